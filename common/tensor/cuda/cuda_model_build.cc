// CudaModel::Create (cuda_model.h): the device twin of each layer kind (its shapes, geometry and
// where its variables sit in the flat parameters), every device buffer in one reservation, the
// stream, the cuBLAS handle and the pinned host buffers.
#include <algorithm>
#include <functional>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "common/tensor/cuda/cuda_model_impl.h"
#include "common/tensor/cuda/runtime.h"

namespace tfd::cuda {

using config::LayerSpec;

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

}  // namespace tfd::cuda
