#include <array>

#include <catch2/catch.hpp>

#include "common/base/random.h"
#include "common/model/model.h"
#include "common/optim/optimizer.h"
#include "common/tensor/gemm.h"
#include "test/test_util.h"

namespace tfd::model {
namespace {

config::ModelSpec Named(const std::string& name) {
  config::ModelSpec s;
  s.name = name;
  return s;
}

TEST_CASE("the seeds' models have the seeds' shapes", "[unit][model]") {
  struct Case {
    const char* name;
    std::int64_t params;
    std::vector<std::string> variables;
  };
  for (const Case& c : std::vector<Case>{
           {"softmax", 784 * 10 + 10, {"dense/kernel", "dense/bias"}},
           {"mlp", 784 * 100 + 100 + 100 * 10 + 10, {"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"}},
           {"dnn", 784 * 160 + 160 + 4 * (160 * 160 + 160) + 160 * 10 + 10, {}},
           {"cnn", 3 * 3 * 32 + 32 + 13 * 13 * 32 * 64 + 64 + 64 * 10 + 10,
            {"conv2d/kernel", "conv2d/bias", "dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"}},
       }) {
    auto m = Model::Build(Named(c.name), {28, 28, 1}, 10, 8);
    REQUIRE(m.ok());
    INFO(c.name);
    CHECK(static_cast<std::int64_t>((*m)->params().size()) == c.params);
    if (!c.variables.empty()) {
      std::vector<std::string> names;
      for (const Variable& v : (*m)->variables()) names.push_back(v.name);
      CHECK(names == c.variables);
    }
  }
  auto cnn = Model::Build(Named("cnn"), {28, 28, 1}, 10, 8);
  CHECK((*cnn)->variables()[0].shape == std::vector<std::int64_t>{3, 3, 1, 32});
  CHECK((*cnn)->variables()[2].shape == std::vector<std::int64_t>{5408, 64});
}

TEST_CASE("initialisation follows the seed and each variable's initializer", "[unit][model]") {
  auto a = Model::Build(Named("dnn"), {28, 28, 1}, 10, 4);
  auto b = Model::Build(Named("dnn"), {28, 28, 1}, 10, 4);
  REQUIRE((a.ok() && b.ok()));
  (*a)->Initialize(5);
  (*b)->Initialize(5);
  CHECK(ParamsSha256(**a) == ParamsSha256(**b));
  (*b)->Initialize(6);
  CHECK(ParamsSha256(**a) != ParamsSha256(**b));
  // He normal: stddev sqrt(2 / 784) for the first kernel; biases zero.
  const Variable& k = (*a)->variables()[0];
  double sum2 = 0, max_abs = 0;
  for (float v : (*a)->params().subspan(k.offset, k.size)) {
    sum2 += double{v} * v;
    max_abs = std::max(max_abs, double{std::abs(v)});
  }
  CHECK(std::sqrt(sum2 / k.size) == Approx(std::sqrt(2.0 / 784)).epsilon(0.05));
  CHECK(max_abs <= 2 * std::sqrt(2.0 / 784) / 0.8796 + 1e-6);  // truncated at two stddev
  const Variable& bias = (*a)->variables()[1];
  for (float v : (*a)->params().subspan(bias.offset, bias.size)) REQUIRE(v == 0.0f);
}

TEST_CASE("a layer list that cannot produce the logits is rejected with its index", "[unit][model]") {
  config::ModelSpec spec;
  spec.name = "layers";
  spec.layers = {config::LayerSpec{.kind = config::LayerSpec::Kind::kDense, .units = 7}};
  auto got = Model::Build(spec, {28, 28, 1}, 10, 4);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().message() ==
        "model.layers[0]: the last layer must be dense with 10 units (one per class of the data) and no activation: it gives the "
        "logits (it has 7 units)");
  spec.layers = {config::LayerSpec{.kind = config::LayerSpec::Kind::kConv2D, .filters = 2, .kernel_size = 30},
                 config::LayerSpec{.kind = config::LayerSpec::Kind::kDense, .units = 10}};
  got = Model::Build(spec, {28, 28, 1}, 10, 4);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().message() == "model.layers[0]: a 30x30 kernel does not fit a 28x28 input (\"padding\": \"same\" pads it)");
  spec.layers[0].padding = config::Padding::kSame;  // "same" pads: 28x28 out, whatever the kernel
  got = Model::Build(spec, {28, 28, 1}, 10, 4);
  REQUIRE(got.ok());
  CHECK((*got)->layer_output_shape(0).size() == 28 * 28 * 2);
}

TEST_CASE("window arithmetic is Keras': valid floors, same is ceil(in / stride) with the odd pad after", "[unit][model]") {
  using config::Padding;
  struct Row {
    int in, k, stride;
    Padding padding;
    tensor::WindowAxis want;
  };
  const Row rows[] = {
      {28, 3, 1, Padding::kValid, {26, 0, 0}}, {28, 3, 2, Padding::kValid, {13, 0, 0}}, {7, 3, 2, Padding::kValid, {3, 0, 0}},
      {9, 4, 3, Padding::kValid, {2, 0, 0}},   {3, 4, 1, Padding::kValid, {0, 0, 0}},   {28, 3, 1, Padding::kSame, {28, 1, 1}},
      {28, 3, 2, Padding::kSame, {14, 0, 1}},  {7, 3, 2, Padding::kSame, {4, 1, 1}},    {5, 2, 2, Padding::kSame, {3, 0, 1}},
      {6, 2, 3, Padding::kSame, {2, 0, 0}},    {5, 1, 2, Padding::kSame, {3, 0, 0}},    {4, 4, 1, Padding::kSame, {4, 1, 2}},
      {1, 3, 2, Padding::kSame, {1, 1, 1}},
  };
  for (const Row& r : rows) {
    INFO("in " << r.in << " k " << r.k << " stride " << r.stride << " " << config::PaddingName(r.padding));
    const tensor::WindowAxis got = tensor::Window(r.in, r.k, r.stride, r.padding);
    CHECK(got.out == r.want.out);
    CHECK(got.pad_before == r.want.pad_before);
    CHECK(got.pad_after == r.want.pad_after);
  }
}

TEST_CASE("a strided same-padded convnet with pooling has Keras' shapes and no extra variables", "[unit][model]") {
  config::ModelSpec spec;
  spec.name = "layers";
  using K = config::LayerSpec::Kind;
  spec.layers = {
      config::LayerSpec{.kind = K::kConv2D, .filters = 8, .kernel_size = 3, .strides = 2, .padding = config::Padding::kSame},  // 14x14
      config::LayerSpec{.kind = K::kMaxPool2D, .pool_size = 3, .strides = 2, .padding = config::Padding::kSame},              // 7x7
      config::LayerSpec{.kind = K::kConv2D, .filters = 5, .kernel_size = 2, .strides = 3},                                    // 2x2
      config::LayerSpec{.kind = K::kAvgPool2D, .pool_size = 2, .strides = 1, .padding = config::Padding::kSame},              // 2x2
      config::LayerSpec{.kind = K::kGlobalAvgPool2D},                                                                         // 1x1x5
      config::LayerSpec{.kind = K::kDense, .units = 10}};
  auto got = Model::Build(spec, {28, 28, 1}, 10, 4);
  INFO(got.status().ToString());
  REQUIRE(got.ok());
  const Model& m = **got;
  const std::vector<std::array<int, 3>> want = {{14, 14, 8}, {7, 7, 8}, {2, 2, 5}, {2, 2, 5}, {1, 1, 5}, {1, 1, 10}};
  REQUIRE(m.num_layers() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("layer " << i);
    CHECK(std::array<int, 3>{m.layer_output_shape(i).h, m.layer_output_shape(i).w, m.layer_output_shape(i).c} == want[i]);
  }
  std::vector<std::string> names;
  for (const Variable& v : m.variables()) names.push_back(v.name);
  CHECK(names == std::vector<std::string>{"conv2d/kernel", "conv2d/bias", "conv2d_1/kernel", "conv2d_1/bias", "dense/kernel", "dense/bias"});
  CHECK(m.Summary().find("conv2d 8 3x3 stride 2 same") != std::string::npos);
  CHECK(m.Summary().find("avg_pool2d 2x2 stride 1 same") != std::string::npos);
}

TEST_CASE("two models in one process run their GEMMs on their own backend and thread count", "[unit][model][gemm]") {
  // The same mlp, parameters and input on the build's first backend with 2 threads and its last
  // with 1: each model's logits keep their own backend's bits whichever model ran last (the
  // backends sum in different orders, so a model whose layers ran on the other's backend would
  // show it), and each model's GEMMs leave their own thread count.
  const std::vector<std::string_view> backends = tensor::GemmBackends();
  tensor::GemmConfig first{.threads = 2}, last{.threads = 1};
  REQUIRE(tensor::SetGemmBackend(backends.front(), &first).ok());
  REQUIRE(tensor::SetGemmBackend(backends.back(), &last).ok());
  auto a = Model::Build(Named("mlp"), {28, 28, 1}, 10, 8, first);
  auto b = Model::Build(Named("mlp"), {28, 28, 1}, 10, 8, last);
  REQUIRE((a.ok() && b.ok()));
  CHECK(((*a)->gemm().backend == first.backend && (*a)->gemm().threads == 2));
  CHECK(((*b)->gemm().backend == last.backend && (*b)->gemm().threads == 1));
  (*a)->Initialize(3);
  (*b)->Initialize(3);
  std::vector<float> x(8 * 784);
  Rng rng(4);
  for (float& v : x) v = static_cast<float>(rng.Uniform());
  auto logits = [&x](Model& m) {
    const float* l = m.Forward(x.data(), 8);
    return std::vector<float>(l, l + 80);
  };
  // Eigen alone (a build without oneDNN or OpenBLAS) has no OpenMP: its products use one thread.
  const int a_threads = backends.size() == 1 ? 1 : 2;
  const std::vector<float> on_first = logits(**a);
  CHECK(tensor::CurrentGemmThreads(first.backend) == a_threads);
  const std::vector<float> on_last = logits(**b);
  CHECK(tensor::CurrentGemmThreads(last.backend) == 1);
  if (backends.size() > 1) REQUIRE(on_first != on_last);  // else this test could not tell the backends apart
  CHECK(logits(**a) == on_first);
  CHECK(tensor::CurrentGemmThreads(first.backend) == a_threads);
  CHECK(logits(**b) == on_last);
  CHECK(tensor::CurrentGemmThreads(last.backend) == 1);
}

TEST_CASE("an mlp learns well-separated synthetic classes to at least 99%", "[unit][learning]") {
  tfd::testing::TempDir dir;
  tfd::testing::WriteSyntheticMnist(dir.path(), 2000, 500);
  auto data = data::LoadMnist(dir.path());
  REQUIRE(data.ok());
  data->train.num_classes = data->test.num_classes = 10;
  config::ModelSpec spec;
  spec.name = "layers";
  spec.layers = {config::LayerSpec{.kind = config::LayerSpec::Kind::kDense, .units = 16, .activation = config::Activation::kRelu},
                 config::LayerSpec{.kind = config::LayerSpec::Kind::kDense, .units = 10}};
  const int batch = 20;
  auto m = Model::Build(spec, {8, 8, 1}, 10, batch);
  REQUIRE(m.ok());
  (*m)->Initialize(1);
  config::OptimizerSpec o;
  o.type = config::OptimizerSpec::Type::kSgd;
  o.learning_rate = 0.1;
  auto opt = optim::MakeOptimizer(o);
  optim::OptimizerState state(*opt, (*m)->params().size());
  std::vector<float> x(batch * 64);
  std::vector<ClassId> y(batch);
  const double before = Evaluate(**m, data->test);
  for (int epoch = 1; epoch <= 3; ++epoch) {  // 300 steps in all
    auto shard = data::EpochShard(data->train.size, 1, epoch, 0, 1, true);
    for (std::size_t s = 0; s + batch <= shard.size(); s += batch) {
      data::FillBatch(data->train, std::span(shard).subspan(s, batch), x.data(), y.data());
      (*m)->ComputeGradients(x.data(), y);
      state.Apply((*m)->params(), (*m)->grads());
    }
  }
  const double after = Evaluate(**m, data->test);
  INFO("test accuracy before " << before << ", after " << after);
  CHECK(before < 0.5);
  CHECK(after >= 0.99);
}

}  // namespace
}  // namespace tfd::model
