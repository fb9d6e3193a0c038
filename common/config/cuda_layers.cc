// What the CUDA backend (common/tensor/cuda) has kernels for, checked on the job spec so a job
// names its layer's field before any device is touched.
#include <fmt/format.h>

#include "common/config/job.h"

namespace tfd::config {

CudaGap FindCudaGap(const LayerSpec& l) {
  // Every stride, padding and activation of dense, conv2d and the three pools has its kernel.
  if (l.kind == LayerSpec::Kind::kBatchNorm || l.kind == LayerSpec::Kind::kLayerNorm || l.kind == LayerSpec::Kind::kResidual ||
      l.kind == LayerSpec::Kind::kDepthwiseConv2D || l.kind == LayerSpec::Kind::kEmbedding || l.kind == LayerSpec::Kind::kOneHot)
    return {"type", fmt::format("{} layers", LayerKindName(l.kind))};
  return {};
}

Status CheckCudaLayers(const ModelSpec& model) {
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const CudaGap gap = FindCudaGap(model.layers[i]);
    if (!gap.field.empty())
      return Status::InvalidArgument(fmt::format("model.layers[{}].{}: the cuda device has no kernel for {} (set \"device\": \"cpu\")", i,
                                                 gap.field, gap.what));
  }
  return Status::Ok();
}

}  // namespace tfd::config
