#include "common/tensor/batch_norm_passes.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include <unistd.h>

#include "common/base/check.h"

namespace tfd::tensor {
namespace {

// A row's channels run kTile at a time, then one at a time for the rest, with the same operations
// in the same order per channel either way. A tile is kTile / N vectors of N floats: N is 4 on the
// baseline (SSE), 8 on AVX2, 16 on AVX-512, so each level keeps a tile's sums in its registers.
constexpr int kTile = 16;
template <int N>
struct Lanes {
  typedef float V __attribute__((vector_size(N * sizeof(float))));
  static constexpr int kParts = kTile / N;
};

// A descending pass that writes asks for the lines it will write this far ahead: the CPU's own
// prefetchers follow descending reads but fetched descending writes' lines late (a third slower).
constexpr int kLineFloats = 16;
constexpr int kPrefetchFloats = 256;

// Rows per block: a channel's partial sums in float cover this many rows at most.
constexpr std::int64_t kBlockRows = 128;

struct Block {
  std::int64_t begin, end;
};
// The i-th of `count` blocks over `rows` rows, counted from the first block or the last.
struct Blocks {
  explicit Blocks(std::int64_t rows) : rows(rows), count((rows + kBlockRows - 1) / kBlockRows) {}
  Block At(std::int64_t i, bool descending) const {
    const std::int64_t b = descending ? count - 1 - i : i;
    return {b * kBlockRows, std::min(rows, (b + 1) * kBlockRows)};
  }
  std::int64_t rows, count;
};

template <typename V>
[[gnu::always_inline]] inline void Load(V* v, const float* p) {
  std::memcpy(v, p, sizeof(V));
}
template <typename V>
[[gnu::always_inline]] inline void Store(float* p, const V* v) {
  std::memcpy(p, v, sizeof(V));
}

// The sums of one block, in float: alternate rows into two partials (two chains of additions in
// flight), then their sum added into the channel's double. The tile (kTile channels at x) and the
// single-channel code make the same additions per channel.
template <int N>
[[gnu::always_inline]] inline void SumTile(const float* x, Block blk, int c, double* acc) {
  using L = Lanes<N>;
  typename L::V even[L::kParts] = {}, odd[L::kParts] = {}, a, b;
  std::int64_t r = blk.begin;
  for (; r + 1 < blk.end; r += 2)
    for (int p = 0; p < L::kParts; ++p) {
      Load(&a, x + r * c + p * N), Load(&b, x + (r + 1) * c + p * N);
      even[p] += a, odd[p] += b;
    }
  if (r < blk.end)
    for (int p = 0; p < L::kParts; ++p) Load(&a, x + r * c + p * N), even[p] += a;
  for (int p = 0; p < L::kParts; ++p) {
    const typename L::V s = even[p] + odd[p];
    for (int j = 0; j < N; ++j) acc[p * N + j] += static_cast<double>(s[j]);
  }
}
[[gnu::always_inline]] inline void SumOne(const float* x, Block blk, int c, double* acc) {
  float even = 0, odd = 0;
  std::int64_t r = blk.begin;
  for (; r + 1 < blk.end; r += 2) even += x[r * c], odd += x[(r + 1) * c];
  if (r < blk.end) even += x[r * c];
  *acc += static_cast<double>(even + odd);
}

template <int N>
[[gnu::always_inline]] inline void SquaredDeviationsTile(const float* x, Block blk, int c, const float* mean, double* acc) {
  using L = Lanes<N>;
  typename L::V m[L::kParts], even[L::kParts] = {}, odd[L::kParts] = {}, a, b;
  for (int p = 0; p < L::kParts; ++p) Load(&m[p], mean + p * N);
  std::int64_t r = blk.begin;
  for (; r + 1 < blk.end; r += 2)
    for (int p = 0; p < L::kParts; ++p) {
      Load(&a, x + r * c + p * N), Load(&b, x + (r + 1) * c + p * N);
      a -= m[p], b -= m[p];
      even[p] += a * a, odd[p] += b * b;
    }
  if (r < blk.end)
    for (int p = 0; p < L::kParts; ++p) Load(&a, x + r * c + p * N), a -= m[p], even[p] += a * a;
  for (int p = 0; p < L::kParts; ++p) {
    const typename L::V s = even[p] + odd[p];
    for (int j = 0; j < N; ++j) acc[p * N + j] += static_cast<double>(s[j]);
  }
}
[[gnu::always_inline]] inline void SquaredDeviationsOne(const float* x, Block blk, int c, float mean, double* acc) {
  float even = 0, odd = 0;
  std::int64_t r = blk.begin;
  for (; r + 1 < blk.end; r += 2) {
    const float a = x[r * c] - mean, b = x[(r + 1) * c] - mean;
    even += a * a, odd += b * b;
  }
  if (r < blk.end) {
    const float a = x[r * c] - mean;
    even += a * a;
  }
  *acc += static_cast<double>(even + odd);
}

// The block's sums of d = x - shift and of d², each in two partials of alternate rows.
template <int N>
[[gnu::always_inline]] inline void ShiftedSumsTile(const float* x, Block blk, int c, const float* shift, double* s1, double* s2) {
  using L = Lanes<N>;
  typename L::V k[L::kParts], even[L::kParts] = {}, odd[L::kParts] = {}, even2[L::kParts] = {}, odd2[L::kParts] = {}, a, b;
  for (int p = 0; p < L::kParts; ++p) Load(&k[p], shift + p * N);
  std::int64_t r = blk.begin;
  for (; r + 1 < blk.end; r += 2)
    for (int p = 0; p < L::kParts; ++p) {
      Load(&a, x + r * c + p * N), Load(&b, x + (r + 1) * c + p * N);
      a -= k[p], b -= k[p];
      even[p] += a, odd[p] += b;
      even2[p] += a * a, odd2[p] += b * b;
    }
  if (r < blk.end)
    for (int p = 0; p < L::kParts; ++p) Load(&a, x + r * c + p * N), a -= k[p], even[p] += a, even2[p] += a * a;
  for (int p = 0; p < L::kParts; ++p) {
    const typename L::V t = even[p] + odd[p], t2 = even2[p] + odd2[p];
    for (int j = 0; j < N; ++j) s1[p * N + j] += static_cast<double>(t[j]), s2[p * N + j] += static_cast<double>(t2[j]);
  }
}
[[gnu::always_inline]] inline void ShiftedSumsOne(const float* x, Block blk, int c, float shift, double* s1, double* s2) {
  float even = 0, odd = 0, even2 = 0, odd2 = 0;
  std::int64_t r = blk.begin;
  for (; r + 1 < blk.end; r += 2) {
    const float a = x[r * c] - shift, b = x[(r + 1) * c] - shift;
    even += a, odd += b;
    even2 += a * a, odd2 += b * b;
  }
  if (r < blk.end) {
    const float a = x[r * c] - shift;
    even += a, even2 += a * a;
  }
  *s1 += static_cast<double>(even + odd), *s2 += static_cast<double>(even2 + odd2);
}

template <int N>
[[gnu::always_inline]] inline void GradSumsTile(const float* x, const float* g, Block blk, int c, const float* mean,
                                                const float* inv_std, double* sg, double* sgx) {
  using L = Lanes<N>;
  typename L::V m[L::kParts], inv[L::kParts], g_even[L::kParts] = {}, g_odd[L::kParts] = {}, gx_even[L::kParts] = {},
                                                  gx_odd[L::kParts] = {}, xa, xb, ga, gb;
  for (int p = 0; p < L::kParts; ++p) Load(&m[p], mean + p * N), Load(&inv[p], inv_std + p * N);
  std::int64_t r = blk.begin;
  for (; r + 1 < blk.end; r += 2)
    for (int p = 0; p < L::kParts; ++p) {
      Load(&xa, x + r * c + p * N), Load(&xb, x + (r + 1) * c + p * N);
      Load(&ga, g + r * c + p * N), Load(&gb, g + (r + 1) * c + p * N);
      g_even[p] += ga, g_odd[p] += gb;
      gx_even[p] += ga * ((xa - m[p]) * inv[p]), gx_odd[p] += gb * ((xb - m[p]) * inv[p]);
    }
  if (r < blk.end)
    for (int p = 0; p < L::kParts; ++p) {
      Load(&xa, x + r * c + p * N), Load(&ga, g + r * c + p * N);
      g_even[p] += ga, gx_even[p] += ga * ((xa - m[p]) * inv[p]);
    }
  for (int p = 0; p < L::kParts; ++p) {
    const typename L::V s = g_even[p] + g_odd[p], sx = gx_even[p] + gx_odd[p];
    for (int j = 0; j < N; ++j) sg[p * N + j] += static_cast<double>(s[j]), sgx[p * N + j] += static_cast<double>(sx[j]);
  }
}
[[gnu::always_inline]] inline void GradSumsOne(const float* x, const float* g, Block blk, int c, float mean, float inv,
                                               double* sg, double* sgx) {
  float g_even = 0, g_odd = 0, gx_even = 0, gx_odd = 0;
  std::int64_t r = blk.begin;
  for (; r + 1 < blk.end; r += 2) {
    const float ga = g[r * c], gb = g[(r + 1) * c];
    g_even += ga, g_odd += gb;
    gx_even += ga * ((x[r * c] - mean) * inv), gx_odd += gb * ((x[(r + 1) * c] - mean) * inv);
  }
  if (r < blk.end) g_even += g[r * c], gx_even += g[r * c] * ((x[r * c] - mean) * inv);
  *sg += static_cast<double>(g_even + g_odd), *sgx += static_cast<double>(gx_even + gx_odd);
}

// The passes, each written once and compiled per level below.
template <int N>
[[gnu::always_inline]] inline void Sum(const float* x, std::int64_t rows, int c, double* acc) {
  const Blocks blocks(rows);
  for (std::int64_t i = 0; i < blocks.count; ++i) {
    const Block blk = blocks.At(i, /*descending=*/true);
    int k = 0;
    for (; k + kTile <= c; k += kTile) SumTile<N>(x + k, blk, c, acc + k);
    for (; k < c; ++k) SumOne(x + k, blk, c, acc + k);
  }
}

template <int N>
[[gnu::always_inline]] inline void SumSquaredDeviations(const float* x, std::int64_t rows, int c, const float* mean, double* acc) {
  const Blocks blocks(rows);
  for (std::int64_t i = 0; i < blocks.count; ++i) {
    const Block blk = blocks.At(i, /*descending=*/false);
    int k = 0;
    for (; k + kTile <= c; k += kTile) SquaredDeviationsTile<N>(x + k, blk, c, mean + k, acc + k);
    for (; k < c; ++k) SquaredDeviationsOne(x + k, blk, c, mean[k], acc + k);
  }
}

template <int N>
[[gnu::always_inline]] inline void ShiftedSums(const float* x, std::int64_t rows, int c, const float* shift, double* s1, double* s2) {
  const Blocks blocks(rows);
  for (std::int64_t i = 0; i < blocks.count; ++i) {
    const Block blk = blocks.At(i, /*descending=*/false);
    int k = 0;
    for (; k + kTile <= c; k += kTile) ShiftedSumsTile<N>(x + k, blk, c, shift + k, s1 + k, s2 + k);
    for (; k < c; ++k) ShiftedSumsOne(x + k, blk, c, shift[k], s1 + k, s2 + k);
  }
}

// The writing passes run over the tensor as one array of rows * c floats, a cache line (kLineFloats)
// at a time, so their stores fill whole lines aligned wherever the rows start: element i is channel
// i % c, whose factors a pass reads from arrays that repeat the channels' (Repeated) at i % c. A line
// goes around the caches (non-temporal stores: no read of the line it overwrites, no eviction of the
// input a pass still reads) unless it is among the last `keep` floats the pass writes, which the
// next layer reads first.
struct Lines {
  Lines(const float* out, std::int64_t total) {
    constexpr auto kLineBytes = kLineFloats * sizeof(float);
    const auto misalign = reinterpret_cast<std::uintptr_t>(out) % kLineBytes;
    if (misalign % sizeof(float) != 0) {  // no float starts a line: every store is plain, one at a time
      begin = end = total;
      return;
    }
    begin = std::min<std::int64_t>(total, misalign == 0 ? 0 : (kLineBytes - misalign) / sizeof(float));
    end = begin + (total - begin) / kLineFloats * kLineFloats;
  }
  std::int64_t begin, end;  // whole lines cover [begin, end)
};

// Each per-channel array repeated in this thread's scratch: factors[j] = channel j % c's, for
// j < c + kLineFloats, so a line's factors sit side by side at any i % c.
template <std::size_t K>
std::array<const float*, K> Repeated(int c, const std::array<const float*, K>& per_channel) {
  thread_local std::vector<float> scratch;
  const std::size_t each = static_cast<std::size_t>(c) + kLineFloats;
  scratch.resize(K * each);
  std::array<const float*, K> out;
  for (std::size_t k = 0; k < K; ++k) {
    float* r = scratch.data() + k * each;
    std::copy(per_channel[k], per_channel[k] + c, r);
    for (std::size_t j = static_cast<std::size_t>(c); j < each; ++j) r[j] = r[j - static_cast<std::size_t>(c)];
    out[k] = r;
  }
  return out;
}

template <int N>
[[gnu::always_inline]] inline void StoreVector(float* p, const typename Lanes<N>::V& v, bool stream) {
#if defined(__x86_64__)
  // p is aligned to the vector (Lines). As instructions: each level's intrinsic would need its
  // target on this shared template.
  auto* to = reinterpret_cast<typename Lanes<N>::V*>(p);
  if (!stream) Store(p, &v);
  else if constexpr (N == 4) asm volatile("movntps %1, %0" : "=m"(*to) : "x"(v));  // SSE: the baseline's
  else asm volatile("vmovntps %1, %0" : "=m"(*to) : "v"(v));
#else
  (void)stream;
  Store(p, &v);
#endif
}

[[gnu::always_inline]] inline void StreamFence() {
#if defined(__x86_64__)
  __builtin_ia32_sfence();  // the streamed lines reach memory before any later store (another thread's reads)
#endif
}

template <int N>
[[gnu::always_inline]] inline void ScaleShift(const float* x, std::int64_t rows, int c, const float* scale, const float* shift,
                                              float* y, std::int64_t keep) {
  const std::int64_t total = rows * c;
  const Lines lines(y, total);
  const std::array<const float*, 2> f = Repeated<2>(c, {scale, shift});
  const float *s = f[0], *b = f[1];
  const auto one = [&](std::int64_t i) { y[i] = x[i] * s[i % c] + b[i % c]; };
  std::int64_t i = total - 1;
  for (; i >= lines.end; --i) one(i);
  typename Lanes<N>::V v, sv, bv;
  const std::int64_t ahead = std::max<std::int64_t>(kPrefetchFloats, c);
  int ch = static_cast<int>((lines.end - kLineFloats) % c + c) % c;
  for (i = lines.end - kLineFloats; i >= lines.begin; i -= kLineFloats) {
    const bool stream = i >= keep;
    // Plain stores in descending order fetch the lines they write late: ask for them ahead.
    if (!stream && i >= ahead) __builtin_prefetch(y + i - ahead, /*rw=*/1);
    for (int p = 0; p < kLineFloats; p += N) {
      Load(&v, x + i + p), Load(&sv, s + ch + p), Load(&bv, b + ch + p);
      v = v * sv + bv;
      StoreVector<N>(y + i + p, v, stream);
    }
    for (ch -= kLineFloats; ch < 0;) ch += c;
  }
  for (i = std::min(lines.begin, total) - 1; i >= 0; --i) one(i);
  if (keep < total) StreamFence();
}

template <int N>
[[gnu::always_inline]] inline void GradSums(const float* x, const float* g, std::int64_t rows, int c, const float* mean,
                                            const float* inv_std, double* sg, double* sgx) {
  const Blocks blocks(rows);
  for (std::int64_t i = 0; i < blocks.count; ++i) {
    const Block blk = blocks.At(i, /*descending=*/false);
    int k = 0;
    for (; k + kTile <= c; k += kTile) GradSumsTile<N>(x + k, g + k, blk, c, mean + k, inv_std + k, sg + k, sgx + k);
    for (; k < c; ++k) GradSumsOne(x + k, g + k, blk, c, mean[k], inv_std[k], sg + k, sgx + k);
  }
}

template <int N>
[[gnu::always_inline]] inline void InputGrad(const float* x, const float* g, std::int64_t rows, int c, const float* mean,
                                             const float* inv_std, const float* scale, const float* mean_g, const float* mean_gx,
                                             float* din, std::int64_t keep) {
  const std::int64_t total = rows * c;
  const Lines lines(din, total);
  const std::array<const float*, 5> f = Repeated<5>(c, {mean, inv_std, scale, mean_g, mean_gx});
  const float *m = f[0], *inv = f[1], *s = f[2], *mg = f[3], *mgx = f[4];
  const auto one = [&](std::int64_t i) {
    const int k = static_cast<int>(i % c);
    din[i] = s[k] * (g[i] - mg[k] - (x[i] - m[k]) * inv[k] * mgx[k]);
  };
  std::int64_t i = total - 1;
  for (; i >= lines.end; --i) one(i);
  typename Lanes<N>::V xv, gv, mv, iv, sv, mgv, mgxv;
  const std::int64_t ahead = std::max<std::int64_t>(kPrefetchFloats, c);
  int ch = static_cast<int>((lines.end - kLineFloats) % c + c) % c;
  for (i = lines.end - kLineFloats; i >= lines.begin; i -= kLineFloats) {
    const bool stream = i >= keep;
    if (!stream && i >= ahead) __builtin_prefetch(din + i - ahead, /*rw=*/1);  // as scale_shift's
    for (int p = 0; p < kLineFloats; p += N) {
      Load(&xv, x + i + p), Load(&gv, g + i + p), Load(&mv, m + ch + p), Load(&iv, inv + ch + p);
      Load(&sv, s + ch + p), Load(&mgv, mg + ch + p), Load(&mgxv, mgx + ch + p);
      xv = sv * (gv - mgv - (xv - mv) * iv * mgxv);
      StoreVector<N>(din + i + p, xv, stream);
    }
    for (ch -= kLineFloats; ch < 0;) ch += c;
  }
  for (i = std::min(lines.begin, total) - 1; i >= 0; --i) one(i);
  if (keep < total) StreamFence();
}

// One set of passes per level: the same source under each target.
#define TFD_BATCH_NORM_PASSES(ns, target, n)                                                                                    \
  namespace ns {                                                                                                             \
  target void Sum(const float* x, std::int64_t rows, int c, double* acc) { tensor::Sum<n>(x, rows, c, acc); }                   \
  target void SumSquaredDeviations(const float* x, std::int64_t rows, int c, const float* mean, double* acc) {               \
    tensor::SumSquaredDeviations<n>(x, rows, c, mean, acc);                                                                     \
  }                                                                                                                          \
  target void ShiftedSums(const float* x, std::int64_t rows, int c, const float* shift, double* s1, double* s2) {           \
    tensor::ShiftedSums<n>(x, rows, c, shift, s1, s2);                                                                          \
  }                                                                                                                          \
  target void ScaleShift(const float* x, std::int64_t rows, int c, const float* scale, const float* shift, float* y,          \
                         std::int64_t keep) {                                                                                \
    tensor::ScaleShift<n>(x, rows, c, scale, shift, y, keep);                                                                   \
  }                                                                                                                          \
  target void GradSums(const float* x, const float* g, std::int64_t rows, int c, const float* mean, const float* inv_std,     \
                       double* sg, double* sgx) {                                                                            \
    tensor::GradSums<n>(x, g, rows, c, mean, inv_std, sg, sgx);                                                                 \
  }                                                                                                                          \
  target void InputGrad(const float* x, const float* g, std::int64_t rows, int c, const float* mean, const float* inv_std,    \
                        const float* scale, const float* mean_g, const float* mean_gx, float* din, std::int64_t keep) {      \
    tensor::InputGrad<n>(x, g, rows, c, mean, inv_std, scale, mean_g, mean_gx, din, keep);                                      \
  }                                                                                                                          \
  constexpr BatchNormPasses kPasses = {&Sum, &SumSquaredDeviations, &ShiftedSums, &ScaleShift, &GradSums, &InputGrad};       \
  }

TFD_BATCH_NORM_PASSES(baseline, , 4)
#if defined(__x86_64__)
TFD_BATCH_NORM_PASSES(avx2, __attribute__((target("arch=x86-64-v3"))), 8)
TFD_BATCH_NORM_PASSES(avx512, __attribute__((target("arch=x86-64-v4"))), 16)
#endif
#undef TFD_BATCH_NORM_PASSES

}  // namespace

bool CpuHas(CpuLevel level) {
#if defined(__x86_64__)
  switch (level) {
    case CpuLevel::kBaseline: return true;
    case CpuLevel::kAvx2: return __builtin_cpu_supports("x86-64-v3");
    case CpuLevel::kAvx512: return __builtin_cpu_supports("x86-64-v4");
  }
  return false;
#else
  return level == CpuLevel::kBaseline;
#endif
}

CpuLevel WidestCpuLevel() {
  for (CpuLevel level : {CpuLevel::kAvx512, CpuLevel::kAvx2})
    if (CpuHas(level)) return level;
  return CpuLevel::kBaseline;
}

const char* CpuLevelName(CpuLevel level) {
  switch (level) {
    case CpuLevel::kBaseline: return "baseline";
    case CpuLevel::kAvx2: return "avx2";
    case CpuLevel::kAvx512: return "avx512";
  }
  return "?";
}

std::int64_t BatchNormKeepFloats(std::int64_t floats) {
  static const std::int64_t l2_bytes = [] {
    const long bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return bytes > 0 ? std::int64_t{bytes} : std::int64_t{1} << 20;  // unknown: 1 MiB
  }();
  return 4 * floats * static_cast<std::int64_t>(sizeof(float)) > l2_bytes ? 0 : floats;
}

const BatchNormPasses& BatchNormPassesFor(CpuLevel level) {
  TFD_CHECK(CpuHas(level));
#if defined(__x86_64__)
  if (level == CpuLevel::kAvx512) return avx512::kPasses;
  if (level == CpuLevel::kAvx2) return avx2::kPasses;
#endif
  return baseline::kPasses;
}

}  // namespace tfd::tensor
