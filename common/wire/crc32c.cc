#include "common/wire/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
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
#endif

}  // namespace

std::uint32_t Crc32cPortable(std::span<const std::byte> data, std::uint32_t crc) {
  return ~TableCrc(reinterpret_cast<const unsigned char*>(data.data()), data.size(), ~crc);
}

std::uint32_t Crc32c(std::span<const std::byte> data, std::uint32_t crc) {
#if defined(__x86_64__)
  if (kHaveSse42) return ~HardwareCrc(reinterpret_cast<const unsigned char*>(data.data()), data.size(), ~crc);
#endif
  return Crc32cPortable(data, crc);
}

}  // namespace tfd::wire
