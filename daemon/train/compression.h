#pragma once

#include <cstdint>
#include <vector>

#include "common/compress/topk.h"
#include "common/config/job.h"
#include "common/model/model.h"

namespace tfd::train {

// The model's trainable variables as flat runs of its gradient, in order, and (when `shapes` is
// given) their shapes: what update.compression compresses tensor by tensor. A batch norm's moving
// statistics are left out: their gradient is always 0.
std::vector<compress::TensorRun> TrainableRuns(const model::Model& model, std::vector<std::vector<std::int64_t>>* shapes = nullptr);

// topk's warm-up (update.compression.warmup_epochs) in steps of `steps_per_epoch`, rounded.
std::int64_t WarmupSteps(const config::CompressionSpec& spec, std::int64_t steps_per_epoch);

}  // namespace tfd::train
