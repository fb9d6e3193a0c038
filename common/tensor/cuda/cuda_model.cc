// CudaModel (cuda_model.h): the forward and backward passes of each layer kind, the loss, the
// optimizer's update, the step's capture as a CUDA graph and the copies in and out (the model's
// making: cuda_model_build.cc).
#include "common/tensor/cuda/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "common/optim/cuda/optimizer_kernels.h"
#include "common/tensor/cuda/cuda_model_impl.h"
#include "common/tensor/cuda/kernels.h"

namespace tfd::cuda {

using config::LayerSpec;

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
