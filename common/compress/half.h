#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tfd::compress {

// A 16-bit float format on the wire: IEEE binary16 (fp16) or bfloat16 (float32's exponent, 7
// mantissa bits). Encoding rounds to nearest, ties to even (Eigen::half / Eigen::bfloat16); values
// beyond fp16's range become +-inf, as Eigen and every GPU convert them.
enum class Half { kFp16, kBf16 };

// out[i] = the 16-bit bits of in[i]; out.size() == in.size().
void EncodeHalf(Half h, std::span<const float> in, std::span<std::uint16_t> out);
// out[i] = the float32 value of the 16 bits at in[i] (little-endian bytes of any alignment, a
// frame's payload): out.size() * 2 == in.size().
void DecodeHalf(Half h, std::span<const std::byte> in, std::span<float> out);
// out[i] += decoded in[i], in float32 (the same bytes as DecodeHalf).
void AddHalf(Half h, std::span<const std::byte> in, std::span<float> out);
// v[i] = decode(encode(v[i])): the value the other end of the wire sees.
void RoundHalf(Half h, std::span<float> v);

}  // namespace tfd::compress
