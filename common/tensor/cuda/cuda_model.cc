// CudaModel (cuda_model.h): building the device twin of each layer kind, its forward and backward
// passes, the step's capture as a CUDA graph and the copies in and out. About 735 lines, over the
// 600 a file should hold: every part reads the one private Impl (the device layers, the arena, the
// stream and the graph), and the layer kinds' forward and backward cases are kept side by side.
#include "common/tensor/cuda/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "common/optim/cuda/optimizer_kernels.h"
#include "common/tensor/cuda/arena.h"
#include "common/tensor/cuda/cublas_loader.h"
#include "common/tensor/cuda/kernels.h"
#include "common/tensor/cuda/runtime.h"

namespace tfd::cuda {
namespace {

using config::LayerSpec;

Status CudaError(cudaError_t e, std::string_view what) {
  return Status::Internal(fmt::format("cuda: {}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e)));
}

#define TFD_CUDA_RETURN(expr, what)                            \
  do {                                                         \
    if (cudaError_t e_ = (expr); e_ != cudaSuccess) return CudaError(e_, what); \
  } while (0)

#define TFD_CUBLAS_RETURN(expr, what)                                                                   \
  do {                                                                                                  \
    if (cublasStatus_t s_ = (expr); s_ != CUBLAS_STATUS_SUCCESS)                                        \
      return Status::Internal(fmt::format("cublas: {}: {}", what, Cublas().status_string(s_)));          \
  } while (0)

// What the device reads each step from pinned host memory (copied in by the step itself, so a
// graph replay sees the values of its step).
struct StepScalars {
  float lr = 0;  // the rate (Adam: lr_t)
  float pad = 0;
  std::uint64_t dropout_seed = 0;
};

// cuBLAS's workspace, from the arena so graph capture never allocates (32 MiB: cuBLAS's advice for Hopper).
constexpr std::size_t kCublasWorkspace = 32u << 20;

// One layer on the device: its shapes and geometry, where its variables sit in the flat
// parameter buffer (offsets, as model::Model lays them out) and its device buffers. A residual
// block holds its layers (and its projection, a 1x1 conv2d) as DevLayers of their own.
struct DevLayer {
  LayerSpec::Kind kind = LayerSpec::Kind::kDense;
  config::Activation act = config::Activation::kNone;
  tensor::ActShape in, out;
  int k = 0;
  WindowGeometry g;  // conv2d, depthwise_conv2d and the pools
  float rate = 0;
  std::uint64_t stream_id = 0;  // dropout: its mask's stream
  std::size_t param_start = 0, param_end = 0;
  std::size_t kernel_off = 0, bias_off = 0;
  bool has_bias = true;  // depthwise_conv2d's use_bias
  int multiplier = 1;    // depthwise_conv2d
  // batch_norm and layer_norm: their options and variables (gamma and beta kNone when left out).
  static constexpr std::size_t kNone = ~std::size_t{0};
  double momentum = 0, epsilon = 0;
  std::size_t gamma_off = kNone, beta_off = kNone, mean_off = 0, var_off = 0;
  bool sync = false;  // batch_norm's "sync": its sums over every replica, when the model has a CrossReplicaSum
  // Buffers: [max_batch, out] output, dropout's mask, conv2d's im2col patches (then their
  // gradient), gelu's pre-activation, a batch norm's statistics (6 x c) or a layer norm's rows'.
  float *out_buf = nullptr, *mask = nullptr, *cols = nullptr, *pre = nullptr, *stats = nullptr;
  float* sync_sums = nullptr;  // a synchronised batch norm's 2c + 2 (BatchNormArgs::sync)
  // residual: the inner layers, the projection (none or one), dL/d(sum), the projection's
  // dL/d(in) and the inner layers' two gradient buffers.
  std::vector<DevLayer> inner, projection;
  float *dsum = nullptr, *dproj = nullptr, *dbuf[2] = {nullptr, nullptr};
  // embedding and one_hot: what each output feature is.
  std::vector<CategoricalOutput> outputs;
  CategoricalOutput* map = nullptr;
  std::int64_t rows(int batch) const { return std::int64_t{batch} * out.h * out.w; }
};

}  // namespace

struct CudaModel::Impl {
  std::unique_ptr<DeviceArena> arena;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  std::vector<DevLayer> layers;
  int max_batch = 0, classes = 0;  // classes: the last layer's units (a regression's targets)
  tensor::LossKind loss = tensor::LossKind::kSoftmaxCrossEntropy;
  std::int64_t input_size = 0, num_params = 0;
  // Device buffers.
  float *params = nullptr, *grads = nullptr, *slots = nullptr, *x = nullptr, *dbuf[2] = {nullptr, nullptr}, *dlogits = nullptr,
        *row_loss = nullptr, *ones = nullptr;
  int* row_hit = nullptr;
  ClassId* y = nullptr;       // classification's labels
  float* targets = nullptr;   // a regression's, [max_batch, classes]
  double* row_err = nullptr;  // a regression's per-row sums
  LossSums* sums = nullptr;
  StepScalars* scalars = nullptr;
  double2* partial = nullptr;  // the column reductions' scratch
  void* workspace = nullptr;
  // Pinned host buffers.
  float *h_x = nullptr, *h_params = nullptr, *h_grads = nullptr;
  ClassId* h_y = nullptr;
  float* h_targets = nullptr;
  float* h_sync = nullptr;  // a synchronised batch norm's sums on their way through CrossReplicaSum
  LossSums* h_sums = nullptr;
  StepScalars* h_scalars = nullptr;
  // The variables a training Forward moves (batch norms' moving statistics): copied back to the
  // host after each step of the gradients-out path.
  std::vector<optim::Range> moved;
  // The optimizer (standalone path).
  const optim::Optimizer* optimizer = nullptr;
  std::vector<optim::Range> decayed;
  std::int64_t updates = 0;
  // Captured full-batch steps: [0] gradients out, [1] with the update.
  cudaGraphExec_t graphs[2] = {nullptr, nullptr};
  // A full batch ran once eagerly in this mode: kernels loaded, cuBLAS set up; capture is safe.
  bool warmed[2] = {false, false};
  // Synchronised batch norms: whether the model has one, and the replicas' summer (null: none).
  // With both, a step stops at each of their sums for the host's all-reduce, so it runs eagerly.
  bool has_sync = false;
  tensor::CrossReplicaSum* cross = nullptr;
  std::string device_name;

  ~Impl() {
    for (cudaGraphExec_t g : graphs)
      if (g != nullptr) cudaGraphExecDestroy(g);
    if (cublas != nullptr) Cublas().destroy(cublas);
    if (stream != nullptr) cudaStreamDestroy(stream);
    for (void* p : {static_cast<void*>(h_x), static_cast<void*>(h_params), static_cast<void*>(h_grads), static_cast<void*>(h_y),
                    static_cast<void*>(h_targets), static_cast<void*>(h_sync), static_cast<void*>(h_sums), static_cast<void*>(h_scalars)})
      if (p != nullptr) cudaFreeHost(p);
  }

  BatchNormArgs BatchNorm(const DevLayer& l) const;
  LayerNormArgs LayerNorm(const DevLayer& l) const;
  Status ForwardLayer(DevLayer& l, const float* in, int batch, bool training);
  Status BackwardLayer(DevLayer& l, const float* in, float* dout, float* din, int batch);
  Status Forward(int batch, bool training);
  Status Backward(int batch);
  Status Update();
  Status Enqueue(int mode, int batch);
  Result<tensor::LossResult> Run(int mode, int batch);
  bool regression() const { return loss != tensor::LossKind::kSoftmaxCrossEntropy; }
  bool synced() const { return has_sync && cross != nullptr; }
  // The first n floats at `sums` (device) summed over the replicas: out to the host, through
  // `cross`, back in; the stream waits for the host between.
  Status SumReplicas(float* sums, int n);
  // Copies y into the pinned labels (or targets) after checking it against the model; its rows.
  Result<int> StageLabels(const tensor::Labels& y);
};

BatchNormArgs CudaModel::Impl::BatchNorm(const DevLayer& l) const {
  BatchNormArgs a;
  a.c = l.out.c;
  a.momentum = l.momentum, a.epsilon = l.epsilon;
  if (l.gamma_off != DevLayer::kNone) a.gamma = params + l.gamma_off, a.dgamma = grads + l.gamma_off;
  if (l.beta_off != DevLayer::kNone) a.beta = params + l.beta_off, a.dbeta = grads + l.beta_off;
  a.moving_mean = params + l.mean_off, a.moving_var = params + l.var_off;
  a.stats = l.stats, a.partial = partial, a.sync = l.sync_sums;
  return a;
}

LayerNormArgs CudaModel::Impl::LayerNorm(const DevLayer& l) const {
  LayerNormArgs a;
  a.c = l.out.c;
  a.epsilon = l.epsilon;
  if (l.gamma_off != DevLayer::kNone) a.gamma = params + l.gamma_off, a.dgamma = grads + l.gamma_off;
  if (l.beta_off != DevLayer::kNone) a.beta = params + l.beta_off, a.dbeta = grads + l.beta_off;
  a.row_stats = l.stats, a.partial = partial;
  return a;
}

// l.out_buf = layer(in) for `batch` rows.
Status CudaModel::Impl::ForwardLayer(DevLayer& l, const float* in, int batch, bool training) {
  float* out = l.out_buf;
  const int in_size = static_cast<int>(l.in.size()), out_c = l.out.c;
  const auto rows = static_cast<int>(l.rows(batch));
  switch (l.kind) {
    case LayerSpec::Kind::kDense:
      TFD_CUBLAS_RETURN(Gemm(cublas, false, false, batch, out_c, in_size, 1.0f, in, in_size, params + l.kernel_off, out_c, 0.0f,
                             out, out_c), "dense forward");
      BiasActivation(out, params + l.bias_off, batch, out_c, l.act, l.pre, stream);
      break;
    case LayerSpec::Kind::kConv2D: {
      const int patch = l.k * l.k * l.in.c;
      Im2Col(in, l.cols, batch, l.g, stream);
      TFD_CUBLAS_RETURN(Gemm(cublas, false, false, rows, out_c, patch, 1.0f, l.cols, patch, params + l.kernel_off, out_c, 0.0f, out,
                             out_c), "conv2d forward");
      BiasActivation(out, params + l.bias_off, rows, out_c, l.act, l.pre, stream);
      break;
    }
    case LayerSpec::Kind::kDepthwiseConv2D:
      DepthwiseForward(in, params + l.kernel_off, out, batch, l.g, l.multiplier, stream);
      BiasActivation(out, l.has_bias ? params + l.bias_off : nullptr, rows, out_c, l.act, l.pre, stream);
      break;
    case LayerSpec::Kind::kMaxPool2D:
    case LayerSpec::Kind::kAvgPool2D: PoolForward(l.kind == LayerSpec::Kind::kMaxPool2D, in, out, batch, l.g, stream); break;
    case LayerSpec::Kind::kGlobalAvgPool2D: GlobalAvgPoolForward(in, out, batch, l.in, stream); break;
    case LayerSpec::Kind::kDropout:
      if (training && l.rate > 0) {
        DropoutForward(in, out, l.mask, l.in.size() * batch, l.rate, &scalars->dropout_seed, l.stream_id, stream);
        break;
      }
      [[fallthrough]];
    case LayerSpec::Kind::kFlatten:
      TFD_CUDA_RETURN(cudaMemcpyAsync(out, in, sizeof(float) * l.in.size() * batch, cudaMemcpyDeviceToDevice, stream), "copy forward");
      break;
    case LayerSpec::Kind::kBatchNorm:
      if (training && l.sync && cross != nullptr) {  // the CPU layer's three steps and two sums
        const BatchNormArgs a = BatchNorm(l);
        BatchNormSyncSums(in, rows, a, stream);
        TFD_RETURN_IF_ERROR(SumReplicas(l.sync_sums, out_c + 1));
        BatchNormSyncDeviations(in, rows, a, stream);
        TFD_RETURN_IF_ERROR(SumReplicas(l.sync_sums, out_c));
        BatchNormSyncOutput(in, out, rows, a, stream);
      } else {
        BatchNormForward(in, out, rows, training, BatchNorm(l), stream);
      }
      break;
    case LayerSpec::Kind::kLayerNorm: LayerNormForward(in, out, rows, LayerNorm(l), stream); break;
    case LayerSpec::Kind::kEmbedding:
    case LayerSpec::Kind::kOneHot: CategoricalForward(in, params, l.map, out, batch, in_size, out_c, stream); break;
    case LayerSpec::Kind::kResidual: {
      const float* x = in;
      for (DevLayer& j : l.inner) {
        TFD_RETURN_IF_ERROR(ForwardLayer(j, x, batch, training));
        x = j.out_buf;
      }
      const float* shortcut = in;
      if (!l.projection.empty()) {
        TFD_RETURN_IF_ERROR(ForwardLayer(l.projection[0], in, batch, training));
        shortcut = l.projection[0].out_buf;
      }
      AddActivation(x, shortcut, out, l.out.size() * batch, l.act, l.pre, stream);
      break;
    }
  }
  return Status::Ok();
}

// From dL/d(out) in `dout` (used as scratch), the layer's parameter gradients and, when `din` is
// not null, dL/d(in); `in` and l.out_buf are its last Forward's.
Status CudaModel::Impl::BackwardLayer(DevLayer& l, const float* in, float* dout, float* din, int batch) {
  const int in_size = static_cast<int>(l.in.size()), out_c = l.out.c;
  const auto rows = static_cast<int>(l.rows(batch));
  switch (l.kind) {
    case LayerSpec::Kind::kDense:
    case LayerSpec::Kind::kConv2D: {
      const bool conv = l.kind == LayerSpec::Kind::kConv2D;
      const int patch = conv ? l.k * l.k * l.in.c : in_size;
      const float* a = conv ? l.cols : in;
      ActivationGrad(l.out_buf, dout, std::int64_t{rows} * out_c, l.act, l.pre, stream);
      TFD_CUBLAS_RETURN(BiasGradient(cublas, dout, rows, out_c, ones, grads + l.bias_off), "bias gradient");
      TFD_CUBLAS_RETURN(Gemm(cublas, true, false, patch, out_c, rows, 1.0f, a, patch, dout, out_c, 0.0f, grads + l.kernel_off, out_c),
                        "kernel gradient");
      if (din == nullptr) break;
      if (!conv) {
        TFD_CUBLAS_RETURN(Gemm(cublas, false, true, batch, in_size, out_c, 1.0f, dout, out_c, params + l.kernel_off, out_c, 0.0f, din,
                               in_size), "dense input gradient");
      } else {
        TFD_CUBLAS_RETURN(Gemm(cublas, false, true, rows, patch, out_c, 1.0f, dout, out_c, params + l.kernel_off, out_c, 0.0f, l.cols,
                               patch), "conv2d input gradient");
        Col2Im(l.cols, din, batch, l.g, stream);
      }
      break;
    }
    case LayerSpec::Kind::kDepthwiseConv2D:
      ActivationGrad(l.out_buf, dout, std::int64_t{rows} * out_c, l.act, l.pre, stream);
      if (l.has_bias) TFD_CUBLAS_RETURN(BiasGradient(cublas, dout, rows, out_c, ones, grads + l.bias_off), "bias gradient");
      DepthwiseBackward(in, dout, params + l.kernel_off, grads + l.kernel_off, din, batch, l.g, l.multiplier, partial, stream);
      break;
    case LayerSpec::Kind::kMaxPool2D:
    case LayerSpec::Kind::kAvgPool2D:
      if (din != nullptr) PoolBackward(l.kind == LayerSpec::Kind::kMaxPool2D, in, l.out_buf, dout, din, batch, l.g, stream);
      break;
    case LayerSpec::Kind::kGlobalAvgPool2D:
      if (din != nullptr) GlobalAvgPoolBackward(dout, din, batch, l.in, stream);
      break;
    case LayerSpec::Kind::kDropout:
      if (din != nullptr && l.rate > 0) {
        DropoutBackward(dout, l.mask, din, l.in.size() * batch, stream);
        break;
      }
      [[fallthrough]];
    case LayerSpec::Kind::kFlatten:
      if (din != nullptr)
        TFD_CUDA_RETURN(cudaMemcpyAsync(din, dout, sizeof(float) * l.in.size() * batch, cudaMemcpyDeviceToDevice, stream), "copy backward");
      break;
    case LayerSpec::Kind::kBatchNorm:
      if (l.sync && cross != nullptr) {  // every replica sums, din or not: the calls must pair up
        const BatchNormArgs a = BatchNorm(l);
        BatchNormSyncGradientSums(in, dout, rows, a, stream);
        TFD_RETURN_IF_ERROR(SumReplicas(l.sync_sums, 2 * l.out.c));
        BatchNormSyncInputGradient(in, dout, din, rows, a, stream);
      } else {
        BatchNormBackward(in, dout, din, rows, BatchNorm(l), stream);
      }
      break;
    case LayerSpec::Kind::kLayerNorm: LayerNormBackward(in, dout, din, rows, LayerNorm(l), stream); break;
    case LayerSpec::Kind::kEmbedding:
    case LayerSpec::Kind::kOneHot:
      // Always the first layer (config says so): its input is the batch, which takes no gradient.
      if (din != nullptr) return Status::Internal("cuda model: an embedding or one_hot layer that is not the first");
      if (l.param_end > l.param_start) {
        TFD_CUDA_RETURN(cudaMemsetAsync(grads + l.param_start, 0, sizeof(float) * (l.param_end - l.param_start), stream), "tables");
        CategoricalBackward(in, dout, l.map, grads, batch, in_size, out_c, stream);
      }
      break;
    case LayerSpec::Kind::kResidual: {
      // dL/d(sum) goes down both branches: the shortcut's share is kept (and the projection's
      // backward run) before the inner layers use `dout` as scratch, and added into `din` after.
      const std::int64_t n = l.out.size() * batch;
      ActivationGrad(l.out_buf, dout, n, l.act, l.pre, stream);
      TFD_CUDA_RETURN(cudaMemcpyAsync(l.dsum, dout, sizeof(float) * n, cudaMemcpyDeviceToDevice, stream), "residual gradient");
      if (!l.projection.empty())
        TFD_RETURN_IF_ERROR(BackwardLayer(l.projection[0], in, l.dsum, din == nullptr ? nullptr : l.dproj, batch));
      float* d = dout;
      for (std::size_t j = l.inner.size(); j-- > 0;) {
        float* next = j == 0 ? din : l.dbuf[j % 2];
        TFD_RETURN_IF_ERROR(BackwardLayer(l.inner[j], j == 0 ? in : l.inner[j - 1].out_buf, d, next, batch));
        d = next;
      }
      if (din != nullptr) Accumulate(din, l.projection.empty() ? l.dsum : l.dproj, l.in.size() * batch, stream);
      break;
    }
  }
  return Status::Ok();
}

Status CudaModel::Impl::Forward(int batch, bool training) {
  const float* in = x;
  for (DevLayer& l : layers) {
    TFD_RETURN_IF_ERROR(ForwardLayer(l, in, batch, training));
    in = l.out_buf;
  }
  return Status::Ok();
}

Status CudaModel::Impl::Backward(int batch) {
  float* dout = dlogits;
  int next = 0;
  for (std::size_t i = layers.size(); i-- > 0;) {
    float* din = i == 0 ? nullptr : dbuf[next];
    TFD_RETURN_IF_ERROR(BackwardLayer(layers[i], i == 0 ? x : layers[i - 1].out_buf, dout, din, batch));
    if (din != nullptr) {
      dout = din;
      next ^= 1;
    }
  }
  return Status::Ok();
}

Status CudaModel::Impl::Update() {
  const auto decay = static_cast<float>(optimizer->weight_decay());
  if (decay > 0)
    for (const optim::Range& r : decayed)
      AddWeightDecay(grads + r.offset, params + r.offset, static_cast<std::int64_t>(r.length), decay, stream);
  const config::OptimizerSpec& spec = optimizer->spec();
  const std::int64_t n = num_params;
  switch (spec.type) {
    case config::OptimizerSpec::Type::kSgd: SgdUpdate(params, grads, n, &scalars->lr, stream); break;
    case config::OptimizerSpec::Type::kMomentum:
      MomentumUpdate(params, grads, slots, n, static_cast<float>(spec.momentum), spec.use_nesterov, &scalars->lr, stream);
      break;
    case config::OptimizerSpec::Type::kAdam:
      AdamUpdate(params, grads, slots, slots + n, n, static_cast<float>(spec.beta1), static_cast<float>(spec.beta2),
                 static_cast<float>(spec.epsilon), &scalars->lr, stream);
      break;
  }
  return Status::Ok();
}

// mode 0: params in, gradients out; mode 1: the whole step, the update on the device.
Status CudaModel::Impl::Enqueue(int mode, int batch) {
  TFD_CUDA_RETURN(cudaMemcpyAsync(scalars, h_scalars, sizeof(StepScalars), cudaMemcpyHostToDevice, stream), "step scalars in");
  if (mode == 0) {
    TFD_CUDA_RETURN(cudaMemcpyAsync(params, h_params, sizeof(float) * num_params, cudaMemcpyHostToDevice, stream), "params in");
  }
  TFD_CUDA_RETURN(cudaMemcpyAsync(x, h_x, sizeof(float) * input_size * batch, cudaMemcpyHostToDevice, stream), "batch in");
  if (regression()) {
    TFD_CUDA_RETURN(cudaMemcpyAsync(targets, h_targets, sizeof(float) * classes * batch, cudaMemcpyHostToDevice, stream), "targets in");
  } else {
    TFD_CUDA_RETURN(cudaMemcpyAsync(y, h_y, sizeof(ClassId) * batch, cudaMemcpyHostToDevice, stream), "labels in");
  }
  TFD_RETURN_IF_ERROR(Forward(batch, /*training=*/true));
  if (regression()) RegressionLoss(layers.back().out_buf, targets, batch, classes, loss, dlogits, row_err, sums, stream);
  else SoftmaxCrossEntropy(layers.back().out_buf, y, batch, classes, dlogits, row_loss, row_hit, sums, stream);
  TFD_RETURN_IF_ERROR(Backward(batch));
  if (mode == 0) {
    TFD_CUDA_RETURN(cudaMemcpyAsync(h_grads, grads, sizeof(float) * num_params, cudaMemcpyDeviceToHost, stream), "gradients out");
    for (const optim::Range& r : moved)
      TFD_CUDA_RETURN(cudaMemcpyAsync(h_params + r.offset, params + r.offset, sizeof(float) * r.length, cudaMemcpyDeviceToHost, stream),
                      "moving statistics out");
  } else {
    TFD_RETURN_IF_ERROR(Update());
  }
  TFD_CUDA_RETURN(cudaMemcpyAsync(h_sums, sums, sizeof(LossSums), cudaMemcpyDeviceToHost, stream), "loss out");
  TFD_CUDA_RETURN(cudaGetLastError(), "kernel launch");
  return Status::Ok();
}

Status CudaModel::Impl::SumReplicas(float* sums, int n) {
  TFD_CUDA_RETURN(cudaMemcpyAsync(h_sync, sums, sizeof(float) * n, cudaMemcpyDeviceToHost, stream), "batch norm sums out");
  TFD_CUDA_RETURN(cudaStreamSynchronize(stream), "batch norm sums");
  cross->Sum(std::span(h_sync, static_cast<std::size_t>(n)));
  // The next host write to h_sync follows a synchronisation, so this copy has read it by then.
  TFD_CUDA_RETURN(cudaMemcpyAsync(sums, h_sync, sizeof(float) * n, cudaMemcpyHostToDevice, stream), "batch norm sums in");
  return Status::Ok();
}

Result<tensor::LossResult> CudaModel::Impl::Run(int mode, int batch) {
  TFD_CUDA_RETURN(cudaSetDevice(arena->device()), "set device");  // the current device is per host thread
  // The first full batch runs eagerly (module loading and cuBLAS's first-call set-up happen
  // outside a capture); the second is captured, and every later one replays the graph. A step
  // that waits for the replicas' sums cannot be captured: it always runs eagerly.
  if (batch == max_batch && warmed[mode] && !synced()) {
    if (graphs[mode] == nullptr) {
      TFD_CUDA_RETURN(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "graph capture");
      Status enqueued = Enqueue(mode, batch);
      cudaGraph_t graph = nullptr;
      const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
      if ((!enqueued.ok() || ended != cudaSuccess) && graph != nullptr) {
        cudaGraphDestroy(graph);  // a capture cut short: nothing to instantiate
        graph = nullptr;
      }
      TFD_RETURN_IF_ERROR(enqueued);
      TFD_CUDA_RETURN(ended, "graph capture");
      const cudaError_t made = cudaGraphInstantiate(&graphs[mode], graph, 0);
      cudaGraphDestroy(graph);
      TFD_CUDA_RETURN(made, "graph instantiation");
    }
    TFD_CUDA_RETURN(cudaGraphLaunch(graphs[mode], stream), "graph launch");
  } else {
    TFD_RETURN_IF_ERROR(Enqueue(mode, batch));
    if (batch == max_batch) warmed[mode] = true;
  }
  TFD_CUDA_RETURN(cudaStreamSynchronize(stream), "step");
  tensor::LossResult r;
  r.loss = h_sums->loss_sum / (regression() ? static_cast<double>(batch) * classes : batch);
  r.correct = h_sums->correct;
  r.abs_error = h_sums->abs_sum;
  r.squared_error = h_sums->squared_sum;
  return r;
}

CudaModel::CudaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaModel::~CudaModel() = default;

namespace {

// Where each of `layer`'s variables starts, counting from `start` in its Params() order; then the end.
std::vector<std::size_t> ParamOffsets(const tensor::Layer& layer, std::size_t start) {
  std::vector<std::size_t> off;
  for (const tensor::ParamSpec& p : layer.Params()) {
    off.push_back(start);
    start += static_cast<std::size_t>(tensor::NumElements(p.shape));
  }
  off.push_back(start);
  return off;
}

// The device twin of `layer` (built from `s`, reading `in`, its variables from `start`); `where`
// names it in errors ("layer 2", "layer 2's layer 0").
Status BuildLayer(const LayerSpec& s, const tensor::Layer& layer, tensor::ActShape in, std::size_t start, std::uint64_t stream_id,
                  const std::string& where, DevLayer* l) {
  l->kind = s.kind;
  l->act = s.activation;
  l->in = in;
  l->out = layer.output_shape();
  l->k = s.kernel_size;
  l->rate = static_cast<float>(s.rate);
  l->stream_id = stream_id;
  const std::vector<std::size_t> off = ParamOffsets(layer, start);
  l->param_start = start;
  l->param_end = off.back();
  if (off.size() > 1) l->kernel_off = off[0];
  if (off.size() > 2) l->bias_off = off[1];
  auto norm_variables = [&] {
    std::size_t i = 0;
    if (s.scale) l->gamma_off = off[i++];
    if (s.center) l->beta_off = off[i++];
    return i;
  };
  switch (s.kind) {
    case LayerSpec::Kind::kConv2D:
    case LayerSpec::Kind::kMaxPool2D:
    case LayerSpec::Kind::kAvgPool2D:
      l->g = Geometry(in, s.kind == LayerSpec::Kind::kConv2D ? s.kernel_size : s.pool_size, s.stride(), s.padding);
      break;
    case LayerSpec::Kind::kDepthwiseConv2D:
      l->g = Geometry(in, s.kernel_size, s.stride(), s.padding);
      l->multiplier = s.depth_multiplier;
      l->has_bias = s.use_bias;
      break;
    case LayerSpec::Kind::kBatchNorm: {
      const std::size_t i = norm_variables();
      l->mean_off = off[i], l->var_off = off[i + 1];
      l->momentum = s.momentum, l->epsilon = s.epsilon;
      l->sync = s.sync;
      break;
    }
    case LayerSpec::Kind::kLayerNorm:
      norm_variables();
      l->epsilon = s.epsilon;
      break;
    case LayerSpec::Kind::kEmbedding:
    case LayerSpec::Kind::kOneHot: {
      std::vector<bool> categorical(static_cast<std::size_t>(in.size()), false);
      for (int f : s.column_features) categorical[static_cast<std::size_t>(f)] = true;
      for (int f = 0; f < in.size(); ++f)
        if (!categorical[static_cast<std::size_t>(f)]) l->outputs.push_back({0, f, 1, 0, 0, 0});
      for (std::size_t c = 0; c < s.column_features.size(); ++c) {
        const int feature = s.column_features[c], ids = s.column_ids[c];
        if (s.kind == LayerSpec::Kind::kEmbedding) {
          for (int k = 0; k < s.output_dim; ++k)
            l->outputs.push_back({1, feature, ids, s.output_dim, k, static_cast<std::int64_t>(off[c]) + k});
        } else {
          for (int v = 0; v < ids; ++v) l->outputs.push_back({2, feature, ids, 0, v, 0});
        }
      }
      if (static_cast<int>(l->outputs.size()) != l->out.c)
        return Status::Internal(fmt::format("cuda model: {}: {} outputs where the layer has {}", where, l->outputs.size(), l->out.c));
      break;
    }
    case LayerSpec::Kind::kResidual: {
      const auto inner = layer.Inner();
      std::vector<const LayerSpec*> specs;  // the block's layers as Inner() holds them (flatten left out)
      for (const LayerSpec& j : s.layers)
        if (j.kind != LayerSpec::Kind::kFlatten) specs.push_back(&j);
      if (specs.size() != inner.size())
        return Status::Internal(fmt::format("cuda model: {}: {} layers in the spec, {} in the block", where, specs.size(), inner.size()));
      std::size_t at = start;
      l->inner.resize(inner.size());
      for (std::size_t j = 0; j < inner.size(); ++j) {
        TFD_RETURN_IF_ERROR(BuildLayer(*specs[j], *inner[j], j == 0 ? in : l->inner[j - 1].out, at, (stream_id + 1) * 1024 + j,
                                       fmt::format("{}'s layer {}", where, j), &l->inner[j]));
        at = l->inner[j].param_end;
      }
      if (s.strides > 0) {  // the projection: a 1x1 conv2d with a bias, `strides` apart
        DevLayer& p = l->projection.emplace_back();
        p.kind = LayerSpec::Kind::kConv2D;
        p.in = in, p.out = l->out, p.k = 1;
        p.g = Geometry(in, 1, s.strides, config::Padding::kValid);
        p.param_start = p.kernel_off = at;
        p.bias_off = at + static_cast<std::size_t>(std::int64_t{in.c} * l->out.c);
        p.param_end = at = p.bias_off + static_cast<std::size_t>(l->out.c);
      }
      if (at != l->param_end)
        return Status::Internal(fmt::format("cuda model: {}: variables end at {}, expected {}", where, at, l->param_end));
      break;
    }
    default: break;
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<CudaModel>> CudaModel::Create(const model::Model& model, int device, double memory_fraction,
                                                     const optim::Optimizer* optimizer) {
  TFD_RETURN_IF_ERROR(CheckDevice(device));
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  TFD_ASSIGN_OR_RETURN(m.arena, DeviceArena::Create(device, memory_fraction));
  m.device_name = DeviceDescription(device);
  m.max_batch = model.max_batch();
  m.classes = model.classes();
  m.loss = model.loss();
  m.input_size = model.input_size();
  m.num_params = static_cast<std::int64_t>(model.params().size());
  m.optimizer = optimizer;
  if (optimizer != nullptr) m.decayed = optim::DecayedRanges(model::VariableRuns(model));
  for (const model::Variable& v : model.variables())
    if (!v.trainable) m.moved.push_back({static_cast<std::size_t>(v.offset), static_cast<std::size_t>(v.size)});
  const std::size_t B = static_cast<std::size_t>(m.max_batch);
  std::int64_t widest = m.input_size;
  m.layers.resize(model.num_layers());
  for (std::size_t i = 0; i < model.num_layers(); ++i) {
    TFD_RETURN_IF_ERROR(BuildLayer(model.layer_spec(i), model.layer(i), i == 0 ? model.input_shape() : model.layer_output_shape(i - 1),
                                   model.layer_starts()[i], i, fmt::format("layer {}", i), &m.layers[i]));
    widest = std::max(widest, m.layers[i].out.size());
  }
  // Every device buffer's size: one reservation for all of them.
  struct Request {
    std::function<void(void*)> set;
    std::size_t bytes;
  };
  std::vector<Request> requests;
  auto want = [&requests]<typename T>(T** dst, std::size_t bytes) {
    requests.push_back({[dst](void* p) { *dst = static_cast<T*>(p); }, bytes});
  };
  const auto P = static_cast<std::size_t>(m.num_params);
  const int num_slots = optimizer != nullptr ? optimizer->num_slots() : 0;
  want(&m.params, P * sizeof(float));
  want(&m.grads, P * sizeof(float));
  if (num_slots > 0) want(&m.slots, P * num_slots * sizeof(float));
  want(&m.x, B * m.input_size * sizeof(float));
  if (m.regression()) {
    want(&m.targets, B * m.classes * sizeof(float));
    want(&m.row_err, 3 * B * sizeof(double));
  } else {
    want(&m.y, B * sizeof(ClassId));
  }
  for (auto& d : m.dbuf) want(&d, B * widest * sizeof(float));
  want(&m.dlogits, B * m.classes * sizeof(float));
  want(&m.row_loss, B * sizeof(float));
  want(&m.row_hit, B * sizeof(int));
  want(&m.sums, sizeof(LossSums));
  want(&m.scalars, sizeof(StepScalars));
  want(&m.workspace, kCublasWorkspace);
  std::int64_t most_rows = m.max_batch, partials = 1;
  std::size_t sync_floats = 0;  // the widest synchronised batch norm's sums
  std::function<void(DevLayer&)> layer_buffers = [&](DevLayer& l) {
    const std::int64_t rows = l.rows(m.max_batch);
    most_rows = std::max(most_rows, rows);
    want(&l.out_buf, B * l.out.size() * sizeof(float));
    if (l.kind == LayerSpec::Kind::kDropout) want(&l.mask, B * l.in.size() * sizeof(float));
    if (l.kind == LayerSpec::Kind::kConv2D) want(&l.cols, static_cast<std::size_t>(rows) * l.k * l.k * l.in.c * sizeof(float));
    if (l.act == config::Activation::kGelu) want(&l.pre, B * l.out.size() * sizeof(float));
    if (l.kind == LayerSpec::Kind::kBatchNorm) {
      want(&l.stats, 6 * static_cast<std::size_t>(l.out.c) * sizeof(float));
      if (l.sync) {
        want(&l.sync_sums, (2 * static_cast<std::size_t>(l.out.c) + 2) * sizeof(float));
        m.has_sync = true;
        sync_floats = std::max<std::size_t>(sync_floats, 2 * static_cast<std::size_t>(l.out.c) + 2);
      }
      partials = std::max(partials, ReducePartials(rows, l.out.c, 1));
    }
    if (l.kind == LayerSpec::Kind::kLayerNorm) {
      want(&l.stats, 2 * static_cast<std::size_t>(rows) * sizeof(float));
      partials = std::max(partials, ReducePartials(rows, l.out.c, 1));
    }
    if (l.kind == LayerSpec::Kind::kDepthwiseConv2D) partials = std::max(partials, ReducePartials(rows, l.out.c, l.k * l.k));
    if (!l.outputs.empty()) want(&l.map, l.outputs.size() * sizeof(CategoricalOutput));
    if (l.kind == LayerSpec::Kind::kResidual) {
      std::int64_t inner_widest = l.in.size();
      for (DevLayer& j : l.inner) {
        layer_buffers(j);
        inner_widest = std::max(inner_widest, j.out.size());
      }
      for (DevLayer& p : l.projection) layer_buffers(p);
      want(&l.dsum, B * l.out.size() * sizeof(float));
      if (!l.projection.empty()) want(&l.dproj, B * l.in.size() * sizeof(float));
      for (auto& d : l.dbuf) want(&d, B * inner_widest * sizeof(float));
    }
  };
  for (DevLayer& l : m.layers) layer_buffers(l);
  want(&m.ones, static_cast<std::size_t>(most_rows) * sizeof(float));
  want(&m.partial, static_cast<std::size_t>(partials) * sizeof(double2));
  std::size_t need = 0;
  for (const Request& r : requests) need += DeviceArena::Rounded(r.bytes);
  TFD_RETURN_IF_ERROR(m.arena->Reserve(need, fmt::format("the model ({} parameters, batch {})", m.num_params, m.max_batch)));
  for (const Request& r : requests) {
    TFD_ASSIGN_OR_RETURN(void* p, m.arena->Take(r.bytes, "a model buffer"));
    r.set(p);
  }
  TFD_CUDA_RETURN(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking), "stream");
  TFD_ASSIGN_OR_RETURN(const CublasApi* api, LoadCublas());
  TFD_CUBLAS_RETURN(api->create(&m.cublas), "handle");
  TFD_CUBLAS_RETURN(api->set_stream(m.cublas, m.stream), "stream");
  TFD_CUBLAS_RETURN(api->set_workspace(m.cublas, m.workspace, kCublasWorkspace), "workspace");
  TFD_CUDA_RETURN(cudaMallocHost(reinterpret_cast<void**>(&m.h_x), B * m.input_size * sizeof(float)), "pinned batch");
  if (m.regression()) TFD_CUDA_RETURN(cudaMallocHost(reinterpret_cast<void**>(&m.h_targets), B * m.classes * sizeof(float)), "pinned targets");
  else TFD_CUDA_RETURN(cudaMallocHost(reinterpret_cast<void**>(&m.h_y), B * sizeof(ClassId)), "pinned labels");
  TFD_CUDA_RETURN(cudaMallocHost(reinterpret_cast<void**>(&m.h_params), P * sizeof(float) + 1), "pinned params");
  TFD_CUDA_RETURN(cudaMallocHost(reinterpret_cast<void**>(&m.h_grads), P * sizeof(float) + 1), "pinned gradients");
  TFD_CUDA_RETURN(cudaMallocHost(reinterpret_cast<void**>(&m.h_sums), sizeof(LossSums)), "pinned loss");
  TFD_CUDA_RETURN(cudaMallocHost(reinterpret_cast<void**>(&m.h_scalars), sizeof(StepScalars)), "pinned scalars");
  if (sync_floats > 0) TFD_CUDA_RETURN(cudaMallocHost(reinterpret_cast<void**>(&m.h_sync), sync_floats * sizeof(float)), "pinned batch norm sums");
  *m.h_scalars = StepScalars{};
  Fill(m.ones, most_rows, 1.0f, m.stream);
  std::function<Status(DevLayer&)> upload_maps = [&](DevLayer& l) -> Status {
    if (!l.outputs.empty())
      TFD_CUDA_RETURN(cudaMemcpyAsync(l.map, l.outputs.data(), l.outputs.size() * sizeof(CategoricalOutput), cudaMemcpyHostToDevice,
                                      m.stream), "categorical map");
    for (DevLayer& j : l.inner) TFD_RETURN_IF_ERROR(upload_maps(j));
    return Status::Ok();
  };
  for (DevLayer& l : m.layers) TFD_RETURN_IF_ERROR(upload_maps(l));
  TFD_CUDA_RETURN(cudaMemsetAsync(m.grads, 0, P * sizeof(float), m.stream), "gradients");
  if (num_slots > 0) TFD_CUDA_RETURN(cudaMemsetAsync(m.slots, 0, P * num_slots * sizeof(float), m.stream), "slots");
  TFD_CUDA_RETURN(cudaGetLastError(), "set-up kernels");
  TFD_CUDA_RETURN(cudaStreamSynchronize(m.stream), "set-up");
  return std::unique_ptr<CudaModel>(new CudaModel(std::move(impl)));
}

namespace {
Status CheckBatch(std::int64_t batch, int max_batch) {
  if (batch < 1 || batch > max_batch)
    return Status::InvalidArgument(fmt::format("cuda model: a batch of {} rows, expected 1 to {}", batch, max_batch));
  return Status::Ok();
}
}  // namespace

Result<int> CudaModel::Impl::StageLabels(const tensor::Labels& y) {
  if (y.regression() != regression() || (y.regression() && y.width != classes))
    return Status::InvalidArgument(fmt::format("cuda model: {} for a model of {} {}", y.regression() ? fmt::format("{} targets a row", y.width) : "class ids",
                                               classes, regression() ? "regression outputs" : "classes"));
  const auto batch = static_cast<std::int64_t>(y.rows());
  TFD_RETURN_IF_ERROR(CheckBatch(batch, max_batch));
  if (regression()) std::memcpy(h_targets, y.targets.data(), y.targets.size_bytes());
  else std::memcpy(h_y, y.ids.data(), y.ids.size_bytes());
  return static_cast<int>(batch);
}

Result<tensor::LossResult> CudaModel::ComputeGradients(std::span<float> params, const float* x, const tensor::Labels& y,
                                                       std::uint64_t dropout_seed, std::span<float> grads) {
  Impl& m = *impl_;
  TFD_ASSIGN_OR_RETURN(const int batch, m.StageLabels(y));
  TFD_CHECK(static_cast<std::int64_t>(params.size()) == m.num_params && static_cast<std::int64_t>(grads.size()) == m.num_params);
  std::memcpy(m.h_params, params.data(), params.size_bytes());
  std::memcpy(m.h_x, x, sizeof(float) * m.input_size * batch);
  m.h_scalars->dropout_seed = dropout_seed;
  TFD_ASSIGN_OR_RETURN(tensor::LossResult r, m.Run(0, batch));
  std::memcpy(grads.data(), m.h_grads, grads.size_bytes());
  for (const optim::Range& moved : m.moved) std::memcpy(params.data() + moved.offset, m.h_params + moved.offset, sizeof(float) * moved.length);
  return r;
}

Status CudaModel::UploadParams(std::span<const float> params) {
  Impl& m = *impl_;
  TFD_CUDA_RETURN(cudaSetDevice(m.arena->device()), "set device");
  TFD_CHECK(static_cast<std::int64_t>(params.size()) == m.num_params);
  TFD_CUDA_RETURN(cudaMemcpyAsync(m.params, params.data(), params.size_bytes(), cudaMemcpyHostToDevice, m.stream), "params in");
  TFD_CUDA_RETURN(cudaStreamSynchronize(m.stream), "params in");
  return Status::Ok();
}

Result<tensor::LossResult> CudaModel::TrainStep(const float* x, const tensor::Labels& y, std::uint64_t dropout_seed) {
  Impl& m = *impl_;
  if (m.optimizer == nullptr) return Status::Internal("cuda model: TrainStep without an optimizer");
  TFD_ASSIGN_OR_RETURN(const int batch, m.StageLabels(y));
  std::memcpy(m.h_x, x, sizeof(float) * m.input_size * batch);
  m.h_scalars->dropout_seed = dropout_seed;
  // OptimizerState's rule: the rate of the step before this update, then update number t.
  const double lr = m.optimizer->LearningRate(m.updates);
  const std::int64_t t = m.updates + 1;
  if (m.optimizer->spec().type == config::OptimizerSpec::Type::kAdam) {
    const double b1 = m.optimizer->spec().beta1, b2 = m.optimizer->spec().beta2;
    m.h_scalars->lr = static_cast<float>(lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t)));
  } else {
    m.h_scalars->lr = static_cast<float>(lr);
  }
  TFD_ASSIGN_OR_RETURN(tensor::LossResult r, m.Run(1, batch));
  m.updates = t;
  return r;
}

Status CudaModel::Forward(const float* x, int batch, std::span<float> out) {
  Impl& m = *impl_;
  TFD_RETURN_IF_ERROR(CheckBatch(batch, m.max_batch));
  TFD_CHECK(static_cast<std::int64_t>(out.size()) == std::int64_t{batch} * m.classes);
  TFD_CUDA_RETURN(cudaSetDevice(m.arena->device()), "set device");
  std::memcpy(m.h_x, x, sizeof(float) * m.input_size * batch);
  TFD_CUDA_RETURN(cudaMemcpyAsync(m.x, m.h_x, sizeof(float) * m.input_size * batch, cudaMemcpyHostToDevice, m.stream), "batch in");
  TFD_RETURN_IF_ERROR(m.Forward(batch, /*training=*/false));
  TFD_CUDA_RETURN(cudaMemcpyAsync(out.data(), m.layers.back().out_buf, out.size_bytes(), cudaMemcpyDeviceToHost, m.stream), "outputs out");
  TFD_CUDA_RETURN(cudaGetLastError(), "kernel launch");
  TFD_CUDA_RETURN(cudaStreamSynchronize(m.stream), "forward");
  return Status::Ok();
}

Status CudaModel::DownloadParams(std::span<float> params) {
  Impl& m = *impl_;
  TFD_CUDA_RETURN(cudaSetDevice(m.arena->device()), "set device");
  TFD_CHECK(static_cast<std::int64_t>(params.size()) == m.num_params);
  TFD_CUDA_RETURN(cudaMemcpyAsync(params.data(), m.params, params.size_bytes(), cudaMemcpyDeviceToHost, m.stream), "params out");
  TFD_CUDA_RETURN(cudaStreamSynchronize(m.stream), "params out");
  return Status::Ok();
}

Status CudaModel::DownloadSlots(std::span<float> slots) {
  Impl& m = *impl_;
  TFD_CUDA_RETURN(cudaSetDevice(m.arena->device()), "set device");
  const std::size_t n = m.optimizer == nullptr ? 0 : static_cast<std::size_t>(m.num_params) * m.optimizer->num_slots();
  TFD_CHECK(slots.size() == n);
  if (n == 0) return Status::Ok();
  TFD_CUDA_RETURN(cudaMemcpyAsync(slots.data(), m.slots, slots.size_bytes(), cudaMemcpyDeviceToHost, m.stream), "slots out");
  TFD_CUDA_RETURN(cudaStreamSynchronize(m.stream), "slots out");
  return Status::Ok();
}

std::int64_t CudaModel::updates() const { return impl_->updates; }

void CudaModel::SetCrossReplicaSum(tensor::CrossReplicaSum* sum) { impl_->cross = sum; }

Status CudaModel::UploadState(std::span<const float> slots, std::int64_t updates) {
  Impl& m = *impl_;
  if (updates < 0) return Status::InvalidArgument(fmt::format("cuda model: {} updates", updates));
  const std::size_t n = m.optimizer == nullptr ? 0 : static_cast<std::size_t>(m.num_params) * m.optimizer->num_slots();
  if (slots.size() != n) return Status::InvalidArgument(fmt::format("cuda model: {} slot floats where the optimizer has {}", slots.size(), n));
  TFD_CUDA_RETURN(cudaSetDevice(m.arena->device()), "set device");
  if (n > 0) {
    TFD_CUDA_RETURN(cudaMemcpyAsync(m.slots, slots.data(), slots.size_bytes(), cudaMemcpyHostToDevice, m.stream), "slots in");
    TFD_CUDA_RETURN(cudaStreamSynchronize(m.stream), "slots in");
  }
  m.updates = updates;
  return Status::Ok();
}

std::string CudaModel::Describe() const {
  return fmt::format("cuda:{} ({}): {} of device memory, limit {}", impl_->arena->device(), impl_->device_name,
                     FormatBytes(impl_->arena->reserved()), FormatBytes(impl_->arena->limit()));
}

}  // namespace tfd::cuda
