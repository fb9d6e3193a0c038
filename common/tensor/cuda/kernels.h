#pragma once

#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "common/base/class_id.h"
#include "common/config/job.h"
#include "common/tensor/layers.h"
#include "common/tensor/loss.h"

// The CUDA kernels of the layers and the loss. Each has a CPU twin in common/tensor (named beside
// it) that a test in test/unit/common/tensor/cuda_*_test.cc compares it with. Every launcher only enqueues work on
// `stream` (check cudaGetLastError after); none allocates, so a step made of them can be captured
// as a CUDA graph. Pointers are device pointers unless said otherwise. Sums are taken in a fixed
// order (no atomics), so results are the same run to run on one GPU.
namespace tfd::cuda {

using config::Activation;
using tensor::ActShape;

// Twin: tensor::Gemm. C = alpha * op(A) * op(B) + beta * C, row-major, as the CPU function takes it.
cublasStatus_t Gemm(cublasHandle_t handle, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                    const float* b, int ldb, float beta, float* c, int ldc);

// Twin: tensor::BiasActivation. y[r][c] = act(y[r][c] + bias[c]) (bias null: + 0); gelu also keeps y + bias in
// `pre` (its gradient is a function of the pre-activation; null for the other activations).
void BiasActivation(float* y, const float* bias, std::int64_t rows, int cols, Activation act, float* pre, cudaStream_t stream);

// Twin: tensor::ActivationGradBias, in two parts: dy *= act'(y) here (gelu: act'(pre)), then (when
// the layer has a bias) BiasGradient, dbias = the column sums of dy as one GEMV with a vector of ones.
void ActivationGrad(const float* y, float* dy, std::int64_t n, Activation act, const float* pre, cudaStream_t stream);
cublasStatus_t BiasGradient(cublasHandle_t handle, const float* dy, int rows, int cols, const float* ones, float* dbias);

// The loss of a batch, summed on the device in a fixed order, in double: `loss_sum` over rows (a
// regression: over rows and targets), and a regression's sums of |o - t| and (o - t)².
struct LossSums {
  double loss_sum;
  int correct;
  int pad;
  double abs_sum, squared_sum;
};

// Twin: tensor::SoftmaxCrossEntropy. Per-row loss and hit into row_loss/row_hit (scratch of
// `batch` each), then their sums into *sums; dlogits (may be null) as the CPU writes it.
void SoftmaxCrossEntropy(const float* logits, const ClassId* labels, int batch, int classes, float* dlogits, float* row_loss,
                         int* row_hit, LossSums* sums, cudaStream_t stream);

// Twin: tensor::RegressionLoss on outputs and targets [batch, width] under kMse or kMae. Per row
// the sums of the loss, |o - t| and (o - t)² (row_err: scratch of 3 x batch doubles), then their
// sums over the rows into *sums; doutputs (may be null) bit for bit as the CPU writes it.
void RegressionLoss(const float* outputs, const float* targets, int batch, int width, tensor::LossKind kind, float* doutputs,
                    double* row_err, LossSums* sums, cudaStream_t stream);

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

// The layers of layer_kernels.cu. Their sums over rows (a batch norm's statistics, a norm's
// gamma and beta gradients, a depthwise kernel's gradient) are column reductions in double: the
// rows are cut into ReduceSplits(rows) stripes, each stripe summed by one block in a fixed order
// into `partial` (ReducePartials(rows, cols, slices) double2 of scratch), then each column's
// stripes by one warp in a fixed order; so a batch size gives the same bits run to run, though
// not the CPU's.
std::int64_t ReduceSplits(std::int64_t rows);
std::int64_t ReducePartials(std::int64_t rows, int cols, int slices);

// Twin: tensor::MakeBatchNorm over `rows` rows (batch x h x w) of `c` channels. gamma and beta
// are null without `scale` and `center`; `stats` is 6c floats the layer keeps from Forward to
// Backward (mean, 1/std, gamma/std, the shift, and the backward pass's two means).
struct BatchNormArgs {
  int c = 0;
  double momentum = 0.99, epsilon = 1e-3;
  const float* gamma = nullptr;
  const float* beta = nullptr;
  float* moving_mean = nullptr;
  float* moving_var = nullptr;
  float* dgamma = nullptr;
  float* dbeta = nullptr;
  float* stats = nullptr;
  double2* partial = nullptr;
  float* sync = nullptr;  // a synchronised batch norm's: 2c + 2 floats (below)
};
// Training: the batch's mean and biased variance (two passes, as the CPU), the moving statistics
// moved toward them; evaluation: the moving statistics. out = in * gamma / std + shift.
void BatchNormForward(const float* in, float* out, std::int64_t rows, bool training, const BatchNormArgs& a, cudaStream_t stream);
// After a training Forward: dgamma, dbeta and (din not null) the input's gradient.
void BatchNormBackward(const float* in, const float* dout, float* din, std::int64_t rows, const BatchNormArgs& a, cudaStream_t stream);
// A synchronised batch norm's training step in parts, the replicas' sums taken between them (the
// caller copies a.sync's first n floats to the host, sums them over the replicas, copies them
// back), as the CPU's layer calls CrossReplicaSum; with one replica the same bits as above.
// Forward: BatchNormSyncSums leaves this replica's Σx per channel and its row count (n = c + 1);
// BatchNormSyncDeviations the mean from those sums, then Σ(x − mean)² (n = c); BatchNormSyncOutput
// the variance from those, the moving statistics moved, and out.
void BatchNormSyncSums(const float* in, std::int64_t rows, const BatchNormArgs& a, cudaStream_t stream);
void BatchNormSyncDeviations(const float* in, std::int64_t rows, const BatchNormArgs& a, cudaStream_t stream);
void BatchNormSyncOutput(const float* in, float* out, std::int64_t rows, const BatchNormArgs& a, cudaStream_t stream);
// Backward: BatchNormSyncGradientSums writes dgamma and dbeta (this replica's) and leaves Σg and
// Σg·x̂ (n = 2c); BatchNormSyncInputGradient din from those (din null: nothing to do).
void BatchNormSyncGradientSums(const float* in, const float* dout, std::int64_t rows, const BatchNormArgs& a, cudaStream_t stream);
void BatchNormSyncInputGradient(const float* in, const float* dout, float* din, std::int64_t rows, const BatchNormArgs& a,
                                cudaStream_t stream);

// Twin: tensor::MakeLayerNorm, over each of `rows` rows of `c` features. `row_stats` is 2 x rows
// floats of scratch (each row's mean and 1/std, for the gamma and beta gradients).
struct LayerNormArgs {
  int c = 0;
  double epsilon = 1e-3;
  const float* gamma = nullptr;
  const float* beta = nullptr;
  float* dgamma = nullptr;
  float* dbeta = nullptr;
  float* row_stats = nullptr;
  double2* partial = nullptr;
};
void LayerNormForward(const float* in, float* out, std::int64_t rows, const LayerNormArgs& a, cudaStream_t stream);
void LayerNormBackward(const float* in, const float* dout, float* din, std::int64_t rows, const LayerNormArgs& a, cudaStream_t stream);

// A residual block's join: out = act(a + b) (gelu keeps a + b in `pre`); and y += x, the
// shortcut's share of the block's input gradient.
void AddActivation(const float* a, const float* b, float* out, std::int64_t n, Activation act, float* pre, cudaStream_t stream);
void Accumulate(float* y, const float* x, std::int64_t n, cudaStream_t stream);

// Twin: tensor::MakeDepthwiseConv2D's sums (bias and activation are BiasActivation's, as a
// convolution's): out[pixel][c * m + j] = the sum over the window's taps inside the input of
// in[tap's pixel][c] * kernel[tap][c * m + j]; kernel [k, k, in.c, m].
void DepthwiseForward(const float* in, const float* kernel, float* out, int batch, const WindowGeometry& g, int m, cudaStream_t stream);
// dkernel (a column reduction, one slice per tap; `partial` sized for batch x oh x ow rows of
// in.c x m columns and k x k slices) and, when din is not null, din (gathered per input cell).
void DepthwiseBackward(const float* in, const float* dout, const float* kernel, float* dkernel, float* din, int batch,
                       const WindowGeometry& g, int m, double2* partial, cudaStream_t stream);

// Twin: tensor::MakeEmbedding and MakeOneHot. One entry per output feature: a numeric feature
// passed through (kind 0), element `k` of an embedding table's row (kind 1: `base` is the table's
// offset in params plus k, `dim` its row length), or value `k` of a one-hot vector (kind 2).
struct CategoricalOutput {
  int kind = 0, feature = 0, ids = 1, dim = 0, k = 0;
  std::int64_t base = 0;
};
void CategoricalForward(const float* in, const float* params, const CategoricalOutput* map, float* out, int batch, int in_size,
                        int width, cudaStream_t stream);
// Adds each row's output gradient into its id's table row, rows in order (the CPU's sums, bit for
// bit); the tables' gradients must be zeroed first. The ids get no gradient.
void CategoricalBackward(const float* in, const float* dout, const CategoricalOutput* map, float* grads, int batch, int in_size,
                         int width, cudaStream_t stream);

// Fills n floats with `value`.
void Fill(float* p, std::int64_t n, float value, cudaStream_t stream);

}  // namespace tfd::cuda
