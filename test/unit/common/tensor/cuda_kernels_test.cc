// The CUDA kernels against their CPU twins (common/tensor, common/optim), CudaModel against Model,
// and (tag [train], needs MNIST) the dnn and cnn trained on the GPU against the same runs on the CPU. Exits 77
// with a one-line reason where no CUDA device is visible, so ctest shows it as skipped.
//
// Tolerances, and why:
// - GEMM: 1e-5 x (k x max|a| x max|b|): cuBLAS and the CPU backend sum k products in different
//   orders (and blockings); FP32 (cuBLAS's default math mode, no TF32) rounding of k terms.
// - bias + activation: 2e-6 absolute + 1e-5 relative: the CPU's exp is Cephes' polynomial and its
//   tanh Eigen's (each within 2 ulp), the device's expf/tanhf are CUDA's (within 2 ulp), and FMA
//   contraction differs; a few ulp at most on values of order 1.
// - activation gradient: 1e-6 relative (the same formula, contraction aside); bias gradient:
//   1e-5 x the sum of |terms| (a GEMV sums the rows in its own order).
// - softmax cross-entropy: loss 1e-5 relative, dlogits 1e-6 absolute (expf and logf against the
//   CPU's std::exp and std::log, on values in (0, 1]); hits exact.
// - max-pool: exact (comparisons only). conv2d: as GEMM (im2col and col2im only copy and add).
// - optimizers: bit-exact (optimizer_kernels.cu is compiled without FMA contraction and with IEEE
//   division and square root, as the CPU loops are).
// - whole models: gradients within 1e-4 x max|g| (every layer's differences, through backprop).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "common/base/random.h"
#include "common/config/job.h"
#include "common/data/dataset.h"
#include "common/model/model.h"
#include "common/optim/cuda/optimizer_kernels.h"
#include "common/optim/optimizer.h"
#include "common/tensor/cuda/cublas_loader.h"
#include "common/tensor/cuda/cuda_model.h"
#include "common/tensor/cuda/kernels.h"
#include "common/tensor/cuda/runtime.h"
#include "common/tensor/elementwise.h"
#include "common/tensor/gemm.h"
#include "common/tensor/layers.h"
#include "common/tensor/loss.h"
#include "daemon/train/standalone.h"
#include "test/catch/session.h"
#include "test/unit/common/tensor/cuda_test_util.h"

namespace {

using namespace tfd;
using namespace tfd::cuda_test;
using config::Activation;

// A cuBLAS handle from the table the backend loads (cublas_loader.h): tfd links no cuBLAS.
struct CublasHandle {
  cublasHandle_t h = nullptr;
  CublasHandle() {
    auto api = cuda::LoadCublas();
    INFO((api.ok() ? std::string() : api.status().message()));
    REQUIRE(api.ok());
    REQUIRE((*api)->create(&h) == CUBLAS_STATUS_SUCCESS);
  }
  ~CublasHandle() { cuda::Cublas().destroy(h); }
};

// Every activation the layers take ([-8, 8] inputs reach relu6's top and tanh's and gelu's tails).
constexpr Activation kActivations[] = {Activation::kNone, Activation::kRelu, Activation::kSigmoid, Activation::kElu,
                                       Activation::kTanh, Activation::kRelu6, Activation::kGelu};

}  // namespace

TEST_CASE("cuda gemm matches tensor::Gemm for every transpose", "[cuda]") {
  CublasHandle cublas;
  const int m = 37, n = 29, k = 53;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      auto a = Random(static_cast<std::size_t>(m) * k, 1), b = Random(static_cast<std::size_t>(k) * n, 2),
           c = Random(static_cast<std::size_t>(m) * n, 3);
      const int lda = ta ? m : k, ldb = tb ? k : n;
      std::vector<float> want = c;
      tensor::Gemm(tensor::GemmConfig{}, ta, tb, m, n, k, 1.5f, a.data(), lda, b.data(), ldb, 0.5f, want.data(), n);
      Dev<float> da(a), db(b), dc(c);
      REQUIRE(cuda::Gemm(cublas.h, ta, tb, m, n, k, 1.5f, da.p, lda, db.p, ldb, 0.5f, dc.p, n) == CUBLAS_STATUS_SUCCESS);
      INFO("trans_a " << ta << " trans_b " << tb);
      ExpectNear(dc.Get(), want, 1e-5f * k * 1.5f, 0);
    }
}

TEST_CASE("cuda bias + activation matches tensor::BiasActivation", "[cuda]") {
  const int rows = 64, cols = 100;
  for (Activation act : kActivations) {
    auto y = Random(rows * cols, 4, -8, 8), bias = Random(cols, 5);
    std::vector<float> want = y, want_pre(y.size());
    tensor::BiasActivation(want.data(), bias.data(), rows, cols, act, want_pre.data());
    Dev<float> dy(y), db(bias), pre(y.size());
    cuda::BiasActivation(dy.p, db.p, rows, cols, act, pre.p, nullptr);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    INFO("activation " << config::ActivationName(act));
    ExpectNear(dy.Get(), want, 2e-6f, 1e-5f);
    if (tensor::NeedsPreActivation(act)) ExpectEqualBits(pre.Get(), want_pre);
  }
}

TEST_CASE("cuda activation and bias gradients match tensor::ActivationGradBias", "[cuda]") {
  CublasHandle cublas;
  const int rows = 300, cols = 70;
  for (Activation act : kActivations) {
    auto x = Random(rows * cols, 6, -8, 8), bias = std::vector<float>(cols, 0.0f), d = Random(rows * cols, 7);
    std::vector<float> pre(x.size());
    tensor::BiasActivation(x.data(), bias.data(), rows, cols, act, pre.data());  // y = act(x): a valid output
    std::vector<float> want_d = d, want_bias(cols);
    tensor::ActivationGradBias(x.data(), want_d.data(), rows, cols, act, want_bias.data(), pre.data());
    Dev<float> dy(x), dd(d), ones(std::vector<float>(rows, 1.0f)), dbias(static_cast<std::size_t>(cols)), dpre(pre);
    cuda::ActivationGrad(dy.p, dd.p, std::int64_t{rows} * cols, act, dpre.p, nullptr);
    REQUIRE(cuda::BiasGradient(cublas.h, dd.p, rows, cols, ones.p, dbias.p) == CUBLAS_STATUS_SUCCESS);
    INFO("activation " << config::ActivationName(act));
    // gelu's derivative crosses zero (near x = -0.75), where erf's last-place difference shows.
    ExpectNear(dd.Get(), want_d, act == Activation::kGelu ? 1e-6f : 1e-7f, 1e-6f);
    ExpectNear(dbias.Get(), want_bias, 1e-5f * rows, 0);
  }
}

TEST_CASE("cuda softmax cross-entropy matches tensor::SoftmaxCrossEntropy", "[cuda]") {
  const int batch = 50, classes = 10;
  auto logits = Random(batch * classes, 8, -5, 5);
  std::vector<ClassId> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = static_cast<ClassId>((i * 7) % classes);
  std::vector<float> want_d(batch * classes);
  const tensor::LossResult want = tensor::SoftmaxCrossEntropy(logits.data(), labels, classes, want_d.data());
  Dev<float> dl(logits), dd(static_cast<std::size_t>(batch * classes)), row_loss(static_cast<std::size_t>(batch));
  Dev<ClassId> dy(labels);
  Dev<int> row_hit(static_cast<std::size_t>(batch));
  Dev<cuda::LossSums> sums(std::size_t{1});
  cuda::SoftmaxCrossEntropy(dl.p, dy.p, batch, classes, dd.p, row_loss.p, row_hit.p, sums.p, nullptr);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const cuda::LossSums got = sums.Get()[0];
  CHECK(std::abs(got.loss_sum / batch - want.loss) <= 1e-5 * want.loss);
  CHECK(got.correct == want.correct);
  ExpectNear(dd.Get(), want_d, 1e-6f, 0);
}

TEST_CASE("cuda dropout: the rate, the scale, the same mask for the same seed", "[cuda]") {
  const std::int64_t n = 100000;
  const float rate = 0.3f, scale = 1.0f / (1.0f - rate);
  auto in = Random(n, 9, 0.5f, 1.5f);
  Dev<float> din(in), out(static_cast<std::size_t>(n)), mask(static_cast<std::size_t>(n)), mask2(static_cast<std::size_t>(n));
  Dev<std::uint64_t> seed(std::vector<std::uint64_t>{42});
  cuda::DropoutForward(din.p, out.p, mask.p, n, rate, seed.p, 3, nullptr);
  cuda::DropoutForward(din.p, out.p, mask2.p, n, rate, seed.p, 3, nullptr);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto o = out.Get(), m = mask.Get();
  ExpectEqualBits(mask2.Get(), m);
  std::int64_t zeros = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    zeros += m[i] == 0.0f;
    REQUIRE((m[i] == 0.0f || m[i] == scale));
    REQUIRE(o[i] == in[i] * m[i]);
  }
  // 0.3 +- 0.01 is about 7 standard deviations (sqrt(0.21 / 1e5) = 0.00145).
  CHECK(std::abs(static_cast<double>(zeros) / n - rate) < 0.01);
  // Another layer (stream) or seed: another mask.
  cuda::DropoutForward(din.p, out.p, mask2.p, n, rate, seed.p, 4, nullptr);
  CHECK(std::memcmp(mask2.Get().data(), m.data(), sizeof(float) * n) != 0);
  // Backward: dout * mask.
  auto g = Random(n, 10);
  Dev<float> dg(g), dgin(static_cast<std::size_t>(n));
  cuda::DropoutBackward(dg.p, mask.p, dgin.p, n, nullptr);
  std::vector<float> want(n);
  for (std::int64_t i = 0; i < n; ++i) want[i] = g[i] * m[i];
  ExpectEqualBits(dgin.Get(), want);
}

// Window shapes: tiling 2x2, a remainder no window covers, overlapping windows, and "same" padding
// with a stride (padding cells take no part).
struct WindowCase {
  int k, stride;
  tensor::Padding padding;
};
constexpr WindowCase kWindows[] = {{2, 2, tensor::Padding::kValid}, {3, 2, tensor::Padding::kValid}, {2, 1, tensor::Padding::kValid},
                                   {3, 2, tensor::Padding::kSame}, {2, 2, tensor::Padding::kSame}, {3, 1, tensor::Padding::kSame}};

TEST_CASE("cuda max and average pooling match the CPU layers for every stride and padding, ties included", "[cuda]") {
  const tensor::ActShape in{7, 7, 3};  // odd: "valid" leaves a remainder, "same" pads
  const int batch = 4;
  for (const bool max : {true, false})
    for (const WindowCase& w : kWindows) {
      INFO((max ? "max" : "avg") << " pool " << w.k << " stride " << w.stride << (w.padding == tensor::Padding::kSame ? " same" : " valid"));
      auto x = Random(static_cast<std::size_t>(batch * in.size()), 11);
      for (float& v : x) v = std::round(v * 2) / 2;  // few levels: ties inside windows, and -0 beside +0
      auto layer = max ? tensor::MakeMaxPool2D(in, w.k, w.stride, w.padding) : tensor::MakeAvgPool2D(in, w.k, w.stride, w.padding);
      const tensor::ActShape out = layer->output_shape();
      std::vector<float> want_out(static_cast<std::size_t>(batch * out.size()));
      layer->Forward(x.data(), want_out.data(), batch);
      auto g = Random(want_out.size(), 12);
      std::vector<float> gcopy = g, want_din(x.size(), -1.0f);
      layer->Backward(x.data(), want_out.data(), gcopy.data(), want_din.data(), batch);
      const cuda::WindowGeometry geometry = cuda::Geometry(in, w.k, w.stride, w.padding);
      REQUIRE((geometry.oh == out.h && geometry.ow == out.w));
      Dev<float> dx(x), dout(want_out.size()), dg(g), ddin(x.size());
      cuda::PoolForward(max, dx.p, dout.p, batch, geometry, nullptr);
      cuda::PoolBackward(max, dx.p, dout.p, dg.p, ddin.p, batch, geometry, nullptr);
      REQUIRE(cudaGetLastError() == cudaSuccess);
      // The same sums in the same order, rounded alike (the kernels use no fused multiply-add).
      ExpectEqualBits(dout.Get(), want_out);
      ExpectEqualBits(ddin.Get(), want_din);
    }
}

TEST_CASE("cuda global average pooling matches the CPU layer", "[cuda]") {
  const tensor::ActShape in{5, 6, 7};
  const int batch = 3;
  auto layer = tensor::MakeGlobalAvgPool2D(in);
  auto x = Random(static_cast<std::size_t>(batch * in.size()), 31);
  std::vector<float> want_out(static_cast<std::size_t>(batch * in.c));
  layer->Forward(x.data(), want_out.data(), batch);
  auto g = Random(want_out.size(), 32);
  std::vector<float> gcopy = g, want_din(x.size());
  layer->Backward(x.data(), want_out.data(), gcopy.data(), want_din.data(), batch);
  Dev<float> dx(x), dout(want_out.size()), dg(g), ddin(x.size());
  cuda::GlobalAvgPoolForward(dx.p, dout.p, batch, in, nullptr);
  cuda::GlobalAvgPoolBackward(dg.p, ddin.p, batch, in, nullptr);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  ExpectEqualBits(dout.Get(), want_out);
  ExpectEqualBits(ddin.Get(), want_din);
}

TEST_CASE("cuda conv2d (im2col + GEMM, col2im) matches the CPU layer for every stride and padding", "[cuda]") {
  CublasHandle cublas;
  const tensor::ActShape in{8, 9, 3};
  const int batch = 5, filters = 4;
  for (const WindowCase& w : kWindows) {
    const int k = w.k;
    INFO("kernel " << k << " stride " << w.stride << (w.padding == tensor::Padding::kSame ? " same" : " valid"));
    auto layer = tensor::MakeConv2D(in, filters, k, Activation::kRelu, {}, tensor::GemmConfig{}, w.stride, w.padding);
    const tensor::ActShape out = layer->output_shape();
    const int patch = k * k * in.c, rows = batch * out.h * out.w;
    auto kernel = Random(static_cast<std::size_t>(patch * filters), 13), bias = Random(filters, 14);
    std::vector<float> dkernel(kernel.size()), dbias(bias.size());
    std::vector<std::span<float>> ps{kernel, bias}, gs{dkernel, dbias};
    layer->Bind(ps, gs);
    layer->Reserve(batch);
    auto x = Random(static_cast<std::size_t>(batch * in.size()), 15);
    std::vector<float> want_out(static_cast<std::size_t>(batch * out.size()));
    layer->Forward(x.data(), want_out.data(), batch);
    auto g = Random(want_out.size(), 16);
    std::vector<float> gcopy = g, want_din(x.size());
    layer->Backward(x.data(), want_out.data(), gcopy.data(), want_din.data(), batch);

    // The device: CudaModel's conv2d sequence.
    const cuda::WindowGeometry geometry = cuda::Geometry(in, k, w.stride, w.padding);
    REQUIRE((geometry.oh == out.h && geometry.ow == out.w));
    Dev<float> dx(x), dk(kernel), db(bias), cols(static_cast<std::size_t>(rows) * patch), dout(want_out.size()), dg(g),
        ones(std::vector<float>(rows, 1.0f)), ddk(kernel.size()), ddb(bias.size()), ddin(x.size());
    cuda::Im2Col(dx.p, cols.p, batch, geometry, nullptr);
    REQUIRE(cuda::Gemm(cublas.h, false, false, rows, filters, patch, 1, cols.p, patch, dk.p, filters, 0, dout.p, filters) ==
            CUBLAS_STATUS_SUCCESS);
    cuda::BiasActivation(dout.p, db.p, rows, filters, Activation::kRelu, nullptr, nullptr);
    cuda::ActivationGrad(dout.p, dg.p, std::int64_t{rows} * filters, Activation::kRelu, nullptr, nullptr);
    REQUIRE(cuda::BiasGradient(cublas.h, dg.p, rows, filters, ones.p, ddb.p) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cuda::Gemm(cublas.h, true, false, patch, filters, rows, 1, cols.p, patch, dg.p, filters, 0, ddk.p, filters) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(cuda::Gemm(cublas.h, false, true, rows, patch, filters, 1, dg.p, filters, dk.p, filters, 0, cols.p, patch) ==
            CUBLAS_STATUS_SUCCESS);
    cuda::Col2Im(cols.p, ddin.p, batch, geometry, nullptr);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    ExpectNear(dout.Get(), want_out, 1e-5f * patch, 1e-5f);
    ExpectNear(ddb.Get(), dbias, 1e-5f * rows, 0);
    ExpectNear(ddk.Get(), dkernel, 1e-5f * rows, 0);
    ExpectNear(ddin.Get(), want_din, 1e-5f * filters * k * k, 0);
  }
}

TEST_CASE("cuda optimizers match the CPU's bit for bit, weight decay included", "[cuda]") {
  using Type = config::OptimizerSpec::Type;
  struct Case {
    const char* name;
    Type type;
    bool nesterov;
  };
  for (const Case& c : {Case{"sgd", Type::kSgd, false}, Case{"momentum", Type::kMomentum, false}, Case{"nesterov", Type::kMomentum, true},
                        Case{"adam", Type::kAdam, false}}) {
    INFO(c.name);
    config::OptimizerSpec spec;
    spec.type = c.type;
    spec.learning_rate = 0.01;
    spec.momentum = 0.9;
    spec.use_nesterov = c.nesterov;
    spec.weight_decay = 0.001;
    auto opt = optim::MakeOptimizer(spec);
    const std::size_t n = 10007;
    const std::vector<optim::Range> decayed{{0, 5000}};
    auto p = Random(n, 17);
    optim::OptimizerState state(*opt, n, decayed);
    Dev<float> dp(p), slots(n * static_cast<std::size_t>(std::max(opt->num_slots(), 1))), lr(std::size_t{1});
    std::vector<float> host = p;
    for (int t = 1; t <= 5; ++t) {
      auto g = Random(n, 100 + static_cast<std::uint64_t>(t));
      state.Apply(host, g);
      Dev<float> dg(g);
      cuda::AddWeightDecay(dg.p, dp.p, 5000, static_cast<float>(spec.weight_decay), nullptr);
      const double rate = opt->LearningRate(t - 1);
      float lr_f = static_cast<float>(rate);
      if (c.type == Type::kAdam)
        lr_f = static_cast<float>(rate * std::sqrt(1 - std::pow(spec.beta2, t)) / (1 - std::pow(spec.beta1, t)));
      REQUIRE(cudaMemcpy(lr.p, &lr_f, sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
      switch (c.type) {
        case Type::kSgd: cuda::SgdUpdate(dp.p, dg.p, n, lr.p, nullptr); break;
        case Type::kMomentum: cuda::MomentumUpdate(dp.p, dg.p, slots.p, n, 0.9f, c.nesterov, lr.p, nullptr); break;
        case Type::kAdam:
          cuda::AdamUpdate(dp.p, dg.p, slots.p, slots.p + n, n, static_cast<float>(spec.beta1), static_cast<float>(spec.beta2),
                           static_cast<float>(spec.epsilon), lr.p, nullptr);
          break;
      }
      REQUIRE(cudaGetLastError() == cudaSuccess);
    }
    ExpectEqualBits(dp.Get(), host);
    if (opt->num_slots() > 0) {
      std::vector<float> want_slots(state.slots().begin(), state.slots().end());
      ExpectEqualBits(slots.Get(), want_slots);
    }
  }
}


TEST_CASE("CudaModel gradients match Model's for dense, conv2d and pooling models", "[cuda]") {
  const std::string dense = R"([{"type": "dense", "units": 64, "activation": "elu"}, {"type": "dense", "units": 32, "activation": "tanh"},
                                {"type": "dense", "units": 16, "activation": "sigmoid"}, {"type": "dense", "units": 10}])";
  const std::string conv = R"([{"type": "conv2d", "filters": 6, "kernel_size": 3, "activation": "relu"}, {"type": "max_pool2d", "pool_size": 2},
                               {"type": "flatten"}, {"type": "dense", "units": 24, "activation": "relu"}, {"type": "dense", "units": 10}])";
  // Strided and padded convolutions, gelu and relu6, overlapping max and average pools, global pooling.
  const std::string strided = R"([{"type": "conv2d", "filters": 6, "kernel_size": 3, "strides": 2, "padding": "same", "activation": "gelu"},
                                  {"type": "max_pool2d", "pool_size": 3, "strides": 1, "padding": "same"},
                                  {"type": "conv2d", "filters": 8, "kernel_size": 2, "activation": "relu6"},
                                  {"type": "avg_pool2d", "pool_size": 2, "strides": 1},
                                  {"type": "global_avg_pool2d"}, {"type": "dense", "units": 16, "activation": "gelu"},
                                  {"type": "dense", "units": 10}])";
  for (const std::string& layers : {dense, conv, strided}) {
    INFO(layers);
    const int batch = 20;
    auto made = model::Model::Build(Layers(layers), {12, 12, 1}, 10, batch);
    REQUIRE(made.ok());
    model::Model& m = **made;
    m.Initialize(3);
    auto x = Random(static_cast<std::size_t>(batch * m.input_size()), 18, 0, 1);
    auto y = Labels(batch, 10, 19);
    const tensor::LossResult want = m.ComputeGradients(x.data(), y);
    std::vector<float> want_g(m.grads().begin(), m.grads().end());
    auto dev = cuda::CudaModel::Create(m, 0, 0.5);
    REQUIRE(dev.ok());
    std::vector<float> got_g(want_g.size());
    // Three times per batch size: the first full batch runs eagerly, the second is captured as a
    // graph and launched, the third replays it; a short batch runs eagerly.
    for (int run = 0; run < 3; ++run) {
      auto got = (*dev)->ComputeGradients(m.params(), x.data(), y, 7, got_g);
      REQUIRE(got.ok());
      CHECK(std::abs(got->loss - want.loss) <= 1e-5 * std::abs(want.loss));
      CHECK(got->correct == want.correct);
      ExpectNear(got_g, want_g, 1e-4f * MaxAbs(want_g), 0);
    }
    std::vector<ClassId> y_short(y.begin(), y.begin() + 7);
    const tensor::LossResult want_short = m.ComputeGradients(x.data(), y_short);
    std::vector<float> want_short_g(m.grads().begin(), m.grads().end());
    auto got_short = (*dev)->ComputeGradients(m.params(), x.data(), y_short, 7, got_g);
    REQUIRE(got_short.ok());
    CHECK(std::abs(got_short->loss - want_short.loss) <= 1e-5 * std::abs(want_short.loss));
    ExpectNear(got_g, want_short_g, 1e-4f * MaxAbs(want_short_g), 0);
  }
}

namespace {

// Every variable moved off its initial value (a gamma of ones, moving statistics of 0 and 1 would
// hide a mix-up of them); moving variances kept positive.
void Perturb(model::Model& m, std::uint64_t seed) {
  Rng rng(seed);
  for (const model::Variable& v : m.variables())
    for (std::int64_t i = 0; i < v.size; ++i) {
      float& p = m.params()[static_cast<std::size_t>(v.offset + i)];
      const auto u = static_cast<float>(rng.Uniform());
      p = v.name.ends_with("moving_variance") ? 0.5f + u : p + 0.4f * (u - 0.5f);
    }
}

// Inputs in [0, 1), with the categorical features (`columns`: place and vocabulary size) holding
// ids, some out of range (a raw value, which both sides read as id 0).
std::vector<float> Inputs(const model::Model& m, int batch, const std::vector<std::pair<int, int>>& columns, std::uint64_t seed) {
  std::vector<float> x = Random(static_cast<std::size_t>(batch * m.input_size()), seed, 0, 1);
  Rng rng(seed + 1);
  for (int n = 0; n < batch; ++n)
    for (auto [feature, vocabulary] : columns)
      x[static_cast<std::size_t>(n * m.input_size() + feature)] = static_cast<float>(rng.Below(static_cast<std::uint64_t>(vocabulary + 2)));
  return x;
}

}  // namespace

// Each model: a training step's loss, hits, every gradient and the moving statistics the step
// leaves, against Model's (eagerly, then captured and replayed, then a short batch), and the
// evaluation forward pass (moving statistics, dropout off) against Model::Forward.
TEST_CASE("CudaModel matches Model for batch norm, layer norm, residual blocks, depthwise convolutions and categorical columns", "[cuda]") {
  struct Case {
    std::string name, layers;
    tensor::ActShape input;
    std::vector<std::pair<int, int>> columns;  // categorical features: place, vocabulary size
  };
  const std::vector<Case> cases = {
      {"batch norm", R"([{"type": "conv2d", "filters": 5, "kernel_size": 3, "padding": "same"}, {"type": "batch_norm", "momentum": 0.9},
                         {"type": "max_pool2d", "pool_size": 2}, {"type": "flatten"}, {"type": "dense", "units": 16, "activation": "relu"},
                         {"type": "batch_norm", "center": false, "epsilon": 0.01}, {"type": "dense", "units": 10}])",
       {9, 9, 2}, {}},
      {"batch norm first, no scale", R"([{"type": "batch_norm", "scale": false}, {"type": "dense", "units": 10}])", {4, 4, 3}, {}},
      {"layer norm", R"([{"type": "conv2d", "filters": 6, "kernel_size": 3, "activation": "elu"}, {"type": "layer_norm"},
                         {"type": "flatten"}, {"type": "dense", "units": 40}, {"type": "layer_norm", "scale": false, "epsilon": 0.1},
                         {"type": "dense", "units": 10}])",
       {8, 8, 1}, {}},
      {"residual", R"([{"type": "conv2d", "filters": 6, "kernel_size": 3, "padding": "same", "activation": "relu"},
                       {"type": "residual", "activation": "relu", "layers": [
                          {"type": "conv2d", "filters": 6, "kernel_size": 3, "padding": "same", "activation": "relu"},
                          {"type": "batch_norm"}, {"type": "conv2d", "filters": 6, "kernel_size": 3, "padding": "same"}]},
                       {"type": "residual", "activation": "gelu", "layers": [
                          {"type": "conv2d", "filters": 8, "kernel_size": 3, "strides": 2, "padding": "same", "activation": "relu6"},
                          {"type": "dropout", "rate": 0}, {"type": "batch_norm", "scale": false}]},
                       {"type": "global_avg_pool2d"}, {"type": "dense", "units": 12, "activation": "tanh"},
                       {"type": "residual", "layers": [{"type": "dense", "units": 12, "activation": "relu"}, {"type": "layer_norm"}]},
                       {"type": "dense", "units": 10}])",
       {9, 9, 1}, {}},
      {"depthwise", R"([{"type": "depthwise_conv2d", "kernel_size": 3, "depth_multiplier": 2, "strides": 2, "padding": "same", "activation": "relu"},
                        {"type": "depthwise_conv2d", "kernel_size": 2, "use_bias": false, "activation": "tanh"},
                        {"type": "depthwise_conv2d", "kernel_size": 3, "padding": "same", "activation": "gelu"},
                        {"type": "flatten"}, {"type": "dense", "units": 10}])",
       {9, 8, 3}, {}},
      {"embedding", R"([{"type": "embedding", "output_dim": 4}, {"type": "dense", "units": 16, "activation": "relu"}, {"type": "dense", "units": 10}])",
       {1, 1, 6}, {{1, 3}, {4, 7}}},
      {"one_hot", R"([{"type": "one_hot"}, {"type": "dense", "units": 10}])", {1, 1, 5}, {{0, 2}, {3, 4}}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const int batch = 24;
    std::vector<data::CategoricalColumn> categorical;
    for (auto [feature, vocabulary] : c.columns) {
      data::CategoricalColumn col{.feature = feature, .name = fmt::format("c{}", feature)};
      for (int v = 0; v < vocabulary; ++v) col.vocabulary.push_back(fmt::format("v{}", v));
      categorical.push_back(std::move(col));
    }
    auto made = model::Model::Build(Layers(c.layers), c.input, 10, batch, {}, categorical);
    INFO((made.ok() ? std::string() : made.status().message()));
    REQUIRE(made.ok());
    model::Model& m = **made;
    m.Initialize(3);
    Perturb(m, 4);
    const std::vector<float> p0(m.params().begin(), m.params().end());
    const std::vector<float> x = Inputs(m, batch, c.columns, 18);
    const std::vector<ClassId> y = Labels(batch, 10, 19);
    auto dev = cuda::CudaModel::Create(m, 0, 0.5);
    INFO((dev.ok() ? std::string() : dev.status().message()));
    REQUIRE(dev.ok());
    for (int rows : {batch, batch, batch, 7}) {
      INFO("rows " << rows);
      std::copy(p0.begin(), p0.end(), m.params().begin());
      const std::vector<ClassId> yb(y.begin(), y.begin() + rows);
      const tensor::LossResult want = m.ComputeGradients(x.data(), yb);
      const std::vector<float> want_g(m.grads().begin(), m.grads().end()), want_p(m.params().begin(), m.params().end());
      std::vector<float> got_p = p0, got_g(want_g.size());
      auto got = (*dev)->ComputeGradients(got_p, x.data(), yb, 7, got_g);
      REQUIRE(got.ok());
      CHECK(std::abs(got->loss - want.loss) <= 1e-5 * std::abs(want.loss));
      CHECK(got->correct == want.correct);
      ExpectNear(got_g, want_g, 1e-4f * MaxAbs(want_g), 0);
      // The moving statistics moved as the CPU moves them; every other variable as it came in.
      ExpectNear(got_p, want_p, 1e-6f, 1e-5f);
    }
    std::copy(p0.begin(), p0.end(), m.params().begin());
    const float* want_out = m.Forward(x.data(), batch);
    const std::vector<float> want_o(want_out, want_out + static_cast<std::ptrdiff_t>(batch) * 10);
    std::vector<float> got_o(want_o.size());
    REQUIRE((*dev)->UploadParams(m.params()).ok());
    REQUIRE((*dev)->Forward(x.data(), batch, got_o).ok());
    ExpectNear(got_o, want_o, 1e-4f * std::max(1.0f, MaxAbs(want_o)), 0);
  }
}

TEST_CASE("CudaModel trains a batch-norm residual net on the device as the host does, moving statistics included", "[cuda]") {
  const int batch = 16;
  auto made = model::Model::Build(Layers(R"([{"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same", "activation": "relu"},
      {"type": "residual", "activation": "relu", "layers": [{"type": "conv2d", "filters": 8, "kernel_size": 3, "strides": 2, "padding": "same"},
                                                            {"type": "batch_norm", "momentum": 0.8}]},
      {"type": "global_avg_pool2d"}, {"type": "dense", "units": 10}])"),
                                  {8, 8, 1}, 10, batch);
  REQUIRE(made.ok());
  model::Model& m = **made;
  m.Initialize(6);
  config::OptimizerSpec spec;
  spec.type = config::OptimizerSpec::Type::kMomentum;
  spec.learning_rate = 0.05;
  spec.momentum = 0.9;
  auto opt = optim::MakeOptimizer(spec);
  auto dev = cuda::CudaModel::Create(m, 0, 0.5, opt.get());
  REQUIRE(dev.ok());
  REQUIRE((*dev)->UploadParams(m.params()).ok());
  optim::OptimizerState state(*opt, m.params().size(), optim::DecayedRanges(model::VariableRuns(m)));
  for (int step = 0; step < 8; ++step) {
    auto x = Random(static_cast<std::size_t>(batch * m.input_size()), 400 + static_cast<std::uint64_t>(step), 0, 1);
    auto y = Labels(batch, 10, 500 + static_cast<std::uint64_t>(step));
    const tensor::LossResult want = m.ComputeGradients(x.data(), y);
    state.Apply(m.params(), m.grads());
    auto got = (*dev)->TrainStep(x.data(), y, 1);
    REQUIRE(got.ok());
    CHECK(std::abs(got->loss - want.loss) <= 1e-4 * std::abs(want.loss));
  }
  std::vector<float> got_p(m.params().size());
  REQUIRE((*dev)->DownloadParams(got_p).ok());
  const std::vector<float> want_p(m.params().begin(), m.params().end());
  ExpectNear(got_p, want_p, 1e-4f * MaxAbs(want_p), 0);
  for (const model::Variable& v : m.variables()) {
    if (v.trainable) continue;
    INFO(v.name);
    const auto at = static_cast<std::size_t>(v.offset);
    const bool variance = v.name.ends_with("moving_variance");
    CHECK(want_p[at] != (variance ? 1.0f : 0.0f));  // moved by the steps
    ExpectNear(std::vector<float>(got_p.begin() + at, got_p.begin() + at + v.size),
               std::vector<float>(want_p.begin() + at, want_p.begin() + at + v.size), 1e-5f, 1e-4f);
  }
}

TEST_CASE("CudaModel gradients are the same bits run to run, dropout included", "[cuda]") {
  const int batch = 32;
  auto made = model::Model::Build(Layers(R"([{"type": "dense", "units": 50, "activation": "relu"}, {"type": "dropout", "rate": 0.5},
                                             {"type": "dense", "units": 10}])"),
                                  {8, 8, 1}, 10, batch);
  REQUIRE(made.ok());
  model::Model& m = **made;
  m.Initialize(4);
  auto x = Random(static_cast<std::size_t>(batch * m.input_size()), 20, 0, 1);
  auto y = Labels(batch, 10, 21);
  std::vector<float> g1(m.params().size()), g2(g1.size()), g3(g1.size());
  auto a = cuda::CudaModel::Create(m, 0, 0.5), b = cuda::CudaModel::Create(m, 0, 0.5);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE((*a)->ComputeGradients(m.params(), x.data(), y, 99, g1).ok());
  REQUIRE((*b)->ComputeGradients(m.params(), x.data(), y, 99, g2).ok());
  REQUIRE((*a)->ComputeGradients(m.params(), x.data(), y, 100, g3).ok());
  ExpectEqualBits(g2, g1);
  CHECK(std::memcmp(g1.data(), g3.data(), sizeof(float) * g1.size()) != 0);  // another seed, other masks
}

TEST_CASE("CudaModel trains on the device as OptimizerState does on the host", "[cuda]") {
  const int batch = 25;
  auto made = model::Model::Build(Layers(R"([{"type": "dense", "units": 40, "activation": "elu"}, {"type": "dense", "units": 10}])"),
                                  {6, 6, 1}, 10, batch);
  REQUIRE(made.ok());
  model::Model& m = **made;
  m.Initialize(5);
  config::OptimizerSpec spec;
  // Momentum: parameter differences stay proportional to the gradients' rounding differences
  // (Adam's m / sqrt(v) can turn a rounding-sized gradient into a rate-sized step).
  spec.type = config::OptimizerSpec::Type::kMomentum;
  spec.learning_rate = 0.05;
  spec.momentum = 0.9;
  spec.weight_decay = 0.0005;
  auto opt = optim::MakeOptimizer(spec);
  auto dev = cuda::CudaModel::Create(m, 0, 0.5, opt.get());
  REQUIRE(dev.ok());
  REQUIRE((*dev)->UploadParams(m.params()).ok());
  optim::OptimizerState state(*opt, m.params().size(), optim::DecayedRanges(model::VariableRuns(m)));
  for (int step = 0; step < 10; ++step) {
    auto x = Random(static_cast<std::size_t>(batch * m.input_size()), 200 + static_cast<std::uint64_t>(step), 0, 1);
    auto y = Labels(batch, 10, 300 + static_cast<std::uint64_t>(step));
    const tensor::LossResult want = m.ComputeGradients(x.data(), y);
    state.Apply(m.params(), m.grads());
    auto got = (*dev)->TrainStep(x.data(), y, 1);
    REQUIRE(got.ok());
    CHECK(std::abs(got->loss - want.loss) <= 1e-4 * std::abs(want.loss));
  }
  CHECK((*dev)->updates() == 10);
  std::vector<float> got_p(m.params().size());
  REQUIRE((*dev)->DownloadParams(got_p).ok());
  std::vector<float> want_p(m.params().begin(), m.params().end());
  ExpectNear(got_p, want_p, 1e-4f * MaxAbs(want_p), 0);
  // The slots come back as OptimizerState lays them out (what an epoch checkpoint saves) ...
  std::vector<float> got_s(state.slots().size());
  REQUIRE((*dev)->DownloadSlots(got_s).ok());
  std::vector<float> want_s(state.slots().begin(), state.slots().end());
  ExpectNear(got_s, want_s, 1e-4f * MaxAbs(want_s), 0);
  // ... and a run resumed from the host's state goes on as the host does.
  auto resumed = cuda::CudaModel::Create(m, 0, 0.5, opt.get());
  REQUIRE(resumed.ok());
  REQUIRE((*resumed)->UploadParams(m.params()).ok());
  CHECK((*resumed)->UploadState(std::vector<float>(3), 10).code() == Code::kInvalidArgument);
  REQUIRE((*resumed)->UploadState(state.slots(), state.updates()).ok());
  for (int step = 10; step < 15; ++step) {
    auto x = Random(static_cast<std::size_t>(batch * m.input_size()), 200 + static_cast<std::uint64_t>(step), 0, 1);
    auto y = Labels(batch, 10, 300 + static_cast<std::uint64_t>(step));
    m.ComputeGradients(x.data(), y);
    state.Apply(m.params(), m.grads());
    REQUIRE((*resumed)->TrainStep(x.data(), y, 1).ok());
  }
  CHECK((*resumed)->updates() == 15);
  REQUIRE((*resumed)->DownloadParams(got_p).ok());
  want_p.assign(m.params().begin(), m.params().end());
  ExpectNear(got_p, want_p, 1e-4f * MaxAbs(want_p), 0);
}

TEST_CASE("CudaModel refuses a model past gpu_memory_fraction, naming the need and the limit", "[cuda]") {
  auto made = model::Model::Build(Layers(R"([{"type": "dense", "units": 10}])"), {28, 28, 1}, 10, 100);
  REQUIRE(made.ok());
  auto dev = cuda::CudaModel::Create(**made, 0, 1e-9);
  REQUIRE(!dev.ok());
  CHECK(dev.status().code() == Code::kFailedPrecondition);
  CHECK(dev.status().message().find("past the limit of") != std::string::npos);
  CHECK(dev.status().message().find("gpu_memory_fraction") != std::string::npos);
}

namespace {

// The test-set accuracy of a standalone run of `job_json` (its final parameters, read back).
double StandaloneAccuracy(const std::string& job_json, const std::filesystem::path& params_file) {
  auto job = config::ParseJobSpec(job_json, "test job");
  REQUIRE(job.ok());
  EventWriter events(stdout, "standalone", false);
  train::StandaloneOptions options;
  options.params_out = params_file.string();
  const Status s = train::RunStandalone(*job, events, options);
  INFO(s.ToString());
  REQUIRE(s.ok());
  auto data = data::LoadMnist(job->data.folder);
  REQUIRE(data.ok());
  auto made = model::Model::Build(job->model, {data->test.height, data->test.width, data->test.channels}, 10, job->batch_size);
  REQUIRE(made.ok());
  std::FILE* f = std::fopen(params_file.c_str(), "rb");
  REQUIRE(f != nullptr);
  const std::size_t read = std::fread((*made)->params().data(), sizeof(float), (*made)->params().size(), f);
  std::fclose(f);
  REQUIRE(read == (*made)->params().size());
  return model::Evaluate(**made, data->test);
}

}  // namespace

// The seed's job (`model`, `batch`, `optimizer`) for 2 epochs on the CPU and on cuda:0: the test
// accuracies within 0.3 points (rounding differs, so the runs are not the same bits).
void ExpectGpuMatchesCpu(const std::string& model, int batch, const std::string& optimizer, double at_least) {
  const char* dir = std::getenv("TFD_MNIST_DIR");
  REQUIRE(dir != nullptr);
  const std::string base = fmt::format(R"("model": "{}", "data": "{}", "epochs": 2, "batch_size": {}, "seed": 1, "log_every_steps": 0,
      "optimizer": {})", model, dir, batch, optimizer);
  const auto tmp = std::filesystem::temp_directory_path();
  const double cpu = StandaloneAccuracy("{" + base + R"(, "device": "cpu"})", tmp / ("tfd_cuda_train_cpu_" + model + ".bin"));
  const double gpu = StandaloneAccuracy("{" + base + R"(, "device": "cuda:0"})", tmp / ("tfd_cuda_train_gpu_" + model + ".bin"));
  INFO(model << ": cpu " << cpu << " gpu " << gpu);
  CHECK(cpu > at_least);
  CHECK(std::abs(gpu - cpu) <= 0.003);
}

TEST_CASE("dnn on the GPU reaches the CPU's accuracy within 0.3 points after 2 epochs", "[train]") {
  ExpectGpuMatchesCpu("dnn", 50, R"({"type": "momentum", "learning_rate": 0.01, "momentum": 0.95})", 0.95);
}

TEST_CASE("cnn on the GPU reaches the CPU's accuracy within 0.3 points after 2 epochs", "[train]") {
  ExpectGpuMatchesCpu("cnn", 64, R"({"type": "sgd", "learning_rate": 0.001})", 0.5);
}

bool Mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(library) != std::string::npos) return true;
  return false;
}

// Needs no device: the toolkit's libraries only.
TEST_CASE("cuBLAS is opened on first use: not mapped before, every entry point resolved after", "[load]") {
  REQUIRE_FALSE(Mapped("libcublas"));  // not linked: no process pays for it at start
  auto api = cuda::LoadCublas();
  INFO((api.ok() ? std::string() : api.status().message()));
  REQUIRE(api.ok());
  CHECK(Mapped("libcublas.so"));
  CHECK(Mapped("libcublasLt.so"));
  for (const void* fn : {reinterpret_cast<const void*>((*api)->create), reinterpret_cast<const void*>((*api)->destroy),
                         reinterpret_cast<const void*>((*api)->set_stream), reinterpret_cast<const void*>((*api)->set_workspace),
                         reinterpret_cast<const void*>((*api)->sgemm), reinterpret_cast<const void*>((*api)->sgemv),
                         reinterpret_cast<const void*>((*api)->status_string)})
    CHECK(fn != nullptr);
  CHECK(std::string((*api)->status_string(CUBLAS_STATUS_NOT_INITIALIZED)).find("not initialized") != std::string::npos);
  auto again = cuda::LoadCublas();
  REQUIRE(again.ok());
  CHECK(*again == *api);
}

// Exits 77 (skipped) without a usable device ([load] needs none); the [train] case also without MNIST.
int main(int argc, char** argv) {
  const bool load_only = argc == 2 && std::string(argv[1]) == "[load]";
  if (Status s = cuda::CheckDevice(0); !s.ok() && !load_only) {
    std::printf("skipped: %s\n", s.message().c_str());
    return 77;
  }
  for (int i = 1; i < argc; ++i) {
    const char* dir = std::getenv("TFD_MNIST_DIR");
    if (std::strstr(argv[i], "[train]") != nullptr &&
        (dir == nullptr || !std::filesystem::exists(std::filesystem::path(dir) / "train-images-idx3-ubyte"))) {
      std::printf("skipped: no MNIST files (set TFD_MNIST_DIR)\n");
      return 77;
    }
  }
  return tfd::testing::RunCatchSession(argc, argv);
}
