#include "test/export_models.h"

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "common/base/check.h"
#include "common/config/spec_json.h"

namespace tfd::testing {
namespace {

config::ModelSpec Spec(const nlohmann::json& j) {
  Result<config::ModelSpec> spec = config::ParseModelSpec(j, "export_models");
  TFD_CHECK(spec.ok());
  return *spec;
}

// Images of random bytes with random labels.
data::Dataset Images(int rows, int side, int channels, int classes, std::mt19937& rng) {
  data::Dataset d;
  d.size = rows, d.height = side, d.width = side, d.channels = channels, d.dtype = data::DType::kU8, d.num_classes = classes;
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(rows) * d.pixels());
  for (auto& b : bytes) b = static_cast<std::uint8_t>(rng() & 0xff);
  d.features = std::move(bytes);
  for (int r = 0; r < rows; ++r) d.labels.push_back(static_cast<tfd::ClassId>(rng() % classes));
  return d;
}

// A float table whose feature j has mean 10 j - 20 and deviation 1 + j, standardized with the
// statistics of its own rows (as training computes them on its split); `targets` > 0: regression
// targets (a fixed linear map of the features plus noise), else random labels of `classes`.
data::Dataset Table(int rows, int features, int classes, int targets, std::mt19937& rng) {
  data::Dataset d;
  d.size = rows, d.height = 1, d.width = features, d.channels = 1, d.dtype = data::DType::kF32;
  d.num_classes = targets > 0 ? 0 : classes, d.num_targets = targets;
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> x(static_cast<std::size_t>(rows) * features);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < features; ++j) x[r * features + j] = 10.0f * j - 20 + (1.0f + j) * normal(rng);
  for (int r = 0; r < rows; ++r) {
    if (targets == 0) d.labels.push_back(static_cast<tfd::ClassId>(rng() % classes));
    for (int t = 0; t < targets; ++t) d.targets.push_back(0.1f * x[r * features + t] - 0.05f * x[r * features + features - 1] + normal(rng));
  }
  d.normalizer.scale = 1.0f;
  for (int j = 0; j < features; ++j) {
    double sum = 0, sq = 0;
    for (int r = 0; r < rows; ++r) sum += x[r * features + j], sq += double{x[r * features + j]} * x[r * features + j];
    const double mean = sum / rows, var = sq / rows - mean * mean;
    d.normalizer.mean.push_back(static_cast<float>(mean));
    d.normalizer.inv_std.push_back(static_cast<float>(1 / std::sqrt(std::max(var, 1e-12))));
  }
  std::vector<std::uint8_t> bytes(x.size() * sizeof(float));
  std::memcpy(bytes.data(), x.data(), bytes.size());
  d.features = std::move(bytes);
  return d;
}

// `d` (a standardized table of 5 features) with features 1 and 3 made categorical columns of 4
// and 2 values: ids 0 (out of vocabulary) to 4 and 0 to 2, which standardization leaves alone.
data::Dataset Categorical(data::Dataset d, std::mt19937& rng) {
  d.categorical = {{.feature = 1, .name = "colour", .vocabulary = {"amber", "blue", "cyan", "dun"}},
                   {.feature = 3, .name = "city", .vocabulary = {"lima", "oslo"}}};
  std::vector<float> x(static_cast<std::size_t>(d.size * d.pixels()));
  std::memcpy(x.data(), d.features.data(), x.size() * sizeof(float));
  for (const data::CategoricalColumn& c : d.categorical) {
    for (std::int64_t r = 0; r < d.size; ++r) x[static_cast<std::size_t>(r * d.pixels() + c.feature)] = static_cast<float>(rng() % c.ids());
    d.normalizer.mean[static_cast<std::size_t>(c.feature)] = 0;
    d.normalizer.inv_std[static_cast<std::size_t>(c.feature)] = 1;
  }
  std::vector<std::uint8_t> bytes(x.size() * sizeof(float));
  std::memcpy(bytes.data(), x.data(), bytes.size());
  d.features = std::move(bytes);
  return d;
}

ExportCase Case(std::string name, const nlohmann::json& model, data::Dataset data) {
  ExportCase c{.name = std::move(name), .job = {}, .data = std::move(data)};
  c.job.model = Spec(model);
  c.job.data.folder = "data/mnist";  // the card records where training read its files
  if (c.data.dtype == data::DType::kF32) {
    c.job.data.format = config::DataSpec::Format::kCsv;
    c.job.data.train.paths = {"data/table.csv"};
    c.job.data.test.paths = {"data/table-test.csv"};
    c.job.data.normalize = config::DataSpec::Normalize::kStandardize;
  }
  if (c.data.regression()) c.job.data.task = config::DataSpec::Task::kRegression;
  for (const data::CategoricalColumn& col : c.data.categorical) c.job.data.categorical_names.push_back(col.name);
  return c;
}

}  // namespace

std::vector<ExportCase> ExportCases(int rows, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<ExportCase> out;
  for (const char* name : {"softmax", "mlp", "dnn", "cnn"}) out.push_back(Case(name, name, Images(rows, 28, 1, 10, rng)));
  const nlohmann::json stack = {{"layers",
                                 {{{"type", "conv2d"}, {"filters", 4}, {"kernel_size", 3}, {"activation", "relu"}},
                                  {{"type", "max_pool2d"}, {"pool_size", 2}},
                                  {{"type", "conv2d"}, {"filters", 6}, {"kernel_size", 2}, {"activation", "elu"}},
                                  {{"type", "flatten"}},
                                  {{"type", "dense"}, {"units", 16}, {"activation", "tanh"}},
                                  {{"type", "dropout"}, {"rate", 0.5}},
                                  {{"type", "dense"}, {"units", 5}}}}};
  ExportCase layers = Case("layers", stack, Images(rows, 11, 3, 5, rng));
  layers.data.class_names = {"cat", "dog", "emu", "fox", "gnu"};
  out.push_back(std::move(layers));
  // Keras' padding and strides on odd sizes, both poolings, relu6 and gelu (built from Erf in opset 13).
  const nlohmann::json windows = {{"layers",
                                   {{{"type", "conv2d"}, {"filters", 4}, {"kernel_size", 3}, {"strides", 2}, {"padding", "same"}, {"activation", "relu6"}},
                                    {{"type", "max_pool2d"}, {"pool_size", 3}, {"strides", 2}, {"padding", "same"}},
                                    {{"type", "conv2d"}, {"filters", 5}, {"kernel_size", 2}, {"padding", "same"}, {"activation", "gelu"}},
                                    {{"type", "avg_pool2d"}, {"pool_size", 2}, {"strides", 1}, {"padding", "same"}},
                                    {{"type", "conv2d"}, {"filters", 6}, {"kernel_size", 2}, {"strides", 2}},
                                    {{"type", "global_avg_pool2d"}},
                                    {{"type", "dense"}, {"units", 7}, {"activation", "gelu"}},
                                    {{"type", "dense"}, {"units", 4}}}}};
  out.push_back(Case("windows", windows, Images(rows, 13, 3, 4, rng)));
  // batch_norm on the raw image (NCHW from the first layer), after a convolution and on flat
  // features without beta; layer_norm over channels and over features without gamma. Trained
  // steps move the moving statistics, which the export must carry.
  const nlohmann::json norms = {{"layers",
                                 {{{"type", "batch_norm"}, {"momentum", 0.5}},
                                  {{"type", "conv2d"}, {"filters", 4}, {"kernel_size", 3}, {"padding", "same"}},
                                  {{"type", "batch_norm"}, {"momentum", 0.5}, {"epsilon", 0.01}},
                                  {{"type", "layer_norm"}},
                                  {{"type", "global_avg_pool2d"}},
                                  {{"type", "dense"}, {"units", 6}, {"activation", "relu"}},
                                  {{"type", "batch_norm"}, {"momentum", 0.5}, {"center", false}},
                                  {{"type", "layer_norm"}, {"scale", false}},
                                  {{"type", "dense"}, {"units", 4}}}}};
  out.push_back(Case("norms", norms, Images(rows, 9, 3, 4, rng)));
  // Residual blocks: the first on the raw image (flat rows into NCHW), one with batch norm inside
  // (moving statistics), one of a depthwise convolution (multiplier 2: a projection to 8
  // channels), a strided one with a 1x1 projection, a depthwise convolution without bias, then
  // blocks of dense layers on the pooled features (flat rows), one projected from 6 to 5 features.
  const nlohmann::json residual = nlohmann::json::parse(R"({"layers": [
    {"type": "residual", "layers": [{"type": "conv2d", "filters": 3, "kernel_size": 3, "padding": "same", "activation": "tanh"}]},
    {"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same"},
    {"type": "residual", "activation": "relu", "layers": [{"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same",
     "activation": "relu"}, {"type": "batch_norm", "momentum": 0.5}]},
    {"type": "residual", "layers": [{"type": "depthwise_conv2d", "kernel_size": 3, "padding": "same", "depth_multiplier": 2,
     "activation": "relu6"}]},
    {"type": "residual", "activation": "gelu", "layers": [{"type": "conv2d", "filters": 6, "kernel_size": 3, "strides": 2,
     "padding": "same"}, {"type": "dropout", "rate": 0.3}]},
    {"type": "depthwise_conv2d", "kernel_size": 2, "use_bias": false},
    {"type": "global_avg_pool2d"},
    {"type": "residual", "activation": "tanh", "layers": [{"type": "dense", "units": 6, "activation": "relu"}]},
    {"type": "residual", "layers": [{"type": "dense", "units": 5}]},
    {"type": "dense", "units": 4}]})");
  out.push_back(Case("residual", residual, Images(rows, 9, 3, 4, rng)));
  ExportCase table = Case("standardized", "mlp", Table(rows, 8, 3, 0, rng));
  table.data.class_names = {"setosa", "versicolor", "virginica"};
  out.push_back(std::move(table));
  const nlohmann::json small = {{"layers", {{{"type", "dense"}, {"units", 12}, {"activation", "sigmoid"}}, {{"type", "dense"}, {"units", 1}}}}};
  out.push_back(Case("regression1", small, Table(rows, 6, 0, 1, rng)));
  out.push_back(Case("regression3", "dnn", Table(rows, 6, 0, 3, rng)));
  const nlohmann::json embedding = nlohmann::json::parse(R"({"layers": [{"type": "embedding", "output_dim": 3},
    {"type": "dense", "units": 6, "activation": "relu"}, {"type": "dense", "units": 3}]})");
  out.push_back(Case("embedding", embedding, Categorical(Table(rows, 5, 3, 0, rng), rng)));
  const nlohmann::json one_hot = nlohmann::json::parse(R"({"layers": [{"type": "one_hot", "columns": ["city", "colour"]},
    {"type": "dense", "units": 3}]})");
  out.push_back(Case("one_hot", one_hot, Categorical(Table(rows, 5, 3, 0, rng), rng)));
  return out;
}

std::unique_ptr<model::Model> TrainedModel(const ExportCase& c, int max_batch, int steps, std::uint64_t seed) {
  const data::Dataset& d = c.data;
  Result<std::unique_ptr<model::Model>> built =
      model::Model::Build(c.job.model, {d.height, d.width, d.channels}, model::OutputsFor(d, c.job.data), max_batch, {}, d.categorical);
  TFD_CHECK(built.ok());
  model::Model& m = **built;
  m.Initialize(seed);
  model::BatchLabels labels(d, max_batch);
  std::vector<float> x(static_cast<std::size_t>(max_batch) * d.pixels());
  std::vector<std::uint32_t> idx(static_cast<std::size_t>(std::min<std::int64_t>(max_batch, d.size)));
  for (int step = 0; step < steps; ++step) {
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::uint32_t>((step * idx.size() + i) % d.size);
    labels.Fill(d, idx, x.data());
    m.SetDropoutSeed(seed + step);
    m.ComputeGradients(x.data(), labels.View(idx.size()));
    for (std::size_t i = 0; i < m.params().size(); ++i) m.params()[i] -= 0.01f * m.grads()[i];
  }
  return std::move(*built);
}

std::vector<float> RawRows(const data::Dataset& data) {
  std::vector<float> out(static_cast<std::size_t>(data.size * data.pixels()));
  if (data.dtype == data::DType::kU8) std::copy(data.features.begin(), data.features.end(), out.begin());
  else std::memcpy(out.data(), data.features.data(), out.size() * sizeof(float));
  return out;
}

}  // namespace tfd::testing
