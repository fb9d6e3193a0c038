#include "daemon/train/compression.h"

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

}  // namespace tfd::train
