#pragma once
// PNG and JPEG files for the tests and benchmarks of the image folder reader, written with
// stb_image_write (Debian's libstb-dev; compiled in stb_write_impl.cc).

#include <cstdint>
#include <string>
#include <vector>

#include "common/data/dataset.h"

namespace tfd::testing {

// The bytes of a PNG (or a JPEG at `quality` 1..100) of height x width x channels pixels
// (channels 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA), row-major.
std::string PngBytes(int height, int width, int channels, const std::vector<std::uint8_t>& pixels);
std::string JpegBytes(int height, int width, int channels, const std::vector<std::uint8_t>& pixels, int quality = 95);

// Writes a synthetic, well-separated classification set as image folders, `dir`/train/<class>/
// and `dir`/test/<class>/, one grayscale side x side PNG per example named by its number: class c
// lights a distinct band of rows, plus noise (the images of WriteSyntheticMnist, as files).
void WriteSyntheticImageFolders(const std::string& dir, int train, int test, const std::vector<std::string>& classes, int side = 8,
                                std::uint32_t seed = 7);

// Writes the first `count` examples of a grayscale byte dataset (MNIST) as `dir`/<label>/<index>.png,
// the index zero-padded to 5 digits so that a class folder's files sort in the dataset's order.
void WriteDatasetPngs(const data::Dataset& d, std::int64_t count, const std::string& dir);

}  // namespace tfd::testing
