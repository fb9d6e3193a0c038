// What the CUDA backend (common/tensor/cuda) has kernels for, checked on the job spec so a job
// names its layer's field before any device is touched.
#include <fmt/format.h>

#include "common/config/job.h"

namespace tfd::config {

CudaGap FindCudaGap(const LayerSpec& l) {
  // Every layer kind, stride, padding and activation has its kernel; a synchronised batch norm's
  // sums would cross the replicas in the middle of the device's step, which runs as one graph.
  if (l.kind == LayerSpec::Kind::kBatchNorm && l.sync) return {"sync", "a synchronised batch_norm (\"sync\": true)"};
  return {};
}

Status CheckCudaLayers(const ModelSpec& model) {
  return ForEachLayer(model.layers, [](const LayerSpec& l, const std::string& path) {
    const CudaGap gap = FindCudaGap(l);
    if (gap.field.empty()) return Status::Ok();
    return Status::InvalidArgument(
        fmt::format("{}.{}: the cuda device has no kernel for {} (set \"device\": \"cpu\")", path, gap.field, gap.what));
  });
}

}  // namespace tfd::config
