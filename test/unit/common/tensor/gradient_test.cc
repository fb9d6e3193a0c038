// Finite-difference checks of every layer's and the loss's gradients.
//
// Each check compares the analytic gradient a with the central difference
// n = (L(x + h) - L(x - h)) / 2h, h = 1e-2, computed in float, and requires
// |a - n| / max(|a| + |n|, 1e-2) <= 1e-2 for every coordinate. Inputs are drawn away from the kinks
// of relu and max-pooling so the difference quotient is well defined.
#include <cmath>
#include <algorithm>
#include <functional>
#include <random>

#include <catch2/catch.hpp>

#include "common/model/model.h"
#include "common/tensor/layers.h"
#include "common/tensor/loss.h"

namespace tfd::tensor {
namespace {

constexpr float kStep = 1e-2f;
constexpr double kMaxRelError = 1e-2;

double RelError(double a, double n) { return std::abs(a - n) / std::max(std::abs(a) + std::abs(n), 1e-2); }

std::vector<float> RandomVector(std::size_t n, std::mt19937& gen, float scale = 1.0f) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) {
    do x = u(gen) * scale; while (std::abs(x) < 0.05f * scale);  // keep off relu's kink at 0
  }
  return v;
}

// Checks d(sum(out * r))/d(params) and /d(in) of `layer` against finite differences.
// With `distinct_inputs`, inputs are a shuffled grid of values 0.05 apart, so no two inputs of a
// pooling window are within 2h of each other and the arg-max cannot flip during the difference.
// With `training`, the layer runs as in a training step (batch norm's batch statistics).
void CheckLayer(Layer& layer, ActShape in_shape, int batch, std::uint32_t seed, bool distinct_inputs = false, bool training = false) {
  std::mt19937 gen(seed);
  std::vector<ParamSpec> specs = layer.Params();
  std::vector<std::vector<float>> params, grads;
  for (const ParamSpec& p : specs) {
    params.push_back(RandomVector(static_cast<std::size_t>(NumElements(p.shape)), gen, 0.5f));
    grads.emplace_back(params.back().size());
  }
  std::vector<std::span<float>> ps, gs;
  for (std::size_t i = 0; i < params.size(); ++i) {
    ps.emplace_back(params[i]);
    gs.emplace_back(grads[i]);
  }
  layer.Bind(ps, gs);
  layer.SetTraining(training, 0);
  layer.Reserve(batch);
  const std::int64_t in_n = in_shape.size() * batch, out_n = layer.output_shape().size() * batch;
  std::vector<float> x = RandomVector(static_cast<std::size_t>(in_n), gen);
  if (distinct_inputs) {
    for (std::int64_t i = 0; i < in_n; ++i) x[i] = -1.0f + 0.05f * static_cast<float>(i);
    std::shuffle(x.begin(), x.end(), gen);
  }
  std::vector<float> r = RandomVector(static_cast<std::size_t>(out_n), gen);
  std::vector<float> out(static_cast<std::size_t>(out_n)), dout(r), din(static_cast<std::size_t>(in_n));

  auto loss = [&]() {
    std::vector<float> o(static_cast<std::size_t>(out_n));
    layer.Forward(x.data(), o.data(), batch);
    double s = 0;
    for (std::int64_t i = 0; i < out_n; ++i) s += static_cast<double>(o[i]) * r[i];
    return s;
  };
  layer.Forward(x.data(), out.data(), batch);
  layer.Backward(x.data(), out.data(), dout.data(), din.data(), batch);
  std::vector<std::vector<float>> analytic_grads = grads;  // Forward in loss() must not disturb these

  auto numeric = [&](float* v) {
    const float saved = *v;
    *v = saved + kStep;
    const double up = loss();
    *v = saved - kStep;
    const double down = loss();
    *v = saved;
    return (up - down) / (2.0 * kStep);
  };
  for (std::size_t p = 0; p < params.size(); ++p) {
    for (std::size_t i = 0; i < params[p].size(); ++i) {
      const double n = numeric(&params[p][i]);
      INFO(layer.Describe() << " " << specs[p].name << "[" << i << "] analytic " << analytic_grads[p][i] << " numeric " << n);
      CHECK(RelError(analytic_grads[p][i], n) <= kMaxRelError);
    }
  }
  for (std::int64_t i = 0; i < in_n; ++i) {
    const double n = numeric(&x[i]);
    INFO(layer.Describe() << " input[" << i << "] analytic " << din[i] << " numeric " << n);
    CHECK(RelError(din[i], n) <= kMaxRelError);
  }
}

TEST_CASE("dense layer gradients match finite differences for every activation", "[unit][gradient]") {
  for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kSigmoid, Activation::kElu, Activation::kTanh,
                         Activation::kRelu6, Activation::kGelu}) {
    auto layer = MakeDense({1, 1, 7}, 5, act, {}, GemmConfig{});
    CheckLayer(*layer, {1, 1, 7}, 3, 11);
  }
}

TEST_CASE("conv2d layer gradients match finite differences", "[unit][gradient]") {
  // relu is left to the dense check: a kernel weight moves every output pixel, so with a 2h step
  // some pre-activation near 0 changes side and the difference quotient is meaningless there.
  // Both convolution paths: oneDNN's primitives (the default where the build has oneDNN) and im2col.
  for (const GemmConfig gemm : {GemmConfig{}, GemmConfig{.im2col_convolutions = true}}) {
    for (Activation act : {Activation::kNone, Activation::kSigmoid, Activation::kElu, Activation::kTanh}) {
      auto layer = MakeConv2D({5, 6, 2}, 3, 3, act, {}, gemm);
      CheckLayer(*layer, {5, 6, 2}, 2, 12);
    }
  }
}

TEST_CASE("max_pool2d gradients match finite differences", "[unit][gradient]") {
  auto layer = MakeMaxPool2D({5, 4, 3}, 2);  // the fifth row is dropped, as "valid" pooling does
  CheckLayer(*layer, {5, 4, 3}, 2, 13, /*distinct_inputs=*/true);
}

// Odd sizes, strides above and below the window, both paddings: every window arithmetic path.
struct WindowCase {
  ActShape in;
  int k, stride;
  Padding padding;
};
constexpr WindowCase kWindowCases[] = {
    {{7, 5, 2}, 3, 2, Padding::kSame},  {{7, 5, 2}, 3, 2, Padding::kValid}, {{6, 7, 1}, 2, 3, Padding::kSame},
    {{5, 5, 3}, 3, 1, Padding::kSame},  {{9, 4, 2}, 4, 3, Padding::kValid}, {{5, 6, 2}, 1, 2, Padding::kSame},
};

TEST_CASE("strided and same-padded conv2d gradients match finite differences", "[unit][gradient]") {
  for (const WindowCase& c : kWindowCases) {
    for (Activation act : {Activation::kNone, Activation::kGelu}) {
      for (const GemmConfig gemm : {GemmConfig{}, GemmConfig{.im2col_convolutions = true}}) {
        auto layer = MakeConv2D(c.in, 3, c.k, act, {}, gemm, c.stride, c.padding);
        INFO(layer->Describe() << " on " << c.in.h << "x" << c.in.w << "x" << c.in.c << (gemm.im2col_convolutions ? " im2col" : ""));
        CheckLayer(*layer, c.in, 2, 21);
      }
    }
  }
}

TEST_CASE("strided and same-padded max and average pooling gradients match finite differences", "[unit][gradient]") {
  for (const WindowCase& c : kWindowCases) {
    for (auto make : {&MakeMaxPool2D, &MakeAvgPool2D}) {
      auto layer = make(c.in, c.k, c.stride, c.padding);
      INFO(layer->Describe() << " on " << c.in.h << "x" << c.in.w << "x" << c.in.c);
      CheckLayer(*layer, c.in, 2, 22, /*distinct_inputs=*/true);
    }
  }
}

TEST_CASE("depthwise_conv2d gradients match finite differences: strides, paddings, multipliers, with and without bias",
          "[unit][gradient][depthwise]") {
  for (const WindowCase& c : kWindowCases) {
    for (int m : {1, 2}) {
      const DepthwiseOptions o{.kernel_size = c.k, .stride = c.stride, .depth_multiplier = m, .padding = c.padding, .use_bias = m == 1};
      auto layer = MakeDepthwiseConv2D(c.in, o, m == 1 ? Activation::kNone : Activation::kGelu, {});
      INFO(layer->Describe() << " on " << c.in.h << "x" << c.in.w << "x" << c.in.c);
      CheckLayer(*layer, c.in, 2, 24);
    }
  }
}

TEST_CASE("global_avg_pool2d gradients match finite differences", "[unit][gradient]") {
  auto layer = MakeGlobalAvgPool2D({3, 5, 4});
  CHECK(layer->output_shape().size() == 4);
  CheckLayer(*layer, {3, 5, 4}, 3, 23);
}

TEST_CASE("batch_norm gradients in training match finite differences, after dense and conv2d", "[unit][gradient][norm]") {
  for (NormOptions o : {NormOptions{}, NormOptions{.center = false}, NormOptions{.scale = false}}) {
    auto dense = MakeBatchNorm({1, 1, 4}, o);  // per feature over 5 rows
    CheckLayer(*dense, {1, 1, 4}, 5, 31, false, /*training=*/true);
    auto conv = MakeBatchNorm({3, 2, 3}, o);   // per channel over 2 images x 6 pixels
    CheckLayer(*conv, {3, 2, 3}, 2, 32, false, /*training=*/true);
  }
}

TEST_CASE("layer_norm gradients match finite differences, over features and over channels", "[unit][gradient][norm]") {
  for (NormOptions o : {NormOptions{}, NormOptions{.center = false, .scale = false}}) {
    auto dense = MakeLayerNorm({1, 1, 6}, o);
    CheckLayer(*dense, {1, 1, 6}, 3, 33);
    auto conv = MakeLayerNorm({2, 3, 4}, o);
    CheckLayer(*conv, {2, 3, 4}, 2, 34);
  }
}

TEST_CASE("residual gradients match finite differences: identity and projected shortcuts, batch norm inside", "[unit][gradient][residual]") {
  const GemmConfig g{};
  {  // the identity shortcut on an odd size, an activation after the add
    std::vector<BlockLayer> inner;
    inner.push_back({"conv2d", MakeConv2D({5, 5, 3}, 3, 3, Activation::kTanh, {}, g, 1, Padding::kSame)});
    inner.push_back({"conv2d_1", MakeConv2D({5, 5, 3}, 3, 3, Activation::kNone, {}, g, 1, Padding::kSame)});
    auto block = MakeResidual({5, 5, 3}, std::move(inner), {.activation = Activation::kTanh});
    CHECK(block->Params().size() == 4);
    CheckLayer(*block, {5, 5, 3}, 2, 41);
  }
  {  // a strided block with more channels: the shortcut is a 1x1 projection of stride 2
    std::vector<BlockLayer> inner;
    inner.push_back({"conv2d", MakeConv2D({7, 5, 2}, 4, 3, Activation::kGelu, {}, g, 2, Padding::kSame)});
    auto block = MakeResidual({7, 5, 2}, std::move(inner), {.projection_stride = 2, .activation = Activation::kGelu, .gemm = g});
    CHECK(block->output_shape().h == 4);
    CHECK(block->output_shape().w == 3);
    CHECK(block->output_shape().c == 4);
    CHECK(block->Params().back().name == "projection/bias");
    CheckLayer(*block, {7, 5, 2}, 2, 42);
  }
  {  // batch norm inside, training: its batch statistics depend on every row
    std::vector<BlockLayer> inner;
    inner.push_back({"conv2d", MakeConv2D({3, 4, 2}, 2, 3, Activation::kNone, {}, g, 1, Padding::kSame)});
    inner.push_back({"batch_norm", MakeBatchNorm({3, 4, 2}, {})});
    auto block = MakeResidual({3, 4, 2}, std::move(inner), {});
    CheckLayer(*block, {3, 4, 2}, 3, 43, false, /*training=*/true);
  }
}

TEST_CASE("softmax cross-entropy gradient matches finite differences", "[unit][gradient]") {
  std::mt19937 gen(14);
  const int batch = 4, classes = 6;
  std::vector<float> logits = RandomVector(batch * classes, gen, 3.0f), d(batch * classes);
  std::vector<ClassId> labels = {0, 5, 2, 2};
  LossResult r = SoftmaxCrossEntropy(logits.data(), labels, classes, d.data());
  CHECK(r.loss > 0);
  for (int i = 0; i < batch * classes; ++i) {
    const float saved = logits[i];
    logits[i] = saved + kStep;
    const double up = SoftmaxCrossEntropy(logits.data(), labels, classes, nullptr).loss;
    logits[i] = saved - kStep;
    const double down = SoftmaxCrossEntropy(logits.data(), labels, classes, nullptr).loss;
    logits[i] = saved;
    const double n = (up - down) / (2.0 * kStep);
    INFO("logit " << i << " analytic " << d[i] << " numeric " << n);
    CHECK(RelError(d[i], n) <= kMaxRelError);
  }
}

TEST_CASE("softmax cross-entropy is stable for huge logits and counts hits", "[unit][loss]") {
  std::vector<float> logits = {1000.0f, 0.0f, -1000.0f, 0.0f, 2000.0f, 1.0f};
  std::vector<ClassId> labels = {0, 2};
  LossResult r = SoftmaxCrossEntropy(logits.data(), labels, 3, nullptr);
  CHECK(std::isfinite(r.loss));
  CHECK(r.loss == Approx(1999.0 / 2).epsilon(1e-6));  // row 0 costs 0, row 1 costs 2000 - 1
  CHECK(r.correct == 1);
  CHECK(CountCorrect(logits.data(), labels, 3) == 1);
}

TEST_CASE("a whole model's gradients match finite differences of its loss", "[unit][gradient]") {
  config::ModelSpec spec;
  spec.name = "layers";
  config::LayerSpec conv{.kind = config::LayerSpec::Kind::kConv2D, .filters = 2, .kernel_size = 3,
                         .activation = Activation::kTanh};
  config::LayerSpec flat{.kind = config::LayerSpec::Kind::kFlatten};
  config::LayerSpec hidden{.kind = config::LayerSpec::Kind::kDense, .units = 5, .activation = Activation::kSigmoid};
  config::LayerSpec out{.kind = config::LayerSpec::Kind::kDense, .units = 3};
  config::LayerSpec strided{.kind = config::LayerSpec::Kind::kConv2D, .filters = 3, .kernel_size = 2,
                            .activation = Activation::kGelu, .strides = 2, .padding = config::Padding::kSame};
  config::LayerSpec avg{.kind = config::LayerSpec::Kind::kAvgPool2D, .pool_size = 2, .strides = 1, .padding = config::Padding::kSame};
  // No max pooling here: a kernel step moves every pixel and can flip a window's arg-max (the
  // pooling layer has its own check with well-separated inputs).
  spec.layers = {conv, strided, avg, flat, hidden, out};
  auto built = model::Model::Build(spec, {6, 6, 1}, 3, 4);
  REQUIRE(built.ok());
  model::Model& m = **built;
  m.Initialize(3);
  std::mt19937 gen(15);
  std::vector<float> x = RandomVector(static_cast<std::size_t>(4 * m.input_size()), gen);
  std::vector<ClassId> y = {0, 1, 2, 1};
  m.ComputeGradients(x.data(), y);
  std::vector<float> analytic(m.grads().begin(), m.grads().end());
  auto loss = [&]() {
    return SoftmaxCrossEntropy(m.Forward(x.data(), 4), y, 3, nullptr).loss;
  };
  for (std::size_t i = 0; i < m.params().size(); ++i) {
    float& v = m.params()[i];
    const float saved = v;
    v = saved + kStep;
    const double up = loss();
    v = saved - kStep;
    const double down = loss();
    v = saved;
    const double n = (up - down) / (2.0 * kStep);
    INFO("param " << i << " analytic " << analytic[i] << " numeric " << n);
    CHECK(RelError(analytic[i], n) <= kMaxRelError);
  }
}

}  // namespace
}  // namespace tfd::tensor

namespace tfd::tensor {
namespace {

TEST_CASE("dropout's gradient matches finite differences under a fixed mask", "[unit][gradient][dropout]") {
  auto layer = MakeDropout({2, 3, 4}, 0.3);
  layer->SetTraining(true, 77);  // every Forward of the check draws the same mask
  CheckLayer(*layer, {2, 3, 4}, 3, 16);
}

}  // namespace
}  // namespace tfd::tensor
