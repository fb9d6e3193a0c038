// Checkpoint files: Write then Load, keep-last-K, every corruption rejected and the previous
// checkpoint used instead, folder errors, and the save schedule.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "common/ckpt/file.h"
#include "test/test_util.h"
#include "test/unit/common/ckpt/ckpt_fixtures.h"

namespace tfd::ckpt {
namespace {

using Catch::Matchers::Contains;
using namespace fixtures;  // MakeCheckpoint, RequireSame, Bytes, RecordStarts
using tfd::testing::TempDir;

void WriteBytes(const std::string& path, const std::vector<std::byte>& b) {
  tfd::testing::WriteFile(path, std::string(reinterpret_cast<const char*>(b.data()), b.size()));
}

TEST_CASE("Write then Load returns the checkpoint, named by its step", "[unit][ckpt]") {
  TempDir dir;
  const Checkpoint c = MakeCheckpoint(42);
  auto path = Write(dir.path(), c, 3);
  REQUIRE(path.ok());
  CHECK(std::filesystem::path(*path).filename() == "ckpt-000000000042.tfdckpt");
  auto back = Load(*path);
  REQUIRE(back.ok());
  RequireSame(c, *back);
}

TEST_CASE("Write keeps only the newest K checkpoints and no temporary file", "[unit][ckpt]") {
  TempDir dir;
  for (std::uint64_t step : {10, 20, 30, 40, 50}) REQUIRE(Write(dir.path(), MakeCheckpoint(step), 3).ok());
  auto files = List(dir.path());
  REQUIRE(files.ok());
  REQUIRE(files->size() == 3);
  CHECK(std::filesystem::path((*files)[0]).filename() == FileName(50));
  CHECK(std::filesystem::path((*files)[2]).filename() == FileName(30));
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  CHECK(entries == 3);
  // A temporary file left by a writer that died is removed by the next save.
  tfd::testing::WriteFile(dir / "ckpt-000000000055.tfdckpt.tmp", "partial");
  REQUIRE(Write(dir.path(), MakeCheckpoint(57), 3).ok());
  CHECK_FALSE(std::filesystem::exists(dir / "ckpt-000000000055.tfdckpt.tmp"));
  CHECK_FALSE(Write(dir.path(), MakeCheckpoint(60), 0).ok());
}

TEST_CASE("LoadNewestValid skips corrupt and truncated files and uses the previous one", "[unit][ckpt]") {
  TempDir dir;
  for (std::uint64_t step : {1, 2, 3}) REQUIRE(Write(dir.path(), MakeCheckpoint(step), 5).ok());
  std::vector<std::byte> b3 = Bytes(MakeCheckpoint(3));
  b3[b3.size() / 2] ^= std::byte{1};
  WriteBytes(dir / FileName(3), b3);
  std::vector<std::byte> b2 = Bytes(MakeCheckpoint(2));
  b2.resize(b2.size() - 3);
  WriteBytes(dir / FileName(2), b2);
  // A save killed before its rename leaves only a temporary file, which is never read.
  tfd::testing::WriteFile(dir / "ckpt-000000000009.tfdckpt.tmp", "partial");

  auto got = LoadNewestValid(dir.path());
  REQUIRE(got.ok());
  CHECK(got->checkpoint.global_step == 1);
  CHECK(std::filesystem::path(got->path).filename() == FileName(1));
  REQUIRE(got->skipped.size() == 2);
  CHECK_THAT(got->skipped[0], Contains(FileName(3)) && Contains("CRC"));
  CHECK_THAT(got->skipped[1], Contains(FileName(2)) && Contains("truncated"));

  WriteBytes(dir / FileName(1), {});
  auto none = LoadNewestValid(dir.path());
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().code() == Code::kNotFound);
  CHECK_THAT(none.status().message(), Contains("none of the 3 checkpoint files is valid"));
}

TEST_CASE("LoadNewestValid falls back to the previous checkpoint for every kind of damage", "[unit][ckpt]") {
  TempDir dir;
  REQUIRE(Write(dir.path(), MakeCheckpoint(1), 5).ok());
  const std::vector<std::byte> good = Bytes(MakeCheckpoint(2));
  const auto starts = RecordStarts(good);
  std::vector<std::pair<std::string, std::vector<std::byte>>> damaged;
  for (std::size_t i = 0; i + 1 < starts.size(); ++i) {
    damaged.emplace_back("truncated at record " + std::to_string(i), std::vector<std::byte>(good.begin(), good.begin() + starts[i]));
    damaged.emplace_back("truncated inside record " + std::to_string(i),
                         std::vector<std::byte>(good.begin(), good.begin() + (starts[i] + starts[i + 1]) / 2));
    std::vector<std::byte> flipped = good;
    flipped[(starts[i] + starts[i + 1]) / 2] ^= std::byte{0x80};
    damaged.emplace_back("flipped in record " + std::to_string(i), flipped);
    std::vector<std::byte> huge = good;
    const std::uint32_t len = 0x7fffffffu;
    std::memcpy(huge.data() + starts[i] + 4, &len, 4);
    damaged.emplace_back("huge length in record " + std::to_string(i), huge);
  }
  std::vector<std::byte> magic = good, version = good;
  magic[1] = std::byte{0};
  version[4] = std::byte{9};
  damaged.emplace_back("bad magic", magic);
  damaged.emplace_back("wrong version", version);
  damaged.emplace_back("empty", std::vector<std::byte>{});
  for (const auto& [what, bytes] : damaged) {
    INFO(what);
    WriteBytes(dir / FileName(2), bytes);
    auto got = LoadNewestValid(dir.path());
    REQUIRE(got.ok());
    CHECK(got->checkpoint.global_step == 1);
    REQUIRE(got->skipped.size() == 1);
    CHECK_THAT(got->skipped[0], Contains(FileName(2)));
  }
}

TEST_CASE("a missing, empty or unwritable folder is a clear error", "[unit][ckpt]") {
  TempDir dir;
  const std::string missing = dir / "nope";
  auto w = Write(missing, MakeCheckpoint(), 2);
  REQUIRE_FALSE(w.ok());
  CHECK_THAT(w.status().message(), Contains(missing) && Contains("No such file or directory"));
  auto l = LoadNewestValid(missing);
  REQUIRE_FALSE(l.ok());
  CHECK(l.status().code() == Code::kNotFound);
  CHECK_THAT(l.status().message(), Contains(missing));
  auto empty = LoadNewestValid(dir.path());
  REQUIRE_FALSE(empty.ok());
  CHECK_THAT(empty.status().message(), Contains("no checkpoint files"));
  auto one = Load(dir / FileName(7));
  REQUIRE_FALSE(one.ok());
  CHECK(one.status().code() == Code::kNotFound);

  tfd::testing::WriteFile(dir / "plain", "x");
  auto notdir = Write(dir / "plain", MakeCheckpoint(), 2);
  REQUIRE_FALSE(notdir.ok());
  CHECK_THAT(notdir.status().message(), Contains("not a folder"));

  // Root writes into any mode-0500 folder, but not into sysfs.
  const std::string ro = ::geteuid() == 0 ? std::string("/sys") : dir / "ro";
  if (ro != "/sys") {
    std::filesystem::create_directory(ro);
    ::chmod(ro.c_str(), 0500);
  }
  if (std::filesystem::is_directory(ro)) {
    auto denied = Write(ro, MakeCheckpoint(), 2);
    if (ro != "/sys") ::chmod(ro.c_str(), 0700);
    REQUIRE_FALSE(denied.ok());
    CHECK_THAT(denied.status().message(), Contains(ro) && Contains("Permission denied"));
  }
}

TEST_CASE("the schedule saves every N steps or every T seconds since the last save", "[unit][ckpt]") {
  using namespace std::chrono_literals;
  const Schedule::Clock::time_point t0{};
  config::CheckpointSpec spec;
  spec.every_steps = 100;
  Schedule steps(spec, 0, t0);
  CHECK_FALSE(steps.Due(99, t0 + 1h));
  CHECK(steps.Due(100, t0));
  steps.Saved(103, t0);
  CHECK_FALSE(steps.Due(202, t0));
  CHECK(steps.Due(203, t0));

  spec.every_steps = 0;
  spec.every_secs = 30;
  Schedule secs(spec, 500, t0);
  CHECK_FALSE(secs.Due(10000, t0 + 29s));
  CHECK(secs.Due(501, t0 + 30s));
  secs.Saved(501, t0 + 31s);
  CHECK_FALSE(secs.Due(502, t0 + 60s));

  Schedule never(config::CheckpointSpec{}, 0, t0);
  CHECK_FALSE(never.Due(1u << 30, t0 + 100h));
}

TEST_CASE("the early-stopping record reads back what was written, for its own model only", "[unit][ckpt]") {
  TempDir dir;
  const EarlyStopping first{.epoch = 2, .have_best = true, .best = 0.875, .best_epoch = 1, .wait = 1};
  REQUIRE(WriteEarlyStopping(dir.path(), 0xabcdef, first).ok());
  Result<EarlyStopping> back = ReadEarlyStopping(dir.path(), 0xabcdef);
  REQUIRE(back.ok());
  CHECK(*back == first);
  // Written again after the next judgement: the newer one replaces it, and no temporary file is left.
  const EarlyStopping second{.epoch = 3, .have_best = true, .best = 0.875, .best_epoch = 1, .wait = 2};
  REQUIRE(WriteEarlyStopping(dir.path(), 0xabcdef, second).ok());
  back = ReadEarlyStopping(dir.path(), 0xabcdef);
  REQUIRE(back.ok());
  CHECK(*back == second);
  CHECK_FALSE(std::filesystem::exists(dir / (std::string(kEarlyStoppingFile) + ".tmp")));
  // Another model's record is not read back: NotFound, as no record at all.
  Result<EarlyStopping> other = ReadEarlyStopping(dir.path(), 0x123);
  REQUIRE_FALSE(other.ok());
  CHECK(other.status().code() == Code::kNotFound);
  TempDir empty;
  CHECK(ReadEarlyStopping(empty.path(), 0xabcdef).status().code() == Code::kNotFound);
}

TEST_CASE("a damaged early-stopping record is Corruption naming the file and the field", "[unit][ckpt]") {
  TempDir dir;
  const std::string path = dir / kEarlyStoppingFile;
  const std::string good_model = "\"model\": \"0000000000abcdef\"";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "not a JSON object"},
      {"{\"epoch\": 2}", "\"model\""},
      {"{" + good_model + ", \"epoch\": 2, \"best\": 0.5, \"best_epoch\": 1, \"wait\": 1}", "\"have_best\""},
      {"{" + good_model + ", \"have_best\": true, \"epoch\": -1, \"best\": 0.5, \"best_epoch\": 1, \"wait\": 1}", "\"epoch\""},
      {"{" + good_model + ", \"have_best\": true, \"epoch\": 2, \"best\": \"x\", \"best_epoch\": 1, \"wait\": 1}", "\"best\""},
      {"{" + good_model + ", \"have_best\": true, \"epoch\": 2, \"best\": 0.5, \"best_epoch\": 1}", "\"wait\""},
  };
  for (const auto& [text, field] : cases) {
    INFO(text);
    tfd::testing::WriteFile(path, text);
    Result<EarlyStopping> read = ReadEarlyStopping(dir.path(), 0xabcdef);
    REQUIRE_FALSE(read.ok());
    CHECK(read.status().code() == Code::kCorruption);
    CHECK_THAT(read.status().message(), Contains(path) && Contains(field));
  }
}

}  // namespace
}  // namespace tfd::ckpt
