#include "common/model/model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "common/base/random.h"
#include "common/base/sha256.h"
#include "common/model/build_layer.h"

namespace tfd::model {
namespace {

using config::InitKind;
using config::InitSpec;
using config::LayerSpec;

LayerSpec Dense(int units, config::Activation act, InitSpec init) {
  LayerSpec l;
  l.kind = LayerSpec::Kind::kDense;
  l.units = units;
  l.activation = act;
  l.init = init;
  return l;
}

// The seeds' models, layer by layer, with the initializers the seeds used; the last layer has one
// unit per class (or regression target).
std::vector<LayerSpec> SeedLayers(const std::string& name, int classes) {
  using A = config::Activation;
  if (name == "softmax") return {Dense(classes, A::kNone, {InitKind::kZeros})};  // TF's MNIST tutorial: zeros
  if (name == "mlp") {
    // tf.random_normal (stddev 1) weights: the seed's slow learner.
    InitSpec normal{InitKind::kNormal, 1.0};
    return {Dense(100, A::kSigmoid, normal), Dense(classes, A::kNone, normal)};
  }
  if (name == "dnn") {
    std::vector<LayerSpec> l(5, Dense(160, A::kElu, {InitKind::kHeNormal}));
    l.push_back(Dense(classes, A::kNone, {InitKind::kHeNormal}));
    return l;
  }
  // cnn: Keras defaults (glorot_uniform kernels).
  LayerSpec conv;
  conv.kind = LayerSpec::Kind::kConv2D;
  conv.filters = 32;
  conv.kernel_size = 3;
  conv.activation = A::kRelu;
  LayerSpec pool;
  pool.kind = LayerSpec::Kind::kMaxPool2D;
  pool.pool_size = 2;
  LayerSpec flatten;
  flatten.kind = LayerSpec::Kind::kFlatten;
  return {conv, pool, flatten, Dense(64, A::kRelu, {}), Dense(classes, A::kNone, {})};
}

void FillInit(const tensor::ParamSpec& p, std::span<float> out, Rng& rng) {
  InitSpec init = p.init;
  switch (init.kind) {
    case InitKind::kZeros: std::fill(out.begin(), out.end(), 0.0f); return;
    case InitKind::kOnes: std::fill(out.begin(), out.end(), 1.0f); return;
    case InitKind::kNormal:
      for (float& v : out) v = static_cast<float>(rng.Normal() * init.stddev);
      return;
    case InitKind::kDefault:
    case InitKind::kGlorotUniform: {
      double limit = std::sqrt(6.0 / static_cast<double>(p.fan_in + p.fan_out));
      for (float& v : out) v = static_cast<float>((2 * rng.Uniform() - 1) * limit);
      return;
    }
    case InitKind::kHeNormal:
      init.stddev = std::sqrt(2.0 / static_cast<double>(p.fan_in)) / 0.87962566103423978;
      [[fallthrough]];
    case InitKind::kTruncatedNormal:
      for (float& v : out) {
        double z;
        do z = rng.Normal(); while (std::abs(z) > 2.0);
        v = static_cast<float>(z * init.stddev);
      }
      return;
  }
}

}  // namespace

Result<std::unique_ptr<Model>> Model::Build(const config::ModelSpec& spec, tensor::ActShape input, Outputs outputs,
                                            int max_batch, tensor::GemmConfig gemm,
                                            const std::vector<data::CategoricalColumn>& categorical) {
  std::unique_ptr<Model> m(new Model());
  const int classes = outputs.units;
  m->gemm_ = gemm;
  m->input_ = input;
  m->classes_ = classes;
  m->loss_ = outputs.loss;
  m->max_batch_ = max_batch;
  std::vector<LayerSpec> specs = spec.name == "layers" ? spec.layers : SeedLayers(spec.name, classes);
  const bool takes_ids = specs[0].kind == LayerSpec::Kind::kEmbedding || specs[0].kind == LayerSpec::Kind::kOneHot;
  if (!categorical.empty() && !takes_ids)  // ids fed to a dense layer as quantities would train, and mean nothing
    return Status::InvalidArgument(fmt::format("{}: the data has categorical columns (data.categorical: \"{}\", ...): the first layer must be "
                                               "embedding or one_hot",
                                               spec.name == "layers" ? "model.layers[0]" : "model", categorical[0].name));
  tensor::ActShape shape = input;
  std::map<std::string, int> kind_count;
  std::vector<std::string> layer_names;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].kind == LayerSpec::Kind::kFlatten) {
      shape = {1, 1, static_cast<int>(shape.size())};
      continue;
    }
    const std::string where = spec.name == "layers" ? fmt::format("model.layers[{}]", i) : fmt::format("model \"{}\"", spec.name);
    TFD_ASSIGN_OR_RETURN(BuiltLayer built, i == 0 && takes_ids ? BuildCategorical(specs[i], shape, where, categorical)
                                                               : BuildLayer(specs[i], shape, where, spec.init, gemm, input.h == 1 && i == 0));
    const std::string kind(config::LayerKindName(built.spec.kind));
    int n = kind_count[kind]++;
    layer_names.push_back(n == 0 ? kind : fmt::format("{}_{}", kind, n));
    shape = built.layer->output_shape();
    m->layers_.push_back(std::move(built.layer));
    m->layer_specs_.push_back(std::move(built.spec));
  }
  const LayerSpec& last = specs.back();
  if (m->layers_.empty() || last.kind != LayerSpec::Kind::kDense || last.units != classes ||
      last.activation != config::Activation::kNone) {
    return Status::InvalidArgument(fmt::format(
        "model.layers[{}]: the last layer must be dense with {} units (one per {} of the data) and no activation: it gives "
        "the {}{}",
        specs.size() - 1, classes, m->regression() ? "regression target" : "class", m->regression() ? "outputs" : "logits",
        last.kind == LayerSpec::Kind::kDense && last.units != classes ? fmt::format(" (it has {} units)", last.units) : ""));
  }
  // Lay the variables out in layer order, then bind every layer to its slices.
  for (std::size_t i = 0; i < m->layers_.size(); ++i) {
    m->layer_params_.push_back(m->layers_[i]->Params());
    for (const tensor::ParamSpec& p : m->layer_params_.back()) {
      std::int64_t offset = m->variables_.empty() ? 0 : m->variables_.back().offset + m->variables_.back().size;
      m->variables_.push_back({layer_names[i] + "/" + p.name, p.shape, offset, tensor::NumElements(p.shape), p.trainable});
    }
  }
  std::int64_t total = m->variables_.empty() ? 0 : m->variables_.back().offset + m->variables_.back().size;
  m->params_.assign(static_cast<std::size_t>(total), 0.0f);
  m->grads_.assign(static_cast<std::size_t>(total), 0.0f);
  std::size_t v = 0;
  std::int64_t widest = input.size();
  for (std::size_t i = 0; i < m->layers_.size(); ++i) {
    std::vector<std::span<float>> ps, gs;
    for (std::size_t j = 0; j < m->layer_params_[i].size(); ++j, ++v) {
      ps.push_back(m->params().subspan(m->variables_[v].offset, m->variables_[v].size));
      gs.push_back(m->grads().subspan(m->variables_[v].offset, m->variables_[v].size));
    }
    m->layers_[i]->Bind(ps, gs);
    m->layers_[i]->Reserve(max_batch);
    std::int64_t out = m->layers_[i]->output_shape().size();
    widest = std::max(widest, out);
    m->acts_.emplace_back(static_cast<std::size_t>(out * max_batch));
  }
  for (auto& d : m->dbuf_) d.resize(static_cast<std::size_t>(widest * max_batch));
  m->FindImageRuns();
  // Layer i's parameters start at its first variable, or (none) where layer i + 1's do.
  m->layer_starts_.assign(m->layers_.size() + 1, static_cast<std::size_t>(total));
  std::size_t first = m->variables_.size();
  for (std::size_t i = m->layers_.size(); i-- > 0;) {
    first -= m->layer_params_[i].size();
    m->layer_starts_[i] = m->layer_params_[i].empty() ? m->layer_starts_[i + 1] : static_cast<std::size_t>(m->variables_[first].offset);
  }
  return m;
}

void Model::Initialize(std::uint64_t seed) {
  std::size_t v = 0;
  for (const auto& layer_params : layer_params_) {
    for (const tensor::ParamSpec& p : layer_params) {
      Rng rng(seed, v);  // one stream per variable: adding a layer does not change the others
      FillInit(p, params().subspan(variables_[v].offset, variables_[v].size), rng);
      ++v;
    }
  }
}

const float* Model::Forward(const float* x, int batch) {
  TFD_CHECK(batch >= 1 && batch <= max_batch_);
  SetTraining(false);
  const float* in = x;
  std::size_t i = 0;
  auto whole_batch_until = [&](std::size_t end) {
    for (; i < end; ++i) {
      layers_[i]->Forward(in, acts_[i].data(), batch);
      in = acts_[i].data();
    }
  };
  for (const ImageRun& run : image_runs_) {
    if (run.block >= batch) continue;  // one block: the whole-batch pass does the same
    whole_batch_until(run.first);
    in = ForwardInBlocks(run, in, batch);
    i = run.last;
  }
  whole_batch_until(layers_.size());
  return in;
}

// Every block reuses the start of each inner layer's buffer, so a block's activations are
// written over the last block's while they are still in cache.
const float* Model::ForwardInBlocks(const ImageRun& run, const float* x, int batch) {
  const std::int64_t in_width = run.first == 0 ? input_.size() : layers_[run.first - 1]->output_shape().size();
  const std::int64_t out_width = layers_[run.last - 1]->output_shape().size();
  float* out = acts_[run.last - 1].data();
  for (int row = 0; row < batch; row += run.block) {
    const int n = std::min(run.block, batch - row);
    const float* in = x + row * in_width;
    for (std::size_t i = run.first; i + 1 < run.last; ++i) {
      layers_[i]->Forward(in, acts_[i].data(), n);
      in = acts_[i].data();
    }
    layers_[run.last - 1]->Forward(in, out + row * out_width, n);
  }
  return out;
}

// A run starts at a convolution, whose patches and activations are the batch's biggest buffers,
// and takes in every per-image layer after it (activations live inside the conv layer).
void Model::FindImageRuns() {
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (layer_specs_[i].kind != LayerSpec::Kind::kConv2D) continue;
    ImageRun run{i, i, 0};
    for (; run.last < layers_.size() && layers_[run.last]->PerImage(); ++run.last) {
      run.bytes_per_image += 4 * layers_[run.last]->ForwardScratchPerImage();
      if (run.last > i) run.bytes_per_image += 4 * layers_[run.last - 1]->output_shape().size();
    }
    image_runs_.push_back(run);
    i = run.last - 1;
  }
  SetInferenceBlock(kAutoBlock);
}

void Model::SetInferenceBlock(int images) {
  TFD_CHECK(images >= kAutoBlock);
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l2 <= 0) l2 = 512 << 10;  // unknown to this libc or CPU: a common size
  const std::int64_t budget = std::int64_t{l2} / 2 * std::max(1, gemm_.threads);
  for (ImageRun& run : image_runs_) {
    const std::int64_t fit = budget / std::max<std::int64_t>(run.bytes_per_image, 1);
    const std::int64_t block = images == kAutoBlock ? fit : images == 0 ? max_batch_ : images;
    run.block = static_cast<int>(std::clamp<std::int64_t>(block, 1, max_batch_));
  }
}

void Model::SetCrossReplicaSum(tensor::CrossReplicaSum* sum) {
  cross_replica_sum_ = sum;
  for (auto& layer : layers_) tensor::SetCrossReplicaSum(*layer, sum);
}

bool Model::has_sync_layers() const {
  bool sync = false;
  (void)config::ForEachLayer(layer_specs_, [&](const LayerSpec& l, const std::string&) {
    sync = sync || (l.kind == LayerSpec::Kind::kBatchNorm && l.sync);
    return Status::Ok();
  });
  return sync;
}

void Model::JoinCrossReplicaSums() {
  for (auto& layer : layers_) tensor::JoinCrossReplicaSums(*layer, /*forward=*/true);
  for (std::size_t i = layers_.size(); i-- > 0;) tensor::JoinCrossReplicaSums(*layers_[i], /*forward=*/false);
}

void Model::SetTraining(bool training) {
  for (std::size_t i = 0; i < layers_.size(); ++i)
    layers_[i]->SetTraining(training, layers_[i]->Stochastic() ? Rng(dropout_seed_, i).Next() : 0);
}

tensor::LossResult Model::ComputeGradients(const float* x, const tensor::Labels& y, const GradientsReady& ready) {
  const int batch = static_cast<int>(y.rows());
  ForwardLayers(0, layers_.size(), x, 0, batch, /*training=*/true);
  tensor::LossResult r = LossGradient(0, y);
  BackwardLayers(0, layers_.size(), x, 0, nullptr, nullptr, batch, ready);
  SetTraining(false);
  return r;
}

tensor::LossResult Model::ComputeMicrobatchGradients(const float* x, const tensor::Labels& y, int microbatches,
                                                     std::uint64_t dropout_seed, std::vector<float>& acc) {
  if (microbatches <= 1) {
    SetDropoutSeed(dropout_seed);
    return ComputeGradients(x, y);
  }
  const int mb = static_cast<int>(y.rows()) / microbatches;
  acc.resize(grads_.size());
  tensor::LossResult total{};
  double loss_sum = 0;
  for (int m = 0; m < microbatches; ++m) {
    SetDropoutSeed(MicrobatchSeed(dropout_seed, m));
    const tensor::LossResult r =
        ComputeGradients(x + static_cast<std::int64_t>(m) * mb * input_.size(), y.Rows(static_cast<std::size_t>(m * mb), mb));
    AccumulateGradients(acc, grads_, m == 0);
    loss_sum += r.loss;
    total.correct += r.correct;
    total.abs_error += r.abs_error;
    total.squared_error += r.squared_error;
  }
  ScaleGradients(grads_, acc, microbatches);
  total.loss = loss_sum / microbatches;
  return total;
}

const float* Model::layer_output(std::size_t i, int row) const {
  return acts_[i].data() + static_cast<std::int64_t>(row) * layers_[i]->output_shape().size();
}

const float* Model::ForwardLayers(std::size_t first, std::size_t last, const float* in, int row, int batch, bool training) {
  TFD_CHECK(first < last && last <= layers_.size() && row >= 0 && batch >= 1 && row + batch <= max_batch_);
  SetTraining(training);
  for (std::size_t i = first; i < last; ++i) {
    float* out = acts_[i].data() + static_cast<std::int64_t>(row) * layers_[i]->output_shape().size();
    layers_[i]->Forward(in, out, batch);
    in = out;
  }
  return in;
}

const float* Model::RecomputeLayers(std::size_t first, std::size_t last, const float* in, int row, int batch) {
  TFD_CHECK(first < last && last <= layers_.size());
  for (std::size_t i = first; i < last; ++i) tensor::SetRecomputing(*layers_[i], true);
  const float* out = ForwardLayers(first, last, in, row, batch, /*training=*/true);
  for (std::size_t i = first; i < last; ++i) tensor::SetRecomputing(*layers_[i], false);
  return out;
}

tensor::LossResult Model::LossGradient(int row, const tensor::Labels& y) {
  return tensor::ComputeLoss(loss_, layer_output(layers_.size() - 1, row), y, classes_, dbuf_[0].data());
}

void Model::BackwardLayers(std::size_t first, std::size_t last, const float* in, int row, const float* dout, float* din, int batch,
                           const GradientsReady& ready) {
  TFD_CHECK(first < last && last <= layers_.size());
  float* d = dbuf_[0].data();
  if (dout != nullptr) std::copy(dout, dout + static_cast<std::int64_t>(batch) * layers_[last - 1]->output_shape().size(), d);
  for (std::size_t i = last; i-- > first;) {
    const float* layer_in = i == first ? in : layer_output(i - 1, row);
    float* out = acts_[i].data() + static_cast<std::int64_t>(row) * layers_[i]->output_shape().size();
    float* next = i == first ? din : dbuf_[(last - i) % 2].data();  // the other buffer, or the caller's
    layers_[i]->Backward(layer_in, out, d, next, batch);
    if (ready) ready(layer_starts_[i]);
    d = next;
  }
}

std::string Model::Summary() const {
  std::string s;
  std::size_t v = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    std::int64_t n = 0;
    for (std::size_t j = 0; j < layer_params_[i].size(); ++j) n += variables_[v + j].size;
    v += layer_params_[i].size();
    s += fmt::format("{}{} ({} parameters)", i == 0 ? "" : " -> ", layers_[i]->Describe(), n);
  }
  return fmt::format("{} -> {}; {} parameters in all", fmt::format("input {}x{}x{}", input_.h, input_.w, input_.c), s,
                     params_.size());
}

std::uint64_t MicrobatchSeed(std::uint64_t step_seed, int m) {
  return m == 0 ? step_seed : Rng(step_seed, static_cast<std::uint64_t>(m)).Next();
}

void AccumulateGradients(std::span<float> acc, std::span<const float> g, bool first) {
  TFD_CHECK(acc.size() == g.size());
  if (first) {
    std::copy(g.begin(), g.end(), acc.begin());
    return;
  }
  float* __restrict a = acc.data();
  const float* __restrict b = g.data();
  for (std::size_t i = 0; i < acc.size(); ++i) a[i] = a[i] + b[i];
}

void ScaleGradients(std::span<float> g, std::span<const float> acc, int microbatches) {
  TFD_CHECK(acc.size() == g.size());
  const float scale = 1.0f / static_cast<float>(microbatches);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = acc[i] * scale;
}

std::vector<std::pair<std::string, std::size_t>> VariableRuns(const Model& model) {
  std::vector<std::pair<std::string, std::size_t>> runs;
  for (const Variable& v : model.variables()) runs.emplace_back(v.name, static_cast<std::size_t>(v.size));
  return runs;
}

double Evaluate(Model& model, const data::Dataset& data) {
  const EvalResult r = EvaluateLoss(model, data, /*with_loss=*/false);
  return model.regression() ? r.mae : r.accuracy;
}

EvalResult EvaluateLoss(Model& model, const data::Dataset& data, bool with_loss) {
  std::vector<float> x(static_cast<std::size_t>(model.max_batch() * model.input_size()));
  BatchLabels y(data, model.max_batch());
  std::vector<std::uint32_t> idx(static_cast<std::size_t>(model.max_batch()));
  std::int64_t correct = 0;
  double loss_sum = 0, abs_sum = 0, sq_sum = 0;
  for (std::int64_t start = 0; start < data.size; start += model.max_batch()) {
    int n = static_cast<int>(std::min<std::int64_t>(model.max_batch(), data.size - start));
    for (int i = 0; i < n; ++i) idx[i] = static_cast<std::uint32_t>(start + i);
    y.Fill(data, std::span(idx).first(n), x.data());
    const float* logits = model.Forward(x.data(), n);
    if (with_loss || model.regression()) {
      const tensor::LossResult r = tensor::ComputeLoss(model.loss(), logits, y.View(n), model.classes(), nullptr);
      loss_sum += r.loss * n;
      correct += r.correct;
      abs_sum += r.abs_error;
      sq_sum += r.squared_error;
    } else {
      correct += tensor::CountCorrect(logits, y.View(n).ids, model.classes());
    }
  }
  if (data.size == 0) return {};
  const double rows = static_cast<double>(data.size), values = rows * model.classes();
  EvalResult out{static_cast<double>(correct) / rows, loss_sum / rows};
  if (model.regression()) out.accuracy = 0, out.mae = abs_sum / values, out.rmse = std::sqrt(sq_sum / values);
  return out;
}

BatchLabels::BatchLabels(const data::Dataset& data, int max_batch) : width_(data.num_targets) {
  if (data.regression()) targets_.resize(static_cast<std::size_t>(max_batch) * static_cast<std::size_t>(width_));
  else ids_.resize(static_cast<std::size_t>(max_batch));
}

void BatchLabels::Fill(const data::Dataset& data, std::span<const std::uint32_t> indices, float* x) {
  TFD_CHECK(data.num_targets == width_);
  data::FillBatch(data, indices, x, ids_.data(), targets_.data());
}

tensor::Labels BatchLabels::View(std::size_t rows) const {
  if (width_ > 0) return tensor::Labels(std::span(targets_).first(rows * static_cast<std::size_t>(width_)), width_);
  return tensor::Labels(std::span(ids_).first(rows));
}

Outputs OutputsFor(const data::Dataset& data, const config::DataSpec& spec) {
  if (!data.regression()) return Outputs(data.num_classes);
  return Outputs(data.num_targets, spec.loss == config::DataSpec::Loss::kMae ? tensor::LossKind::kMae : tensor::LossKind::kMse);
}

std::vector<float> PredictProbabilities(Model& model, const data::Dataset& data) {
  const int classes = model.classes();
  std::vector<float> out(static_cast<std::size_t>(data.size) * static_cast<std::size_t>(classes));
  std::vector<float> x(static_cast<std::size_t>(model.max_batch() * model.input_size()));
  std::vector<ClassId> y(static_cast<std::size_t>(model.max_batch()));
  std::vector<std::uint32_t> idx(static_cast<std::size_t>(model.max_batch()));
  for (std::int64_t start = 0; start < data.size; start += model.max_batch()) {
    const int n = static_cast<int>(std::min<std::int64_t>(model.max_batch(), data.size - start));
    for (int i = 0; i < n; ++i) idx[i] = static_cast<std::uint32_t>(start + i);
    data::FillBatch(data, std::span(idx).first(n), x.data(), y.data());
    const float* logits = model.Forward(x.data(), n);
    if (model.regression()) {
      std::copy(logits, logits + static_cast<std::ptrdiff_t>(n) * classes, out.begin() + start * classes);
      continue;
    }
    std::copy(logits, logits + static_cast<std::ptrdiff_t>(n) * classes, out.begin() + start * classes);
    SoftmaxRows(std::span(out).subspan(static_cast<std::size_t>(start * classes), static_cast<std::size_t>(n) * classes), classes);
  }
  return out;
}

void SoftmaxRows(std::span<float> rows, int classes) {
  for (std::size_t at = 0; at + static_cast<std::size_t>(classes) <= rows.size(); at += static_cast<std::size_t>(classes)) {
    float* p = rows.data() + at;
    const float top = *std::max_element(p, p + classes);
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += p[c] = std::exp(p[c] - top);
    for (int c = 0; c < classes; ++c) p[c] = static_cast<float>(p[c] / sum);
  }
}

std::string ParamsSha256(const Model& model) {
  Sha256 h;
  for (const Variable& v : model.variables()) {
    h.Update(std::as_bytes(std::span(v.name)));
    h.Update(std::as_bytes(model.params().subspan(v.offset, v.size)));  // x86-64 is little-endian
  }
  return h.HexDigest();
}

}  // namespace tfd::model
