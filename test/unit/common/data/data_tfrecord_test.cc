// The TFRecord reader (common/data/tfrecord.h): records written here with the generated
// tf.train.Example classes and summary's framing, one file written by protobuf's Python library
// (write_tfrecord.py), and each kind of broken file refused naming the file and record offset.
#include <stb/stb_image_write.h>
#include <zlib.h>

#include <cstring>
#include <map>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "common/config/job.h"
#include "common/data/images.h"
#include "common/data/proto/example.pb.h"
#include "common/data/readers.h"
#include "common/data/source.h"
#include "common/data/tfrecord.h"
#include "common/summary/record.h"
#include "test/test_util.h"

namespace tfd::data {
namespace {

using config::DataSpec;
using tfd::testing::TempDir;
using tfd::testing::WriteFile;

tensorflow::Feature FloatsFeature(std::vector<float> v) {
  tensorflow::Feature f;
  for (float x : v) f.mutable_float_list()->add_value(x);
  return f;
}
tensorflow::Feature IntsFeature(std::vector<std::int64_t> v) {
  tensorflow::Feature f;
  for (std::int64_t x : v) f.mutable_int64_list()->add_value(x);
  return f;
}
tensorflow::Feature BytesFeature(std::vector<std::string> v) {
  tensorflow::Feature f;
  for (const std::string& x : v) f.mutable_bytes_list()->add_value(x);
  return f;
}

std::string Serialized(const std::map<std::string, tensorflow::Feature>& features) {
  tensorflow::Example ex;
  for (const auto& [k, f] : features) (*ex.mutable_features()->mutable_feature())[k] = f;
  return ex.SerializeAsString();
}

// The records framed as a TFRecord file's bytes.
std::string Framed(const std::vector<std::string>& records) {
  std::string out;
  for (const std::string& r : records) summary::AppendRecord(r, &out);
  return out;
}

DataSpec TfrecordSpec() {
  DataSpec s;
  s.format = DataSpec::Format::kTfrecord;
  return s;
}

// n records of two float features ("b": 2 values, "a": 1 value) and an int64 "label".
std::vector<std::string> TableRecords(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(Serialized({{"b", FloatsFeature({1.0f * i, 0.5f})}, {"a", IntsFeature({-i})}, {"label", IntsFeature({i % 3})}}));
  return out;
}

std::vector<float> FloatsOf(const Examples& e) {
  std::vector<float> v(e.features.size() / sizeof(float));
  std::memcpy(v.data(), e.features.data(), e.features.size());
  return v;
}

std::string ErrorReading(const DataSpec& spec, const std::string& path) {
  Result<Examples> r = ReadTfrecords(spec, {path});
  return r.ok() ? "" : r.status().message();
}

TEST_CASE("tfrecord: float and int64 features, every key but the label in sorted order, int64 labels", "[unit][data]") {
  TempDir dir;
  WriteFile(dir / "a.tfrecord", Framed(TableRecords(3)));
  WriteFile(dir / "b.tfrecord", Framed(TableRecords(2)));
  Result<Examples> e = ReadTfrecords(TfrecordSpec(), {dir / "a.tfrecord", dir / "b.tfrecord"});
  REQUIRE(e.ok());
  CHECK(e->size == 5);
  CHECK(e->dtype == DType::kF32);
  CHECK((e->height == 1 && e->width == 3 && e->channels == 1));
  CHECK(e->feature_names == std::vector<std::string>{"a", "b[0]", "b[1]"});
  CHECK(FloatsOf(*e) == std::vector<float>{0, 0, 0.5f, -1, 1, 0.5f, -2, 2, 0.5f, 0, 0, 0.5f, -1, 1, 0.5f});
  CHECK(e->label_ids == std::vector<std::int64_t>{0, 1, 2, 0, 1});
  CHECK(e->label_text.empty());
}

TEST_CASE("tfrecord: named features in the spec's order, a bytes label, a float regression target", "[unit][data]") {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 4; ++i)
    records.push_back(Serialized({{"x", FloatsFeature({0.25f * i})}, {"y", IntsFeature({10 + i})}, {"kind", BytesFeature({i < 2 ? "cat" : "dog"})}, {"t", FloatsFeature({2.0f * i})}}));
  WriteFile(dir / "d.tfrecord", Framed(records));
  DataSpec spec = TfrecordSpec();
  spec.label = "kind";
  spec.feature_names = {"y", "x"};
  Result<Examples> e = ReadTfrecords(spec, {dir / "d.tfrecord"});
  REQUIRE(e.ok());
  CHECK(FloatsOf(*e) == std::vector<float>{10, 0, 11, 0.25f, 12, 0.5f, 13, 0.75f});
  CHECK(e->label_text == std::vector<std::string>{"cat", "cat", "dog", "dog"});

  spec.task = DataSpec::Task::kRegression;
  spec.label = "t";
  Result<Examples> r = ReadTfrecords(spec, {dir / "d.tfrecord"});
  REQUIRE(r.ok());
  CHECK(r->targets == std::vector<float>{0, 2, 4, 6});
  CHECK(r->num_targets == 1);
  CHECK(r->label_ids.empty());
  spec.label = "kind";
  CHECK(ErrorReading(spec, dir / "d.tfrecord") ==
        dir / "d.tfrecord" + ": record 0 at byte 0: label \"kind\" is a bytes_list; a regression target is a float_list or an int64_list");
  spec.task = DataSpec::Task::kClassification;
  spec.label = "t";
  CHECK(ErrorReading(spec, dir / "d.tfrecord") ==
        dir / "d.tfrecord" + ": record 0 at byte 0: label \"t\" is a float_list; a class label is an int64_list or a bytes_list (or set \"task\": \"regression\")");
}

TEST_CASE("tfrecord: a bytes feature is an image: raw pixels with image_size and color, or a PNG", "[unit][data]") {
  TempDir dir;
  std::vector<std::string> raw, png;
  for (int i = 0; i < 3; ++i) {
    std::string pixels(2 * 3 * 3, '\0');
    for (std::size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<char>(10 * i + static_cast<int>(k));
    raw.push_back(Serialized({{"image", BytesFeature({pixels})}, {"label", IntsFeature({i})}}));
    REQUIRE(stbi_write_png((dir / "i.png").c_str(), 3, 2, 3, pixels.data(), 3 * 3) != 0);
    png.push_back(Serialized({{"image", BytesFeature({tfd::testing::ReadAll(dir / "i.png")})}, {"label", IntsFeature({i})}}));
  }
  WriteFile(dir / "raw.tfrecord", Framed(raw));
  WriteFile(dir / "png.tfrecord", Framed(png));
  DataSpec spec = TfrecordSpec();
  CHECK(ErrorReading(spec, dir / "raw.tfrecord") ==
        dir / "raw.tfrecord" + ": record 0 at byte 0: feature \"image\": 18 bytes are not a PNG or JPEG; for raw pixels set data.image_size [height, width] and data.color");
  spec.image_height = 2, spec.image_width = 3, spec.channels = 3;
  Result<Examples> r = ReadTfrecords(spec, {dir / "raw.tfrecord"});
  REQUIRE(r.ok());
  CHECK(r->dtype == DType::kU8);
  CHECK((r->size == 3 && r->height == 2 && r->width == 3 && r->channels == 3));
  CHECK(r->features[0] == 0);
  CHECK(r->features[18 + 5] == 15);

  for (int channels : {3, 0}) {
    spec.channels = channels;  // 0: the PNG's own (RGB)
    Result<Examples> p = ReadTfrecords(spec, {dir / "png.tfrecord"});
    REQUIRE(p.ok());
    CHECK((p->height == 2 && p->width == 3 && p->channels == 3));
    CHECK(p->features == std::vector<std::uint8_t>(r->features.begin(), r->features.end()));
  }
  spec.channels = 1;  // grayscale: converted
  Result<Examples> gray = ReadTfrecords(spec, {dir / "png.tfrecord"});
  REQUIRE(gray.ok());
  CHECK((gray->channels == 1 && gray->features.size() == 3 * 6));
  spec.image_height = 4;
  CHECK(ErrorReading(spec, dir / "png.tfrecord") ==
        dir / "png.tfrecord" + ": record 0 at byte 0: feature \"image\": the image is 2x3, data.image_size is 4x3 (TFRecord images are not resized)");
}

TEST_CASE("tfrecord: a .gz file is read through zlib; a GZIP file not named .gz is refused saying so", "[unit][data]") {
  TempDir dir;
  const std::string bytes = Framed(TableRecords(4));
  gzFile f = gzopen((dir / "t.tfrecord.gz").c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
  Result<Examples> e = ReadTfrecords(TfrecordSpec(), {dir / "t.tfrecord.gz"});
  REQUIRE(e.ok());
  CHECK(e->size == 4);
  CHECK(e->label_ids == std::vector<std::int64_t>{0, 1, 2, 0});

  std::filesystem::copy_file(dir / "t.tfrecord.gz", dir / "t.tfrecord");
  CHECK(ErrorReading(TfrecordSpec(), dir / "t.tfrecord") ==
        dir / "t.tfrecord" + ": record 0 at byte 0: the length's CRC does not match: the file is GZIP-compressed; name it .gz");
  const std::string gz = tfd::testing::ReadAll(dir / "t.tfrecord.gz");
  WriteFile(dir / "cut.tfrecord.gz", gz.substr(0, gz.size() - 20));
  CHECK(ErrorReading(TfrecordSpec(), dir / "cut.tfrecord.gz").rfind(dir / "cut.tfrecord.gz: ", 0) == 0);
}

TEST_CASE("tfrecord: a bad CRC, length or truncation names the file, record and byte offset", "[unit][data]") {
  TempDir dir;
  const std::vector<std::string> records = TableRecords(3);
  const std::string good = Framed(records);
  const std::size_t second = Framed({records[0]}).size(), third = second + Framed({records[1]}).size();
  const std::string path = dir / "bad.tfrecord";
  auto error_with = [&](std::string bytes) {
    WriteFile(path, bytes);
    return ErrorReading(TfrecordSpec(), path);
  };
  std::string b = good;
  b[second] ^= 1;
  CHECK(error_with(b) == fmt::format("{}: record 1 at byte {}: the length's CRC does not match (not a TFRecord file?)", path, second));
  b = good;
  b[second + 20] ^= 1;
  CHECK(error_with(b) == fmt::format("{}: record 1 at byte {}: the data's CRC does not match", path, second));
  b = good;
  b[third - 1] ^= 1;  // the data CRC itself
  CHECK(error_with(b) == fmt::format("{}: record 1 at byte {}: the data's CRC does not match", path, second));
  CHECK(error_with(good.substr(0, second + 5)) ==
        fmt::format("{}: record 1 at byte {}: the file ends inside the record's header (5 of 12 bytes; a truncated file?)", path, second));
  CHECK(error_with(good.substr(0, third - 1)) ==
        fmt::format("{}: record 1 at byte {}: length {} runs past the end of the file ({} bytes; a truncated file?)", path, second,
                    records[1].size(), third - 1));

  // A length with a valid CRC, over the limit: refused before anything is allocated.
  std::string huge;
  summary::AppendRecord("", &huge);
  const std::uint64_t n = tfrecord::kMaxRecordBytes + 1;
  std::memcpy(huge.data(), &n, 8);
  const std::uint32_t crc = summary::MaskedCrc32c(std::as_bytes(std::span(huge.data(), 8)));
  std::memcpy(huge.data() + 8, &crc, 4);
  CHECK(error_with(good + huge) == fmt::format("{}: record 3 at byte {}: length {} is over the limit of {} bytes", path, good.size(), n,
                                               tfrecord::kMaxRecordBytes));
  CHECK(error_with("") == path + ": no records");
  CHECK(error_with(Framed({"not a protobuf \xff\xff"})) == path + ": record 0 at byte 0: not a tf.train.Example (protobuf cannot parse it)");
}

TEST_CASE("tfrecord: every record must repeat the first record's keys, kinds and lengths", "[unit][data]") {
  TempDir dir;
  const std::string path = dir / "r.tfrecord";
  std::vector<std::string> records = TableRecords(2);
  const std::size_t second = Framed({records[0]}).size();
  auto error_with = [&](const std::string& last, const DataSpec& spec = TfrecordSpec()) {
    WriteFile(path, Framed({records[0], last}));
    return ErrorReading(spec, path);
  };
  const std::string at = fmt::format("{}: record 1 at byte {}: ", path, second);
  CHECK(error_with(Serialized({{"b", FloatsFeature({1, 2})}, {"a", IntsFeature({1})}, {"label", IntsFeature({1})}, {"c", IntsFeature({1})}})) ==
        at + "has feature \"c\", which the first record (in " + path + ") has not");
  CHECK(error_with(Serialized({{"b", FloatsFeature({1, 2})}, {"label", IntsFeature({1})}})) == at + "feature \"a\" is missing; the first record (in " + path + ") has it");
  CHECK(error_with(Serialized({{"b", FloatsFeature({1, 2, 3})}, {"a", IntsFeature({1})}, {"label", IntsFeature({1})}})) ==
        at + "feature \"b\" holds 3 values; the first record's holds 2");
  CHECK(error_with(Serialized({{"b", FloatsFeature({1, 2})}, {"a", FloatsFeature({1})}, {"label", IntsFeature({1})}})) ==
        at + "feature \"a\" is a float_list; the first record's is an int64_list");
  CHECK(error_with(Serialized({{"b", FloatsFeature({1, 2})}, {"a", IntsFeature({1})}, {"label", IntsFeature({1, 2})}})) ==
        at + "feature \"label\" holds 2 values; the first record's holds 1");

  DataSpec spec = TfrecordSpec();
  spec.label = "y";
  CHECK(error_with(records[1], spec) == path + ": record 0 at byte 0: data.label: no feature \"y\" (the record's features: a, b, label)");
  spec.label.clear();
  spec.feature_names = {"a", "z"};
  CHECK(error_with(records[1], spec) == path + ": record 0 at byte 0: data.features: no feature \"z\" (the record's features: a, b, label)");
}

TEST_CASE("tfrecord: a file written by protobuf's Python library reads the same, plain and GZIP", "[unit][data]") {
  TempDir dir;
  const std::string out = dir / "py.tfrecord";
  tfd::testing::CommandResult w =
      tfd::testing::RunCommand(fmt::format("python3 {} {} {} {}", WRITE_TFRECORD, EXAMPLE_PROTO, dir / "proto", out), dir);
  INFO("write_tfrecord.py: " << w.err);
  REQUIRE(w.exit_code == 0);
  DataSpec spec = TfrecordSpec();
  spec.label = "species";
  spec.feature_names = {"pixels", "count"};
  for (const std::string& path : {out, out + ".gz"}) {
    Result<Examples> e = ReadTfrecords(spec, {path});
    REQUIRE(e.ok());
    CHECK(e->size == 5);
    CHECK(e->label_text == std::vector<std::string>{"cat", "dog", "cat", "dog", "cat"});
    const std::vector<float> v = FloatsOf(*e);
    REQUIRE(v.size() == 25);
    for (int i = 0; i < 5; ++i) {
      const float* row = v.data() + 5 * i;
      CHECK(row[0] == static_cast<float>(i / 2.0));
      CHECK(row[1] == static_cast<float>(-i));
      CHECK(row[2] == static_cast<float>(0.001 * i));
      CHECK(row[3] == static_cast<float>(i));
      CHECK(row[4] == static_cast<float>((std::int64_t{1} << 40) + i));
    }
  }
}

TEST_CASE("tfrecord: a job's data spec reads TFRecords through LoadData, classes numbered, a test split held out", "[unit][data]") {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 20; ++i) records.push_back(Serialized({{"x", FloatsFeature({1.0f * i, 2.0f})}, {"class", BytesFeature({i % 2 == 0 ? "even" : "odd"})}}));
  WriteFile(dir / "train.tfrecord", Framed(records));
  Result<config::JobSpec> job = config::ParseJobSpec(
      fmt::format(R"({{"model": "dnn", "epochs": 1, "batch_size": 2, "optimizer": {{"type": "sgd", "learning_rate": 0.1}},
                     "data": {{"train": "{}", "test_split": 5, "label": "class"}}}})",
                  dir / "*.tfrecord"),
      "job.json");
  REQUIRE(job.ok());
  REQUIRE(job->data.format == DataSpec::Format::kTfrecord);
  Result<DataSplits> d = LoadData(job->data, 7);
  REQUIRE(d.ok());
  CHECK(d->train.size == 15);
  CHECK(d->test.size == 5);
  CHECK(d->train.class_names == std::vector<std::string>{"even", "odd"});
  CHECK(d->train.pixels() == 2);
}

TEST_CASE("tfrecord: DecodeImage refuses what is not a PNG or JPEG, a corrupt one, and a PNG whose lengths lie", "[unit][data]") {
  const std::vector<std::uint8_t> text = {'h', 'e', 'l', 'l', 'o'};
  Result<Image> r = DecodeImage(text, 0);
  REQUIRE(!r.ok());
  CHECK(r.status().message() == "not a PNG or JPEG image");
  const std::vector<std::uint8_t> cut = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13};
  Result<Image> c = DecodeImage(cut, 0);
  REQUIRE(!c.ok());
  CHECK(c.status().message().rfind("not a PNG or JPEG image stb_image can read (", 0) == 0);

  // A PNG whose IDAT chunk claims more bytes than there are: refused before stb_image, which would
  // grow its buffer to the claimed length.
  TempDir dir;
  const std::uint8_t gray[4] = {0, 80, 160, 240};
  REQUIRE(stbi_write_png((dir / "g.png").c_str(), 2, 2, 1, gray, 2) != 0);
  const std::string png = tfd::testing::ReadAll(dir / "g.png");
  const auto as_bytes = [](const std::string& s) { return std::vector<std::uint8_t>(s.begin(), s.end()); };
  Result<Image> ok = DecodeImage(as_bytes(png), 0);
  REQUIRE(ok.ok());
  CHECK(ok->pixels == std::vector<std::uint8_t>(gray, gray + 4));
  const std::size_t idat = png.find("IDAT") - 4;
  std::string lying = png;
  lying[idat] = '\x55';
  Result<Image> l = DecodeImage(as_bytes(lying), 0);
  REQUIRE(!l.ok());
  CHECK(l.status().message() == fmt::format("not a PNG image stb_image can read (chunk at byte {} claims {} bytes; {} remain)", idat,
                                            0x55000000u + static_cast<std::uint8_t>(png[idat + 1]) * 0x10000u +
                                                static_cast<std::uint8_t>(png[idat + 2]) * 0x100u + static_cast<std::uint8_t>(png[idat + 3]),
                                            png.size() - idat - 8));
  std::string wide = png;  // the header says 3 pixels wide; the data holds 2
  wide[16 + 3] = 3;
  Result<Image> w = DecodeImage(as_bytes(wide), 0);
  REQUIRE(!w.ok());
  CHECK(w.status().message().rfind("cannot decode the image (", 0) == 0);  // stb_image's own check, below 256 KiB of data
}

}  // namespace
}  // namespace tfd::data
