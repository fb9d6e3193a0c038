#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/base/status.h"
#include "common/config/job.h"
#include "common/data/dataset.h"
#include "common/tensor/aligned.h"
#include "common/tensor/gemm.h"
#include "common/tensor/layers.h"
#include "common/tensor/loss.h"

namespace tfd::model {

// One named variable inside the model's flat parameter buffer.
struct Variable {
  std::string name;                  // "dense/kernel", "dense_1/bias", ...
  std::vector<std::int64_t> shape;   // as TensorFlow stores it
  std::int64_t offset = 0, size = 0; // in floats
  // False for a batch norm's moving statistics: updated by the layer's training Forward, their
  // gradient always zero; saved, restored, hashed and exported as the others are.
  bool trainable = true;
};

// What the last layer gives and what it is trained to: `units` logits under softmax cross-entropy
// (one per class), or `units` regression outputs under the mean squared or absolute error.
struct Outputs {
  int units = 0;
  tensor::LossKind loss = tensor::LossKind::kSoftmaxCrossEntropy;
  Outputs(int classes) : units(classes) {}  // implicit: a classifier's class count
  Outputs(int n, tensor::LossKind kind) : units(n), loss(kind) {}
};
// The outputs a model needs for `data`, trained with `spec`'s regression loss where it applies.
Outputs OutputsFor(const data::Dataset& data, const config::DataSpec& spec);

// A feed-forward classifier or regressor: a stack of layers whose parameters and gradients live in two flat
// float buffers (variables in a fixed order), so they can be pushed, pulled, all-reduced, hashed
// and checkpointed as one span. Single-threaded; buffers are allocated once, at Build.
class Model {
 public:
  // Builds the model `spec` for inputs of shape `input` with `outputs` and batches of up to
  // `max_batch` rows; every GEMM of its layers runs on `gemm` (the job's `threads`; the build's
  // fastest backend unless a caller picks another). `categorical`: the input rows' categorical
  // features (data::Dataset::categorical), which an embedding or one_hot first layer takes and
  // which need one. InvalidArgument (naming model.layers[i]) when the layer list does not fit.
  static Result<std::unique_ptr<Model>> Build(const config::ModelSpec& spec, tensor::ActShape input, Outputs outputs,
                                              int max_batch, tensor::GemmConfig gemm = {},
                                              const std::vector<data::CategoricalColumn>& categorical = {});

  // Fills the parameters from `seed` per each layer's initializer; the same seed gives the same bits.
  void Initialize(std::uint64_t seed);

  // Outputs [batch, classes()] (logits, or regression outputs) of the batch x [batch, input size], as at evaluation (dropout is the
  // identity); valid until the next call. Each run of per-image layers that starts at a
  // convolution (conv2d -> pooling, ...) runs a block of images at a time, so one block's patches,
  // activations and pooling stay in cache and only the run's last output is written for the whole
  // batch: the outputs equal a whole-batch pass within float rounding (the GEMMs see fewer rows).
  // The layers' outputs inside such a run are not kept (layer_output is for ForwardLayers).
  const float* Forward(const float* x, int batch);
  // Images per block in Forward's runs: kAutoBlock (the default) sizes blocks to fill half of
  // the L2 cache per GEMM thread; 0 runs every layer over the whole batch; n > 0 runs n images
  // at a time. Tests force either path with it, on any CPU.
  static constexpr int kAutoBlock = -1;
  void SetInferenceBlock(int images);
  // Seeds the dropout masks of the next ComputeGradients (each dropout layer its own stream of
  // it). The trainer derives it from the job seed, the worker rank and the step.
  void SetDropoutSeed(std::uint64_t seed) { dropout_seed_ = seed; }
  // Synchronised batch norm (`"sync": true`): their batch statistics summed over the replicas by
  // `sum` (null: this replica's alone), which must outlive the model's training. Every replica
  // must then run the same layers in the same order (JoinCrossReplicaSums for a step without data).
  void SetCrossReplicaSum(tensor::CrossReplicaSum* sum);
  tensor::CrossReplicaSum* cross_replica_sum() const { return cross_replica_sum_; }  // for a device twin's layers
  bool has_sync_layers() const;
  // The cross-replica sums one training step (forward, then backward) makes, with zeros; the
  // moving statistics move as the replicas' with data do.
  void JoinCrossReplicaSums();
  // Called during backprop each time grads()[from, end) have become final; `from` only goes
  // down, to 0. The last layers' gradients are ready while the first layers' are computed.
  using GradientsReady = std::function<void(std::size_t from)>;
  // Forward (dropout active) and backward: writes the mean loss's gradient into grads() and returns loss and hits.
  tensor::LossResult ComputeGradients(const float* x, const tensor::Labels& y, const GradientsReady& ready = nullptr);
  // The same on rows [0, rows) of a batch cut into `microbatches` equal micro-batches: each one's
  // gradient is computed alone (dropout seeded by MicrobatchSeed) and they are summed in order by
  // AccumulateGradients, then scaled by 1 / microbatches: a pipeline's stages sum the same
  // micro-batch gradients in the same order, so both give the same bits. `acc` is scratch.
  tensor::LossResult ComputeMicrobatchGradients(const float* x, const tensor::Labels& y, int microbatches,
                                                std::uint64_t dropout_seed, std::vector<float>& acc);

  // Layer by layer, for a model split across tasks (daemon/pipeline). Layer i's output for the
  // rows [row, row + batch) of the batch lives at layer_output(i, row) until the next pass over
  // those rows, so micro-batches at different rows stay in flight together.
  std::size_t num_layers() const { return layers_.size(); }
  const config::LayerSpec& layer_spec(std::size_t i) const { return layer_specs_[i]; }
  tensor::ActShape layer_output_shape(std::size_t i) const { return layers_[i]->output_shape(); }
  // Layer i itself; a residual block's Inner() layers pair with layer_spec(i).layers (flatten left out).
  const tensor::Layer& layer(std::size_t i) const { return *layers_[i]; }
  const float* layer_output(std::size_t i, int row) const;
  // Whether layer i keeps state from its Forward that its Backward reads (a dropout mask, a
  // convolution's patches): such a layer's Forward is run again just before its Backward.
  bool layer_keeps_state(std::size_t i) const { return layers_[i]->KeepsForwardState(); }
  // Runs layers [first, last) forward on `batch` rows at `row` from `in` (dropout active when
  // `training`, seeded by SetDropoutSeed); returns layer last - 1's output.
  const float* ForwardLayers(std::size_t first, std::size_t last, const float* in, int row, int batch, bool training);
  // ForwardLayers while training, again on rows a pass has already seen (a pipeline stage's
  // recompute before a Backward): the layers' state rebuilt, a batch norm's moving statistics left
  // as that first pass moved them.
  const float* RecomputeLayers(std::size_t first, std::size_t last, const float* in, int row, int batch);
  // dL/doutputs of the rows at `row` (layer_output of the last layer) into scratch for
  // BackwardLayers; returns their mean loss and hits.
  tensor::LossResult LossGradient(int row, const tensor::Labels& y);
  // Backprop through layers [first, last) for the rows at `row`: `dout` is dL/d(output of layer
  // last - 1) (null: LossGradient's); writes those layers' parameter gradients into grads() (not
  // accumulated) and, when `din` is not null, dL/d`in` into it. `in` is what ForwardLayers read.
  void BackwardLayers(std::size_t first, std::size_t last, const float* in, int row, const float* dout, float* din, int batch,
                      const GradientsReady& ready = nullptr);

  // Where each layer's parameters start in params() and grads(), in layer order (a layer without
  // any starts where the next one does), then params().size().
  const std::vector<std::size_t>& layer_starts() const { return layer_starts_; }

  const std::vector<Variable>& variables() const { return variables_; }
  std::span<float> params() { return params_; }
  std::span<const float> params() const { return params_; }
  std::span<float> grads() { return grads_; }
  std::int64_t input_size() const { return input_.size(); }
  tensor::ActShape input_shape() const { return input_; }
  // Units of the last layer: classes, or regression targets.
  int classes() const { return classes_; }
  tensor::LossKind loss() const { return loss_; }
  bool regression() const { return loss_ != tensor::LossKind::kSoftmaxCrossEntropy; }
  int max_batch() const { return max_batch_; }
  // The backend and thread count its GEMMs run on, as Build was given them; code that runs GEMMs
  // on this model's buffers (a pipeline stage's slices) runs them on this too.
  const tensor::GemmConfig& gemm() const { return gemm_; }
  // One line per layer and a parameter count, for the start-up log.
  std::string Summary() const;

 private:
  Model() = default;
  void SetTraining(bool training);
  // Layers [first, last) that Forward runs `block` images at a time; the bytes one image writes
  // inside the run (scratch and every output but the last) size the block.
  struct ImageRun {
    std::size_t first = 0, last = 0;
    std::int64_t bytes_per_image = 0;
    int block = 0;
  };
  void FindImageRuns();
  // Runs `run` over the batch block by block; its last layer's output for the whole batch.
  const float* ForwardInBlocks(const ImageRun& run, const float* in, int batch);

  tensor::ActShape input_;
  int classes_ = 0, max_batch_ = 0;
  tensor::CrossReplicaSum* cross_replica_sum_ = nullptr;
  tensor::LossKind loss_ = tensor::LossKind::kSoftmaxCrossEntropy;
  tensor::GemmConfig gemm_;
  std::vector<std::unique_ptr<tensor::Layer>> layers_;
  std::vector<config::LayerSpec> layer_specs_;  // layers_[i]'s, as BuildLayer returned them
  std::vector<std::vector<tensor::ParamSpec>> layer_params_;
  std::vector<Variable> variables_;
  std::vector<std::size_t> layer_starts_;
  std::vector<float> params_, grads_;
  std::vector<tensor::AlignedFloats> acts_;  // acts_[i]: output of layer i
  tensor::AlignedFloats dbuf_[2];            // ping-pong gradient buffers for backprop
  std::vector<float> dlogits_;
  std::uint64_t dropout_seed_ = 0;
  std::vector<ImageRun> image_runs_;  // in layer order
};

// The dropout seed of micro-batch `m` of a step whose seed is `step_seed` (m = 0 alone: step_seed).
std::uint64_t MicrobatchSeed(std::uint64_t step_seed, int m);
// Sums micro-batch gradients in the one order every task uses: acc = g for the first, then
// acc = acc + g. ScaleGradients(g, acc, M) then writes acc * (1 / M) into g.
void AccumulateGradients(std::span<float> acc, std::span<const float> g, bool first);
void ScaleGradients(std::span<float> g, std::span<const float> acc, int microbatches);

// Room for one batch's labels of a dataset (class ids, or regression targets) that FillBatch
// fills with the examples' features; Labels views the rows filled.
class BatchLabels {
 public:
  BatchLabels(const data::Dataset& data, int max_batch);
  // data::FillBatch of `indices` into `x` and these labels.
  void Fill(const data::Dataset& data, std::span<const std::uint32_t> indices, float* x);
  // The first `rows` rows.
  tensor::Labels View(std::size_t rows) const;

 private:
  std::vector<ClassId> ids_;
  std::vector<float> targets_;
  int width_ = 0;
};

// Each variable's name and float count, in order (optim::DecayedRanges takes them).
std::vector<std::pair<std::string, std::size_t>> VariableRuns(const Model& model);

// Test-set accuracy of `model` in batches of its max_batch (a regression model: its MAE).
double Evaluate(Model& model, const data::Dataset& data);
// Accuracy and (with `with_loss`) mean cross-entropy of `model` on `data`, as at evaluation
// (dropout off); zeros for an empty set. A regression model: its mean loss, MAE and RMSE over
// every example and target (accuracy 0).
struct EvalResult {
  double accuracy = 0, loss = 0;
  double mae = 0, rmse = 0;
};
EvalResult EvaluateLoss(Model& model, const data::Dataset& data, bool with_loss = true);
// The softmax of `model` on every example of `data`, as at evaluation: data.size x classes floats,
// row-major (an ensemble member's predictions); a regression model's outputs, data.size x targets.
std::vector<float> PredictProbabilities(Model& model, const data::Dataset& data);
// Each row of `rows` (rows x classes logits, row-major) replaced by its softmax, as PredictProbabilities computes it.
void SoftmaxRows(std::span<float> rows, int classes);

// SHA-256 (hex) of the parameters: each variable's name, then its floats as little-endian bytes,
// in variable order. Equal hashes mean bit-identical parameters.
std::string ParamsSha256(const Model& model);

}  // namespace tfd::model
