// depthwise_conv2d: its outputs equal a conv2d's whose kernel is zero outside each channel's own
// filters (so padding, strides and the output channel order c * M + m are conv2d's, checked
// there), and Keras' variable names and shapes. Gradients: gradient_test.cc.
#include <random>

#include <catch2/catch.hpp>

#include "common/model/model.h"
#include "common/tensor/layers.h"

namespace tfd::tensor {
namespace {

std::vector<float> Uniform(std::size_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

TEST_CASE("depthwise_conv2d equals a conv2d with a block-diagonal kernel, on odd sizes, strides and both paddings",
          "[unit][depthwise]") {
  struct Case {
    ActShape in;
    int k, stride, m;
    Padding padding;
  };
  for (const Case c : {Case{{7, 5, 3}, 3, 2, 1, Padding::kSame}, Case{{7, 5, 3}, 3, 2, 2, Padding::kValid},
                       Case{{6, 7, 2}, 2, 3, 3, Padding::kSame}, Case{{5, 5, 4}, 5, 1, 1, Padding::kSame}}) {
    INFO(c.in.h << "x" << c.in.w << "x" << c.in.c << " k " << c.k << " stride " << c.stride << " multiplier " << c.m);
    std::mt19937 gen(7);
    const int batch = 3, cm = c.in.c * c.m;
    auto dw = MakeDepthwiseConv2D(c.in, {.kernel_size = c.k, .stride = c.stride, .depth_multiplier = c.m, .padding = c.padding},
                                  Activation::kNone, {});
    auto conv = MakeConv2D(c.in, cm, c.k, Activation::kNone, {}, GemmConfig{}, c.stride, c.padding);
    std::vector<float> kernel = Uniform(static_cast<std::size_t>(c.k * c.k * cm), gen), bias = Uniform(static_cast<std::size_t>(cm), gen);
    std::vector<float> full(static_cast<std::size_t>(c.k * c.k * c.in.c * cm), 0.0f);
    for (int tap = 0; tap < c.k * c.k; ++tap)
      for (int ch = 0; ch < c.in.c; ++ch)
        for (int j = 0; j < c.m; ++j) full[(static_cast<std::size_t>(tap) * c.in.c + ch) * cm + ch * c.m + j] = kernel[tap * cm + ch * c.m + j];
    std::vector<float> g1(kernel.size()), g2(bias.size()), g3(full.size()), g4(bias.size());
    const std::span<float> dw_params[] = {kernel, bias}, dw_grads[] = {g1, g2}, conv_params[] = {full, bias}, conv_grads[] = {g3, g4};
    dw->Bind(dw_params, dw_grads);
    conv->Bind(conv_params, conv_grads);
    dw->Reserve(batch);
    conv->Reserve(batch);
    REQUIRE(dw->output_shape().size() == conv->output_shape().size());
    const std::vector<float> x = Uniform(static_cast<std::size_t>(c.in.size() * batch), gen);
    std::vector<float> a(static_cast<std::size_t>(dw->output_shape().size() * batch)), b(a.size());
    dw->Forward(x.data(), a.data(), batch);
    conv->Forward(x.data(), b.data(), batch);
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-5));
  }
}

TEST_CASE("a model's depthwise_conv2d variables have Keras' names and shapes", "[unit][depthwise][model]") {
  using K = config::LayerSpec::Kind;
  config::ModelSpec spec;
  spec.name = "layers";
  spec.layers = {config::LayerSpec{.kind = K::kDepthwiseConv2D, .kernel_size = 3, .strides = 2, .padding = Padding::kSame,
                                   .depth_multiplier = 2},
                 config::LayerSpec{.kind = K::kDepthwiseConv2D, .kernel_size = 2, .use_bias = false},
                 config::LayerSpec{.kind = K::kFlatten}, config::LayerSpec{.kind = K::kDense, .units = 2}};
  auto built = model::Model::Build(spec, {7, 6, 3}, 2, 4);
  INFO(built.status().ToString());
  REQUIRE(built.ok());
  const model::Model& m = **built;
  CHECK(m.layer_output_shape(0).h == 4);
  CHECK(m.layer_output_shape(0).w == 3);
  CHECK(m.layer_output_shape(0).c == 6);
  CHECK(m.layer_output_shape(1).h == 3);
  REQUIRE(m.variables().size() == 5);
  CHECK(m.variables()[0].name == "depthwise_conv2d/depthwise_kernel");
  CHECK(m.variables()[0].shape == std::vector<std::int64_t>{3, 3, 3, 2});
  CHECK(m.variables()[1].name == "depthwise_conv2d/bias");
  CHECK(m.variables()[1].shape == std::vector<std::int64_t>{6});
  CHECK(m.variables()[2].name == "depthwise_conv2d_1/depthwise_kernel");
  CHECK(m.variables()[3].name == "dense/kernel");
  // A "valid" window larger than the image, and a depthwise conv on table rows, are refused naming the layer.
  spec.layers[1].kernel_size = 5;
  auto misfit = model::Model::Build(spec, {7, 6, 3}, 2, 4);
  REQUIRE_FALSE(misfit.ok());
  CHECK(misfit.status().message().starts_with("model.layers[1]: a 5x5 kernel does not fit a 4x3 input"));
  auto rows = model::Model::Build(spec, {1, 1, 12}, 2, 4);
  REQUIRE_FALSE(rows.ok());
  CHECK(rows.status().message().starts_with("model.layers[0]: depthwise_conv2d needs images"));
}

}  // namespace
}  // namespace tfd::tensor
