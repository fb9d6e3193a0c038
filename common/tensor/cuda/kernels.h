#pragma once

#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "common/base/class_id.h"
#include "common/config/job.h"
#include "common/tensor/layers.h"

// The CUDA kernels of the layers and the loss. Each has a CPU twin in common/tensor (named beside
// it) that test/unit/common/tensor/cuda_kernels_test.cc compares it with. Every launcher only enqueues work on
// `stream` (check cudaGetLastError after); none allocates, so a step made of them can be captured
// as a CUDA graph. Pointers are device pointers unless said otherwise. Sums are taken in a fixed
// order (no atomics), so results are the same run to run on one GPU.
namespace tfd::cuda {

using config::Activation;
using tensor::ActShape;

// Twin: tensor::Gemm. C = alpha * op(A) * op(B) + beta * C, row-major, as the CPU function takes it.
cublasStatus_t Gemm(cublasHandle_t handle, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                    const float* b, int ldb, float beta, float* c, int ldc);

// Twin: tensor::BiasActivation. y[r][c] = act(y[r][c] + bias[c]); gelu also keeps y + bias in
// `pre` (its gradient is a function of the pre-activation; null for the other activations).
void BiasActivation(float* y, const float* bias, std::int64_t rows, int cols, Activation act, float* pre, cudaStream_t stream);

// Twin: tensor::ActivationGradBias, in two parts: dy *= act'(y) here (gelu: act'(pre)), then (when
// the layer has a bias) BiasGradient, dbias = the column sums of dy as one GEMV with a vector of ones.
void ActivationGrad(const float* y, float* dy, std::int64_t n, Activation act, const float* pre, cudaStream_t stream);
cublasStatus_t BiasGradient(cublasHandle_t handle, const float* dy, int rows, int cols, const float* ones, float* dbias);

// The loss of a batch, summed on the device: `loss_sum` over rows in row order, in double.
struct LossSums {
  double loss_sum;
  int correct;
  int pad;
};

// Twin: tensor::SoftmaxCrossEntropy. Per-row loss and hit into row_loss/row_hit (scratch of
// `batch` each), then their sums into *sums; dlogits (may be null) as the CPU writes it.
void SoftmaxCrossEntropy(const float* logits, const ClassId* labels, int batch, int classes, float* dlogits, float* row_loss,
                         int* row_hit, LossSums* sums, cudaStream_t stream);

// Twin: the dropout layer (tensor::MakeDropout) while training. mask[i] = 0 with probability
// `rate`, else 1 / (1 - rate); out = in * mask. The mask is a hash of (*seed, stream_id, i): the
// same seed gives the same mask, but not the CPU's bits. `seed` is read on the device when the
// kernel runs (a graph replay sees the value of that step).
void DropoutForward(const float* in, float* out, float* mask, std::int64_t n, float rate, const std::uint64_t* seed,
                    std::uint64_t stream_id, cudaStream_t stream);
// din = dout * mask.
void DropoutBackward(const float* dout, const float* mask, float* din, std::int64_t n, cudaStream_t stream);

// Where square k x k windows (a convolution's kernel, a pool's window) fall on an NHWC input:
// `stride` apart, pad_y / pad_x cells of padding before the first row / column (tensor::Window's
// pad_before), oh x ow windows.
struct WindowGeometry {
  ActShape in;
  int k = 1, stride = 1, pad_y = 0, pad_x = 0, oh = 0, ow = 0;
};
WindowGeometry Geometry(ActShape in, int k, int stride, tensor::Padding padding);

// Twins: the conv2d layer's im2col and col2im (NHWC, any stride and padding). cols is
// [batch * oh * ow, k * k * in.c], zeros where a patch reads padding.
void Im2Col(const float* in, float* cols, int batch, const WindowGeometry& g, cudaStream_t stream);
// din = the sum of every patch's gradient in cols over the pixels it covers (gathered per input
// pixel, no atomics).
void Col2Im(const float* cols, float* din, int batch, const WindowGeometry& g, cudaStream_t stream);

// Twins: the max_pool2d (`max`) and avg_pool2d layers, any stride and padding (padding cells take
// no part, as on the CPU). Max backward gives each window's gradient to its first input equal to
// the window's max; average gives each covered input its share; inputs no window covers get +0.
void PoolForward(bool max, const float* in, float* out, int batch, const WindowGeometry& g, cudaStream_t stream);
void PoolBackward(bool max, const float* in, const float* out, const float* dout, float* din, int batch, const WindowGeometry& g,
                  cudaStream_t stream);

// Twins: the global_avg_pool2d layer ([batch, h, w, c] to [batch, 1, 1, c]).
void GlobalAvgPoolForward(const float* in, float* out, int batch, ActShape in_shape, cudaStream_t stream);
void GlobalAvgPoolBackward(const float* dout, float* din, int batch, ActShape in_shape, cudaStream_t stream);

// Fills n floats with `value`.
void Fill(float* p, std::int64_t n, float value, cudaStream_t stream);

}  // namespace tfd::cuda
