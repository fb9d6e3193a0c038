// conv2d on oneDNN's convolution primitives against the same layer as im2col + GEMM, on the same
// weights and inputs: outputs, kernel and bias gradients and input gradients agree within
// |a - b| <= 1e-4 * (1 + |b|) (float sums taken in another order). In a build without oneDNN both
// layers run im2col, and the comparison holds trivially.
#include <random>

#include <catch2/catch.hpp>

#include "common/tensor/conv_onednn.h"
#include "common/tensor/gemm.h"
#include "common/tensor/layers.h"

namespace tfd::tensor::conv_onednn_test {
namespace {

constexpr GemmConfig kPrimitives{.backend = GemmBackend::kOneDnn};
constexpr GemmConfig kIm2Col{.backend = GemmBackend::kOneDnn, .im2col_convolutions = true};

bool BuiltWithOneDnn() {
  for (std::string_view b : GemmBackends())
    if (b == "onednn") return true;
  return false;
}

std::vector<float> Uniform(std::size_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

void CheckClose(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(what << "[" << i << "]");
    CHECK(got[i] == Approx(want[i]).epsilon(1e-4).margin(1e-4));
  }
}

// One conv2d layer with its own parameter and gradient storage.
struct Bound {
  std::unique_ptr<Layer> layer;
  std::vector<float> kernel, bias, dkernel, dbias;
};

struct Case {
  ActShape in;
  int filters, k, stride;
  Padding padding;
  Activation act;
};

Bound Make(const Case& c, const GemmConfig& gemm, int max_batch, std::uint32_t seed) {
  Bound b{MakeConv2D(c.in, c.filters, c.k, c.act, {}, gemm, c.stride, c.padding), {}, {}, {}, {}};
  std::mt19937 gen(seed);
  b.kernel = Uniform(static_cast<std::size_t>(c.k * c.k * c.in.c * c.filters), gen);
  b.bias = Uniform(static_cast<std::size_t>(c.filters), gen);
  b.dkernel.assign(b.kernel.size(), 0.0f);
  b.dbias.assign(b.bias.size(), 0.0f);
  const std::span<float> params[] = {b.kernel, b.bias}, grads[] = {b.dkernel, b.dbias};
  b.layer->Bind(params, grads);
  b.layer->Reserve(max_batch);
  return b;
}

// Forward and Backward of `batch` images on both layers; every result compared.
void Compare(Bound& a, Bound& b, const Case& c, int batch, std::mt19937& gen) {
  const std::size_t in_n = static_cast<std::size_t>(c.in.size() * batch);
  const std::size_t out_n = static_cast<std::size_t>(a.layer->output_shape().size() * batch);
  const std::vector<float> x = Uniform(in_n, gen), r = Uniform(out_n, gen);
  std::vector<float> out_a(out_n), out_b(out_n), dout_a(r), dout_b(r), din_a(in_n, 7.0f), din_b(in_n, 7.0f);
  a.layer->Forward(x.data(), out_a.data(), batch);
  b.layer->Forward(x.data(), out_b.data(), batch);
  CheckClose(out_a, out_b, "output");
  a.layer->Backward(x.data(), out_a.data(), dout_a.data(), din_a.data(), batch);
  b.layer->Backward(x.data(), out_b.data(), dout_b.data(), din_b.data(), batch);
  CheckClose(a.dkernel, b.dkernel, "kernel gradient");
  CheckClose(a.dbias, b.dbias, "bias gradient");
  CheckClose(din_a, din_b, "input gradient");
}

TEST_CASE("conv2d on oneDNN's convolution primitives equals im2col + GEMM: kernels 1 and 3, strides, paddings, odd sizes, "
          "short batches",
          "[unit][conv][onednn]") {
  const Case cases[] = {
      {{7, 5, 1}, 4, 3, 1, Padding::kSame, Activation::kRelu},   {{7, 5, 3}, 4, 3, 2, Padding::kSame, Activation::kGelu},
      {{7, 5, 3}, 2, 3, 2, Padding::kValid, Activation::kNone},  {{6, 7, 1}, 3, 1, 2, Padding::kSame, Activation::kTanh},
      {{5, 6, 3}, 5, 1, 1, Padding::kValid, Activation::kRelu6}, {{9, 4, 3}, 3, 3, 1, Padding::kValid, Activation::kSigmoid},
      {{8, 8, 3}, 6, 3, 2, Padding::kSame, Activation::kElu},    {{28, 28, 1}, 16, 3, 1, Padding::kSame, Activation::kRelu},
  };
  for (const Case& c : cases) {
    INFO(MakeConv2D(c.in, c.filters, c.k, c.act, {}, kIm2Col, c.stride, c.padding)->Describe() << " on " << c.in.h << "x" << c.in.w
                                                                                              << "x" << c.in.c);
    std::mt19937 gen(31);
    Bound full_a = Make(c, kPrimitives, 5, 3), full_b = Make(c, kIm2Col, 5, 3);
    Compare(full_a, full_b, c, 5, gen);
    Compare(full_a, full_b, c, 2, gen);  // a short batch after a full one: primitives made for it on the way
    Compare(full_a, full_b, c, 5, gen);  // and back to the full one's
    Bound one_a = Make(c, kPrimitives, 1, 4), one_b = Make(c, kIm2Col, 1, 4);
    Compare(one_a, one_b, c, 1, gen);
  }
}

TEST_CASE("conv2d on oneDNN's primitives keeps no im2col patches; the im2col path does", "[unit][conv][onednn]") {
  const ActShape in{28, 28, 16};
  auto primitives = MakeConv2D(in, 16, 3, Activation::kRelu, {}, kPrimitives, 1, Padding::kSame);
  auto im2col = MakeConv2D(in, 16, 3, Activation::kRelu, {}, kIm2Col, 1, Padding::kSame);
  CHECK(im2col->ForwardScratchPerImage() == 28 * 28 * 3 * 3 * 16);
  CHECK(im2col->KeepsForwardState());
  if (!BuiltWithOneDnn()) return;  // both run im2col
  CHECK(MakeOneDnnConvolution({.in = in, .out = {28, 28, 16}, .k = 3, .stride = 1, .y = {28, 1, 1}, .x = {28, 1, 1}}, kPrimitives) != nullptr);
  CHECK(MakeOneDnnConvolution({.in = in, .out = {28, 28, 16}, .k = 3, .stride = 1, .y = {28, 1, 1}, .x = {28, 1, 1}}, kIm2Col) == nullptr);
  CHECK(primitives->ForwardScratchPerImage() == 0);
  CHECK_FALSE(primitives->KeepsForwardState());
}

TEST_CASE("conv2d on oneDNN's primitives runs on its config's thread count", "[unit][conv][onednn]") {
  if (!BuiltWithOneDnn()) return;  // no primitives to run
  const Case c{{6, 6, 2}, 3, 3, 1, Padding::kSame, Activation::kNone};
  constexpr GemmConfig kTwo{.backend = GemmBackend::kOneDnn, .threads = 2};
  Bound one = Make(c, kPrimitives, 2, 5);  // threads = 1
  std::mt19937 gen(9);
  const std::vector<float> x = Uniform(static_cast<std::size_t>(c.in.size() * 2), gen);
  std::vector<float> out(static_cast<std::size_t>(one.layer->output_shape().size() * 2));
  ApplyGemmThreads(kTwo);
  REQUIRE(CurrentGemmThreads(GemmBackend::kOneDnn) == 2);
  one.layer->Forward(x.data(), out.data(), 2);
  CHECK(CurrentGemmThreads(GemmBackend::kOneDnn) == 1);
}

}  // namespace
}  // namespace tfd::tensor::conv_onednn_test
