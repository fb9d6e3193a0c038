#include "common/tensor/elementwise.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include <Eigen/Core>

#include "common/base/check.h"

namespace tfd::tensor {
namespace {

// One clone per machine level; the loader picks the widest the CPU has.
#define TFD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

// Cephes' expf: x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-6 polynomial, 2^n put into the
// exponent bits. Rounding to n uses the 1.5 * 2^23 trick rather than floorf, which the baseline
// (SSE2) cannot vectorise. Branch-free, so loops over it vectorise (with -fno-trapping-math: CMakeLists.txt).
inline float Exp(float x) {
  x = std::min(std::max(x, -87.3f), 88.3f);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  const float fn = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = (x - fn * 0.693359375f) + fn * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const auto scale = std::bit_cast<float>((static_cast<std::int32_t>(fn) + 127) << 23);
  return p * scale;
}

// y[c] = act(y[c] + b[c]) for one row; inlined into BiasRows' clones, where its loops vectorise.
[[gnu::always_inline]] inline void BiasRow(float* __restrict y, const float* __restrict b, std::int64_t cols, Activation act) {
  switch (act) {
    case Activation::kNone:
      for (std::int64_t c = 0; c < cols; ++c) y[c] += b[c];
      break;
    case Activation::kRelu:
      for (std::int64_t c = 0; c < cols; ++c) y[c] = std::max(y[c] + b[c], 0.0f);
      break;
    case Activation::kSigmoid:
      for (std::int64_t c = 0; c < cols; ++c) y[c] = 1.0f / (1.0f + Exp(-(y[c] + b[c])));
      break;
    case Activation::kElu:
      // exp(x) - 1 as TensorFlow's Elu computes it (not expm1), on min(x, 0) so no lane overflows.
      for (std::int64_t c = 0; c < cols; ++c) {
        const float x = y[c] + b[c];
        const float e = Exp(std::min(x, 0.0f)) - 1.0f;
        y[c] = x > 0.0f ? x : e;
      }
      break;
    case Activation::kTanh:  // Eigen's vectorised tanh, in TanhRow
    case Activation::kGelu:  // GeluRow, from the pre-activation
      for (std::int64_t c = 0; c < cols; ++c) y[c] += b[c];
      break;
    case Activation::kRelu6:
      for (std::int64_t c = 0; c < cols; ++c) y[c] = std::min(std::max(y[c] + b[c], 0.0f), 6.0f);
      break;
  }
}

// All rows in one call: a convolution's rows are short (one per output pixel, a column per
// filter), and a call per row through the clones' dispatch cost more than its row.
TFD_CLONES void BiasRows(float* __restrict y, const float* __restrict b, std::int64_t rows, std::int64_t cols, Activation act) {
  for (std::int64_t r = 0; r < rows; ++r) BiasRow(y + r * cols, b, cols, act);
}

// gelu(x) = x Phi(x) = x (1 + erf(x / sqrt 2)) / 2, Keras' exact form (approximate=False). Scalar
// erf: gelu is rare in these networks, and std::erf is correctly rounded to a few ulp.
void GeluRow(const float* __restrict x, float* __restrict y, std::int64_t cols) {
  for (std::int64_t c = 0; c < cols; ++c) y[c] = 0.5f * x[c] * (1.0f + std::erf(x[c] * 0.70710678118654752f));
}

// gelu'(x) = Phi(x) + x phi(x).
void GeluGradRow(const float* __restrict x, float* __restrict d, std::int64_t cols) {
  for (std::int64_t c = 0; c < cols; ++c) {
    const float cdf = 0.5f * (1.0f + std::erf(x[c] * 0.70710678118654752f));
    const float pdf = 0.39894228040143268f * std::exp(-0.5f * x[c] * x[c]);
    d[c] *= cdf + x[c] * pdf;
  }
}

void TanhRow(float* y, std::int64_t cols) {
  Eigen::Map<Eigen::ArrayXf> v(y, cols);
  v = v.tanh();
}

TFD_CLONES void GradRow(const float* __restrict y, float* __restrict d, std::int64_t cols, Activation act) {
  switch (act) {
    case Activation::kNone: break;
    case Activation::kRelu:
      for (std::int64_t c = 0; c < cols; ++c) d[c] = y[c] > 0.0f ? d[c] : 0.0f;
      break;
    case Activation::kSigmoid:
      for (std::int64_t c = 0; c < cols; ++c) d[c] *= y[c] * (1.0f - y[c]);
      break;
    case Activation::kElu:  // elu'(x) = elu(x) + 1 for x <= 0
      for (std::int64_t c = 0; c < cols; ++c) d[c] = y[c] > 0.0f ? d[c] : d[c] * (y[c] + 1.0f);
      break;
    case Activation::kTanh:
      for (std::int64_t c = 0; c < cols; ++c) d[c] *= 1.0f - y[c] * y[c];
      break;
    case Activation::kRelu6:
      for (std::int64_t c = 0; c < cols; ++c) d[c] = y[c] > 0.0f && y[c] < 6.0f ? d[c] : 0.0f;
      break;
    case Activation::kGelu: break;  // GeluGradRow, from the pre-activation
  }
}

TFD_CLONES void AddRow(const float* __restrict d, float* __restrict sum, std::int64_t cols) {
  for (std::int64_t c = 0; c < cols; ++c) sum[c] += d[c];
}

TFD_CLONES void ExpLoop(const float* __restrict x, float* __restrict out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = Exp(x[i]);
}

}  // namespace

bool NeedsPreActivation(Activation act) { return act == Activation::kGelu; }

void BiasActivation(float* y, const float* bias, std::int64_t rows, std::int64_t cols, Activation act, float* pre) {
  TFD_CHECK(!NeedsPreActivation(act) || pre != nullptr);
  if (act != Activation::kTanh && act != Activation::kGelu) return BiasRows(y, bias, rows, cols, act);
  for (std::int64_t r = 0; r < rows; ++r) {  // row by row, so each row is still in L1 for its second pass
    BiasRows(y + r * cols, bias, 1, cols, act);
    if (act == Activation::kTanh) TanhRow(y + r * cols, cols);
    if (act == Activation::kGelu) {
      std::copy(y + r * cols, y + (r + 1) * cols, pre + r * cols);
      GeluRow(pre + r * cols, y + r * cols, cols);
    }
  }
}

void ActivationGradBias(const float* y, float* dy, std::int64_t rows, std::int64_t cols, Activation act,
                        float* dbias, const float* pre) {
  TFD_CHECK(!NeedsPreActivation(act) || pre != nullptr);
  if (dbias != nullptr) std::fill(dbias, dbias + cols, 0.0f);
  // Row by row, so the row just made is summed while it is in L1.
  for (std::int64_t r = 0; r < rows; ++r) {
    GradRow(y + r * cols, dy + r * cols, cols, act);
    if (act == Activation::kGelu) GeluGradRow(pre + r * cols, dy + r * cols, cols);
    if (dbias != nullptr) AddRow(dy + r * cols, dbias, cols);
  }
}

void ExpArray(const float* x, float* out, std::int64_t n) { ExpLoop(x, out, n); }

}  // namespace tfd::tensor
