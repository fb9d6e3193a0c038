// Model::Forward's blocked inference (conv -> ... -> pooling runs a few images at a time) against
// the whole-batch pass, on every layer shape a run can hold; both paths forced with
// SetInferenceBlock, so each is tested on any CPU.
#include <cmath>
#include <random>

#include <catch2/catch.hpp>

#include "common/model/model.h"

namespace tfd::model {
namespace {

using config::Activation;
using config::LayerSpec;
using config::Padding;
using Kind = LayerSpec::Kind;

LayerSpec Conv(int filters, int k, Activation act, int stride = 0, Padding padding = Padding::kValid) {
  return {.kind = Kind::kConv2D, .filters = filters, .kernel_size = k, .activation = act, .strides = stride, .padding = padding};
}
LayerSpec Pool(Kind kind, int pool, int stride = 0, Padding padding = Padding::kValid) {
  return {.kind = kind, .pool_size = pool, .strides = stride, .padding = padding};
}
LayerSpec Other(Kind kind) { return {.kind = kind, .rate = kind == Kind::kDropout ? 0.5 : 0.0}; }
LayerSpec Logits() { return {.kind = Kind::kDense, .units = 3}; }

struct Case {
  const char* name;
  tensor::ActShape input;
  std::vector<LayerSpec> layers;
};

std::vector<Case> Cases() {
  using A = Activation;
  return {
      {"the seeds' cnn: conv 3x3 valid relu, max pool 2", {28, 28, 1},
       {Conv(8, 3, A::kRelu), Pool(Kind::kMaxPool2D, 2), Other(Kind::kFlatten), {.kind = Kind::kDense, .units = 5, .activation = A::kRelu},
        Logits()}},
      {"odd sizes, same padding, strides, avg pool same", {9, 11, 3},
       {Conv(5, 3, A::kRelu, 2, Padding::kSame), Pool(Kind::kAvgPool2D, 3, 2, Padding::kSame), Other(Kind::kFlatten), Logits()}},
      {"two convs (tanh, elu), dropout, an overlapping max pool", {13, 13, 2},
       {Conv(4, 3, A::kTanh), Conv(6, 2, A::kElu, 2), Other(Kind::kDropout), Pool(Kind::kMaxPool2D, 3, 2), Other(Kind::kFlatten),
        Logits()}},
      {"a 5x5 one-channel conv, gelu, max pool same with a remainder", {12, 7, 1},
       {Conv(3, 5, A::kGelu, 1, Padding::kSame), Pool(Kind::kMaxPool2D, 2, 0, Padding::kSame), Other(Kind::kFlatten), Logits()}},
      {"conv, pool, conv, global average pool", {10, 10, 2},
       {Conv(4, 3, A::kRelu, 1, Padding::kSame), Pool(Kind::kAvgPool2D, 2), Conv(6, 3, A::kSigmoid), Other(Kind::kGlobalAvgPool2D),
        Logits()}},
  };
}

// A model of `c` with random weights and biases (biases too, so a bias bug shows).
std::unique_ptr<Model> Random(const Case& c, int max_batch) {
  config::ModelSpec spec;
  spec.name = "layers";
  spec.layers = c.layers;
  auto m = Model::Build(spec, c.input, 3, max_batch);
  REQUIRE(m.ok());
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (float& p : (*m)->params()) p = u(rng);
  return std::move(*m);
}

std::vector<float> Inputs(const Model& m, int batch) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(batch * m.input_size()));
  for (float& v : x) v = u(rng);
  return x;
}

std::vector<float> Run(Model& m, const std::vector<float>& x, int batch, int block) {
  m.SetInferenceBlock(block);
  const float* out = m.Forward(x.data(), batch);
  return std::vector<float>(out, out + static_cast<std::ptrdiff_t>(batch) * m.classes());
}

TEST_CASE("blocked inference equals the whole-batch forward within float rounding", "[unit][model]") {
  constexpr int kBatch = 10;  // not a multiple of 3 or 4: the last block is short
  for (const Case& c : Cases()) {
    INFO(c.name);
    auto m = Random(c, kBatch);
    const std::vector<float> x = Inputs(*m, kBatch);
    const std::vector<float> whole = Run(*m, x, kBatch, 0);
    double spread = 0;
    for (float v : whole) spread += std::abs(v - whole[0]);
    REQUIRE(spread > 0);  // the outputs depend on the inputs: equal outputs would prove nothing
    for (int block : {1, 3, 4, Model::kAutoBlock}) {
      INFO("block " << block);
      const std::vector<float> blocked = Run(*m, x, kBatch, block);
      for (std::size_t i = 0; i < whole.size(); ++i) REQUIRE(blocked[i] == Approx(whole[i]).epsilon(1e-5).margin(1e-6));
    }
    // A batch smaller than the model's room, as a last partial batch of an evaluation is.
    const std::vector<float> part = Run(*m, x, 7, 3);
    for (std::size_t i = 0; i < part.size(); ++i) REQUIRE(part[i] == Approx(whole[i]).epsilon(1e-5).margin(1e-6));
  }
}

TEST_CASE("blocked inference leaves training's gradients bit-identical", "[unit][model]") {
  const Case c = Cases()[2];  // two convs, dropout and an overlapping pool: every layer keeps state
  constexpr int kBatch = 6;
  auto a = Random(c, kBatch), b = Random(c, kBatch);
  const std::vector<float> x = Inputs(*a, kBatch);
  const std::vector<ClassId> ids = {0, 1, 2, 0, 1, 2};
  const tensor::Labels y(ids);
  a->SetInferenceBlock(4);
  a->Forward(x.data(), kBatch);
  a->SetDropoutSeed(9);
  b->SetDropoutSeed(9);
  const tensor::LossResult ra = a->ComputeGradients(x.data(), y), rb = b->ComputeGradients(x.data(), y);
  CHECK(ra.loss == rb.loss);
  const std::span<float> ga = a->grads(), gb = b->grads();
  REQUIRE(std::equal(ga.begin(), ga.end(), gb.begin()));
  double norm = 0;
  for (float g : ga) norm += std::abs(g);
  CHECK(norm > 0);
}

}  // namespace
}  // namespace tfd::model
