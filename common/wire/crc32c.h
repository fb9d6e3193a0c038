#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tfd::wire {

// CRC-32C (Castagnoli) of `data`, continuing from `crc` (0 to start). Uses carry-less multiplication
// (AVX-512 VPCLMULQDQ) for 1 KB and more, else the SSE4.2 instruction, when the CPU has them
// (checked once, at run time), else a table.
std::uint32_t Crc32c(std::span<const std::byte> data, std::uint32_t crc = 0);
// The same, always by table (what machines without SSE4.2 use); for tests.
std::uint32_t Crc32cPortable(std::span<const std::byte> data, std::uint32_t crc = 0);

}  // namespace tfd::wire
