#pragma once

#include <memory>

#include "common/tensor/gemm.h"
#include "common/tensor/layers.h"

namespace tfd::tensor {

// A 2-D convolution's shape as Conv2D holds it: NHWC activations, a square kernel
// [k, k, in.c, out.c] (TensorFlow's layout, oneDNN's hwio), Keras' padding on each axis.
struct ConvGeometry {
  ActShape in, out;
  int k = 1, stride = 1;
  WindowAxis y, x;
};

// Conv2D's three convolutions on oneDNN's convolution primitives, run straight on tfd's NHWC
// activations: only the kernel (small) is reordered to and from the blocked layout that oneDNN's
// JIT kernels want, as with hwio they fall back to their own im2col + GEMM, 2-3x slower here
// (docs/benchmarks.md). No bias and no activation: the layer adds and applies them as it does
// after im2col + Gemm. Primitives are made once per batch size, on first use, and kept; each call
// runs on the calling thread with the GemmConfig's thread count. A oneDNN error aborts: the shapes
// are Conv2D's, checked when it was built, so one is our bug or an exhausted machine.
// Not thread-safe, as a Layer.
class OneDnnConvolution {
 public:
  virtual ~OneDnnConvolution() = default;
  // Makes the forward primitive for `batch` images ahead of the first Forward (the backward ones
  // wait for the first Backward: a model that only predicts never needs them).
  virtual void Prepare(int batch) = 0;
  // out = in (*) kernel, NHWC, for `batch` images.
  virtual void Forward(const float* in, const float* kernel, float* out, int batch) = 0;
  // dkernel (hwio, overwritten) = dL/d(kernel) from Forward's `in` and dL/d(out) in `dout`.
  virtual void BackwardWeights(const float* in, const float* dout, float* dkernel, int batch) = 0;
  // din (NHWC, overwritten) = dL/d(in) from dL/d(out) in `dout` and the kernel Forward used.
  virtual void BackwardData(const float* dout, const float* kernel, float* din, int batch) = 0;
};

// The oneDNN convolution for `geometry` when `gemm` runs on oneDNN, this build has it and
// gemm.im2col_convolutions is false; null otherwise (the layer then runs im2col + Gemm).
std::unique_ptr<OneDnnConvolution> MakeOneDnnConvolution(const ConvGeometry& geometry, const GemmConfig& gemm);

}  // namespace tfd::tensor
