// The passes of a training batch norm (normalization.cc) over `rows` rows of `c` channels (a row is
// an NHWC pixel or a dense layer's sample): the statistics' sums, the normalisation, backprop's sums
// and the input's gradient.
//
// A channel's sum is taken in float over blocks of 128 rows (two partials per block, of alternate
// rows), and each block's sum is added into a double, the blocks in a fixed order: the order depends
// on rows and c alone, so a result has the same bits on every run. Each pass is compiled for the
// x86-64 baseline, AVX2 (x86-64-v3) and AVX-512 (x86-64-v4), without FMA contraction
// (common/tensor/CMakeLists.txt); the vector lanes hold side-by-side channels, so every level makes
// the same operations in the same order per channel and gives the same bits: replicas of a
// synchronised batch norm agree on any mix of CPUs. The layer runs the widest level the CPU has;
// the unit tests run every level the CPU has against the baseline.
#pragma once

#include <cstdint>

namespace tfd::tensor {

enum class CpuLevel { kBaseline, kAvx2, kAvx512 };
// Whether this CPU runs `level`'s code (kBaseline: always).
bool CpuHas(CpuLevel level);
CpuLevel WidestCpuLevel();
const char* CpuLevelName(CpuLevel level);  // "baseline", "avx2", "avx512"

// x, g, y, din: rows x c (null when rows is 0); per-channel arrays: c. Outputs do not alias inputs.
struct BatchNormPasses {
  // Each pass runs over the rows (blocks of rows for a sum) in the direction opposite to the pass
  // before it, so it starts on the rows still in cache: one replica's layer runs shifted_sums
  // (ascending), scale_shift (descending), then grad_sums (ascending) and input_grad (descending),
  // the next step's shifted_sums starting where input_grad ended; a synchronised one, sum
  // (descending) and sum_squared_deviations (ascending) before scale_shift.
  //
  // acc[ch] += the sum over rows of x[r][ch]; descending.
  void (*sum)(const float* x, std::int64_t rows, int c, double* acc);
  // acc[ch] += the sum of (x[r][ch] - mean[ch])²; ascending.
  void (*sum_squared_deviations)(const float* x, std::int64_t rows, int c, const float* mean, double* acc);
  // With d = x[r][ch] - shift[ch]: s1[ch] += the sum of d, s2[ch] += the sum of d²; ascending. The
  // mean and variance in one pass, as long as the shift is near the mean (normalization.cc).
  void (*shifted_sums)(const float* x, std::int64_t rows, int c, const float* shift, double* s1, double* s2);
  // y[r][ch] = x[r][ch] * scale[ch] + shift[ch]; descending (the next layer reads y from its start).
  // The last `keep` floats written (y's first) are stored as usual, the others stream to memory
  // around the caches (BatchNormKeepFloats); the bits are the same either way.
  void (*scale_shift)(const float* x, std::int64_t rows, int c, const float* scale, const float* shift, float* y,
                      std::int64_t keep);
  // With xhat = (x - mean) * inv_std: sg[ch] += the sum of g, sgx[ch] += the sum of g * xhat; ascending.
  void (*grad_sums)(const float* x, const float* g, std::int64_t rows, int c, const float* mean, const float* inv_std,
                    double* sg, double* sgx);
  // din[r][ch] = scale (g - mean_g - (x - mean) inv_std mean_gx), each factor [ch]; descending; the
  // last `keep` floats written (din's first) stored as usual, the others streamed, as scale_shift's.
  void (*input_grad)(const float* x, const float* g, std::int64_t rows, int c, const float* mean, const float* inv_std,
                     const float* scale, const float* mean_g, const float* mean_gx, float* din, std::int64_t keep);
};

// The `keep` a training layer passes to scale_shift and input_grad for a tensor of `floats`: all of
// them (plain stores) while its four tensors (x, y, g, din) fit in the core's L2 cache together,
// none (every store streamed) once they do not, where a plain store would read each line it
// overwrites from further away and evict lines a later pass reads.
std::int64_t BatchNormKeepFloats(std::int64_t floats);

// `level`'s passes; CpuHas(level) must hold.
const BatchNormPasses& BatchNormPassesFor(CpuLevel level);

// The rows of `rows` whose mean a replica's one-pass statistics shift by (normalization.cc): row i
// of min(rows, kBatchNormShiftRows), one in each of as many equal strides, each at its own offset
// in its stride (so not the same pixel of every image when a stride is whole images).
inline constexpr std::int64_t kBatchNormShiftRows = 16;
inline std::int64_t BatchNormShiftRow(std::int64_t i, std::int64_t rows) {
  const std::int64_t stride = rows / (rows < kBatchNormShiftRows ? rows : kBatchNormShiftRows);
  return i * stride + (i * 131) % stride;
}

}  // namespace tfd::tensor
