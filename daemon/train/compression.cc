#include "daemon/train/compression.h"

#include <cmath>

namespace tfd::train {

std::vector<compress::TensorRun> TrainableRuns(const model::Model& model, std::vector<std::vector<std::int64_t>>* shapes) {
  std::vector<compress::TensorRun> runs;
  for (const model::Variable& v : model.variables()) {
    if (!v.trainable || v.size == 0) continue;
    runs.push_back({static_cast<std::size_t>(v.offset), static_cast<std::size_t>(v.size)});
    if (shapes != nullptr) shapes->push_back(v.shape);
  }
  return runs;
}

std::int64_t WarmupSteps(const config::CompressionSpec& spec, std::int64_t steps_per_epoch) {
  if (spec.method != config::CompressionSpec::Method::kTopK || spec.warmup_epochs <= 0 || steps_per_epoch <= 0) return 0;
  return static_cast<std::int64_t>(std::llround(spec.warmup_epochs * static_cast<double>(steps_per_epoch)));
}

}  // namespace tfd::train
