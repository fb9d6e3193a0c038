// Batch norm's passes (batch_norm_passes.h): every instruction-set level this CPU has gives the
// baseline's bits, on channel counts with and without whole tiles and row counts around a block;
// the writing passes give the same bits streamed or stored, wherever their output starts; and the
// blocked float sums stay within float rounding of sums taken in double.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "common/tensor/batch_norm_passes.h"

namespace tfd::tensor::batch_norm_passes_test {
namespace {

std::vector<float> Normal(std::size_t n, std::uint32_t seed, float mean, float stddev) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(mean, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// Every output of every pass of `level` on one input.
struct Outputs {
  std::vector<double> sum, squares, shifted, shifted_squares, sg, sgx;
  std::vector<float> y, din;
  bool operator==(const Outputs&) const = default;
};

Outputs RunPasses(CpuLevel level, std::int64_t rows, int c) {
  const auto n = static_cast<std::size_t>(rows * c);
  const std::vector<float> x = Normal(n, 1, 3.0f, 2.0f), g = Normal(n, 2, 0.0f, 1.0f);
  const std::vector<float> mean = Normal(c, 3, 3.0f, 0.1f), inv_std = Normal(c, 4, 0.5f, 0.05f), scale = Normal(c, 5, 1.0f, 0.2f),
                           shift = Normal(c, 6, 0.0f, 0.2f), mean_g = Normal(c, 7, 0.0f, 0.1f), mean_gx = Normal(c, 8, 0.0f, 0.1f);
  const BatchNormPasses& p = BatchNormPassesFor(level);
  Outputs o{std::vector<double>(c, 0.5), std::vector<double>(c, 0.25), std::vector<double>(c, -0.5), std::vector<double>(c, 0.75),
            std::vector<double>(c), std::vector<double>(c), std::vector<float>(n), std::vector<float>(n)};
  p.sum(x.data(), rows, c, o.sum.data());
  p.sum_squared_deviations(x.data(), rows, c, mean.data(), o.squares.data());
  p.shifted_sums(x.data(), rows, c, mean.data(), o.shifted.data(), o.shifted_squares.data());
  p.scale_shift(x.data(), rows, c, scale.data(), shift.data(), o.y.data(), rows * c / 2);
  p.grad_sums(x.data(), g.data(), rows, c, mean.data(), inv_std.data(), o.sg.data(), o.sgx.data());
  p.input_grad(x.data(), g.data(), rows, c, mean.data(), inv_std.data(), scale.data(), mean_g.data(), mean_gx.data(), o.din.data(), rows * c / 2);
  return o;
}

// scale_shift's y and input_grad's din written from `offset` floats past a vector boundary, with
// `keep` floats stored as usual and the rest streamed.
struct Written {
  std::vector<float> y, din;
};
Written RunWriting(CpuLevel level, std::int64_t rows, int c, int offset, std::int64_t keep) {
  const auto n = static_cast<std::size_t>(rows * c);
  const std::vector<float> x = Normal(n, 11, 1.0f, 2.0f), g = Normal(n, 12, 0.0f, 1.0f);
  const std::vector<float> mean = Normal(c, 13, 1.0f, 0.1f), inv_std = Normal(c, 14, 0.5f, 0.05f), scale = Normal(c, 15, 1.0f, 0.2f),
                           shift = Normal(c, 16, 0.0f, 0.2f), mean_g = Normal(c, 17, 0.0f, 0.1f), mean_gx = Normal(c, 18, 0.0f, 0.1f);
  alignas(64) static float y[64 + 300 * 512], din[64 + 300 * 512];
  REQUIRE(offset + n <= 64 + 300 * 512);
  std::fill(std::begin(y), std::end(y), std::nanf(""));  // so a store left out shows, whatever ran before
  std::fill(std::begin(din), std::end(din), std::nanf(""));
  const BatchNormPasses& p = BatchNormPassesFor(level);
  p.scale_shift(x.data(), rows, c, scale.data(), shift.data(), y + offset, keep);
  p.input_grad(x.data(), g.data(), rows, c, mean.data(), inv_std.data(), scale.data(), mean_g.data(), mean_gx.data(), din + offset, keep);
  Written w{{y + offset, y + offset + n}, {din + offset, din + offset + n}};
  // The definitions, so a channel mix-up the levels would share fails: the first element off.
  std::int64_t off = -1;
  for (std::size_t i = 0; i < n && off < 0; ++i) {
    const std::size_t k = i % c;
    const float want_y = x[i] * scale[k] + shift[k];
    const float want_din = scale[k] * (g[i] - mean_g[k] - (x[i] - mean[k]) * inv_std[k] * mean_gx[k]);
    if (std::abs(w.y[i] - want_y) > 1e-5f || std::abs(w.din[i] - want_din) > 1e-5f) off = static_cast<std::int64_t>(i);
  }
  REQUIRE(off == -1);
  return w;
}

}  // namespace

TEST_CASE("batch_norm's writing passes give the same bits streamed or stored, from any alignment", "[unit][norm]") {
  for (CpuLevel level : {CpuLevel::kBaseline, CpuLevel::kAvx2, CpuLevel::kAvx512}) {
    if (!CpuHas(level)) continue;
    for (int c : {1, 3, 16, 17, 32, 512})
      for (std::int64_t rows : {1, 2, 7, 300})
        for (int offset : {0, 1, 3, 8, 15}) {
          const std::int64_t total = rows * c;
          INFO(CpuLevelName(level) << ": " << rows << " rows of " << c << " channels at " << offset << " floats past a boundary");
          const Written plain = RunWriting(level, rows, c, offset, total);
          for (std::int64_t keep : {std::int64_t{0}, total / 3, total - 1}) {
            const Written w = RunWriting(level, rows, c, offset, keep);
            REQUIRE(w.y == plain.y);
            REQUIRE(w.din == plain.din);
          }
          if (level != CpuLevel::kBaseline) {
            const Written base = RunWriting(CpuLevel::kBaseline, rows, c, offset, 0);
            REQUIRE(base.y == plain.y);
            REQUIRE(base.din == plain.din);
          }
        }
  }
}

TEST_CASE("batch_norm streams its writes once its four tensors outgrow the L2 cache", "[unit][norm]") {
  CHECK(BatchNormKeepFloats(1000) == 1000);                     // 16 KB in all: stored as usual
  CHECK(BatchNormKeepFloats(std::int64_t{1} << 28) == 0);       // 4 GiB in all: streamed
  const std::int64_t big = std::int64_t{1} << 28;
  std::int64_t last_kept = 0;  // the switch is one size: every tensor below it kept, every one above it streamed
  for (std::int64_t floats = 1024; floats < big; floats *= 2)
    if (BatchNormKeepFloats(floats) == floats) last_kept = floats;
    else CHECK(floats > last_kept);
  CHECK(last_kept >= 1024);
}

TEST_CASE("batch_norm passes give the baseline's bits on every instruction-set level this CPU has", "[unit][norm]") {
  REQUIRE(CpuHas(CpuLevel::kBaseline));
  CHECK(CpuHas(WidestCpuLevel()));
  int levels = 0;
  for (CpuLevel level : {CpuLevel::kAvx2, CpuLevel::kAvx512}) {
    if (!CpuHas(level)) continue;
    ++levels;
    for (int c : {1, 3, 16, 17, 32, 40, 64, 512})
      for (std::int64_t rows : {0, 1, 2, 7, 127, 128, 129, 300}) {
        INFO(CpuLevelName(level) << ": " << rows << " rows of " << c << " channels");
        REQUIRE(RunPasses(level, rows, c) == RunPasses(CpuLevel::kBaseline, rows, c));
      }
  }
  WARN("levels checked against the baseline on this CPU: " << levels);
}

TEST_CASE("batch_norm passes' sums are within float rounding of sums in double", "[unit][norm]") {
  const std::int64_t rows = 1000;
  for (int c : {3, 16, 40}) {
    const auto n = static_cast<std::size_t>(rows * c);
    const std::vector<float> x = Normal(n, 9, 100.0f, 1.0f), g = Normal(n, 10, 0.5f, 1.0f);
    std::vector<double> want_sum(c), want_sq(c), want_sg(c), want_sgx(c), want_shifted(c), want_shifted_sq(c);
    std::vector<float> pivot(c);
    for (int k = 0; k < c; ++k) pivot[k] = 99.5f + 0.25f * static_cast<float>(k % 5);
    std::vector<float> mean(c), inv_std(c);
    for (std::size_t i = 0; i < n; ++i) want_sum[i % c] += x[i];
    for (int k = 0; k < c; ++k) mean[k] = static_cast<float>(want_sum[k] / rows);
    for (std::size_t i = 0; i < n; ++i) want_sq[i % c] += (double{x[i]} - mean[i % c]) * (double{x[i]} - mean[i % c]);
    for (int k = 0; k < c; ++k) inv_std[k] = static_cast<float>(1 / std::sqrt(want_sq[k] / rows));
    for (std::size_t i = 0; i < n; ++i) {
      const double d = double{x[i]} - pivot[i % c];
      want_shifted[i % c] += d, want_shifted_sq[i % c] += d * d;
    }
    for (std::size_t i = 0; i < n; ++i) {
      want_sg[i % c] += g[i];
      want_sgx[i % c] += double{g[i]} * ((double{x[i]} - mean[i % c]) * inv_std[i % c]);
    }
    const BatchNormPasses& p = BatchNormPassesFor(WidestCpuLevel());
    std::vector<double> sum(c), sq(c), sg(c), sgx(c), shifted(c), shifted_sq(c);
    p.sum(x.data(), rows, c, sum.data());
    p.shifted_sums(x.data(), rows, c, pivot.data(), shifted.data(), shifted_sq.data());
    p.sum_squared_deviations(x.data(), rows, c, mean.data(), sq.data());
    p.grad_sums(x.data(), g.data(), rows, c, mean.data(), inv_std.data(), sg.data(), sgx.data());
    for (int k = 0; k < c; ++k) {
      INFO(c << " channels, channel " << k);
      CHECK(sum[k] == Approx(want_sum[k]).epsilon(1e-6));
      CHECK(sq[k] == Approx(want_sq[k]).epsilon(1e-5));
      CHECK(shifted[k] == Approx(want_shifted[k]).margin(1e-2));
      CHECK(shifted_sq[k] == Approx(want_shifted_sq[k]).epsilon(1e-5));
      CHECK(sg[k] == Approx(want_sg[k]).margin(1e-3));
      CHECK(sgx[k] == Approx(want_sgx[k]).margin(1e-3));
    }
  }
}

}  // namespace tfd::tensor::batch_norm_passes_test
