#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/base/status.h"
#include "common/config/data_spec.h"

namespace tfd::config {

// relu6: min(max(x, 0), 6); gelu: Keras' default (approximate=False), the exact x * Phi(x) with erf.
enum class Activation { kNone, kRelu, kSigmoid, kElu, kTanh, kRelu6, kGelu };
std::string_view ActivationName(Activation a);

// How a layer's kernel is initialised (biases always start at zero).
enum class InitKind {
  kDefault,          // the layer's default: what the seed model used, else glorot_uniform
  kZeros,
  kNormal,           // N(0, stddev²)
  kTruncatedNormal,  // N(0, stddev²) redrawn beyond 2 stddev, as tf.truncated_normal
  kGlorotUniform,    // U(±sqrt(6 / (fan_in + fan_out))), Keras' default
  kHeNormal,         // truncated normal with stddev sqrt(2 / fan_in) / 0.8796, Keras' he_normal
  kOnes,             // a normalisation's gamma and moving variance (not a kernel's: no JSON name)
};
struct InitSpec {
  InitKind kind = InitKind::kDefault;
  double stddev = 1.0;  // kNormal and kTruncatedNormal only
};

// Keras' padding of a convolution or pooling window: "valid" places windows inside the input only
// (out = floor((in - k) / stride) + 1); "same" gives out = ceil(in / stride), padding the input by
// max((out - 1) * stride + k - in, 0) cells per axis, the odd one at the bottom / right.
enum class Padding { kValid, kSame };
std::string_view PaddingName(Padding p);

struct LayerSpec {
  enum class Kind {
    kDense, kConv2D, kMaxPool2D, kFlatten, kDropout, kAvgPool2D, kGlobalAvgPool2D, kBatchNorm, kLayerNorm, kResidual, kDepthwiseConv2D,
    kEmbedding, kOneHot
  };
  Kind kind = Kind::kDense;
  int units = 0;        // dense
  int filters = 0;      // conv2d
  int kernel_size = 0;  // conv2d, depthwise_conv2d: square kernel
  int pool_size = 0;    // max_pool2d, avg_pool2d: square window
  double rate = 0;      // dropout: the fraction of values zeroed while training, in [0, 1)
  Activation activation = Activation::kNone;  // dense, convolutions; residual: after the add
  InitSpec init;        // dense, convolutions; residual: its projection's kernel
  // convolutions, pools: the step between windows; 0: Keras' default (convs 1, pools pool_size).
  // residual: never read from JSON; a built model's spec holds its projection's stride (0: none).
  int strides = 0;
  Padding padding = Padding::kValid;  // convolutions, pools
  double momentum = 0.99;  // batch_norm: moving = moving * momentum + batch * (1 - momentum)
  double epsilon = 1e-3;   // batch_norm, layer_norm: added to the variance
  bool center = true, scale = true;  // batch_norm, layer_norm: learn beta / gamma
  bool sync = false;       // batch_norm: the batch's statistics over every allreduce replica
  int depth_multiplier = 1;  // depthwise_conv2d: output channels per input channel
  bool use_bias = true;      // depthwise_conv2d
  // residual: the block's layers, whose output is added to the block's input (through a strided
  // 1x1 projection when their output's shape differs from it).
  std::vector<LayerSpec> layers;
  // embedding, one_hot: the data's categorical columns they take (empty: every one, in the data's
  // order); embedding: each column's vector length. A built model's spec also holds each column's
  // place in an example's row and its id count (vocabulary + 1), never read from JSON.
  std::vector<std::string> columns;
  int output_dim = 0;
  std::vector<int> column_features, column_ids;
  // The step between windows, with the default applied.
  int stride() const { return strides > 0 ? strides : kind == Kind::kConv2D || kind == Kind::kDepthwiseConv2D ? 1 : pool_size; }
};
// "dense", "conv2d", "max_pool2d", ... as model.layers[i].type names them.
std::string_view LayerKindName(LayerSpec::Kind k);
// Calls `visit(layer, path)` on each layer of `layers` and, after a residual block, on each of its
// layers in turn ("model.layers[2].layers[0]"), until it returns a non-Ok status, which it returns.
Status ForEachLayer(const std::vector<LayerSpec>& layers, const std::function<Status(const LayerSpec&, const std::string&)>& visit,
                    const std::string& path = "model.layers");

// Either one of the seeds' models by name, or an explicit layer list ("layers").
struct ModelSpec {
  std::string name;               // "softmax" | "mlp" | "dnn" | "cnn" | "layers"
  std::vector<LayerSpec> layers;  // only when name == "layers"
  InitSpec init;                  // overrides every kernel's default init when not kDefault
};

// optimizer.learning_rate as a function of the global step (the updates applied before this one),
// with tf.keras.optimizers.schedules' semantics; optim::LearningRate evaluates it.
struct LrSchedule {
  enum class Kind { kConstant, kExponentialDecay, kPiecewiseConstant, kCosineDecay };
  Kind kind = Kind::kConstant;
  std::int64_t decay_steps = 0;          // exponential, cosine
  double decay_rate = 0;                 // exponential
  bool staircase = false;                // exponential
  double alpha = 0;                      // cosine: the floor, as a fraction of the initial rate
  std::vector<std::int64_t> boundaries;  // piecewise: increasing
  std::vector<double> values;            // piecewise: boundaries.size() + 1 rates
  std::int64_t warmup_steps = 0;         // linear warm-up before the schedule starts; 0: none
};

struct OptimizerSpec {
  enum class Type { kSgd, kMomentum, kAdam };
  Type type = Type::kSgd;
  double learning_rate = 0.01;  // the constant rate, or a schedule's initial one (piecewise: values[0])
  LrSchedule schedule;
  double weight_decay = 0;  // L2: lambda * w is added to every kernel's gradient before the update
  double momentum = 0.9;  // momentum
  bool use_nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-7;  // adam (Keras defaults)
};

// update.compression (docs/config.md, "Gradient compression"): how each worker's gradient travels.
// fp16/bf16: as 16-bit values, every sum in float32. topk: the largest-|g| `ratio` of each tensor,
// the rest kept for the next step (error feedback). powersgd (allreduce only): each matrix as a
// rank-`rank` product P Q^T (Vogels et al. 2019), with error feedback.
struct CompressionSpec {
  enum class Method { kNone, kFp16, kBf16, kTopK, kPowerSgd };
  Method method = Method::kNone;
  double ratio = 0.01;  // topk: in (0, 1]
  double warmup_epochs = 1;  // topk: the share kept falls from 1/4 to the ratio over these epochs (compress::TopK)
  int rank = 2;         // powersgd: in [1, 1024]
  bool enabled() const { return method != Method::kNone; }
};
std::string_view CompressionName(CompressionSpec::Method m);  // "none", "fp16", "bf16", "topk", "powersgd"

struct UpdateSpec {
  enum class Mode { kAsync, kSync, kAllreduce };
  Mode mode = Mode::kAsync;
  int replicas_to_aggregate = 0;  // sync; 0 = every worker
  int total_num_replicas = 0;     // sync; 0 = every worker
  // async: scale each gradient by 1 / (1 + staleness), staleness = updates applied since the
  // worker read its parameters (Zhang et al., IJCAI 2016); false = TensorFlow's raw async.
  bool scale_stale = true;
  // async: let each step's exchange travel while the next step computes (one more step of
  // staleness, no waiting on the network).
  bool overlap = false;
  // sync: what the ps does when a worker is lost for good mid-run: fail the step naming it (the
  // default), wait for it to come back (a restarted worker resumes at the global step), or go on
  // with the gradients of the workers left, never fewer than min_replicas.
  enum class OnWorkerLoss { kFail, kWait, kShrink };
  OnWorkerLoss on_worker_loss = OnWorkerLoss::kFail;
  int min_replicas = 1;
  // allreduce: the gradient is all-reduced in buckets of whole layers, filled from the last layer
  // until they hold at least this many KB; a bucket starts while backprop computes the layers
  // before it. 0: one bucket, after backprop.
  int bucket_kb = 128;
  // allreduce: reduce inside each host first, one leader per host in the ring across hosts, then
  // broadcast inside the host (collective/hierarchy.h). kAuto: on when the cluster has at least two
  // hosts and some host runs two workers or more.
  enum class Hierarchical { kAuto, kOn, kOff };
  Hierarchical hierarchical = Hierarchical::kAuto;
  CompressionSpec compression;
};

enum class Placement { kBalanced, kRoundRobin, kGreedy, kByHost };

// Workers may join a running job and leave it for good (docs/operations.md, "Elastic runs"):
// max_workers 0 means the membership is the cluster's worker list, fixed. A joining worker's rank
// must stay below max_workers; async, sync and allreduce go on while at least min_workers remain.
// Allreduce: every worker keeps in memory a commit of the training state every commit_every_steps
// global steps, and the ring re-forms without a lost worker from the last commit.
struct ElasticSpec {
  int min_workers = 1;
  int max_workers = 0;
  int commit_every_steps = 10;
  bool enabled() const { return max_workers > 0; }
};

struct CheckpointSpec {
  std::string dir;  // empty: no checkpoints
  std::int64_t every_steps = 0;
  double every_secs = 0;
  int keep = 3;
};

// TensorBoard event files (docs/observability.md): each task writes DIR/<task>/events.out.tfevents.*.
struct SummarySpec {
  std::string dir;                 // empty: no summaries (tfd's --summaries-dir sets or overrides it)
  int every_steps = 100;           // scalars every this many local steps, averaged over them
  int histograms_every_epochs = 0; // weight histograms every this many epochs; 0: none
};

// The trained model out (docs/serving.md): the chief (or a standalone run) writes a version folder
// into `dir` at the end of the run, and every `every_epochs` epochs when set.
struct ExportSpec {
  std::string dir;       // empty: no export (tfd's --export-dir sets or overrides it; tfctl up sets RUN/model)
  int every_epochs = 0;  // 0: at the end only
};

// Stop training at the end of an epoch when the monitored metric stops improving (Keras'
// EarlyStopping: `patience` epochs without an improvement larger than `min_delta`).
struct EarlyStoppingSpec {
  // Accuracies for classification data; MAEs (lower is better) for regression data. No test
  // metric: the test set is reported, never used to decide when to stop (test_* is refused).
  enum class Monitor { kNone, kValAccuracy, kValLoss, kLoss, kValMae };
  Monitor monitor = Monitor::kNone;  // kNone: no patience rule
  int patience = 0;
  double min_delta = 0;
};
std::string_view MonitorName(EarlyStoppingSpec::Monitor m);

// Who evaluates while the job trains: the chief at the end of every epoch (the default), an
// evaluator task on each of the chief's checkpoints, or nobody. The chief's final evaluation and
// its done event stay in every case.
enum class Evaluation { kChief, kEvaluator, kNone };
std::string_view EvaluationName(Evaluation e);

// Model parallelism (docs/model_parallel.md): the network split across `stages` tasks, by whole
// layers (a pipeline) or by each dense layer's units (vertical slices). A batch is cut into
// `microbatches` equal micro-batches whose gradients are summed in order and applied once per step;
// `--standalone` honours that accumulation and ignores the split.
struct ModelParallelSpec {
  enum class Split { kNone, kLayers, kUnits };
  enum class Schedule { kGpipe, kOneFOneB };
  Split split = Split::kNone;  // kNone: no "model_parallel" object
  int stages = 0;
  int microbatches = 1;
  Schedule schedule = Schedule::kGpipe;
  // layers: the index of the first layer of stages 1 .. S-1 (layers as Model::Summary lists them,
  // flatten not counted), increasing; empty: balanced by parameter count and FLOPs.
  std::vector<int> boundaries;
  bool enabled() const { return split != Split::kNone; }
};
std::string_view SplitName(ModelParallelSpec::Split s);
std::string_view ScheduleName(ModelParallelSpec::Schedule s);
// N independent networks trained at once, one per worker of tfctl ensemble (docs/sweeps.md): member
// k is the job with "ensemble" removed, "seed" set to seed + k, and each "vary" path set to its
// k-th value.
struct EnsembleSpec {
  int members = 0;  // 0: not an ensemble
  std::vector<std::pair<std::string, std::vector<std::string>>> vary;  // dotted path -> one JSON text per member
};

// The job spec of docs/config.md: what to train and how. Validated whole at load.
struct JobSpec {
  ModelSpec model;
  DataSpec data;  // the MNIST IDX folder, or the user's files (docs/data.md)
  int epochs = 1;
  int batch_size = 100;  // per worker
  OptimizerSpec optimizer;
  UpdateSpec update;
  Placement placement = Placement::kBalanced;
  std::uint64_t seed = 1;
  int log_every_steps = 100;  // 0: no step events
  std::string device = "cpu";  // "cpu" or "cuda:N"
  int cuda_device = -1;        // N of "cuda:N", -1 for cpu
  double gpu_memory_fraction = 1.0;
  int threads = 1;  // compute threads per task
  bool shuffle = true;
  // Gather the next batch on a thread of its own while a step computes; unset: on for a cuda
  // device (the host idles through a GPU step), off on the CPU (the thread would take a core).
  std::optional<bool> prefetch;
  bool Prefetch() const { return prefetch.value_or(cuda_device >= 0); }
  CheckpointSpec checkpoint;
  SummarySpec summaries;
  ExportSpec export_model;  // "export"
  // Held out from the end of the training set before sharding: a fraction in (0, 1) of it, or a
  // count of examples. Both 0: none.
  double validation_fraction = 0;
  std::int64_t validation_count = 0;
  EarlyStoppingSpec early_stopping;
  // Stop once val_accuracy reaches this; 0: never. Needs a validation split (never the test set);
  // classification only (regression stops with early_stopping).
  double stop_at_accuracy = 0;
  Evaluation evaluation = Evaluation::kChief;
  ElasticSpec elastic;
  ModelParallelSpec model_parallel;
  EnsembleSpec ensemble;
  bool validates() const { return validation_fraction > 0 || validation_count > 0; }
  bool can_stop_early() const { return early_stopping.monitor != EarlyStoppingSpec::Monitor::kNone || stop_at_accuracy > 0; }
};

// Parses and validates a job spec. `source` names the text in errors ("configs/jobs/mlp.json");
// every error is InvalidArgument and reads "SOURCE: JSON.PATH: what was expected".
Result<JobSpec> ParseJobSpec(std::string_view text, std::string_view source);
// Reads the file at `path`; NotFound when it cannot be read.
Result<JobSpec> LoadJobSpec(const std::string& path);

// A device string: "cpu" (-1) or "cuda:N" (N, below 64); InvalidArgument "expected \"cpu\" or
// \"cuda:N\", got \"TEXT\"" otherwise. The job's "device" and tfd's --device read it.
Result<int> ParseDevice(std::string_view text);

}  // namespace tfd::config
