// The element-wise kernels and every GEMM backend against plain double-precision twins.
//
// Tolerances: the vectorised exp is Cephes' (documented below 2 ulp); 4 ulp of relative error
// (4.8e-7) leaves room for the FMA contraction of the AVX2/AVX-512 clones. Activations built on it
// are checked to 1e-6 absolute, since their values lie in (-1, inf) and are used as float. GEMMs
// sum in different orders per backend, so they are checked to 1e-5 relative of the sum of |terms|.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/tensor/elementwise.h"
#include "common/tensor/gemm.h"

namespace tfd::tensor {
namespace {

std::vector<float> Uniform(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

double Reference(Activation act, double x) {
  switch (act) {
    case Activation::kNone: return x;
    case Activation::kRelu: return x > 0 ? x : 0;
    case Activation::kSigmoid: return 1 / (1 + std::exp(-x));
    case Activation::kElu: return x > 0 ? x : std::exp(x) - 1;
    case Activation::kTanh: return std::tanh(x);
    case Activation::kRelu6: return std::min(std::max(x, 0.0), 6.0);
    case Activation::kGelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  }
  return 0;
}

TEST_CASE("ExpArray is within 4 ulp of exp over float's range", "[elementwise]") {
  std::vector<float> x = Uniform(20000, -87.0f, 88.0f, 1);
  for (float v : {0.0f, -0.0f, 1e-8f, -1e-8f, 0.5f, -0.5f, 1.0f, 88.0f, -87.0f}) x.push_back(v);
  std::vector<float> out(x.size());
  ExpArray(x.data(), out.data(), static_cast<std::int64_t>(x.size()));
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::abs(out[i] - want) / want);
  }
  CHECK(worst <= 4 * std::numeric_limits<float>::epsilon());
}

TEST_CASE("ExpArray clamps far inputs and keeps NaN", "[elementwise]") {
  const std::vector<float> x = {-1000.0f, 1000.0f, std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> out(x.size());
  ExpArray(x.data(), out.data(), 3);
  CHECK(out[0] >= 0.0f);
  CHECK(out[0] < 1e-37f);
  CHECK(std::isfinite(out[1]));
  CHECK(out[1] > 1e38f);
  CHECK(std::isnan(out[2]));
}

TEST_CASE("BiasActivation matches its double twin for every activation", "[elementwise]") {
  const int rows = 7, cols = 37;  // odd sizes: vector bodies and scalar tails both run
  const std::vector<float> x = Uniform(rows * cols, -6.0f, 6.0f, 2), bias = Uniform(cols, -1.0f, 1.0f, 3);
  for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kSigmoid, Activation::kElu,
                         Activation::kTanh, Activation::kRelu6, Activation::kGelu}) {
    INFO(config::ActivationName(act));
    std::vector<float> y = x, pre(x.size());
    BiasActivation(y.data(), bias.data(), rows, cols, act, pre.data());
    double worst = 0;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        const double want = Reference(act, static_cast<double>(x[r * cols + c] + bias[c]));
        worst = std::max(worst, std::abs(y[r * cols + c] - want) / std::max(1.0, std::abs(want)));
      }
    CHECK(worst <= 1e-6);
  }
}

TEST_CASE("relu6 passes no gradient where it clamps, at either end", "[elementwise]") {
  std::vector<float> y = {-1.0f, 3.0f, 7.5f, 6.0f};
  const std::vector<float> zero(4, 0.0f);
  BiasActivation(y.data(), zero.data(), 1, 4, Activation::kRelu6);
  CHECK(y == std::vector<float>{0.0f, 3.0f, 6.0f, 6.0f});
  std::vector<float> dy = {1.0f, 1.0f, 1.0f, 1.0f};
  ActivationGradBias(y.data(), dy.data(), 1, 4, Activation::kRelu6, nullptr);
  CHECK(dy == std::vector<float>{0.0f, 1.0f, 0.0f, 0.0f});
}

TEST_CASE("BiasActivation keeps a NaN (a diverged step stays visible)", "[elementwise]") {
  for (Activation act : {Activation::kNone, Activation::kSigmoid, Activation::kElu, Activation::kTanh}) {
    std::vector<float> y = {std::numeric_limits<float>::quiet_NaN(), 1.0f};
    const std::vector<float> bias = {0.0f, 0.0f};
    BiasActivation(y.data(), bias.data(), 1, 2, act);
    CHECK(std::isnan(y[0]));
  }
}

TEST_CASE("ActivationGradBias gives the derivative and the bias gradient in one pass", "[elementwise]") {
  const int rows = 9, cols = 21;
  const std::vector<float> x = Uniform(rows * cols, -3.0f, 3.0f, 4), zero(cols, 0.0f);
  const std::vector<float> g = Uniform(rows * cols, -1.0f, 1.0f, 5);
  for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kSigmoid, Activation::kElu,
                         Activation::kTanh, Activation::kRelu6, Activation::kGelu}) {
    INFO(config::ActivationName(act));
    std::vector<float> y = x, dy = g, dbias(cols, 7.0f), pre(x.size());  // dbias is overwritten, not added to
    BiasActivation(y.data(), zero.data(), rows, cols, act, pre.data());
    ActivationGradBias(y.data(), dy.data(), rows, cols, act, dbias.data(), pre.data());
    std::vector<double> sums(cols, 0.0);
    double worst = 0;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        const double xv = x[r * cols + c], h = 1e-4;
        const double slope = (Reference(act, xv + h) - Reference(act, xv - h)) / (2 * h);
        const double want = act == Activation::kRelu ? (xv > 0 ? g[r * cols + c] : 0.0) : g[r * cols + c] * slope;
        worst = std::max(worst, std::abs(dy[r * cols + c] - want));
        sums[c] += dy[r * cols + c];
      }
    CHECK(worst <= 1e-5);
    for (int c = 0; c < cols; ++c) CHECK(dbias[c] == Approx(sums[c]).margin(1e-5));
    std::vector<float> dy2 = g;
    ActivationGradBias(y.data(), dy2.data(), rows, cols, act, nullptr, pre.data());  // no bias: the same dy
    CHECK(dy2 == dy);
  }
}

TEST_CASE("every GEMM backend computes op(A) op(B) with alpha and beta", "[elementwise][gemm]") {
  const int m = 13, n = 11, k = 17;
  const std::vector<float> a = Uniform(m * k, -1, 1, 6), b = Uniform(k * n, -1, 1, 7), c0 = Uniform(m * n, -1, 1, 8);
  for (std::string_view backend : GemmBackends()) {
    GemmConfig config;
    REQUIRE(SetGemmBackend(backend, &config).ok());
    REQUIRE(GemmBackendName(config.backend) == backend);
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO(backend << " trans_a=" << ta << " trans_b=" << tb);
        std::vector<float> c = c0;
        Gemm(config, ta, tb, m, n, k, 0.5f, a.data(), ta ? m : k, b.data(), tb ? k : n, 2.0f, c.data(), n);
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < n; ++j) {
            double sum = 0, mag = 0;
            for (int p = 0; p < k; ++p) {
              const double t = static_cast<double>(ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
              sum += t;
              mag += std::abs(t);
            }
            const double want = 0.5 * sum + 2.0 * c0[i * n + j];
            CHECK(std::abs(c[i * n + j] - want) <= 1e-5 * (mag + 2 * std::abs(c0[i * n + j])));
          }
      }
  }
}

TEST_CASE("SetGemmBackend refuses a backend the build lacks, naming the ones it has", "[elementwise][gemm]") {
  GemmConfig config{.backend = GemmBackend::kEigen, .threads = 3};
  const Status s = SetGemmBackend("cublas-someday", &config);
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("cublas-someday") != std::string::npos);
  CHECK(s.message().find("eigen") != std::string::npos);
  CHECK(GemmBackends().back() == "eigen");
  CHECK(config.backend == GemmBackend::kEigen);  // unchanged
  CHECK(config.threads == 3);
}

// The product of one fixed 64 x 48 x 500 GEMM on `config`, as bits.
std::vector<float> FixedProduct(const GemmConfig& config) {
  const int m = 64, n = 48, k = 500;
  const std::vector<float> a = Uniform(m * k, -1, 1, 21), b = Uniform(k * n, -1, 1, 22);
  std::vector<float> c(m * n);
  Gemm(config, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  return c;
}

TEST_CASE("GEMM configs in one process each run on their own backend", "[elementwise][gemm]") {
  // Each backend's product alone, then all of them interleaved twice: every call gives its own
  // backend's bits. The backends sum in different orders, so their bits differ; a Gemm that ran on
  // another config's backend would show it.
  const std::vector<std::string_view> backends = GemmBackends();
  std::vector<GemmConfig> configs(backends.size());
  std::vector<std::vector<float>> alone;
  for (std::size_t i = 0; i < backends.size(); ++i) {
    REQUIRE(SetGemmBackend(backends[i], &configs[i]).ok());
    alone.push_back(FixedProduct(configs[i]));
  }
  if (backends.size() > 1) REQUIRE(alone.front() != alone.back());  // else this test could not tell them apart
  for (int round = 0; round < 2; ++round)
    for (std::size_t i = 0; i < backends.size(); ++i) {
      INFO("round " << round << ": " << backends[i]);
      CHECK(FixedProduct(configs[i]) == alone[i]);
    }
}

TEST_CASE("GEMM configs in one process each run on their own thread count", "[elementwise][gemm]") {
  // Two configs on one backend, 2 threads and 1: each Gemm applies its own count. OpenBLAS's count
  // is the process's, so a Gemm on another thread changes it, and the next Gemm of the first
  // config must set it back. Eigen follows OpenMP's count, which the build has with oneDNN only;
  // without it Eigen runs on the calling thread alone.
  const std::vector<std::string_view> backends = GemmBackends();
  const bool openmp = std::find(backends.begin(), backends.end(), "onednn") != backends.end();
  for (std::string_view name : backends) {
    INFO(name);
    const int most = name == "eigen" && !openmp ? 1 : 2;
    GemmConfig two{.threads = 2}, one{.threads = 1};
    REQUIRE(SetGemmBackend(name, &two).ok());
    REQUIRE(SetGemmBackend(name, &one).ok());
    (void)FixedProduct(two);
    CHECK(CurrentGemmThreads(two.backend) == most);
    (void)FixedProduct(one);
    CHECK(CurrentGemmThreads(one.backend) == 1);
    (void)FixedProduct(two);
    CHECK(CurrentGemmThreads(two.backend) == most);
    std::thread other([&] { (void)FixedProduct(one); });
    other.join();
    CHECK(CurrentGemmThreads(two.backend) == (name == "openblas" ? 1 : most));  // OpenBLAS's is the process's
    (void)FixedProduct(two);
    CHECK(CurrentGemmThreads(two.backend) == most);
  }
}

}  // namespace
}  // namespace tfd::tensor
