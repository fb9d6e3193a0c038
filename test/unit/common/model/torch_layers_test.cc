// Every layer kind of model.layers against PyTorch on the same weights: each case builds a small
// model from its spec JSON (the parser and Model::Build tfd trains with), runs its evaluation
// forward and one training step's forward and backward on a fixed batch, and writes the inputs,
// variables, logits, loss, gradients (and the moving statistics after the step) to a JSON file that
// torch_layers_peer.py rebuilds in PyTorch and compares. Finite differences check the same layers
// in test/unit/common/tensor/gradient_test.cc; this checks their semantics against Keras/PyTorch's
// (layouts, padding, batch-norm conventions, gelu's form). Skipped (77) without python3-torch,
// except the check that every layer kind and activation has a case, which runs everywhere.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/config/job.h"
#include "common/config/spec_json.h"
#include "common/model/model.h"
#include "test/catch/session.h"
#include "test/test_util.h"

namespace tfd::model {
namespace {

using nlohmann::json;

struct PeerCase {
  std::string name;
  tensor::ActShape input;
  std::string model;  // the job's "model" value
  int classes = 3;
  // Categorical columns: (place in the row, vocabulary size); their features hold ids.
  std::vector<std::pair<int, int>> categorical;
  float input_scale = 1.0f;
};

// Odd sizes, both paddings and strides 1 and 2, an even kernel ("same" pads it unevenly), every
// activation, batch norm's optional variables left out once, residual blocks with and without a
// projection. No relu feeds a max pool: its zeros would tie, and ties may route the gradient to
// another (equally right) element than PyTorch's.
std::vector<PeerCase> Cases() {
  return {
      {"activations", {1, 6, 1},
       R"({"layers": [{"type": "dense", "units": 6, "activation": "relu6"}, {"type": "dense", "units": 5, "activation": "relu"},
           {"type": "dense", "units": 5, "activation": "gelu"}, {"type": "dense", "units": 5, "activation": "sigmoid"},
           {"type": "dense", "units": 5, "activation": "tanh"}, {"type": "dense", "units": 5, "activation": "elu"},
           {"type": "dense", "units": 5, "activation": "linear"}, {"type": "dense", "units": 3}]})",
       3, {}, 6.0f},
      {"conv2d_same_s1_valid_s2", {9, 9, 2},
       R"({"layers": [{"type": "conv2d", "filters": 3, "kernel_size": 3, "padding": "same", "activation": "tanh"},
           {"type": "conv2d", "filters": 4, "kernel_size": 3, "strides": 2}, {"type": "flatten"}, {"type": "dense", "units": 3}]})"},
      {"conv2d_same_s2_even_kernel", {7, 7, 2},
       R"({"layers": [{"type": "conv2d", "filters": 3, "kernel_size": 4, "strides": 2, "padding": "same"},
           {"type": "conv2d", "filters": 3, "kernel_size": 3, "strides": 2, "padding": "same", "activation": "gelu"},
           {"type": "conv2d", "filters": 2, "kernel_size": 1}, {"type": "flatten"}, {"type": "dense", "units": 3}]})"},
      {"depthwise_conv2d", {7, 7, 3},
       R"({"layers": [{"type": "depthwise_conv2d", "kernel_size": 3, "strides": 2, "padding": "same", "depth_multiplier": 2,
           "activation": "relu"},
           {"type": "depthwise_conv2d", "kernel_size": 2, "use_bias": false}, {"type": "flatten"}, {"type": "dense", "units": 3}]})"},
      {"pools_same", {9, 9, 2},
       R"({"layers": [{"type": "max_pool2d", "pool_size": 3, "strides": 2, "padding": "same"},
           {"type": "avg_pool2d", "pool_size": 2, "padding": "same"},
           {"type": "avg_pool2d", "pool_size": 3, "strides": 1, "padding": "same"},
           {"type": "flatten"}, {"type": "dense", "units": 3}]})"},
      {"pools_valid", {9, 9, 2},
       R"({"layers": [{"type": "avg_pool2d", "pool_size": 3, "strides": 2}, {"type": "max_pool2d", "pool_size": 2},
           {"type": "flatten"}, {"type": "dense", "units": 3}]})"},
      {"global_avg_pool2d", {5, 5, 3},
       R"({"layers": [{"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same"}, {"type": "global_avg_pool2d"},
           {"type": "dense", "units": 3}]})"},
      {"batch_norm_images", {6, 6, 2},
       R"({"layers": [{"type": "conv2d", "filters": 3, "kernel_size": 3}, {"type": "batch_norm", "momentum": 0.9},
           {"type": "flatten"}, {"type": "dense", "units": 3}]})"},
      {"batch_norm_rows", {1, 5, 1},
       R"({"layers": [{"type": "dense", "units": 6}, {"type": "batch_norm", "epsilon": 0.01, "center": false},
           {"type": "dense", "units": 4}, {"type": "batch_norm", "scale": false, "momentum": 0.5}, {"type": "dense", "units": 3}]})"},
      {"layer_norm", {5, 5, 3},
       R"({"layers": [{"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same"}, {"type": "layer_norm"},
           {"type": "flatten"}, {"type": "dense", "units": 6}, {"type": "layer_norm", "epsilon": 0.01, "center": false},
           {"type": "dense", "units": 3}]})"},
      {"residual_identity", {6, 6, 3},
       R"({"layers": [{"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same"},
           {"type": "residual", "activation": "relu", "layers": [
             {"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same", "activation": "relu"},
             {"type": "batch_norm"}, {"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same"}]},
           {"type": "global_avg_pool2d"}, {"type": "dense", "units": 3}]})"},
      {"residual_projection", {7, 7, 2},
       R"({"layers": [{"type": "conv2d", "filters": 3, "kernel_size": 3, "padding": "same"},
           {"type": "residual", "layers": [
             {"type": "conv2d", "filters": 6, "kernel_size": 3, "strides": 2, "padding": "same", "activation": "relu"},
             {"type": "batch_norm", "momentum": 0.8}]},
           {"type": "flatten"}, {"type": "dense", "units": 3}]})"},
      {"embedding", {1, 5, 1},
       R"({"layers": [{"type": "embedding", "output_dim": 3},
           {"type": "dense", "units": 4, "activation": "tanh"}, {"type": "dense", "units": 3}]})",
       3, {{1, 4}, {3, 2}}},
      {"one_hot", {1, 5, 1}, R"({"layers": [{"type": "one_hot"}, {"type": "dense", "units": 3}]})", 3, {{1, 4}, {3, 2}}},
      {"dropout", {1, 6, 1},
       R"({"layers": [{"type": "dense", "units": 8, "activation": "tanh"},
           {"type": "dropout", "rate": 0.5}, {"type": "dense", "units": 3}]})"},
  };
}

constexpr int kBatch = 6;

json Tensor(std::vector<std::int64_t> shape, const float* data, std::int64_t n) {
  return {{"shape", std::move(shape)}, {"data", std::vector<float>(data, data + n)}};
}

std::vector<data::CategoricalColumn> Columns(const PeerCase& c) {
  std::vector<data::CategoricalColumn> out;
  for (auto [feature, vocabulary] : c.categorical) {
    data::CategoricalColumn col{.feature = feature, .name = fmt::format("c{}", feature)};
    for (int v = 0; v < vocabulary; ++v) col.vocabulary.push_back(fmt::format("v{}", v));
    out.push_back(std::move(col));
  }
  return out;
}

// The initializer's weights moved off their defaults (a bias of zeros, a gamma of ones, moving
// statistics of 0 and 1 would hide a mix-up of them), the same for the same seed.
void Perturb(Model& m, std::mt19937& rng) {
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::uniform_real_distribution<float> variance(0.5f, 1.5f);
  for (const Variable& v : m.variables()) {
    float* p = m.params().data() + v.offset;
    const bool is_variance = v.name.ends_with("moving_variance");
    for (std::int64_t i = 0; i < v.size; ++i) p[i] = is_variance ? variance(rng) : p[i] + noise(rng);
  }
}

// A batch of `c`'s inputs: normal features, each categorical feature an id below its id count.
std::vector<float> Inputs(const PeerCase& c, const Model& m, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, c.input_scale);
  std::vector<float> x(static_cast<std::size_t>(kBatch * m.input_size()));
  for (float& v : x) v = normal(rng);
  for (auto [feature, vocabulary] : c.categorical)
    for (int n = 0; n < kBatch; ++n)
      x[static_cast<std::size_t>(n * m.input_size() + feature)] = static_cast<float>((n * 7 + feature) % (vocabulary + 1));
  return x;
}

json Variables(const Model& m) {
  json vars = json::array();
  for (const Variable& v : m.variables())
    vars.push_back({{"name", v.name}, {"trainable", v.trainable}, {"value", Tensor(v.shape, m.params().data() + v.offset, v.size)}});
  return vars;
}

// One case's record for the peer: the model's evaluation logits, then one training step (what
// Model::ComputeGradients runs, with the input's gradient asked for too).
json RunCase(const PeerCase& c) {
  auto spec = config::ParseModelSpec(json::parse(c.model), c.name);
  INFO(c.name << ": " << spec.status().ToString());
  REQUIRE(spec.ok());
  auto built = Model::Build(*spec, c.input, c.classes, kBatch, {}, Columns(c));
  INFO(c.name << ": " << built.status().ToString());
  REQUIRE(built.ok());
  Model& m = **built;
  m.Initialize(31);
  std::mt19937 rng(2026);
  Perturb(m, rng);
  const std::vector<float> x = Inputs(c, m, rng);
  std::vector<ClassId> y(kBatch);
  for (int n = 0; n < kBatch; ++n) y[static_cast<std::size_t>(n)] = n % c.classes;

  json out = {{"name", c.name}, {"model", json::parse(c.model)}, {"input_shape", {c.input.h, c.input.w, c.input.c}}, {"labels", y}};
  out["categorical"] = json::array();
  for (auto [feature, vocabulary] : c.categorical) out["categorical"].push_back({feature, vocabulary + 1});
  out["x"] = Tensor({kBatch, m.input_size()}, x.data(), static_cast<std::int64_t>(x.size()));
  out["variables"] = Variables(m);
  out["eval_logits"] = Tensor({kBatch, m.classes()}, m.Forward(x.data(), kBatch), std::int64_t{kBatch} * m.classes());

  m.SetDropoutSeed(7);
  const std::size_t last = m.num_layers();
  m.ForwardLayers(0, last, x.data(), 0, kBatch, /*training=*/true);
  out["train_logits"] = Tensor({kBatch, m.classes()}, m.layer_output(last - 1, 0), std::int64_t{kBatch} * m.classes());
  // The dropout masks this step drew (PyTorch cannot draw the same): where the layer kept a value.
  out["dropout_masks"] = json::array();
  for (std::size_t i = 0; i < last; ++i) {
    if (m.layer_spec(i).kind != config::LayerSpec::Kind::kDropout) continue;
    const float* kept = m.layer_output(i, 0);
    std::vector<float> mask(static_cast<std::size_t>(kBatch * m.layer_output_shape(i).size()));
    for (std::size_t k = 0; k < mask.size(); ++k) mask[k] = kept[k] != 0.0f ? 1.0f : 0.0f;
    out["dropout_masks"].push_back(Tensor({kBatch, m.layer_output_shape(i).size()}, mask.data(), static_cast<std::int64_t>(mask.size())));
  }
  out["loss"] = m.LossGradient(0, y).loss;
  std::vector<float> dx(x.size());
  m.BackwardLayers(0, last, x.data(), 0, nullptr, dx.data(), kBatch);
  out["dx"] = Tensor({kBatch, m.input_size()}, dx.data(), static_cast<std::int64_t>(dx.size()));
  out["after"] = Variables(m);  // the moving statistics after the step
  json grads = json::object();
  for (const Variable& v : m.variables())
    if (v.trainable) grads[v.name] = Tensor(v.shape, m.grads().data() + v.offset, v.size);
  out["grads"] = grads;
  return out;
}

// The layer kinds and activations the spec parser knows: LayerKindName and ActivationName name
// every enumerator (the compiler's -Wswitch sees to it), so a kind added later is listed here.
std::vector<std::string> KnownNames(bool activations) {
  std::vector<std::string> names;
  for (int k = 0;; ++k) {
    const std::string_view name = activations ? config::ActivationName(static_cast<config::Activation>(k))
                                              : config::LayerKindName(static_cast<config::LayerSpec::Kind>(k));
    if (name == "?") return names;
    names.emplace_back(name);
  }
}

TEST_CASE("every layer kind and activation the spec parser knows has a PyTorch peer case", "[unit][model][torch][coverage]") {
  std::set<std::string> kinds, activations;
  for (const PeerCase& c : Cases()) {
    auto spec = config::ParseModelSpec(json::parse(c.model), c.name);
    INFO(c.name << ": " << spec.status().ToString());
    REQUIRE(spec.ok());
    REQUIRE(config::ForEachLayer(spec->layers, [&](const config::LayerSpec& l, const std::string&) {
              kinds.emplace(config::LayerKindName(l.kind));
              activations.emplace(config::ActivationName(l.activation));
              return Status::Ok();
            }).ok());
  }
  for (const std::string& kind : KnownNames(false)) {
    INFO("layer kind " << kind << " has no case in torch_layers_test.cc's Cases() (and torch_layers_peer.py)");
    CHECK(kinds.count(kind) == 1);
  }
  for (const std::string& act : KnownNames(true)) {
    INFO("activation " << act << " has no case in torch_layers_test.cc's Cases() (and torch_layers_peer.py)");
    CHECK(activations.count(act) == 1);
  }
}

TEST_CASE("every layer's forward, backward and moving statistics agree with PyTorch on the same weights", "[unit][model][torch]") {
  testing::TempDir dir;
  json cases = json::array();
  for (const PeerCase& c : Cases()) cases.push_back(RunCase(c));
  {
    std::ofstream f(dir / "cases.json");
    f << json{{"cases", cases}}.dump();
  }
  const testing::CommandResult peer =
      testing::RunCommand(fmt::format("/usr/bin/python3 {} {} {}", TORCH_LAYERS_PEER, dir / "cases.json", dir / "verdict.json"), dir);
  std::cout << peer.err;  // the peer's per-tensor max differences, for ctest -V
  INFO("torch_layers_peer.py: " << peer.err);
  REQUIRE(peer.exit_code == 0);
  const json verdict = json::parse(testing::ReadAll(dir / "verdict.json"));
  for (const PeerCase& c : Cases()) {
    INFO("case " << c.name);
    REQUIRE(verdict.contains(c.name));
    INFO(verdict[c.name].dump());
    CHECK(verdict[c.name]["ok"].get<bool>());
    CHECK(verdict[c.name]["compared"].get<int>() > 0);
  }
}

}  // namespace
}  // namespace tfd::model

// Without PyTorch only the coverage case runs (it needs none); a pass is then reported skipped.
int main(int argc, char** argv) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    char filter[] = "[coverage]";
    char* coverage[] = {argv[0], filter, nullptr};
    const int rc = tfd::testing::RunCatchSession(2, coverage);
    if (rc != 0) return rc;
    std::printf("skipped: /usr/bin/python3 cannot import torch (scripts/setup --bench installs python3-torch)\n");
    return tfd::testing::kSkipExitCode;
  }
  return tfd::testing::RunCatchSession(argc, argv);
}
