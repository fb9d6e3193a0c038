#include "test/image_files.h"

#include <stb/stb_image_write.h>

#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "test/test_util.h"

namespace tfd::testing {
namespace {

void Append(void* context, void* data, int size) { static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<std::size_t>(size)); }

}  // namespace

std::string PngBytes(int height, int width, int channels, const std::vector<std::uint8_t>& pixels) {
  std::string out;
  stbi_write_png_to_func(Append, &out, width, height, channels, pixels.data(), width * channels);
  return out;
}

std::string JpegBytes(int height, int width, int channels, const std::vector<std::uint8_t>& pixels, int quality) {
  std::string out;
  stbi_write_jpg_to_func(Append, &out, width, height, channels, pixels.data(), quality);
  return out;
}

void WriteSyntheticImageFolders(const std::string& dir, int train, int test, const std::vector<std::string>& classes, int side,
                                std::uint32_t seed) {
  std::mt19937 gen(seed);
  const int k = static_cast<int>(classes.size());
  auto make = [&](int n, const std::string& split) {
    for (const std::string& c : classes) std::filesystem::create_directories(dir + "/" + split + "/" + c);
    std::vector<std::uint8_t> x(static_cast<std::size_t>(side) * side);
    for (int i = 0; i < n; ++i) {
      const int c = static_cast<int>(gen() % static_cast<std::uint32_t>(k));
      for (int p = 0; p < side * side; ++p) {
        const bool lit = (p / side) * k / side == c;  // rows of band c
        x[static_cast<std::size_t>(p)] = static_cast<std::uint8_t>((lit ? 180 : 20) + static_cast<int>(gen() % 60));
      }
      WriteFile(dir + "/" + split + "/" + classes[static_cast<std::size_t>(c)] + "/" + std::to_string(i) + ".png", PngBytes(side, side, 1, x));
    }
  };
  make(train, "train");
  make(test, "test");
}

void WriteDatasetPngs(const data::Dataset& d, std::int64_t count, const std::string& dir) {
  const auto bytes = d.example_bytes();
  for (int c = 0; c < d.num_classes; ++c) std::filesystem::create_directories(fmt::format("{}/{}", dir, c));
  for (std::int64_t i = 0; i < count; ++i) {
    const std::uint8_t* px = d.features.data() + static_cast<std::size_t>(i) * bytes;
    WriteFile(fmt::format("{}/{}/{:05}.png", dir, d.labels[static_cast<std::size_t>(i)], i),
              PngBytes(d.height, d.width, 1, std::vector<std::uint8_t>(px, px + bytes)));
  }
}

}  // namespace tfd::testing
