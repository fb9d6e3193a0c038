// TensorBoard event files: the TFRecord framing against TensorBoard's own golden record, events
// read back through a protobuf decoder written here from the published field numbers, cut-off
// files, the writer's files and errors, and the summaries a standalone run writes.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "common/config/job.h"
#include "common/summary/event.h"
#include "common/summary/record.h"
#include "common/summary/writer.h"
#include "daemon/train/standalone.h"
#include "daemon/train/summary_observer.h"
#include "test/test_util.h"

namespace tfd::summary {
namespace {

namespace fs = std::filesystem;

// --- A protobuf reader for the fields of event.proto, summary.proto and histogram.proto we use.

struct Proto {
  std::string_view in;
  bool ok = true;
  bool Varint(std::uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (in.empty()) return ok = false;
      const auto b = static_cast<std::uint8_t>(in[0]);
      in.remove_prefix(1);
      *v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return ok = false;
  }
  template <typename T>
  bool Fixed(T* v) {
    if (in.size() < sizeof(T)) return ok = false;
    std::memcpy(v, in.data(), sizeof(T));
    in.remove_prefix(sizeof(T));
    return true;
  }
  bool Bytes(std::string_view* b) {
    std::uint64_t n = 0;
    if (!Varint(&n) || n > in.size()) return ok = false;
    *b = in.substr(0, n);
    in.remove_prefix(n);
    return true;
  }
};

struct DecodedValue {
  std::string tag;
  std::optional<float> simple;
  std::optional<Histogram> histo;
};
struct DecodedEvent {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string file_version;
  std::vector<DecodedValue> values;
};

std::vector<double> PackedDoubles(std::string_view b) {
  std::vector<double> v(b.size() / 8);
  std::memcpy(v.data(), b.data(), v.size() * 8);
  return v;
}

// Calls on_field(key, reader) for each field of the message `b`; on_field reads the field's value.
template <typename F>
void ForEachField(std::string_view b, F on_field) {
  Proto p{b};
  std::uint64_t key = 0;
  while (!p.in.empty() && p.Varint(&key)) on_field(key, p);
  REQUIRE(p.ok);
}

Histogram DecodeHisto(std::string_view b) {
  Histogram h;
  ForEachField(b, [&](std::uint64_t key, Proto& p) {
    std::string_view bytes;
    switch (key) {
      case 0x09: p.Fixed(&h.min); break;
      case 0x11: p.Fixed(&h.max); break;
      case 0x19: p.Fixed(&h.num); break;
      case 0x21: p.Fixed(&h.sum); break;
      case 0x29: p.Fixed(&h.sum_squares); break;
      case 0x32: p.Bytes(&bytes), h.bucket_limit = PackedDoubles(bytes); break;
      case 0x3a: p.Bytes(&bytes), h.bucket = PackedDoubles(bytes); break;
      default: FAIL("unexpected HistogramProto key " << key);
    }
  });
  return h;
}

DecodedValue DecodeValue(std::string_view b) {
  DecodedValue v;
  ForEachField(b, [&](std::uint64_t key, Proto& p) {
    std::string_view bytes;
    float f = 0;
    switch (key) {
      case 0x0a: p.Bytes(&bytes), v.tag = bytes; break;
      case 0x15: p.Fixed(&f), v.simple = f; break;
      case 0x2a: p.Bytes(&bytes), v.histo = DecodeHisto(bytes); break;
      default: FAIL("unexpected Summary.Value key " << key);
    }
  });
  return v;
}

DecodedEvent DecodeEvent(std::string_view b) {
  DecodedEvent e;
  ForEachField(b, [&](std::uint64_t key, Proto& p) {
    std::string_view bytes;
    std::uint64_t step = 0;
    switch (key) {
      case 0x09: p.Fixed(&e.wall_time); break;
      case 0x10: p.Varint(&step), e.step = static_cast<std::int64_t>(step); break;
      case 0x1a: p.Bytes(&bytes), e.file_version = bytes; break;
      case 0x2a:  // Summary: repeated Value, field 1
        p.Bytes(&bytes);
        ForEachField(bytes, [&](std::uint64_t k, Proto& s) {
          std::string_view value;
          REQUIRE(k == 0x0a);
          REQUIRE(s.Bytes(&value));
          e.values.push_back(DecodeValue(value));
        });
        break;
      default: FAIL("unexpected Event key " << key);
    }
  });
  return e;
}

std::vector<DecodedEvent> ReadEventFile(const std::string& path, bool* truncated = nullptr) {
  Result<ReadRecordsResult> read = ReadRecords(tfd::testing::ReadAll(path));
  REQUIRE(read.ok());
  if (truncated != nullptr) *truncated = read->truncated;
  else CHECK_FALSE(read->truncated);
  std::vector<DecodedEvent> events;
  for (const std::string& r : read->records) events.push_back(DecodeEvent(r));
  return events;
}

// The event files under `dir`, by name.
std::vector<std::string> EventFiles(const std::string& dir) {
  std::vector<std::string> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find("tfevents") != std::string::npos) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::string Hex(std::string_view s) {
  std::string out;
  for (char c : s) out += fmt::format("{:02x} ", static_cast<std::uint8_t>(c));
  return out;
}

TEST_CASE("the file_version record matches TensorBoard's golden record byte for byte", "[unit][summary]") {
  const unsigned char wall[] = {0x00, 0x00, 0x80, 0x38, 0x99, 0xd6, 0xd7, 0x41};
  double wall_time = 0;
  std::memcpy(&wall_time, wall, 8);
  std::string record;
  AppendRecord(EncodeFileVersionEvent(wall_time), &record);
  const unsigned char golden[] = {0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // length 24
                                  0xa3, 0x7f, 0x4b, 0x22,                          // its masked CRC
                                  0x09, 0x00, 0x00, 0x80, 0x38, 0x99, 0xd6, 0xd7, 0x41, 0x1a, 0x0d,
                                  'b',  'r',  'a',  'i',  'n',  '.',  'E',  'v',  'e',  'n',  't',  ':',  '2',
                                  0x12, 0x4b, 0x36, 0xab};  // the data's masked CRC
  CHECK(Hex(record) == Hex(std::string_view(reinterpret_cast<const char*>(golden), sizeof golden)));
}

TEST_CASE("scalars and a histogram come back through a protobuf decoder", "[unit][summary]") {
  const std::vector<Value> values = {{"loss", 0.25f}, {"time/compute_seconds", 1.5e-3f}};
  std::string file;
  AppendRecord(EncodeFileVersionEvent(1.7e9), &file);
  AppendRecord(EncodeSummaryEvent(1.7e9 + 1, 300, values), &file);
  const std::vector<float> w = {-2.0f, -0.5f, 0.0f, 0.0f, 1e-3f, 0.5f, 3.0f, NAN};
  AppendRecord(EncodeSummaryEvent(1.7e9 + 2, 1ll << 40, std::vector<Value>{{"weights/dense/kernel", MakeHistogram(w)}}), &file);
  Result<ReadRecordsResult> read = ReadRecords(file);
  REQUIRE(read.ok());
  REQUIRE(read->records.size() == 3);
  const DecodedEvent first = DecodeEvent(read->records[0]);
  CHECK(first.file_version == "brain.Event:2");
  CHECK(first.wall_time == 1.7e9);
  const DecodedEvent scalars = DecodeEvent(read->records[1]);
  CHECK(scalars.step == 300);
  CHECK(scalars.wall_time == 1.7e9 + 1);
  REQUIRE(scalars.values.size() == 2);
  CHECK(scalars.values[0].tag == "loss");
  CHECK(scalars.values[0].simple == 0.25f);
  CHECK(scalars.values[1].tag == "time/compute_seconds");
  CHECK(scalars.values[1].simple == 1.5e-3f);
  const DecodedEvent histo = DecodeEvent(read->records[2]);
  CHECK(histo.step == (1ll << 40));
  REQUIRE(histo.values.size() == 1);
  CHECK(histo.values[0].tag == "weights/dense/kernel");
  REQUIRE(histo.values[0].histo.has_value());
  const Histogram& h = *histo.values[0].histo;
  CHECK(h.num == 7);  // the NaN left out
  CHECK(h.min == -2.0);
  CHECK(h.max == 3.0);
  CHECK(h.sum == Approx(-2.0 - 0.5 + 1e-3 + 0.5 + 3.0));
  CHECK(h.sum_squares == Approx(4.0 + 0.25 + 1e-6 + 0.25 + 9.0));
  REQUIRE(h.bucket.size() == h.bucket_limit.size());
  CHECK(h.bucket.size() <= kMaxBuckets);
  double total = 0;
  for (std::size_t i = 0; i < h.bucket.size(); ++i) {
    total += h.bucket[i];
    if (i > 0) CHECK(h.bucket_limit[i] > h.bucket_limit[i - 1]);
    // The two zeros: bucket [0, 1e-12), as histogram.cc counts them.
    if (h.bucket_limit[i] == 1e-12) CHECK(h.bucket[i] == 2);
  }
  CHECK(total == 7);
  CHECK(h.bucket_limit.back() == DBL_MAX);
}

TEST_CASE("a file cut off inside its last record yields every complete record", "[unit][summary]") {
  std::string file;
  AppendRecord(EncodeFileVersionEvent(1.7e9), &file);
  for (int i = 1; i <= 3; ++i) AppendRecord(EncodeSummaryEvent(1.7e9 + i, i * 10, std::vector<Value>{{"loss", 1.0f / i}}), &file);
  const std::size_t last = EncodeSummaryEvent(1.7e9 + 3, 30, std::vector<Value>{{"loss", 1.0f / 3}}).size() + kRecordOverheadBytes;
  for (std::size_t cut : {std::size_t{1}, std::size_t{4}, std::size_t{9}, last - 1}) {
    Result<ReadRecordsResult> read = ReadRecords(std::string_view(file).substr(0, file.size() - cut));
    INFO("cut " << cut << " bytes");
    REQUIRE(read.ok());
    CHECK(read->truncated);
    REQUIRE(read->records.size() == 3);
    CHECK(DecodeEvent(read->records[2]).step == 20);
  }
  // A flipped bit is corruption, not a cut.
  std::string bad = file;
  bad[bad.size() - 6] ^= 0x01;
  Result<ReadRecordsResult> corrupt = ReadRecords(bad);
  REQUIRE_FALSE(corrupt.ok());
  CHECK(corrupt.status().code() == Code::kCorruption);
  CHECK(corrupt.status().message().find("record 3") != std::string::npos);
  // A length past the limit is refused before anything is allocated for it.
  std::string huge;
  AppendRecord("x", &huge);
  const std::uint64_t n = kMaxRecordBytes + 1;
  std::memcpy(huge.data(), &n, 8);
  const std::uint32_t crc = MaskedCrc32c(std::as_bytes(std::span(huge.data(), 8)));
  std::memcpy(huge.data() + 8, &crc, 4);
  Result<ReadRecordsResult> over = ReadRecords(huge);
  REQUIRE_FALSE(over.ok());
  CHECK(over.status().message().find("over the limit") != std::string::npos);
}

TEST_CASE("a writer makes its folders and a new file per start, and names the path when it cannot", "[unit][summary]") {
  tfd::testing::TempDir dir;
  const WriterOptions at{.hostname = "pc-01", .wall_time = 1763870000.5};
  Result<std::unique_ptr<Writer>> w = Writer::Open(dir / "runs/a", "worker:0", at);
  REQUIRE(w.ok());
  CHECK((*w)->path() == dir / "runs/a/worker:0/events.out.tfevents.1763870000.pc-01");
  // The first event is on disk at once.
  std::vector<DecodedEvent> events = ReadEventFile((*w)->path());
  REQUIRE(events.size() == 1);
  CHECK(events[0].file_version == "brain.Event:2");
  REQUIRE((*w)->Scalar("loss", 100, 0.5, 1763870001).ok());
  REQUIRE((*w)->Histogram("weights/b", 100, std::vector<float>{1, 2, 3}, 1763870001).ok());
  CHECK(ReadEventFile((*w)->path()).size() == 1);  // buffered
  REQUIRE((*w)->Flush().ok());
  events = ReadEventFile((*w)->path());
  REQUIRE(events.size() == 3);
  CHECK(events[1].values[0].tag == "loss");
  CHECK(events[2].values[0].histo->num == 3);
  // A second start in the same second gets a file of its own, after the first in name order.
  Result<std::unique_ptr<Writer>> again = Writer::Open(dir / "runs/a", "worker:0", at);
  REQUIRE(again.ok());
  CHECK((*again)->path() == (*w)->path() + ".2");
  CHECK(EventFiles(dir / "runs/a/worker:0").size() == 2);
  // A folder that cannot be made: the error names it and says why.
  tfd::testing::WriteFile(dir / "file", "x");
  Result<std::unique_ptr<Writer>> bad = Writer::Open(dir / "file", "standalone", at);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == Code::kInvalidArgument);
  CHECK(bad.status().message().find(dir / "file/standalone") != std::string::npos);
  CHECK(bad.status().message().find("Not a directory") != std::string::npos);
}

TEST_CASE("a standalone run's summaries: step points on the global step, epoch values, histograms", "[unit][summary]") {
  tfd::testing::TempDir dir;
  tfd::testing::WriteSyntheticMnist(dir.path(), 400, 100, 28, 10);
  Result<config::JobSpec> job = config::ParseJobSpec(
      R"({"model": {"name": "mlp"}, "data": ")" + dir.path() + R"(", "epochs": 2, "batch_size": 50, "seed": 3,
          "optimizer": {"type": "sgd", "learning_rate": 0.1}, "validation_split": 50,
          "summaries": {"dir": ")" + dir.path() + R"(/tb", "every_steps": 3, "histograms_every_epochs": 2}})",
      "job.json");
  REQUIRE(job.ok());
  Result<std::unique_ptr<train::SummaryObserver>> observer = train::SummaryObserver::Open(job->summaries, "standalone");
  REQUIRE(observer.ok());
  EventWriter events(stdout, "standalone", false);
  REQUIRE(train::RunStandalone(*job, events, {.observers = {observer->get()}}).ok());
  const std::vector<std::string> files = EventFiles(dir / "tb/standalone");
  REQUIRE(files.size() == 1);
  const std::vector<DecodedEvent> got = ReadEventFile(files[0]);
  std::map<std::string, std::vector<std::pair<std::int64_t, float>>> scalars;
  std::map<std::string, Histogram> histos;
  for (const DecodedEvent& e : got)
    for (const DecodedValue& v : e.values) {
      if (v.simple) scalars[v.tag].push_back({e.step, *v.simple});
      if (v.histo) histos[v.tag] = *v.histo;
    }
  // 350 training examples / 50 = 7 steps an epoch, 14 in all: a point at steps 3, 6, 9 and 12.
  for (const char* tag : {"loss", "accuracy", "samples_per_sec", "learning_rate", "time/compute_seconds", "time/update_seconds"}) {
    INFO(tag);
    REQUIRE(scalars[tag].size() == 4);
    for (std::size_t i = 0; i < 4; ++i) CHECK(scalars[tag][i].first == 3 * static_cast<std::int64_t>(i + 1));
  }
  for (const auto& [step, v] : scalars["loss"]) CHECK((std::isfinite(v) && v > 0 && v < 10));
  for (const auto& [step, v] : scalars["accuracy"]) CHECK((v >= 0 && v <= 1));
  for (const auto& [step, v] : scalars["samples_per_sec"]) CHECK(v > 0);
  for (const auto& [step, v] : scalars["learning_rate"]) CHECK(v == Approx(0.1));
  for (const auto& [step, v] : scalars["time/compute_seconds"]) CHECK(v > 0);
  for (const char* tag : {"epoch/loss", "epoch/accuracy", "epoch/samples_per_sec", "test_accuracy", "val_accuracy", "val_loss"}) {
    INFO(tag);
    REQUIRE(scalars[tag].size() == 2);
    CHECK(scalars[tag][0].first == 7);
    CHECK(scalars[tag][1].first == 14);
  }
  // Histograms every second epoch: once, at its end, one per variable.
  REQUIRE(histos.size() == 4);  // the mlp's two kernels and two biases
  for (const auto& [tag, h] : histos) {
    INFO(tag);
    CHECK(tag.starts_with("weights/"));
    CHECK(h.num > 0);
  }
  CHECK(histos.at("weights/dense/kernel").num == 784 * 100);
}

}  // namespace
}  // namespace tfd::summary
