#include "common/data/image_decode.h"

#include <stb/stb_image.h>

#include <cstring>
#include <limits>
#include <memory>

#include <fmt/format.h>

namespace tfd::data {

bool IsPngOrJpeg(std::span<const std::uint8_t> bytes) {
  static constexpr std::uint8_t kPng[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= sizeof kPng && std::memcmp(bytes.data(), kPng, sizeof kPng) == 0) return true;
  return bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff;
}

Result<DecodedImage> DecodeImage(std::span<const std::uint8_t> bytes, int channels) {
  if (!IsPngOrJpeg(bytes)) return Status::InvalidArgument("not a PNG or JPEG image");
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) return Status::InvalidArgument("image over 2 GiB");
  const int len = static_cast<int>(bytes.size());
  int w = 0, h = 0, file_channels = 0;
  if (stbi_info_from_memory(bytes.data(), len, &w, &h, &file_channels) == 0)
    return Status::InvalidArgument(fmt::format("cannot decode the image: {}", stbi_failure_reason()));
  if (w < 1 || h < 1 || w > kMaxImageSide || h > kMaxImageSide)
    return Status::InvalidArgument(fmt::format("image is {}x{}; each side must be in [1, {}]", h, w, kMaxImageSide));
  const int want = channels != 0 ? channels : file_channels <= 2 ? 1 : 3;
  std::unique_ptr<stbi_uc, void (*)(void*)> pixels(stbi_load_from_memory(bytes.data(), len, &w, &h, &file_channels, want), stbi_image_free);
  if (pixels == nullptr) return Status::InvalidArgument(fmt::format("cannot decode the image: {}", stbi_failure_reason()));
  DecodedImage out;
  out.height = h, out.width = w, out.channels = want;
  out.pixels.assign(pixels.get(), pixels.get() + static_cast<std::size_t>(h) * static_cast<std::size_t>(w) * static_cast<std::size_t>(want));
  return out;
}

}  // namespace tfd::data
