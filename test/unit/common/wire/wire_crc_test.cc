// CRC-32C: the standard check value and RFC 3720's vectors, and the table, SSE4.2 and folding
// paths against a bitwise reference for every length, alignment and chaining.
#include <catch2/catch.hpp>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/wire/crc32c.h"

namespace tfd::wire {
namespace {

std::span<const std::byte> Bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

// Bit by bit, from the definition: independent of both the table and the SSE4.2 paths.
std::uint32_t ReferenceCrc32c(std::span<const std::byte> data) {
  std::uint32_t crc = 0xffffffffu;
  for (std::byte b : data) {
    crc ^= static_cast<std::uint8_t>(b);
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
  }
  return ~crc;
}

TEST_CASE("Crc32c gives the standard check value and RFC 3720's test vectors", "[unit][wire][crc]") {
  CHECK(Crc32c(Bytes("123456789")) == 0xE3069283u);
  CHECK(Crc32c({}) == 0u);
  std::vector<std::byte> v(32, std::byte{0});
  CHECK(Crc32c(v) == 0x8A9136AAu);
  std::fill(v.begin(), v.end(), std::byte{0xff});
  CHECK(Crc32c(v) == 0x62A8AB43u);
  for (std::size_t i = 0; i < 32; ++i) v[i] = static_cast<std::byte>(i);
  CHECK(Crc32c(v) == 0x46DD794Eu);
  for (std::size_t i = 0; i < 32; ++i) v[i] = static_cast<std::byte>(31 - i);
  CHECK(Crc32c(v) == 0x113FDB5Cu);
}

TEST_CASE("Crc32c matches a bitwise reference for every length and alignment", "[unit][wire][crc]") {
  std::vector<std::byte> buf(80);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
  for (std::size_t start = 0; start < 8; ++start) {
    for (std::size_t len = 0; start + len <= 72; ++len) {
      auto s = std::span<const std::byte>(buf).subspan(start, len);
      INFO("start " << start << " length " << len);
      CHECK(Crc32c(s) == ReferenceCrc32c(s));
    }
  }
}

TEST_CASE("Crc32c chains: Crc32c(b, Crc32c(a)) is the CRC of a then b", "[unit][wire][crc]") {
  // Lengths around multiples of 8 exercise the 8-byte loop and the byte tail on both sides.
  std::vector<std::byte> buf(67);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>((i * 37 + 11) & 0xff);
  const std::span<const std::byte> all(buf);
  for (std::size_t total : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9},
                            std::size_t{16}, std::size_t{23}, std::size_t{64}, std::size_t{67}}) {
    const auto whole = all.first(total);
    const std::uint32_t expected = Crc32c(whole);
    CHECK(expected == ReferenceCrc32c(whole));
    for (std::size_t cut = 0; cut <= total; ++cut) {
      INFO("length " << total << " cut at " << cut);
      CHECK(Crc32c(whole.subspan(cut), Crc32c(whole.first(cut))) == expected);
    }
  }
  // Three pieces, as Seal chains head and tails.
  const std::uint32_t three = Crc32c(all.subspan(40), Crc32c(all.subspan(13, 27), Crc32c(all.first(13))));
  CHECK(three == Crc32c(all));
}

TEST_CASE("Crc32c agrees with the table and the bitwise reference on long, interleaved lengths", "[unit][wire][crc]") {
  // The hardware path runs three streams over blocks of 8192 and then 256 bytes while three blocks
  // remain; these lengths land on, just short of and just past those thresholds, at every alignment.
  std::vector<std::byte> buf(3 * 3 * 8192 + 3 * 256 + 64);
  std::uint32_t x = 12345;
  for (auto& b : buf) {
    x = x * 1103515245u + 12345u;
    b = static_cast<std::byte>(x >> 24);
  }
  const std::span<const std::byte> all(buf);
  for (std::size_t len : {std::size_t{255}, std::size_t{256}, std::size_t{767}, std::size_t{768}, std::size_t{769},
                          std::size_t{775}, std::size_t{776}, std::size_t{3 * 256 * 2 + 5}, std::size_t{8192},
                          std::size_t{3 * 8192 - 1}, std::size_t{3 * 8192}, std::size_t{3 * 8192 + 1},
                          std::size_t{3 * 8192 + 3 * 256 + 13}, std::size_t{2 * 3 * 8192 + 7}, std::size_t{3 * 3 * 8192 + 3 * 256 + 3}}) {
    for (std::size_t start : {std::size_t{0}, std::size_t{1}, std::size_t{5}}) {
      INFO("start " << start << " length " << len);
      const auto s = all.subspan(start, len);
      const std::uint32_t reference = ReferenceCrc32c(s);
      CHECK(Crc32c(s) == reference);
      CHECK(Crc32cPortable(s) == reference);
    }
  }
  CHECK(Crc32cPortable(Bytes("123456789")) == 0xE3069283u);

  // Chaining across block boundaries gives the same CRC as one pass.
  const std::uint32_t whole = Crc32c(all);
  CHECK(whole == ReferenceCrc32c(all));
  for (std::size_t cut : {std::size_t{1}, std::size_t{8}, std::size_t{767}, std::size_t{768}, std::size_t{3 * 8192},
                          std::size_t{3 * 8192 + 1}, std::size_t{buf.size() - 768}, std::size_t{buf.size() - 1}}) {
    INFO("cut at " << cut);
    CHECK(Crc32c(all.subspan(cut), Crc32c(all.first(cut))) == whole);
    CHECK(Crc32cPortable(all.subspan(cut), Crc32c(all.first(cut))) == whole);
    CHECK(Crc32c(all.subspan(cut), Crc32cPortable(all.first(cut))) == whole);
  }
}

TEST_CASE("Crc32c's folding path agrees with the table at its thresholds and at every lane alignment", "[unit][wire][crc]") {
  // On CPUs with VPCLMULQDQ, 1024 bytes and more are folded 256, then 64, then 16 bytes at a time,
  // and the last 0-15 bytes go through the crc32 instruction: lengths on and around each step.
  std::vector<std::byte> buf(131072 + 64 + 300);
  std::uint32_t x = 777;
  for (auto& b : buf) {
    x = x * 1103515245u + 12345u;
    b = static_cast<std::byte>(x >> 24);
  }
  const std::span<const std::byte> all(buf);
  for (std::size_t len : {std::size_t{1023}, std::size_t{1024}, std::size_t{1025}, std::size_t{1024 + 15}, std::size_t{1024 + 16},
                          std::size_t{1024 + 63}, std::size_t{1024 + 64}, std::size_t{1024 + 255}, std::size_t{1280},
                          std::size_t{1280 + 64 + 16 + 7}, std::size_t{4096 - 1}, std::size_t{32 + 32768 * 4},
                          std::size_t{131072 + 64 + 17}}) {
    for (std::size_t start : {std::size_t{0}, std::size_t{3}, std::size_t{16}, std::size_t{61}}) {
      for (std::uint32_t crc : {0u, 0xdeadbeefu}) {
        INFO("start " << start << " length " << len << " crc " << crc);
        const auto s = all.subspan(start, len);
        CHECK(Crc32c(s, crc) == Crc32cPortable(s, crc));
      }
    }
  }
}

}  // namespace
}  // namespace tfd::wire
