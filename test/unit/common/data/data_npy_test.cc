// The NumPy readers (common/data/npy.cc): .npy pairs and .npz archives written here byte by byte
// (and, where /usr/bin/python3 has numpy, by numpy itself), every dtype and layout the reader
// converts, and each kind of broken file refused with one line naming it.
#include <zip.h>

#include <bit>
#include <cstring>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "common/config/job.h"
#include "common/data/npy.h"
#include "common/data/readers.h"
#include "common/data/source.h"
#include "test/test_util.h"

namespace tfd::data {
namespace {

using config::DataSpec;
using tfd::testing::TempDir;
using tfd::testing::WriteFile;

// An .npy file: the format's prefix, the header dict padded with spaces to a multiple of 64 bytes
// and ended by a newline (as numpy writes it), then `data`.
std::string Npy(const std::string& descr, const std::string& shape, const std::string& data, bool fortran = false, int version = 1) {
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': {}, 'shape': {}, }}", descr, fortran ? "True" : "False", shape);
  const std::size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(version);
  out += '\0';
  for (std::size_t i = 0; i < prefix - 8; ++i) out += static_cast<char>((dict.size() >> (8 * i)) & 0xff);
  return out + dict + data;
}

// The elements' bytes, little-endian, or big-endian when `big`.
template <typename T>
std::string Raw(const std::vector<T>& v, bool big = false) {
  std::string out(v.size() * sizeof(T), '\0');
  std::memcpy(out.data(), v.data(), out.size());
  if (big)
    for (std::size_t i = 0; i < out.size(); i += sizeof(T)) std::reverse(out.begin() + static_cast<std::ptrdiff_t>(i), out.begin() + static_cast<std::ptrdiff_t>(i + sizeof(T)));
  return out;
}

std::span<const std::uint8_t> ByteSpan(const std::string& s) { return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()}; }

// `s` with its first `from` replaced by `to`.
std::string Replaced(std::string s, const std::string& from, const std::string& to) {
  const std::size_t at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

std::vector<float> Floats(const ByteArray& b) {
  std::vector<float> v(b.size() / sizeof(float));
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

DataSpec Classification() { return DataSpec{}; }
DataSpec Regression() {
  DataSpec s;
  s.task = DataSpec::Task::kRegression;
  return s;
}

// Reads x (and labels 0 .. n-1 mod 2 written as int64) and returns the examples or the error.
Result<Examples> ReadX(const TempDir& dir, const std::string& x_bytes, std::int64_t n) {
  WriteFile(dir / "x.npy", x_bytes);
  std::vector<std::int64_t> y(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>(i % 2);
  WriteFile(dir / "y.npy", Npy("<i8", fmt::format("({},)", n), Raw(y)));
  return ReadNpyPair(Classification(), dir / "x.npy", dir / "y.npy");
}

TEST_CASE("npy: float32 features are mapped as they are; integer labels are class ids", "[unit][data]") {
  TempDir dir;
  const std::vector<float> x = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  WriteFile(dir / "x.npy", Npy("<f4", "(3, 4)", Raw(x)));
  WriteFile(dir / "y.npy", Npy("<i4", "(3,)", Raw(std::vector<std::int32_t>{2, 0, 1})));
  Result<Examples> e = ReadNpyPair(Classification(), dir / "x.npy", dir / "y.npy");
  REQUIRE(e.ok());
  CHECK(e->size == 3);
  CHECK((e->height == 1 && e->width == 4 && e->channels == 1));
  CHECK(e->dtype == DType::kF32);
  CHECK(e->features.mapped());
  CHECK(Floats(e->features) == x);
  CHECK(e->label_ids == std::vector<std::int64_t>{2, 0, 1});
  CHECK(e->label_text.empty());
}

TEST_CASE("npy: uint8 images (N, H, W) and (N, H, W, C) stay bytes and mapped", "[unit][data]") {
  TempDir dir;
  std::vector<std::uint8_t> pixels(2 * 3 * 2 * 3);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 7);
  Result<Examples> gray = ReadX(dir, Npy("|u1", "(2, 3, 6)", Raw(pixels)), 2);
  REQUIRE(gray.ok());
  CHECK((gray->height == 3 && gray->width == 6 && gray->channels == 1));
  CHECK(gray->dtype == DType::kU8);
  CHECK(gray->features.mapped());
  CHECK(gray->features == pixels);
  Result<Examples> rgb = ReadX(dir, Npy("|u1", "(2, 3, 2, 3)", Raw(pixels)), 2);
  REQUIRE(rgb.ok());
  CHECK((rgb->height == 3 && rgb->width == 2 && rgb->channels == 3));
  CHECK(rgb->features == pixels);
  // (N,) is one value per example; more than four dimensions a row of their product.
  Result<Examples> one = ReadX(dir, Npy("<f4", "(3,)", Raw(std::vector<float>{1, 2, 3})), 3);
  REQUIRE(one.ok());
  CHECK((one->height == 1 && one->width == 1 && one->size == 3));
  Result<Examples> deep = ReadX(dir, Npy("|u1", "(2, 3, 2, 3, 1)", Raw(pixels)), 2);
  REQUIRE(deep.ok());
  CHECK((deep->height == 1 && deep->width == 18 && deep->channels == 1));
}

TEST_CASE("npy: float64, integer, big-endian and Fortran-order arrays become float32 in C order", "[unit][data]") {
  TempDir dir;
  // x[n][h][w] = 100n + 10h + w for shape (2, 2, 3); `fortran` lists it with n fastest, then h, then w.
  std::vector<float> c_order, fortran;
  for (int n = 0; n < 2; ++n)
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 3; ++w) c_order.push_back(static_cast<float>(100 * n + 10 * h + w));
  for (int w = 0; w < 3; ++w)
    for (int h = 0; h < 2; ++h)
      for (int n = 0; n < 2; ++n) fortran.push_back(static_cast<float>(100 * n + 10 * h + w));
  auto as = [](const std::vector<float>& v, auto type) {
    std::vector<decltype(type)> out(v.begin(), v.end());
    return out;
  };
  const std::vector<std::pair<std::string, std::string>> files = {
      {"<f8", Npy("<f8", "(2, 2, 3)", Raw(as(c_order, double{})))},
      {">f4", Npy(">f4", "(2, 2, 3)", Raw(c_order, true))},
      {"<i4 fortran", Npy("<i4", "(2, 2, 3)", Raw(as(fortran, std::int32_t{})), true)},
      {">i8", Npy(">i8", "(2, 2, 3)", Raw(as(c_order, std::int64_t{}), true))},
      {">u2 fortran", Npy(">u2", "(2, 2, 3)", Raw(as(fortran, std::uint16_t{}), true), true)},
      {"<f4 fortran", Npy("<f4", "(2, 2, 3)", Raw(fortran), true)},
  };
  for (const auto& [name, bytes] : files) {
    INFO(name);
    Result<Examples> e = ReadX(dir, bytes, 2);
    REQUIRE(e.ok());
    CHECK(e->dtype == DType::kF32);
    CHECK_FALSE(e->features.mapped());
    CHECK((e->height == 2 && e->width == 3));
    CHECK(Floats(e->features) == c_order);
  }
  // ByteSpan in Fortran order are reordered and stay bytes.
  Result<Examples> bytes = ReadX(dir, Npy("|u1", "(2, 2, 3)", Raw(as(fortran, std::uint8_t{})), true), 2);
  REQUIRE(bytes.ok());
  CHECK(bytes->dtype == DType::kU8);
  CHECK(bytes->features == as(c_order, std::uint8_t{}));
}

TEST_CASE("npy: format 2.0 and 3.0 headers, double quotes and any key order parse", "[unit][data]") {
  const std::string data = Raw(std::vector<float>{1, 2, 3, 4});
  for (int version : {2, 3}) {
    const std::string file = Npy("<f4", "(2, 2)", data, false, version);
    Result<NpyHeader> h = ParseNpyHeader(ByteSpan(file), file.size(), "v.npy");
    REQUIRE(h.ok());
    CHECK(h->data_offset == 128);  // 12 + the padded dict, a multiple of 64 as numpy writes it
    CHECK(h->shape == std::vector<std::uint64_t>{2, 2});
  }
  std::string dict = "{\"shape\": (2,2), \"fortran_order\": True , 'descr':'<u2'}\n";
  std::string file = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(dict.size()) + '\0' + dict + std::string(8, '\0');
  Result<NpyHeader> h = ParseNpyHeader(ByteSpan(file), file.size(), "q.npy");
  REQUIRE(h.ok());
  CHECK(h->fortran_order);
  CHECK((h->kind == 'u' && h->item_bytes == 2 && !h->swap));
  CHECK(h->ShapeText() == "(2, 2)");
}

TEST_CASE("npy: regression reads float targets; classification takes float labels only when whole", "[unit][data]") {
  TempDir dir;
  WriteFile(dir / "x.npy", Npy("<f4", "(3, 1)", Raw(std::vector<float>{1, 2, 3})));
  WriteFile(dir / "y.npy", Npy("<f8", "(3,)", Raw(std::vector<double>{0.5, -1.25, 2})));
  Result<Examples> r = ReadNpyPair(Regression(), dir / "x.npy", dir / "y.npy");
  REQUIRE(r.ok());
  CHECK(r->targets == std::vector<float>{0.5f, -1.25f, 2.0f});
  CHECK(r->num_targets == 1);
  CHECK(r->label_ids.empty());
  Result<Examples> c = ReadNpyPair(Classification(), dir / "x.npy", dir / "y.npy");
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message() == dir / "y.npy" +
                                    ": example 0 has label 0.5; class ids are whole numbers (for a numeric target set \"task\": \"regression\")");
  WriteFile(dir / "y.npy", Npy("<f4", "(3, 1)", Raw(std::vector<float>{1, 0, 3})));
  Result<Examples> whole = ReadNpyPair(Classification(), dir / "x.npy", dir / "y.npy");
  REQUIRE(whole.ok());
  CHECK(whole->label_ids == std::vector<std::int64_t>{1, 0, 3});
  WriteFile(dir / "y.npy", Npy("<f4", "(3, 2)", Raw(std::vector<float>{1, 10, 2, 20, 3, 30})));
  Result<Examples> two = ReadNpyPair(Regression(), dir / "x.npy", dir / "y.npy");
  REQUIRE(two.ok());
  CHECK(two->num_targets == 2);
  CHECK(two->targets == std::vector<float>{1, 10, 2, 20, 3, 30});
}

TEST_CASE("npy: each malformed .npy is refused with one line naming the file and what is wrong", "[unit][data]") {
  TempDir dir;
  const std::string f4 = Raw(std::vector<float>{1, 2, 3, 4});
  const std::string good = Npy("<f4", "(2, 2)", f4);
  std::string huge_header = good;
  huge_header[8] = '\xff', huge_header[9] = '\x7f';
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "truncated .npy file: 0 bytes"},
      {"\x93NUM", "truncated .npy file: 4 bytes"},
      {"PK\x03\x04 not npy", "not an .npy file"},
      {good.substr(0, 40), "truncated .npy file: 40 bytes, its header says it alone has 128"},
      {good.substr(0, good.size() - 1), "truncated .npy file: shape (2, 2) of '<f4' is 16 bytes of data, the file has 15"},
      {good + "xx", "2 bytes after the data that shape (2, 2) of '<f4' holds (16 bytes)"},
      {std::string("\x93NUMPY\x04\x00", 8) + good.substr(8), "npy format version 4.0 is not supported"},
      {huge_header, "npy header of 32767 bytes; at most 10000 are read"},
      {Npy("<c8", "(2, 1)", f4), "dtype '<c8' (complex numbers) is not supported"},
      {Npy("|O", "(2,)", f4), "dtype '|O' (Python objects) is not supported"},
      {Npy("<f2", "(8,)", f4), "dtype '<f2' (16-bit floats) is not supported"},
      {Npy("|i4", "(2, 2)", f4), "has no byte order ('|') but 4 bytes per item"},
      {Npy("<f4", "()", f4.substr(0, 4)), "shape () has no dimensions: expected (N, ...)"},
      {Npy("<f4", "(0, 2)", ""), "shape (0, 2) holds no values"},
      {Npy("<f4", "(4)", f4), "'shape' (n) is not a tuple"},
      {Npy("<f4", "(2, -2)", f4), "expected a dimension"},
      {Npy("<f4", "(99999999999999999999, 2)", f4), "expected a dimension (an integer below 2^64)"},
      {Npy("<f4", "(4294967296, 4294967296)", f4), "truncated .npy file: shape (4294967296, 4294967296) of '<f4' needs more than"},
      {Npy("<f4", "[2, 2]", f4), "'shape' must be a tuple of integers at byte"},
      {Npy("<f4", "(2, 2), 'extra': 1", f4), "unexpected key 'extra'"},
      {Npy("<f4", "(2, 2), 'shape': (2, 2)", f4), "key 'shape' appears twice"},
      {Replaced(good, "'descr'", "'DESCR'"), "unexpected key 'DESCR'"},
      {Replaced(good, "False", "Falsy"), "'fortran_order' must be True or False"},
      {Replaced(good, "{", "["), "expected a dict '{'"},
      {Replaced(good, "} ", "}x"), "text after the dict"},
      {Replaced(good, "}", ")"), "expected a quoted key or '}'"},
      {Replaced(good, "'<f4'", "\"<f4'"), "'descr' must be a quoted dtype string"},
      {Npy("<f4", "(2, 2)", f4).replace(20, 1, "\x01"), "byte 20 is 0x01, not printable ASCII"},
      {Npy("<f4", "(2, 2)", Raw(std::vector<float>{1, 2, std::nanf(""), 4})), "example 1, value 0 is nan; features must be finite numbers"},
      {Npy("<f8", "(2, 2)", Raw(std::vector<double>{1, 2, 3, 1e300})), "example 1, value 1 is inf; features must be finite numbers"},
  };
  for (const auto& [bytes, expected] : cases) {
    INFO(expected);
    Result<Examples> e = ReadX(dir, bytes, 2);
    REQUIRE_FALSE(e.ok());
    const std::string& m = e.status().message();
    CHECK(e.status().code() == Code::kInvalidArgument);
    CHECK(m.rfind(dir / "x.npy" + ": ", 0) == 0);
    CHECK(m.find('\n') == std::string::npos);
    CHECK(m.find(expected) != std::string::npos);
  }
  // A structured dtype and a missing key (the dict is not the writer's).
  std::string structured = "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }\n";
  std::string missing = "{'descr': '<f4', 'shape': (2,), }\n";
  for (const auto& [dict, expected] : {std::pair{structured, "structured (record) dtype"}, std::pair{missing, "no 'fortran_order' key"}}) {
    const std::string file = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(dict.size()) + '\0' + dict + f4.substr(0, 8);
    Result<NpyHeader> h = ParseNpyHeader(ByteSpan(file), file.size(), "s.npy");
    REQUIRE_FALSE(h.ok());
    CHECK(h.status().message().rfind("s.npy: ", 0) == 0);
    CHECK(h.status().message().find(expected) != std::string::npos);
  }
}

TEST_CASE("npy: x and y of different lengths, or labels that are not one id per example, are refused naming the file", "[unit][data]") {
  TempDir dir;
  WriteFile(dir / "x.npy", Npy("<f4", "(2, 2)", Raw(std::vector<float>{1, 2, 3, 4})));
  WriteFile(dir / "y.npy", Npy("|u1", "(3,)", std::string("\x01\x00\x01", 3)));
  Result<Examples> e = ReadNpyPair(Classification(), dir / "x.npy", dir / "y.npy");
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message() == fmt::format("{}: 3 labels (shape (3,)), but {} has 2 examples", dir / "y.npy", dir / "x.npy"));
  WriteFile(dir / "y.npy", Npy("<i8", "(2, 2)", Raw(std::vector<std::int64_t>{0, 1, 1, 0})));
  e = ReadNpyPair(Classification(), dir / "x.npy", dir / "y.npy");
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message().find("labels of shape (2, 2); expected one class id per example") != std::string::npos);
  WriteFile(dir / "y.npy", Npy("<i8", "(2,)", Raw(std::vector<std::int64_t>{0, -1})));
  e = ReadNpyPair(Classification(), dir / "x.npy", dir / "y.npy");
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message() == dir / "y.npy" + ": example 1 has label -1; class ids are 0 and up");
}

// Writes an .npz archive of `arrays` (name without .npy, file bytes), deflated unless `stored`.
void WriteNpz(const std::string& path, const std::vector<std::pair<std::string, std::string>>& arrays, bool stored = false) {
  int error = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  REQUIRE(z != nullptr);
  for (const auto& [name, bytes] : arrays) {
    zip_source_t* src = zip_source_buffer(z, bytes.data(), bytes.size(), 0);  // `arrays` outlives zip_close
    REQUIRE(src != nullptr);
    const zip_int64_t index = zip_file_add(z, (name + ".npy").c_str(), src, ZIP_FL_OVERWRITE);
    REQUIRE(index >= 0);
    zip_set_file_compression(z, static_cast<zip_uint64_t>(index), stored ? ZIP_CM_STORE : ZIP_CM_DEFLATE, 0);
  }
  REQUIRE(zip_close(z) == 0);
}

TEST_CASE("npz: named arrays from stored and deflated archives, concatenated; a missing array names those present", "[unit][data]") {
  TempDir dir;
  std::vector<std::uint8_t> pixels(4 * 2 * 2);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i);
  const std::vector<std::uint8_t> first(pixels.begin(), pixels.begin() + 8), second(pixels.begin() + 8, pixels.end());
  WriteNpz(dir / "a.npz", {{"images", Npy("|u1", "(2, 2, 2)", Raw(first))}, {"labels", Npy("<i8", "(2,)", Raw(std::vector<std::int64_t>{0, 1}))}});
  WriteNpz(dir / "b.npz", {{"images", Npy("|u1", "(2, 2, 2)", Raw(second))}, {"labels", Npy("<i8", "(2,)", Raw(std::vector<std::int64_t>{1, 2}))}}, true);
  DataSpec spec;
  spec.format = DataSpec::Format::kNpz;
  spec.npz_x = "images", spec.npz_y = "labels";
  Result<Examples> e = ReadNpz(spec, {dir / "a.npz", dir / "b.npz"});
  REQUIRE(e.ok());
  CHECK(e->size == 4);
  CHECK((e->height == 2 && e->width == 2 && e->dtype == DType::kU8));
  CHECK(e->features == pixels);
  CHECK(e->label_ids == std::vector<std::int64_t>{0, 1, 1, 2});

  spec.npz_y = "y";
  e = ReadNpz(spec, {dir / "a.npz"});
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message() == dir / "a.npz" + ": no array \"y\" (data.arrays.y; the arrays: images, labels)");

  WriteNpz(dir / "c.npz", {{"images", Npy("<f4", "(2, 4)", Raw(std::vector<float>(8, 1.0f)))}, {"y", Npy("<i8", "(2,)", Raw(std::vector<std::int64_t>{0, 1}))}});
  e = ReadNpz(spec, {dir / "c.npz"});
  REQUIRE(e.ok());
  e = ReadNpz(spec, {dir / "c.npz", dir / "a.npz"});
  REQUIRE_FALSE(e.ok());  // a.npz has no "y"
  spec.npz_y = "labels";
  WriteNpz(dir / "d.npz", {{"images", Npy("<f4", "(2, 4)", Raw(std::vector<float>(8, 1.0f)))}, {"labels", Npy("<i8", "(2,)", Raw(std::vector<std::int64_t>{0, 1}))}});
  e = ReadNpz(spec, {dir / "a.npz", dir / "d.npz"});
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message() == dir / "d.npz" + ": examples are 1x4x1 floats, but " + dir / "a.npz" + "'s are 2x2x1 bytes");

  // A bad array inside names the archive and the array; a file that is not a zip names the file.
  WriteNpz(dir / "e.npz", {{"images", Npy("<c8", "(2, 1)", Raw(std::vector<float>(4, 0)))}, {"labels", Npy("<i8", "(2,)", Raw(std::vector<std::int64_t>{0, 1}))}});
  e = ReadNpz(spec, {dir / "e.npz"});
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message().rfind(dir / "e.npz" + ": array \"images\": dtype '<c8' (complex numbers) is not supported", 0) == 0);
  WriteFile(dir / "f.npz", "not a zip archive at all, just text");
  e = ReadNpz(spec, {dir / "f.npz"});
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message().rfind(dir / "f.npz" + ": not a readable .npz (zip) archive: ", 0) == 0);
  // A deflated entry cut short: the archive's end is gone.
  std::string bytes = tfd::testing::ReadAll(dir / "a.npz");
  WriteFile(dir / "g.npz", bytes.substr(0, bytes.size() / 2));
  e = ReadNpz(spec, {dir / "g.npz"});
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message().rfind(dir / "g.npz" + ": ", 0) == 0);
}

TEST_CASE("npy and npz files written by numpy itself read as numpy holds them", "[unit][data]") {
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
    WARN("numpy not found (/usr/bin/python3 with python3-numpy, which python3-sklearn brings): only the files written here were read");
    return;
  }
  TempDir dir;
  const std::string script = R"(
import numpy as np, sys
d = sys.argv[1]
x = (np.arange(5 * 3 * 4 * 2) % 251).astype(np.float32).reshape(5, 3, 4, 2)
np.save(d + '/x.npy', x)
np.save(d + '/xf.npy', np.asfortranarray(x.astype('>f8')))
np.save(d + '/xu.npy', x.astype(np.uint8))
np.save(d + '/y.npy', np.array([0, 1, 2, 1, 0], dtype=np.int64))
np.savez_compressed(d + '/a.npz', x=x, y=np.array([0, 1, 2, 1, 0], dtype=np.uint8))
)";
  WriteFile(dir / "make.py", script);
  REQUIRE(std::system(("/usr/bin/python3 " + dir / "make.py" + " " + dir.path()).c_str()) == 0);
  std::vector<float> expected(5 * 3 * 4 * 2);
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<float>(i % 251);
  for (const std::string x : {"x.npy", "xf.npy", "xu.npy"}) {
    INFO(x);
    Result<Examples> e = ReadNpyPair(Classification(), dir / x, dir / "y.npy");
    REQUIRE(e.ok());
    CHECK((e->size == 5 && e->height == 3 && e->width == 4 && e->channels == 2));
    CHECK(e->label_ids == std::vector<std::int64_t>{0, 1, 2, 1, 0});
    if (x == "xu.npy") {
      CHECK(e->dtype == DType::kU8);
      CHECK(e->features == std::vector<std::uint8_t>(expected.begin(), expected.end()));
    } else {
      CHECK(e->features.mapped() == (x == "x.npy"));
      CHECK(Floats(e->features) == expected);
    }
  }
  DataSpec spec;
  spec.format = DataSpec::Format::kNpz;
  Result<Examples> z = ReadNpz(spec, {dir / "a.npz"});
  REQUIRE(z.ok());
  CHECK(Floats(z->features) == expected);
  CHECK(z->label_ids == std::vector<std::int64_t>{0, 1, 2, 1, 0});
}

TEST_CASE("npy: a job's x/y pair loads through LoadData with its classes numbered and a test set held out", "[unit][data]") {
  TempDir dir;
  std::vector<float> x;
  std::vector<std::int64_t> y;
  for (int i = 0; i < 40; ++i) {
    y.push_back(i % 3);
    for (int j = 0; j < 5; ++j) x.push_back(static_cast<float>(i * 5 + j));
  }
  WriteFile(dir / "x.npy", Npy("<f4", "(40, 5)", Raw(x)));
  WriteFile(dir / "y.npy", Npy("<i8", "(40,)", Raw(y)));
  Result<config::JobSpec> job = config::ParseJobSpec(
      fmt::format(R"({{"model": "dnn", "epochs": 1, "batch_size": 2, "optimizer": {{"type": "sgd", "learning_rate": 0.1}},
                      "data": {{"train": {{"x": "{}", "y": "{}"}}, "test_split": 10}}}})",
                  dir / "x.npy", dir / "y.npy"),
      "job.json");
  REQUIRE(job.ok());
  Result<DataSplits> data = LoadData(job->data, 7);
  REQUIRE(data.ok());
  CHECK(data->train.size == 30);
  CHECK(data->test.size == 10);
  CHECK(data->train.num_classes == 3);
  CHECK(data->train.pixels() == 5);
  CHECK(data->train.class_names == std::vector<std::string>{"0", "1", "2"});
}

}  // namespace
}  // namespace tfd::data
