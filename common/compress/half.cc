#include "common/compress/half.h"

#include <cstring>

#include <Eigen/Core>

#include "common/base/check.h"

namespace tfd::compress {
namespace {

// Eigen's conversions (round to nearest even) as bits and back; one function template per format.
template <typename T>
std::uint16_t ToBits(float f) {
  return Eigen::numext::bit_cast<std::uint16_t>(T(f));
}
template <typename T>
float FromBits(std::uint16_t b);
template <>
float FromBits<Eigen::half>(std::uint16_t b) {
  return static_cast<float>(Eigen::half(Eigen::half_impl::raw_uint16_to_half(b)));
}
template <>
float FromBits<Eigen::bfloat16>(std::uint16_t b) {
  return static_cast<float>(Eigen::bfloat16(Eigen::bfloat16_impl::raw_uint16_to_bfloat16(b)));
}

template <typename T, typename Op>
void ForEachDecoded(std::span<const std::byte> in, std::span<float> out, Op op) {
  TFD_CHECK(in.size() == out.size() * 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::uint16_t b = 0;
    std::memcpy(&b, in.data() + 2 * i, 2);  // little-endian host (as every float on the wire)
    op(out[i], FromBits<T>(b));
  }
}

}  // namespace

void EncodeHalf(Half h, std::span<const float> in, std::span<std::uint16_t> out) {
  TFD_CHECK(in.size() == out.size());
  if (h == Half::kFp16)
    for (std::size_t i = 0; i < in.size(); ++i) out[i] = ToBits<Eigen::half>(in[i]);
  else
    for (std::size_t i = 0; i < in.size(); ++i) out[i] = ToBits<Eigen::bfloat16>(in[i]);
}

void DecodeHalf(Half h, std::span<const std::byte> in, std::span<float> out) {
  auto set = [](float& o, float v) { o = v; };
  if (h == Half::kFp16) ForEachDecoded<Eigen::half>(in, out, set);
  else ForEachDecoded<Eigen::bfloat16>(in, out, set);
}

void AddHalf(Half h, std::span<const std::byte> in, std::span<float> out) {
  auto add = [](float& o, float v) { o += v; };
  if (h == Half::kFp16) ForEachDecoded<Eigen::half>(in, out, add);
  else ForEachDecoded<Eigen::bfloat16>(in, out, add);
}

void RoundHalf(Half h, std::span<float> v) {
  if (h == Half::kFp16)
    for (float& x : v) x = FromBits<Eigen::half>(ToBits<Eigen::half>(x));
  else
    for (float& x : v) x = FromBits<Eigen::bfloat16>(ToBits<Eigen::bfloat16>(x));
}

}  // namespace tfd::compress
