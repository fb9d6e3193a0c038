#pragma once
// PNG and JPEG decoding for the readers that meet encoded images (TFRecord bytes features today).
// stb_image does the work; its implementation is Debian's libstb, so no source in tfd defines
// STB_IMAGE_IMPLEMENTATION (two that did would clash at link time).

#include <cstdint>
#include <span>
#include <vector>

#include "common/base/status.h"

namespace tfd::data {

// The largest side a decoded image may have; checked from the header before any pixel is decoded.
inline constexpr int kMaxImageSide = 4096;

struct DecodedImage {
  int height = 0, width = 0, channels = 0;
  std::vector<std::uint8_t> pixels;  // height x width x channels, row-major
};

// True when `bytes` begin with a PNG or JPEG signature.
bool IsPngOrJpeg(std::span<const std::uint8_t> bytes);

// Decodes PNG or JPEG `bytes` to `channels` channels: 1 (grayscale) or 3 (RGB), converting as
// needed; 0: 1 for a grayscale image, else 3 (alpha is dropped). InvalidArgument with the reason
// (no file name: the caller says where the bytes came from) when the bytes are neither format,
// are corrupt, or have a side over kMaxImageSide. Thread-safe.
Result<DecodedImage> DecodeImage(std::span<const std::uint8_t> bytes, int channels);

}  // namespace tfd::data
