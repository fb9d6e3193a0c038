// Gradient compression's pieces without sockets (common/compress): the 16-bit codecs against values
// worked out by hand, top-k selection and its error feedback over two steps by hand, and PowerSGD's
// Gram-Schmidt and one step of two workers against a reference computed here with plain loops.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "common/compress/half.h"
#include "common/compress/powersgd.h"
#include "common/compress/topk.h"

namespace tfd::compress {
namespace {

std::vector<std::uint16_t> Encode(Half h, const std::vector<float>& v) {
  std::vector<std::uint16_t> out(v.size());
  EncodeHalf(h, v, out);
  return out;
}

std::vector<float> Decode(Half h, const std::vector<std::uint16_t>& b) {
  std::vector<float> out(b.size());
  DecodeHalf(h, std::as_bytes(std::span<const std::uint16_t>(b)), out);
  return out;
}

TEST_CASE("fp16 encodes to IEEE binary16 bits, rounds to nearest even and round-trips what it can hold", "[unit][compress]") {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: the even one (1) wins; 1 + 3 * 2^-11 goes up to 1 + 2^-9.
  const std::vector<float> v{1.0f, -2.5f, 65504.0f, 0.1f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 70000.0f, 0.0f};
  const std::vector<std::uint16_t> bits = Encode(Half::kFp16, v);
  CHECK(bits == std::vector<std::uint16_t>{0x3c00, 0xc100, 0x7bff, 0x2e66, 0x3c00, 0x3c02, 0x7c00, 0x0000});
  const std::vector<float> back = Decode(Half::kFp16, bits);
  CHECK(back[0] == 1.0f);
  CHECK(back[1] == -2.5f);
  CHECK(back[2] == 65504.0f);
  CHECK(back[3] == 0.0999755859375f);  // 0x2e66: 1638 / 16384
  CHECK(back[4] == 1.0f);
  CHECK(back[5] == 1.0f + 0x1p-9f);
  CHECK(std::isinf(back[6]));  // beyond fp16's range
  // What decodes encodes to the same bits again.
  CHECK(Encode(Half::kFp16, back) == bits);
}

TEST_CASE("bf16 keeps float32's exponent with 7 mantissa bits, rounding to nearest even", "[unit][compress]") {
  const std::vector<float> v{1.0f, -2.5f, 65504.0f, 1e6f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 70000.0f};
  const std::vector<std::uint16_t> bits = Encode(Half::kBf16, v);
  CHECK(bits == std::vector<std::uint16_t>{0x3f80, 0xc020, 0x4780, 0x4974, 0x3f80, 0x3f82, 0x4789});
  const std::vector<float> back = Decode(Half::kBf16, bits);
  CHECK(back[2] == 65536.0f);
  CHECK(back[3] == 999424.0f);
  CHECK(back[5] == 1.0f + 0x1p-6f);
  CHECK(back[6] == 70144.0f);  // within range, unlike fp16
  std::vector<float> rounded = v;
  RoundHalf(Half::kBf16, rounded);
  CHECK(rounded == back);
}

TEST_CASE("a 16-bit value is added to a float32 sum in float32", "[unit][compress]") {
  // 2048 + 1 is 2049 in float32; fp16 (spacing 2 at 2048) would have lost the 1.
  std::vector<float> sum{2048.0f, 0.5f, 0.0f};
  const std::vector<std::uint16_t> in = Encode(Half::kFp16, {1.0f, 0.25f, 1e-4f});
  AddHalf(Half::kFp16, std::as_bytes(std::span<const std::uint16_t>(in)), sum);
  CHECK(sum[0] == 2049.0f);
  CHECK(sum[1] == 0.75f);
  CHECK(sum[2] == Decode(Half::kFp16, {in[2]})[0]);
  CHECK(sum[2] == 0x1.a38p-14f);  // the value that travelled is fp16's 1e-4 (0x068e), not float32's
  CHECK(sum[2] != 1e-4f);
}

TEST_CASE("top-k keeps ceil(ratio * size) values per tensor, the largest magnitudes, lower index on ties", "[unit][compress]") {
  CHECK(TopKCount(10, 0.01) == 1);
  CHECK(TopKCount(0, 0.5) == 0);
  CHECK(TopKCount(5, 0.4) == 2);
  CHECK(TopKCount(3, 0.4) == 2);  // ceil(1.2)
  CHECK(TopKCount(3, 1.0) == 3);
  CHECK(SelectTopK(std::vector<float>{1, -1, 1}, 2) == std::vector<std::uint32_t>{0, 1});
  CHECK(SelectTopK(std::vector<float>{0.1f, -0.5f, 0.3f, 0.45f, -0.2f}, 3) == std::vector<std::uint32_t>{1, 2, 3});
  CHECK(SelectTopK(std::vector<float>{0.1f, -0.5f}, 0).empty());
}

TEST_CASE("top-k selection keeps the k largest magnitudes, ties to the lower index, as sorting every index would", "[unit][compress]") {
  // The definition, by a full sort: larger |v| first, then the lower index; the first k, by index.
  auto reference = [](const std::vector<float>& v, std::size_t k) {
    std::vector<std::uint32_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0u);
    std::sort(idx.begin(), idx.end(), [&](std::uint32_t a, std::uint32_t b) {
      const float x = std::fabs(v[a]), y = std::fabs(v[b]);
      return x > y || (x == y && a < b);
    });
    idx.resize(k);
    std::sort(idx.begin(), idx.end());
    return idx;
  };
  std::mt19937 gen(3);
  std::vector<std::uint32_t> scratch, out;
  int cases = 0;
  for (std::size_t n : {1, 2, 7, 100, 1000, 4097}) {
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<float> v(n);
      // Distinct values; few values (ties of both signs, -0 and +0); tiny values among denormals.
      std::uniform_real_distribution<float> dist(-1, 1);
      std::uniform_int_distribution<int> few(-3, 3);
      for (float& x : v) x = kind == 0 ? dist(gen) : kind == 1 ? (few(gen) == 0 ? -0.0f : 0.5f * static_cast<float>(few(gen))) : dist(gen) * 1e-39f;
      for (std::size_t k : {std::size_t{0}, std::size_t{1}, n / 3, n - 1, n}) {
        INFO("n " << n << " kind " << kind << " k " << k);
        SelectTopK(v, k, &scratch, &out);
        CHECK(out == reference(v, k));
        CHECK(SelectTopK(v, k) == out);
        ++cases;
      }
    }
  }
  CHECK(cases == 6 * 3 * 5);
}

TEST_CASE("top-k error feedback: what a step drops is added to the next step's gradient", "[unit][compress]") {
  // Two tensors, [0, 5) and [5, 8), ratio 0.4: two values kept of each.
  TopK topk({{0, 5}, {5, 3}}, 8, 0.4);
  REQUIRE(topk.kept() == 4);
  std::vector<std::uint32_t> idx(4);
  std::vector<float> val(4);
  const std::vector<float> g1{0.1f, -0.5f, 0.3f, 0.5f, -0.2f, 2.0f, -3.0f, 1.0f};
  CHECK(topk.Compress(g1, 0, idx, val) == 4);
  CHECK(idx == std::vector<std::uint32_t>{1, 3, 5, 6});
  CHECK(val == std::vector<float>{-0.5f, 0.5f, 2.0f, -3.0f});
  CHECK(std::vector<float>(topk.residual().begin(), topk.residual().end()) == std::vector<float>{0.1f, 0, 0.3f, 0, -0.2f, 0, 0, 1.0f});
  // Step 2: residual + g2 = {0.35, 0.1, 0.3, -0.1, -0.1 | 0.5, 0.5, 0.25}.
  const std::vector<float> g2{0.25f, 0.1f, 0.0f, -0.1f, 0.1f, 0.5f, 0.5f, -0.75f};
  CHECK(topk.Compress(g2, 1, idx, val) == 4);
  CHECK(idx == std::vector<std::uint32_t>{0, 2, 5, 6});
  CHECK(val == std::vector<float>{0.1f + 0.25f, 0.3f, 0.5f, 0.5f});
  CHECK(std::vector<float>(topk.residual().begin(), topk.residual().end()) ==
        std::vector<float>{0, 0.1f, 0, -0.1f, -0.2f + 0.1f, 0, 0, 1.0f - 0.75f});
  // The kept pairs as the dense gradient a ps or a worker adds them into.
  std::vector<float> dense(8, 0.0f);
  AddSparse(idx, val, dense);
  CHECK(dense == std::vector<float>{0.35f, 0, 0.3f, 0, 0, 0.5f, 0.5f, 0});
}

TEST_CASE("top-k warm-up: 1/4, 1/16, 1/64 of each tensor in equal thirds of the warm-up, then the ratio", "[unit][compress]") {
  // Ratio 0.01 over tensors of 1000 and 7 values; 30 warm-up steps: three stages (1/256 < 0.01).
  TopK topk({{0, 1000}, {1000, 7}}, 1007, 0.01, /*warmup_steps=*/30);
  CHECK(topk.warmup_stages() == 3);
  CHECK(topk.KeptAt(0) == 250 + 2);  // ceil(1000 / 4), ceil(7 / 4)
  CHECK(topk.KeptAt(9) == 250 + 2);
  CHECK(topk.KeptAt(10) == 63 + 1);  // ceil(1000 / 16)
  CHECK(topk.KeptAt(20) == 16 + 1);  // ceil(1000 / 64)
  CHECK(topk.KeptAt(29) == 16 + 1);
  CHECK(topk.KeptAt(30) == 10 + 1);  // the ratio's: ceil(10), at least 1
  CHECK(topk.kept() == 11);
  CHECK(topk.max_kept() == 252);
  // What a warm-up step keeps: the largest magnitudes of the first tensor, the rest in the residual.
  std::vector<float> g(1007);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 1000) * (i % 2 == 0 ? 1.0f : -1.0f);
  std::vector<std::uint32_t> idx(topk.max_kept());
  std::vector<float> val(topk.max_kept());
  REQUIRE(topk.Compress(g, 20, idx, val) == 17);
  for (std::size_t j = 0; j < 16; ++j) CHECK(idx[j] == 984 + j);  // |v| = 984 .. 999
  CHECK(idx[16] == 1006);  // the second tensor's largest, 6
  float kept_sum = 0, residual_sum = 0;
  for (std::size_t j = 0; j < 17; ++j) kept_sum += std::fabs(val[j]);
  for (float r : topk.residual()) residual_sum += std::fabs(r);
  float total = 0;
  for (float v : g) total += std::fabs(v);
  CHECK(kept_sum + residual_sum == total);  // nothing lost: small integers add exactly
  // No warm-up above 1/4, and none without steps.
  CHECK(TopK({{0, 100}}, 100, 0.5, 30).warmup_stages() == 0);
  CHECK(TopK({{0, 100}}, 100, 0.01, 0).KeptAt(0) == 1);
}

TEST_CASE("Gram-Schmidt orthonormalises columns in order and leaves a zero column zero", "[unit][compress]") {
  // Columns (3, 4, 0) and (1, 2, 5): the first becomes (0.6, 0.8, 0); the second loses 2.2 times it,
  // (-0.32, 0.24, 5), and is divided by sqrt(25.16).
  std::vector<float> a{3, 1, 4, 2, 0, 5};
  Orthogonalize(a, 3, 2);
  const double norm = std::sqrt(25.16);
  const std::vector<double> want{0.6, -0.32 / norm, 0.8, 0.24 / norm, 0.0, 5 / norm};
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(want[i]).margin(1e-6));
  double dot = 0;
  for (std::size_t i = 0; i < 3; ++i) dot += static_cast<double>(a[i * 2]) * a[i * 2 + 1];
  CHECK(std::fabs(dot) < 1e-6);
  std::vector<float> z{1, 0, 0, 0};
  Orthogonalize(z, 2, 2);
  CHECK(z == std::vector<float>{1, 0, 0, 0});
}

TEST_CASE("PowerSGD splits matrices worth compressing from tensors that travel whole", "[unit][compress]") {
  std::vector<MatrixRun> m;
  std::vector<TensorRun> w;
  const std::vector<TensorRun> runs{{0, 156800}, {156800, 200}, {157000, 4}, {157004, 2880}};
  const std::vector<std::vector<std::int64_t>> shapes{{784, 200}, {200}, {2, 2}, {3, 3, 1, 320}};
  SplitForPowerSgd(runs, shapes, 2, &m, &w);
  REQUIRE(m.size() == 2);
  CHECK((m[0].offset == 0 && m[0].rows == 784 && m[0].cols == 200));
  CHECK((m[1].offset == 157004 && m[1].rows == 9 && m[1].cols == 320));
  REQUIRE(w.size() == 2);  // the bias, and the 2 x 2 kernel ((2 + 2) * 2 >= 4)
  CHECK((w[0].offset == 156800 && w[1].offset == 157000));
}

// The reference: plain loops over the same data, in double.
struct Mat {
  std::size_t rows, cols;
  std::vector<double> v;
  double& at(std::size_t i, std::size_t j) { return v[i * cols + j]; }
};

TEST_CASE("one PowerSGD step of two workers matches a reference, and the next starts from its Q and error", "[unit][compress]") {
  // A 4 x 3 kernel at [0, 12) (rank 1: (4 + 3) < 12, compressed) and a bias of 3 at [12, 15).
  const std::size_t n = 4, m = 3, total = 15;
  auto make = [&] { return PowerSgd({{0, n, m}}, {{12, 3}}, total, /*rank=*/1, /*seed=*/7); };
  PowerSgd w0 = make(), w1 = make();
  REQUIRE((w0.p_size() == 4 && w0.q_size() == 3 && w0.whole_size() == 3));
  const std::vector<float> q0(w0.q().begin(), w0.q().end());
  CHECK(q0 == std::vector<float>(w1.q().begin(), w1.q().end()));  // the same seed, the same start on every worker
  std::vector<std::vector<float>> g(2, std::vector<float>(total));
  for (std::size_t i = 0; i < total; ++i) {
    g[0][i] = 0.1f * static_cast<float>(i) - 0.5f;
    g[1][i] = 0.05f * static_cast<float>((i * 7) % 11) - 0.2f;
  }
  // The workers' step, with the ring's sums done here.
  std::vector<std::vector<float>> p(2, std::vector<float>(4)), whole(2, std::vector<float>(3)), q(2, std::vector<float>(3));
  w0.ComputeP(g[0], true, p[0], whole[0]);
  w1.ComputeP(g[1], true, p[1], whole[1]);
  std::vector<float> p_sum(4), whole_sum(3), q_sum(3);
  for (std::size_t i = 0; i < 4; ++i) p_sum[i] = p[0][i] + p[1][i];
  for (std::size_t i = 0; i < 3; ++i) whole_sum[i] = whole[0][i] + whole[1][i];
  std::vector<float> p_a = p_sum, p_b = p_sum;
  w0.ComputeQ(p_a, q[0]);
  w1.ComputeQ(p_b, q[1]);
  CHECK(p_a == p_b);
  for (std::size_t i = 0; i < 3; ++i) q_sum[i] = q[0][i] + q[1][i];
  std::vector<float> out0(total), out1(total);
  w0.Decompress(p_a, q_sum, whole_sum, 2.0f, out0);
  w1.Decompress(p_b, q_sum, whole_sum, 2.0f, out1);
  CHECK(out0 == out1);

  // The reference: P_w = G_w Q0, P = sum, P /= |P| (rank 1), Q = sum G_w^T P, approx = P Q^T.
  Mat pr{n, 1, std::vector<double>(n, 0.0)};
  for (std::size_t w = 0; w < 2; ++w)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < m; ++j) pr.at(i, 0) += static_cast<double>(g[w][i * m + j]) * q0[j];
  double norm = 0;
  for (double x : pr.v) norm += x * x;
  for (double& x : pr.v) x /= std::sqrt(norm);
  std::vector<double> qr(m, 0.0);
  for (std::size_t w = 0; w < 2; ++w)
    for (std::size_t j = 0; j < m; ++j)
      for (std::size_t i = 0; i < n; ++i) qr[j] += static_cast<double>(g[w][i * m + j]) * pr.at(i, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      const double approx = pr.at(i, 0) * qr[j];
      CHECK(out0[i * m + j] == Approx(approx).epsilon(1e-5).margin(1e-7));
      // e_w = G_w - approx / 2
      CHECK(w0.error()[i * m + j] == Approx(g[0][i * m + j] - approx / 2).epsilon(1e-5).margin(1e-6));
      CHECK(w1.error()[i * m + j] == Approx(g[1][i * m + j] - approx / 2).epsilon(1e-5).margin(1e-6));
    }
  for (std::size_t j = 0; j < m; ++j) CHECK(w0.q()[j] == Approx(qr[j]).epsilon(1e-5));  // the next step's warm start
  for (std::size_t i = 12; i < total; ++i) CHECK(out0[i] == g[0][i] + g[1][i]);            // the bias, whole
  // The next step adds the error: with a zero gradient, P = e Q.
  const std::vector<float> e(w0.error().begin(), w0.error().end()), qn(w0.q().begin(), w0.q().end());
  std::vector<float> p2(4), whole2(3);
  w0.ComputeP(std::vector<float>(total, 0.0f), true, p2, whole2);
  for (std::size_t i = 0; i < n; ++i) {
    double s = 0;
    for (std::size_t j = 0; j < m; ++j) s += static_cast<double>(e[i * m + j]) * qn[j];
    CHECK(p2[i] == Approx(s).epsilon(1e-5).margin(1e-7));
  }
  CHECK(whole2 == std::vector<float>(3, 0.0f));
}

}  // namespace
}  // namespace tfd::compress
