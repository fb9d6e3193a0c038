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
__attribute__((target("sse4.2"))) std::uint32_t HardwareCrc(const unsigned char* p, std::size_t n, std::uint32_t crc) {
  std::uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  for (; n > 0; --n) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace

std::uint32_t Crc32c(std::span<const std::byte> data, std::uint32_t crc) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  crc = ~crc;
#if defined(__x86_64__)
  if (kHaveSse42) return ~HardwareCrc(p, data.size(), crc);
#endif
  return ~TableCrc(p, data.size(), crc);
}

}  // namespace tfd::wire
