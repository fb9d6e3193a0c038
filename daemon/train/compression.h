#pragma once

#include <cstdint>
#include <vector>

#include "common/compress/topk.h"
#include "common/model/model.h"

namespace tfd::train {

// The model's trainable variables as flat runs of its gradient, in order, and (when `shapes` is
// given) their shapes: what update.compression compresses tensor by tensor. A batch norm's moving
// statistics are left out: their gradient is always 0.
std::vector<compress::TensorRun> TrainableRuns(const model::Model& model, std::vector<std::vector<std::int64_t>>* shapes = nullptr);

}  // namespace tfd::train
