#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/config/job.h"
#include "common/tensor/gemm.h"

namespace tfd::tensor {

using config::Activation;
using config::InitSpec;
using config::Padding;

// What a layer needs stored and how to initialise it. `name` is relative ("kernel", "bias").
struct ParamSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  InitSpec init;  // biases: zeros
  std::int64_t fan_in = 0, fan_out = 0;
  // False for state the layer updates itself (batch norm's moving statistics): its gradient is
  // always zero, so no optimizer moves it, yet it is saved, restored and exported as a parameter.
  bool trainable = true;
};

// Elements in a tensor of `shape` (1 for a scalar's []); dimensions must not be negative.
std::int64_t NumElements(const std::vector<std::int64_t>& shape);

// Per-sample activation shape: height x width x channels (NHWC without N); dense data has h = w = 1.
struct ActShape {
  int h = 1, w = 1, c = 1;
  std::int64_t size() const { return std::int64_t{h} * w * c; }
};

// One layer of a feed-forward network over row-major batches (one sample per row, NHWC inside a row).
// Not thread-safe: a layer keeps scratch between Forward and Backward.
class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string Describe() const = 0;  // "dense 100 sigmoid"
  virtual ActShape output_shape() const = 0;
  virtual std::vector<ParamSpec> Params() const { return {}; }
  // Points the layer at its parameter and gradient storage, in Params() order and sizes. The
  // storage must outlive the layer's use.
  virtual void Bind(std::span<const std::span<float>> params, std::span<const std::span<float>> grads) {
    (void)params;
    (void)grads;
  }
  // Training or evaluation: a dropout layer draws its mask from `seed` in each Forward while
  // training (the same seed gives the same mask) and is the identity otherwise. Others ignore it.
  virtual void SetTraining(bool training, std::uint64_t seed) {
    (void)training;
    (void)seed;
  }
  // True for a layer whose training Forward draws from SetTraining's seed (dropout): the model
  // derives seeds for these alone, as a seed costs a generator's seeding.
  virtual bool Stochastic() const { return false; }
  // Whether Backward reads state the last Forward left (a mask, im2col patches) besides in/out.
  virtual bool KeepsForwardState() const { return false; }
  // Sizes scratch for batches up to `max_batch`; call before Forward.
  virtual void Reserve(int max_batch) { (void)max_batch; }
  // Floats of scratch one image's Forward writes besides its output (a convolution's patches):
  // the model sizes blocks of images that stay in cache from it.
  virtual std::int64_t ForwardScratchPerImage() const { return 0; }
  // Whether Forward at evaluation computes each image (row) on its own (dropout: the identity), so
  // a batch run a few images at a time gives the same outputs (within a GEMM's rounding): a run of such layers from a convolution on
  // runs block by block at inference (model::Model::Forward). Dense layers say no: their GEMMs
  // want the whole batch.
  virtual bool PerImage() const { return false; }
  // The layers inside a block (a residual's), in forward order; none for a plain layer.
  virtual std::span<const std::unique_ptr<Layer>> Inner() const { return {}; }
  // out = layer(in) for `batch` rows.
  virtual void Forward(const float* in, float* out, int batch) = 0;
  // From dL/d(out) in `dout` (overwritten: used as scratch), writes the parameter gradients (not
  // accumulated) and, when `din` is not null, dL/d(in). `in`/`out` are the last Forward's.
  virtual void Backward(const float* in, const float* out, float* dout, float* din, int batch) = 0;
};

// Fully connected: out = act(in . kernel + bias), kernel [in, units] as TensorFlow stores it. Its
// GEMMs run on `gemm` (the model's).
std::unique_ptr<Layer> MakeDense(ActShape in, int units, Activation act, InitSpec init, GemmConfig gemm);
// One axis of a convolution or pooling window of size `k` moved by `stride` over `in` cells with
// `padding` (Keras' arithmetic, config::Padding): the output length and the padding cells before
// the first window and after the last. out <= 0 when a "valid" window does not fit.
struct WindowAxis {
  int out = 0, pad_before = 0, pad_after = 0;
};
WindowAxis Window(int in, int k, int stride, Padding padding);

// 2-D convolution, square kernel, NHWC; kernel [k, k, c_in, filters]. Its GEMMs run on `gemm` (the
// model's). The window must fit (Window(...).out >= 1 on both axes).
std::unique_ptr<Layer> MakeConv2D(ActShape in, int filters, int kernel_size, Activation act, InitSpec init, GemmConfig gemm,
                                  int stride = 1, Padding padding = Padding::kValid);
// Keras' DepthwiseConv2D, square kernel, NHWC: each input channel c convolved with its own
// `depth_multiplier` (M) k x k filters, output channel c * M + m; depthwise_kernel [k, k, c_in, M],
// bias [c_in * M] when `use_bias`. The window must fit, as MakeConv2D's.
struct DepthwiseOptions {
  int kernel_size = 1, stride = 1, depth_multiplier = 1;
  Padding padding = Padding::kValid;
  bool use_bias = true;
};
std::unique_ptr<Layer> MakeDepthwiseConv2D(ActShape in, DepthwiseOptions options, Activation act, InitSpec init);
// Max and average pooling over pool x pool windows moved by `stride` (0: pool, Keras' default).
// Padding cells take no part: a max ignores them, an average divides by the window's cells
// inside the input (Keras and TensorFlow; ONNX's count_include_pad = 0).
std::unique_ptr<Layer> MakeMaxPool2D(ActShape in, int pool, int stride = 0, Padding padding = Padding::kValid);
std::unique_ptr<Layer> MakeAvgPool2D(ActShape in, int pool, int stride = 0, Padding padding = Padding::kValid);
// The mean over height and width of each channel: h x w x c -> 1 x 1 x c (Keras' GlobalAveragePooling2D).
std::unique_ptr<Layer> MakeGlobalAvgPool2D(ActShape in);

// Sums `values` element by element over every replica of a data-parallel run, in place; every
// replica gets the same bits. Called by a synchronised batch norm in Forward and Backward, so every
// replica must make the same calls in the same order. Errors are the implementation's to keep (a
// layer cannot return one): after a failure it leaves the values as they are.
class CrossReplicaSum {
 public:
  virtual ~CrossReplicaSum() = default;
  virtual void Sum(std::span<float> values) = 0;
};

// Keras' BatchNormalization over the channels of `in` (a dense layer's features, a convolution's
// NHWC channels): while training it normalises with the batch's mean and biased variance and moves
// the moving statistics toward them (moving = moving * momentum + batch * (1 - momentum)); at
// evaluation it normalises with the moving statistics. Variables: gamma (when `scale`), beta (when
// `center`), moving_mean, moving_variance (not trainable). With `sync`, the batch's statistics and
// the backward pass's sums are taken over every replica through SetCrossReplicaSum's summer.
struct NormOptions {
  double momentum = 0.99, epsilon = 1e-3;
  bool center = true, scale = true, sync = false;
};
std::unique_ptr<Layer> MakeBatchNorm(ActShape in, NormOptions options);
// Points a synchronised batch norm made by MakeBatchNorm (or each inside a block) at `sum` (null:
// this replica's batch alone); `sum` must outlive its use. False when `layer` is not one and holds none.
bool SetCrossReplicaSum(Layer& layer, CrossReplicaSum* sum);
// A replica without a batch of its own for a step (an allreduce join step) still makes the sums a
// synchronised batch norm's training Forward (`forward`) or Backward makes, each from zeros, so every
// replica's calls pair up; the forward's also move its moving statistics toward the other replicas'
// batch, as theirs move. A block makes its batch norms' in its Forward's (Backward's) order. False
// when `layer` is not a batch norm and holds none.
bool JoinCrossReplicaSums(Layer& layer, bool forward);
// A training Forward run again on a batch it has seen, only to rebuild the state its Backward reads
// (a pipeline stage's recompute): between SetRecomputing(layer, true) and (layer, false) a batch
// norm (or each inside a block) normalises with the batch's statistics as before but leaves its
// moving statistics alone, so each batch moves them once. False when `layer` is not one and holds none.
bool SetRecomputing(Layer& layer, bool recomputing);
// Keras' LayerNormalization over the last axis (each sample's features, or each pixel's channels):
// (x - mean) / sqrt(variance + epsilon) * gamma + beta; the same in training and evaluation.
std::unique_ptr<Layer> MakeLayerNorm(ActShape in, NormOptions options);

// A residual block: out = act(inner(in) + shortcut(in)), the inner layers run in order and the
// shortcut the identity, or (`projection_stride` > 0, when the inner output's shape differs from
// `in`) a 1x1 convolution with that stride and a bias onto the inner output's channels (Keras'
// ResNet). Variables: each inner layer's under its name ("conv2d/kernel", "batch_norm_1/gamma"),
// then "projection/kernel" and "projection/bias". The inner output's shape must be the shortcut's.
struct BlockLayer {
  std::string name;
  std::unique_ptr<Layer> layer;
};
struct ResidualOptions {
  int projection_stride = 0;  // 0: the identity shortcut
  Activation activation = Activation::kNone;
  InitSpec projection_init;
  GemmConfig gemm;            // the projection's GEMMs
};
std::unique_ptr<Layer> MakeResidual(ActShape in, std::vector<BlockLayer> inner, ResidualOptions options);

// A categorical feature of the input rows (a CSV's data.categorical column): its place in a row and
// its id count (vocabulary + 1; id 0 is out of vocabulary). A value that is not an id in
// [0, ids) is taken as 0.
struct CategoricalInput {
  int feature = 0, ids = 1;
};
// Keras' Embedding, one table per column: the output row is the input's other (numeric)
// features in row order, then each column's table row for its id ([ids, output_dim], variables
// "embeddings", "embeddings_1", ... in `columns` order). The ids get no gradient.
std::unique_ptr<Layer> MakeEmbedding(ActShape in, std::vector<CategoricalInput> columns, int output_dim, InitSpec init);
// The same with each column's one-hot vector of `ids` values in place of a table row; no variables.
std::unique_ptr<Layer> MakeOneHot(ActShape in, std::vector<CategoricalInput> columns);

// Inverted dropout: while training, each value is zeroed with probability `rate` and the others
// scaled by 1 / (1 - rate); the identity at evaluation. rate in [0, 1).
std::unique_ptr<Layer> MakeDropout(ActShape in, double rate);

}  // namespace tfd::tensor
