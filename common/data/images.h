#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/config/data_spec.h"
#include "common/data/examples.h"

// The image folder reader's parts (ReadImageFolders in common/data/readers.h is the whole): one
// image decoded from bytes, resized, and the folders read on a given number of threads. Apart so
// that the fuzz target, the benchmark and the tests reach them. Every function is safe to call
// from several threads at once (stb_image keeps its failure reason per thread).
namespace tfd::data {

// What one image may hold, checked from its header before any pixel is decoded: 2^25 pixels (a
// 33-megapixel photo) and 256 MiB of file, so that a corrupt header cannot ask for gigabytes.
inline constexpr std::int64_t kMaxImagePixels = std::int64_t{1} << 25;
inline constexpr std::int64_t kMaxImageFileBytes = std::int64_t{1} << 28;

// An image's pixels, row-major height x width x channels bytes.
struct Image {
  int height = 0, width = 0, channels = 0;
  std::vector<std::uint8_t> pixels;
};

// True when `bytes` begin with a PNG or JPEG signature.
bool IsPngOrJpeg(std::span<const std::uint8_t> bytes);

// Decodes a PNG or JPEG (any other format is refused) to `channels` 1 (grayscale, stb's luma of
// RGB) or 3 (RGB, gray repeated), or 0: the image's own (1 for gray with or without alpha, else 3);
// an alpha channel is dropped. InvalidArgument with stb_image's
// reason ("bad png sig", "bad huffman code", ...) or the size over `max_pixels`; the message does
// not name a file (the caller does).
Result<Image> DecodeImage(std::span<const std::uint8_t> bytes, int channels, std::int64_t max_pixels = kMaxImagePixels);

// Resizes `in` to height x width (stb_image_resize: Mitchell down, Catmull-Rom up, edges clamped)
// into `out`, which holds height * width * in.channels bytes.
Status ResizeImage(const Image& in, int height, int width, std::uint8_t* out);

// ReadImageFolders with `threads` decoding threads (>= 1); the examples are the same for any count.
Result<Examples> ReadImageFolders(const config::DataSpec& spec, const std::vector<std::string>& paths, int threads);

}  // namespace tfd::data
