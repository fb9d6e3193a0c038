// PNG and JPEG decoding (common/data/images.h: stb_image, compiled into tfd_data so that this
// build instruments it) on arbitrary bytes, to gray and to RGB, with an image that decodes
// resized down and up. The pixel bound is lower than the reader's so that no input can ask for
// more than scripts/fuzz's -malloc_limit_mb: what the bound must do is hold, whatever it is.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <utility>
#include <vector>

#include "common/data/images.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr std::int64_t kMaxPixels = std::int64_t{1} << 20;
  const std::span<const std::uint8_t> bytes(data, size);
  for (int channels : {1, 3}) {
    auto image = tfd::data::DecodeImage(bytes, channels, kMaxPixels);
    if (!image.ok()) continue;
    const auto& img = *image;
    if (img.height < 1 || img.width < 1 || std::int64_t{img.height} * img.width > kMaxPixels || img.channels != channels ||
        img.pixels.size() != static_cast<std::size_t>(img.height) * img.width * channels)
      std::abort();
    for (auto [h, w] : {std::pair{3, 2}, std::pair{img.height + 1, img.width + 2}}) {
      if (std::int64_t{h} * w > kMaxPixels) continue;
      std::vector<std::uint8_t> out(static_cast<std::size_t>(h) * w * channels);
      if (!tfd::data::ResizeImage(img, h, w, out.data()).ok()) std::abort();
    }
  }
  return 0;
}
