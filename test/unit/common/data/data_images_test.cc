// The image folder reader (common/data/images.h): PNG and JPEG files written here with
// stb_image_write (test/image_files.h), read back through ReadImageFolders and LoadData.
#include <zlib.h>

#include <filesystem>

#include <catch2/catch.hpp>

#include "common/data/images.h"
#include "common/data/readers.h"
#include "common/data/source.h"
#include "test/image_files.h"
#include "test/test_util.h"

namespace tfd::data {
namespace {

using config::DataSpec;
using tfd::testing::JpegBytes;
using tfd::testing::PngBytes;
using tfd::testing::TempDir;
using tfd::testing::WriteFile;

DataSpec ImagesSpec(std::vector<std::string> train) {
  DataSpec spec;
  spec.format = DataSpec::Format::kImages;
  spec.train.paths = std::move(train);
  return spec;
}

// A gray h x w image whose pixels count up from `start`.
std::vector<std::uint8_t> Ramp(int h, int w, int start, int channels = 1) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(h) * w * channels);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>(start + static_cast<int>(i));
  return px;
}

void WritePng(const std::string& path, int h, int w, int c, const std::vector<std::uint8_t>& px) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  WriteFile(path, PngBytes(h, w, c, px));
}

std::vector<std::uint8_t> Bytes(const ByteArray& a, std::size_t from, std::size_t n) { return {a.begin() + from, a.begin() + from + n}; }

std::string ErrorOf(const DataSpec& spec, const std::vector<std::string>& paths, int threads = 2) {
  Result<Examples> e = ReadImageFolders(spec, paths, threads);
  return e.ok() ? "" : e.status().message();
}

TEST_CASE("image folders: one class per subfolder, examples by class then file name, pixels as stored", "[unit][data]") {
  TempDir dir;
  WritePng(dir / "root/dog/b.png", 3, 4, 1, Ramp(3, 4, 100));
  WritePng(dir / "root/dog/a.png", 3, 4, 1, Ramp(3, 4, 50));
  WritePng(dir / "root/cat/z.PNG", 3, 4, 1, Ramp(3, 4, 0));
  WritePng(dir / "root/cat/nested/y.png", 3, 4, 1, Ramp(3, 4, 200));  // a class folder's subfolders count, as in Keras
  WriteFile(dir / "root/cat/notes.txt", "not an image");               // other extensions are ignored
  WriteFile(dir / "root/cat/._z.png", "AppleDouble");                  // so are hidden files
  WritePng(dir / "root/.ipynb_checkpoints/x.png", 3, 4, 1, Ramp(3, 4, 9));  // and hidden folders: no class
  WriteFile(dir / "root/README.md", "top-level files are not classes");

  Result<Examples> e = ReadImageFolders(ImagesSpec({dir / "root"}), {dir / "root"}, 3);
  REQUIRE(e.ok());
  CHECK(e->size == 4);
  CHECK(e->height == 3);
  CHECK(e->width == 4);
  CHECK(e->channels == 1);
  CHECK(e->dtype == DType::kU8);
  CHECK(e->label_text == std::vector<std::string>{"cat", "cat", "dog", "dog"});
  CHECK(e->label_ids.empty());
  REQUIRE(e->features.size() == 4 * 12);
  CHECK(Bytes(e->features, 0, 12) == Ramp(3, 4, 200));  // cat/nested/y.png sorts before cat/z.PNG
  CHECK(Bytes(e->features, 12, 12) == Ramp(3, 4, 0));
  CHECK(Bytes(e->features, 24, 12) == Ramp(3, 4, 50));
  CHECK(Bytes(e->features, 36, 12) == Ramp(3, 4, 100));
}

TEST_CASE("image folders: JPEG files decode, .jpg and .jpeg in any case", "[unit][data]") {
  TempDir dir;
  std::vector<std::uint8_t> gray(16 * 16, 0);
  for (std::size_t i = 0; i < gray.size(); ++i) gray[i] = static_cast<std::uint8_t>(i < 128 ? 40 : 220);  // top half dark
  std::filesystem::create_directories(dir / "r/a");
  std::filesystem::create_directories(dir / "r/b");
  WriteFile(dir / "r/a/1.jpg", JpegBytes(16, 16, 1, gray, 100));
  WriteFile(dir / "r/b/2.JPEG", JpegBytes(16, 16, 1, gray, 100));
  DataSpec spec = ImagesSpec({dir / "r"});
  spec.channels = 1;  // stb_image_write stores even a gray JPEG as three components (YCbCr)
  Result<Examples> e = ReadImageFolders(spec, {dir / "r"}, 2);
  REQUIRE(e.ok());
  REQUIRE(e->size == 2);
  REQUIRE(e->features.size() == 2 * gray.size());
  for (std::size_t i = 0; i < 2 * gray.size(); ++i) CHECK(std::abs(int{e->features[i]} - gray[i % gray.size()]) <= 8);  // JPEG is lossy
}

TEST_CASE("image folders: color converts, and without it the first image's channels decide", "[unit][data]") {
  TempDir dir;
  WritePng(dir / "r/a/1.png", 1, 2, 3, {255, 0, 0, 10, 20, 30});     // RGB
  WritePng(dir / "r/b/1.png", 1, 2, 4, {0, 0, 255, 9, 1, 2, 3, 9});  // RGBA: the alpha is dropped
  WritePng(dir / "r/b/2.png", 1, 2, 1, {7, 8});                      // gray, repeated into RGB
  DataSpec spec = ImagesSpec({dir / "r"});
  Result<Examples> rgb = ReadImageFolders(spec, {dir / "r"}, 1);
  REQUIRE(rgb.ok());
  CHECK(rgb->channels == 3);
  CHECK(Bytes(rgb->features, 0, 18) == std::vector<std::uint8_t>{255, 0, 0, 10, 20, 30, 0, 0, 255, 1, 2, 3, 7, 7, 7, 8, 8, 8});

  spec.channels = 1;  // "color": "grayscale": stb's luma, (77 r + 150 g + 29 b) / 256
  Result<Examples> gray = ReadImageFolders(spec, {dir / "r"}, 1);
  REQUIRE(gray.ok());
  CHECK(gray->channels == 1);
  CHECK(Bytes(gray->features, 0, 6) == std::vector<std::uint8_t>{76, 18, 28, 1, 7, 8});

  TempDir gray_first;  // a gray first image (with alpha too) makes one channel
  WritePng(gray_first / "r/a/1.png", 1, 1, 2, {90, 255});
  WritePng(gray_first / "r/b/1.png", 1, 1, 3, {90, 90, 90});
  Result<Examples> first = ReadImageFolders(ImagesSpec({}), {gray_first / "r"}, 1);
  REQUIRE(first.ok());
  CHECK(first->channels == 1);
  CHECK(Bytes(first->features, 0, 2) == std::vector<std::uint8_t>{90, 90});
}

TEST_CASE("image folders: image_size resizes every image; without it a size that differs is refused naming the file", "[unit][data]") {
  TempDir dir;
  WritePng(dir / "r/a/1.png", 4, 6, 1, std::vector<std::uint8_t>(24, 200));
  WritePng(dir / "r/b/1.png", 4, 6, 1, std::vector<std::uint8_t>(24, 10));
  WritePng(dir / "r/b/2.png", 9, 5, 1, std::vector<std::uint8_t>(45, 60));
  WritePng(dir / "r/b/3.png", 2, 2, 1, std::vector<std::uint8_t>(4, 90));
  CHECK(ErrorOf(ImagesSpec({}), {dir / "r"}) == dir / "r/b/2.png" + ": 9x5 pixels (height x width), but " + dir / "r/a/1.png" +
                                                   " is 4x6; set data.image_size to resize them all");
  DataSpec spec = ImagesSpec({});
  spec.image_height = 3, spec.image_width = 7;
  Result<Examples> e = ReadImageFolders(spec, {dir / "r"}, 2);
  REQUIRE(e.ok());
  CHECK(e->height == 3);
  CHECK(e->width == 7);
  REQUIRE(e->features.size() == 4 * 21);
  for (int i = 0; i < 4; ++i)  // a flat image stays flat, down or up
    CHECK(Bytes(e->features, static_cast<std::size_t>(i) * 21, 21) == std::vector<std::uint8_t>(21, std::vector<std::uint8_t>{200, 10, 60, 90}[i]));
}

TEST_CASE("image folders: bad folders and bad files are refused naming them", "[unit][data]") {
  TempDir dir;
  const DataSpec spec = ImagesSpec({});
  WritePng(dir / "ok/a/1.png", 2, 2, 1, Ramp(2, 2, 0));
  std::filesystem::create_directories(dir / "ok/b");
  CHECK(ErrorOf(spec, {dir / "ok"}) == dir / "ok/b" + ": an empty class folder (no .png, .jpg or .jpeg file)");
  std::filesystem::create_directories(dir / "flat");
  WritePng(dir / "flat/1.png", 2, 2, 1, Ramp(2, 2, 0));
  CHECK(ErrorOf(spec, {dir / "flat"}) == dir / "flat: no class folders (expected one subfolder of PNG/JPEG files per class)");
  CHECK(ErrorOf(spec, {dir / "flat/1.png"}) ==
        dir / "flat/1.png: not a folder (image data is a folder with one subfolder of PNG/JPEG files per class)");

  const std::string png = PngBytes(8, 8, 1, Ramp(8, 8, 0));
  WritePng(dir / "bad/a/1.png", 8, 8, 1, Ramp(8, 8, 0));
  std::filesystem::create_directories(dir / "bad/b");
  WriteFile(dir / "bad/b/2.png", png.substr(0, png.size() - 24));  // the image data cut short
  CHECK(ErrorOf(spec, {dir / "bad"}).starts_with(dir / "bad/b/2.png: not a PNG image stb_image can read (chunk at byte 33 claims "));
  WriteFile(dir / "bad/b/2.png", "BM not a PNG at all");
  CHECK(ErrorOf(spec, {dir / "bad"}) == dir / "bad/b/2.png: not a PNG or JPEG image stb_image can read (unknown image type)");

  DataSpec regression = spec;
  regression.task = DataSpec::Task::kRegression;
  CHECK(ErrorOf(regression, {dir / "bad"}).find("regression needs a number per example") != std::string::npos);
}

TEST_CASE("image folders: the same examples and the same first error on any number of threads", "[unit][data]") {
  TempDir dir;
  tfd::testing::WriteSyntheticImageFolders(dir.path(), 300, 1, {"x", "y", "z"}, 6);
  Result<Examples> one = ReadImageFolders(ImagesSpec({}), {dir / "train"}, 1);
  Result<Examples> many = ReadImageFolders(ImagesSpec({}), {dir / "train"}, 7);
  REQUIRE(one.ok());
  REQUIRE(many.ok());
  CHECK(one->size == 300);
  CHECK(one->label_text == many->label_text);
  CHECK(std::equal(one->features.begin(), one->features.end(), many->features.begin(), many->features.end()));

  for (const char* name : {"y/150.png", "y/151.png", "z/2.png", "x/299.png"}) WriteFile(dir / "train/" + name, "garbage");
  // x/ sorts first: its bad file is the first one, whichever thread reaches it first.
  const std::string first = dir / "train/x/299.png: not a PNG or JPEG image stb_image can read (unknown image type)";
  for (int threads : {1, 2, 7}) CHECK(ErrorOf(ImagesSpec({}), {dir / "train"}, threads) == first);
}

TEST_CASE("DecodeImage bounds the size from the header before decoding", "[unit][data]") {
  std::string png = PngBytes(4, 4, 1, Ramp(4, 4, 0));
  const std::span<const std::uint8_t> bytes(reinterpret_cast<const std::uint8_t*>(png.data()), png.size());
  Result<Image> ok = DecodeImage(bytes, 3);
  REQUIRE(ok.ok());
  CHECK(ok->channels == 3);
  CHECK(ok->pixels.size() == 48);
  Result<Image> small = DecodeImage(bytes, 1, 15);
  REQUIRE_FALSE(small.ok());
  CHECK(small.status().message() == "4x4 pixels (height x width) is over the 15 an image may have");
  // The IHDR chunk's width and height (bytes 16..23) made 5000 x 8000: refused from the header.
  png.replace(16, 8, std::string("\x00\x00\x13\x88\x00\x00\x1f\x40", 8));
  Result<Image> huge = DecodeImage(std::span(reinterpret_cast<const std::uint8_t*>(png.data()), png.size()), 1);
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.status().message() == "8000x5000 pixels (height x width) is over the 33554432 an image may have");
}

// A PNG chunk: length, type, data, CRC over type and data.
std::string Chunk(const std::string& type, const std::string& data) {
  std::string body = type + data;
  const auto crc = static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
  return tfd::testing::BigEndian32(static_cast<std::uint32_t>(data.size())) + body + tfd::testing::BigEndian32(crc);
}

TEST_CASE("DecodeImage refuses a PNG whose image data inflates past what its size needs", "[unit][data]") {
  std::string raw(300 << 10, '\0');  // 300 KiB that deflate cannot shrink, for an 8 x 8 gray image
  std::uint32_t x = 1;
  for (char& c : raw) c = static_cast<char>((x = x * 1664525u + 1013904223u) >> 24);
  std::string packed(compressBound(static_cast<uLong>(raw.size())), '\0');
  uLongf packed_size = packed.size();
  REQUIRE(::compress(reinterpret_cast<Bytef*>(packed.data()), &packed_size, reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size())) == Z_OK);
  packed.resize(packed_size);
  const std::string ihdr = tfd::testing::BigEndian32(8) + tfd::testing::BigEndian32(8) + std::string("\x08\x00\x00\x00\x00", 5);
  const std::string png = std::string("\x89PNG\r\n\x1a\n", 8) + Chunk("IHDR", ihdr) + Chunk("IDAT", packed) + Chunk("IEND", "");
  Result<Image> img = DecodeImage(std::span(reinterpret_cast<const std::uint8_t*>(png.data()), png.size()), 1);
  REQUIRE_FALSE(img.ok());
  CHECK(img.status().message() == "not a PNG image stb_image can read (its image data inflates past the 3216 bytes 8x8 pixels need)");
}

TEST_CASE("image folders through LoadData: classes sorted by name, a test folder or a held-out split", "[unit][data]") {
  TempDir dir;
  tfd::testing::WriteSyntheticImageFolders(dir.path(), 40, 12, {"frog", "cat", "dog"}, 5);
  DataSpec spec = ImagesSpec({dir / "train"});
  spec.test.paths = {dir / "test"};
  Result<DataSplits> d = LoadData(spec, 1);
  REQUIRE(d.ok());
  CHECK(d->train.class_names == std::vector<std::string>{"cat", "dog", "frog"});
  CHECK(d->train.num_classes == 3);
  CHECK(d->train.size == 40);
  CHECK(d->test.size == 12);
  CHECK(d->train.pixels() == 25);
  CHECK(d->train.dtype == DType::kU8);
  CHECK(d->train.labels.front() == 0);  // the first example is in cat/, the first folder
  CHECK(d->train.labels.back() == 2);

  DataSpec split = ImagesSpec({dir / "train"});
  split.test_fraction = 0.25;
  Result<DataSplits> held = LoadData(split, 1);
  REQUIRE(held.ok());
  CHECK(held->train.size == 30);
  CHECK(held->test.size == 10);
}

}  // namespace
}  // namespace tfd::data
