#include "common/wire/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#include <nmmintrin.h>
#endif

namespace tfd::wire {
namespace {

constexpr std::uint32_t kPoly = 0x82f63b78;  // reflected Castagnoli polynomial

constexpr std::array<std::uint32_t, 256> MakeTable() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<std::uint32_t, 256> kTable = MakeTable();

std::uint32_t TableCrc(const unsigned char* p, std::size_t n, std::uint32_t crc) {
  while (n--) crc = kTable[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
// The crc32 instruction has a latency of three cycles and a throughput of one per cycle, so the
// hardware path runs three independent CRCs over three adjacent blocks and then combines them:
// crc(A || B) = shift(crc(A), |B|) ^ crc(B), where shift appends |B| zero bytes through a table
// built once from the GF(2) operator for that many zeros (after Mark Adler's crc32c.c).
constexpr std::size_t kLong = 8192, kShort = 256;

using ShiftTable = std::array<std::array<std::uint32_t, 256>, 4>;

std::uint32_t Gf2Times(const std::uint32_t* mat, std::uint32_t vec) {
  std::uint32_t sum = 0;
  for (; vec != 0; vec >>= 1, ++mat)
    if (vec & 1) sum ^= *mat;
  return sum;
}

void Gf2Square(std::uint32_t* square, const std::uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = Gf2Times(mat, mat[n]);
}

// The table that appends `len` zero bytes (len a power of two) to a CRC register.
ShiftTable MakeShiftTable(std::size_t len) {
  std::uint32_t even[32], odd[32];
  odd[0] = kPoly;  // one zero bit
  for (int n = 1; n < 32; ++n) odd[n] = 1u << (n - 1);
  Gf2Square(even, odd);  // two zero bits
  Gf2Square(odd, even);  // four
  const std::uint32_t* op = nullptr;
  for (;;) {
    Gf2Square(even, odd);  // 8, 32, 128, ... zero bits
    len >>= 1;
    if (len == 0) {
      op = even;
      break;
    }
    Gf2Square(odd, even);  // 16, 64, ... zero bits
    len >>= 1;
    if (len == 0) {
      op = odd;
      break;
    }
  }
  ShiftTable t;
  for (std::uint32_t n = 0; n < 256; ++n)
    for (int b = 0; b < 4; ++b) t[b][n] = Gf2Times(op, n << (8 * b));
  return t;
}

const ShiftTable kShiftLong = MakeShiftTable(kLong);
const ShiftTable kShiftShort = MakeShiftTable(kShort);

inline std::uint64_t Shift(const ShiftTable& t, std::uint64_t crc) {
  return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][(crc >> 24) & 0xff];
}

__attribute__((target("sse4.2"))) inline std::uint64_t Crc64(std::uint64_t crc, const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return _mm_crc32_u64(crc, v);
}

// Three interleaved streams over blocks of `block` bytes while at least 3 blocks remain.
__attribute__((target("sse4.2"))) void Interleaved(const ShiftTable& shift, std::size_t block, const unsigned char*& p,
                                                   std::size_t& n, std::uint64_t& crc0) {
  while (n >= 3 * block) {
    std::uint64_t crc1 = 0, crc2 = 0;
    const unsigned char* end = p + block;
    do {
      crc0 = Crc64(crc0, p);
      crc1 = Crc64(crc1, p + block);
      crc2 = Crc64(crc2, p + 2 * block);
      p += 8;
    } while (p < end);
    crc0 = Shift(shift, crc0) ^ crc1;
    crc0 = Shift(shift, crc0) ^ crc2;
    p += 2 * block;
    n -= 3 * block;
  }
}

__attribute__((target("sse4.2"))) std::uint32_t HardwareCrc(const unsigned char* p, std::size_t n, std::uint32_t crc) {
  std::uint64_t c = crc;
  Interleaved(kShiftLong, kLong, p, n, c);
  Interleaved(kShiftShort, kShort, p, n, c);
  for (; n >= 8; n -= 8, p += 8) c = Crc64(c, p);
  auto c32 = static_cast<std::uint32_t>(c);
  for (; n > 0; --n) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");

// Long inputs: carry-less multiplication folds 256 bytes per step (four 512-bit registers, each
// four 128-bit lanes), about four times the crc32 instruction's 8 bytes per cycle (after Intel,
// "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ"). The folded 128-bit remainder is
// congruent to the message modulo the polynomial, so the crc32 instruction finishes it.
//
// A 128-bit lane holds bytes in memory order with reflected bits: integer bit p is the coefficient
// of x^(127-p). Moving a lane D bits towards the end multiplies its high-degree half (the low
// quadword) by x^(64+D) and its low-degree half by x^D, each reduced modulo P first. With a
// constant m stored as reg(m) << 32 (reg: the 32-bit CRC register form, bit 31-d = x^d), the
// 64x64 product lands one degree low, so the constants are x^(64+D-1) and x^(D-1) mod P.
std::uint32_t XPowModP(std::size_t e) {  // register form
  std::uint32_t r = 0x80000000u;         // x^0
  for (; e > 0; --e) r = (r & 1) ? (r >> 1) ^ kPoly : r >> 1;
  return r;
}

struct FoldConstant {
  std::uint64_t lo, hi;  // for the lane's low quadword (x^(64+D)) and its high quadword (x^D)
};
FoldConstant MakeFoldConstant(std::size_t d) {
  return {std::uint64_t{XPowModP(64 + d - 1)} << 32, std::uint64_t{XPowModP(d - 1)} << 32};
}
const FoldConstant kFold2048 = MakeFoldConstant(2048), kFold512 = MakeFoldConstant(512), kFold128 = MakeFoldConstant(128);
constexpr std::size_t kFoldMin = 1024;
inline long long Lo(const FoldConstant& k) { return static_cast<long long>(k.lo); }
inline long long Hi(const FoldConstant& k) { return static_cast<long long>(k.hi); }  // below this, the wide registers do not pay

#define TFD_FOLD_TARGET __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2")))

TFD_FOLD_TARGET inline __m512i Fold512(__m512i x, __m512i k, __m512i next) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11), next, 0x96);
}

TFD_FOLD_TARGET inline __m128i Fold128(__m128i x, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

// `crc` is the register (not inverted); n >= kFoldMin.
TFD_FOLD_TARGET std::uint32_t FoldingCrc(const unsigned char* p, std::size_t n, std::uint32_t crc) {
  const __m512i k2048 = _mm512_set_epi64(Hi(kFold2048), Lo(kFold2048), Hi(kFold2048), Lo(kFold2048), Hi(kFold2048), Lo(kFold2048),
                                         Hi(kFold2048), Lo(kFold2048));
  const __m512i k512 = _mm512_set_epi64(Hi(kFold512), Lo(kFold512), Hi(kFold512), Lo(kFold512), Hi(kFold512), Lo(kFold512),
                                        Hi(kFold512), Lo(kFold512));
  const __m128i k128 = _mm_set_epi64x(Hi(kFold128), Lo(kFold128));
  __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, crc));
  __m512i x1 = _mm512_loadu_si512(p + 64), x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
  p += 256;
  n -= 256;
  for (; n >= 256; p += 256, n -= 256) {
    x0 = Fold512(x0, k2048, _mm512_loadu_si512(p));
    x1 = Fold512(x1, k2048, _mm512_loadu_si512(p + 64));
    x2 = Fold512(x2, k2048, _mm512_loadu_si512(p + 128));
    x3 = Fold512(x3, k2048, _mm512_loadu_si512(p + 192));
  }
  x1 = Fold512(x0, k512, x1);
  x2 = Fold512(x1, k512, x2);
  x3 = Fold512(x2, k512, x3);
  for (; n >= 64; p += 64, n -= 64) x3 = Fold512(x3, k512, _mm512_loadu_si512(p));
  __m128i lane[4];  // through memory: GCC 12's lane extract intrinsics trip -Wuninitialized
  _mm512_storeu_si512(lane, x3);
  __m128i a = Fold128(Fold128(Fold128(lane[0], k128, lane[1]), k128, lane[2]), k128, lane[3]);
  for (; n >= 16; p += 16, n -= 16) a = Fold128(a, k128, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  std::uint64_t c = _mm_crc32_u64(0, static_cast<std::uint64_t>(_mm_cvtsi128_si64(a)));
  c = _mm_crc32_u64(c, static_cast<std::uint64_t>(_mm_extract_epi64(a, 1)));
  for (; n >= 8; n -= 8, p += 8) c = Crc64(c, p);
  auto c32 = static_cast<std::uint32_t>(c);
  for (; n > 0; --n) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
#undef TFD_FOLD_TARGET

const bool kHaveFolding = kHaveSse42 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul");
#endif

}  // namespace

std::uint32_t Crc32cPortable(std::span<const std::byte> data, std::uint32_t crc) {
  return ~TableCrc(reinterpret_cast<const unsigned char*>(data.data()), data.size(), ~crc);
}

std::uint32_t Crc32c(std::span<const std::byte> data, std::uint32_t crc) {
#if defined(__x86_64__)
  if (kHaveFolding && data.size() >= kFoldMin)
    return ~FoldingCrc(reinterpret_cast<const unsigned char*>(data.data()), data.size(), ~crc);
  if (kHaveSse42) return ~HardwareCrc(reinterpret_cast<const unsigned char*>(data.data()), data.size(), ~crc);
#endif
  return Crc32cPortable(data, crc);
}

}  // namespace tfd::wire
