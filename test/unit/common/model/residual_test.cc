// Residual blocks in a model: Keras' shapes and variable names, the projection's stride, errors
// naming model.layers[i] (and .layers[j] inside a block), batch norm inside a block (moving
// statistics as variables, cross-replica sums reached), the job file's fields and the model.json
// round trip, and a whole model's gradients against finite differences. The layer's own gradient
// checks: test/unit/common/tensor/gradient_test.cc.
#include <algorithm>
#include <cmath>
#include <random>

#include <catch2/catch.hpp>

#include "common/config/job.h"
#include "common/config/spec_json.h"
#include "common/model/model.h"
#include "common/tensor/layers.h"
#include "common/tensor/loss.h"

namespace tfd::model {
namespace {

using K = config::LayerSpec::Kind;
using config::Activation;
using config::LayerSpec;
using config::Padding;

LayerSpec Conv(int filters, int k, int stride = 1, Activation act = Activation::kNone) {
  return {.kind = K::kConv2D, .filters = filters, .kernel_size = k, .activation = act, .strides = stride, .padding = Padding::kSame};
}
LayerSpec Block(std::vector<LayerSpec> inner, Activation act = Activation::kRelu) {
  LayerSpec l{.kind = K::kResidual, .activation = act};
  l.layers = std::move(inner);
  return l;
}
config::ModelSpec Layers(std::vector<LayerSpec> layers) {
  config::ModelSpec spec;
  spec.name = "layers";
  spec.layers = std::move(layers);
  return spec;
}

// conv2d 8 -> residual(conv, batch_norm, conv) -> residual(strided conv 16, batch_norm) -> pool -> dense.
config::ModelSpec SmallResNet(bool sync = false) {
  const LayerSpec bn{.kind = K::kBatchNorm, .momentum = 0.5, .sync = sync};
  return Layers({Conv(8, 3), Block({Conv(8, 3, 1, Activation::kRelu), bn, Conv(8, 3)}), Block({Conv(16, 3, 2), bn}),
                 LayerSpec{.kind = K::kGlobalAvgPool2D}, LayerSpec{.kind = K::kDense, .units = 3}});
}

TEST_CASE("a residual block has Keras' shapes, its variables named under the block, a projection only where shapes differ",
          "[unit][model][residual]") {
  auto built = Model::Build(SmallResNet(), {9, 9, 1}, 3, 4);
  INFO(built.status().ToString());
  REQUIRE(built.ok());
  Model& m = **built;
  REQUIRE(m.num_layers() == 5);  // a block is one layer: the pipeline's split cannot cut inside it
  CHECK(m.layer_output_shape(1).h == 9);
  CHECK(m.layer_output_shape(2).h == 5);  // ceil(9 / 2), as the strided "same" conv and the 1x1 stride-2 projection give
  CHECK(m.layer_output_shape(2).c == 16);
  CHECK(m.layer_spec(1).strides == 0);
  CHECK(m.layer_spec(2).strides == 2);
  std::vector<std::string> names;
  for (const Variable& v : m.variables()) names.push_back(v.name);
  const std::vector<std::string> want = {"conv2d/kernel", "conv2d/bias", "residual/conv2d/kernel", "residual/conv2d/bias",
                                         "residual/batch_norm/gamma", "residual/batch_norm/beta", "residual/batch_norm/moving_mean",
                                         "residual/batch_norm/moving_variance", "residual/conv2d_1/kernel", "residual/conv2d_1/bias",
                                         "residual_1/conv2d/kernel", "residual_1/conv2d/bias", "residual_1/batch_norm/gamma",
                                         "residual_1/batch_norm/beta", "residual_1/batch_norm/moving_mean",
                                         "residual_1/batch_norm/moving_variance", "residual_1/projection/kernel",
                                         "residual_1/projection/bias", "dense/kernel", "dense/bias"};
  CHECK(names == want);
  CHECK(m.variables()[16].shape == std::vector<std::int64_t>{1, 1, 8, 16});
  CHECK_FALSE(m.variables()[6].trainable);
  CHECK(m.Summary().find("residual [conv2d 16 3x3 stride 2 same -> batch_norm] + projection stride 2 relu") != std::string::npos);
}

TEST_CASE("a block no strided 1x1 projection can match, or a bad layer inside one, is refused naming its path", "[unit][model][residual]") {
  const LayerSpec valid{.kind = K::kConv2D, .filters = 4, .kernel_size = 3};
  auto shrunk = Model::Build(Layers({Conv(4, 3), Block({valid}), LayerSpec{.kind = K::kFlatten}, LayerSpec{.kind = K::kDense, .units = 2}}),
                             {9, 9, 1}, 2, 4);
  REQUIRE_FALSE(shrunk.ok());
  INFO(shrunk.status().message());
  CHECK(shrunk.status().message().starts_with("model.layers[1]: the block's layers turn its 9x9x4 input into 7x7x4"));
  const LayerSpec huge{.kind = K::kConv2D, .filters = 4, .kernel_size = 12};
  auto misfit = Model::Build(Layers({Block({Conv(4, 3), huge}), LayerSpec{.kind = K::kFlatten}, LayerSpec{.kind = K::kDense, .units = 2}}),
                             {9, 9, 1}, 2, 4);
  REQUIRE_FALSE(misfit.ok());
  CHECK(misfit.status().message().starts_with("model.layers[0].layers[1]: a 12x12 kernel does not fit a 9x9 input"));
  auto only_flatten = Model::Build(Layers({Block({LayerSpec{.kind = K::kFlatten}}), LayerSpec{.kind = K::kDense, .units = 2}}), {1, 1, 4}, 2, 4);
  REQUIRE_FALSE(only_flatten.ok());
  CHECK(only_flatten.status().message() == "model.layers[0].layers: the block has no layer but flatten");
}

TEST_CASE("a residual of dense layers on table rows: identity and projected shortcuts", "[unit][model][residual]") {
  const LayerSpec d6{.kind = K::kDense, .units = 6, .activation = Activation::kTanh};
  const LayerSpec d4{.kind = K::kDense, .units = 4};
  auto built = Model::Build(Layers({d6, Block({d6, d6}), Block({d4}), d4}), {1, 1, 5}, 4, 4);
  INFO(built.status().ToString());
  REQUIRE(built.ok());
  CHECK((*built)->layer_spec(1).strides == 0);
  CHECK((*built)->layer_spec(2).strides == 1);  // 6 -> 4 features: a 1x1 projection of stride 1
}

// Counts the sums a synchronised batch norm makes, each over this replica alone.
class CountingSum final : public tensor::CrossReplicaSum {
 public:
  void Sum(std::span<float>) override { ++calls; }
  int calls = 0;
};

TEST_CASE("batch norm inside a block moves its moving statistics, which are variables, and syncs its sums", "[unit][model][residual][norm]") {
  auto built = Model::Build(SmallResNet(/*sync=*/true), {9, 9, 1}, 3, 4);
  REQUIRE(built.ok());
  Model& m = **built;
  m.Initialize(5);
  CHECK(m.has_sync_layers());
  CountingSum sum;
  m.SetCrossReplicaSum(&sum);
  std::mt19937 gen(3);
  std::normal_distribution<float> d(0.5f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(4 * m.input_size()));
  for (float& v : x) v = d(gen);
  const std::vector<ClassId> y = {0, 1, 2, 1};
  (void)m.ComputeGradients(x.data(), tensor::Labels(std::span(y)));
  CHECK(sum.calls == 2 * 3);  // two batch norms: two forward sums and one backward sum each
  const Variable& mean = m.variables()[6];
  REQUIRE(mean.name == "residual/batch_norm/moving_mean");
  CHECK(m.params()[mean.offset] != 0.0f);
  CHECK(m.grads()[mean.offset] == 0.0f);
  // The parameters are the whole state: a fresh model given them computes the same outputs.
  auto fresh = Model::Build(SmallResNet(), {9, 9, 1}, 3, 4);
  REQUIRE(fresh.ok());
  std::copy(m.params().begin(), m.params().end(), (*fresh)->params().begin());
  const float* a = m.Forward(x.data(), 4);
  const std::vector<float> want(a, a + 12);
  const float* b = (*fresh)->Forward(x.data(), 4);
  CHECK(std::vector<float>(b, b + 12) == want);
  CHECK(std::all_of(want.begin(), want.end(), [](float v) { return std::isfinite(v); }));
  // A step without data makes the same sums (this summer adds no other replica's rows, so the
  // statistics it leaves are not meaningful: only the calls are counted).
  m.JoinCrossReplicaSums();
  CHECK(sum.calls == 2 * 2 * 3);
}

TEST_CASE("a model with residual blocks: gradients match finite differences of its loss", "[unit][model][residual][gradient]") {
  const LayerSpec drop{.kind = K::kDropout, .rate = 0.0};
  const LayerSpec gelu_block = Block({Conv(3, 3, 1, Activation::kTanh), drop, Conv(3, 2)}, Activation::kGelu);
  const LayerSpec down = Block({Conv(4, 3, 2, Activation::kTanh), Block({Conv(4, 1)}, Activation::kNone)}, Activation::kTanh);
  auto built = Model::Build(Layers({Conv(3, 3, 1, Activation::kTanh), gelu_block, down, LayerSpec{.kind = K::kFlatten},
                                    LayerSpec{.kind = K::kDense, .units = 3}}),
                            {5, 6, 1}, 3, 4);
  INFO(built.status().ToString());
  REQUIRE(built.ok());
  Model& m = **built;
  m.Initialize(3);
  std::mt19937 gen(15);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(4 * m.input_size()));
  for (float& v : x) v = u(gen);
  const std::vector<ClassId> y = {0, 1, 2, 1};
  (void)m.ComputeGradients(x.data(), tensor::Labels(std::span(y)));
  const std::vector<float> analytic(m.grads().begin(), m.grads().end());
  auto loss = [&]() { return tensor::SoftmaxCrossEntropy(m.Forward(x.data(), 4), y, 3, nullptr).loss; };
  constexpr float kStep = 1e-2f;
  for (std::size_t i = 0; i < m.params().size(); ++i) {
    float& v = m.params()[i];
    const float saved = v;
    v = saved + kStep;
    const double up = loss();
    v = saved - kStep;
    const double down_loss = loss();
    v = saved;
    const double n = (up - down_loss) / (2.0 * kStep);
    INFO("param " << i << " analytic " << analytic[i] << " numeric " << n);
    CHECK(std::abs(analytic[i] - n) / std::max(std::abs(double{analytic[i]}) + std::abs(n), 1e-2) <= 1e-2);
  }
}

TEST_CASE("the job file's residual and depthwise_conv2d fields: read, written back, and bad ones named", "[unit][config][residual]") {
  auto parse = [](const std::string& layers) {
    return config::ParseJobSpec(R"({"model": {"layers": )" + layers + R"(}, "data": "d", "epochs": 1, "batch_size": 8, )"
                              R"("optimizer": {"type": "sgd", "learning_rate": 0.1}})", "job.json");
  };
  auto ok = parse(R"([{"type": "residual", "activation": "relu", "init": "he_normal", "layers": [
                         {"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same"},
                         {"type": "residual", "layers": [{"type": "depthwise_conv2d", "kernel_size": 3, "padding": "same",
                                                          "depth_multiplier": 2, "use_bias": false, "strides": 2}]}]},
                       {"type": "dense", "units": 10}])");
  INFO(ok.status().ToString());
  REQUIRE(ok.ok());
  const LayerSpec& block = ok->model.layers[0];
  REQUIRE(block.kind == K::kResidual);
  CHECK(block.activation == Activation::kRelu);
  CHECK(block.init.kind == config::InitKind::kHeNormal);
  REQUIRE(block.layers.size() == 2);
  const LayerSpec& dw = block.layers[1].layers[0];
  CHECK(dw.kind == K::kDepthwiseConv2D);
  CHECK(dw.depth_multiplier == 2);
  CHECK_FALSE(dw.use_bias);
  CHECK(dw.stride() == 2);
  auto back = config::ParseModelSpec(config::ModelSpecJson(ok->model), "model.json");
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK(config::ModelSpecJson(*back) == config::ModelSpecJson(ok->model));
  CHECK(back->layers[0].layers[1].layers[0].depth_multiplier == 2);

  const std::pair<const char*, const char*> bad[] = {
      {R"([{"type": "residual"}])", "job.json: model.layers[0].layers: expected a non-empty array of the block's layers, got nothing"},
      {R"([{"type": "residual", "layers": []}])", "model.layers[0].layers: expected a non-empty array"},
      {R"([{"type": "residual", "layers": [{"type": "conv2d", "filters": 4}]}])", "model.layers[0].layers[0].kernel_size"},
      {R"([{"type": "residual", "layers": [{"type": "dense", "units": 2, "bogus": 1}]}])", "model.layers[0].layers[0].bogus"},
      {R"([{"type": "residual", "layers": [{"type": "dense", "units": 2}], "activation": "swish"}])", "model.layers[0].activation"},
      {R"([{"type": "residual", "layers": [{"type": "dense", "units": 2}], "strides": 2}])", "model.layers[0].strides"},
      {R"([{"type": "depthwise_conv2d", "kernel_size": 3, "depth_multiplier": 0}])", "model.layers[0].depth_multiplier"},
      {R"([{"type": "depthwise_conv2d", "kernel_size": 3, "use_bias": 1}])", "model.layers[0].use_bias"},
      {R"([{"type": "depthwise_conv2d", "kernel_size": 3, "padding": "full"}])", "model.layers[0].padding"},
      {R"([{"type": "depthwise_conv2d"}])", "model.layers[0].kernel_size"},
      {R"([{"type": "depthwise_conv2d", "kernel_size": 3, "filters": 4}])", "model.layers[0].filters"},
  };
  for (const auto& [layers, want] : bad) {
    auto r = parse(layers);
    INFO(layers);
    REQUIRE_FALSE(r.ok());
    INFO(r.status().message());
    CHECK(r.status().message().find(want) != std::string::npos);
  }
}

TEST_CASE("the cuda device takes residual blocks, with batch norms inside, synchronised or not", "[unit][config][residual][cuda]") {
  auto parse = [](const char* layer) {
    return config::ParseJobSpec(std::string(R"({"model": {"layers": [{"type": "dense", "units": 4}, )") + layer +
                                    R"(, {"type": "dense", "units": 10}]}, "data": "d", "epochs": 1, "batch_size": 8, "device": "cuda:0", )"
                                    R"("optimizer": {"type": "sgd", "learning_rate": 0.1}})",
                                "job.json");
  };
  CHECK(parse(R"({"type": "residual", "layers": [{"type": "dense", "units": 4}, {"type": "batch_norm"}]})").ok());
  auto r = parse(R"({"type": "residual", "layers": [{"type": "dense", "units": 4}, {"type": "batch_norm", "sync": true}]})");
  INFO(r.status().message());
  CHECK(r.ok());
}

}  // namespace
}  // namespace tfd::model
