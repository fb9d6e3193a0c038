// Checkpoint files: round trips, keep-last-K, every corruption rejected with a message and the
// previous checkpoint used instead, folder errors, and re-sharding onto other ps and worker counts.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/ckpt/checkpoint.h"
#include "test/test_util.h"

namespace tfd::ckpt {
namespace {

using Catch::Matchers::Contains;
using tfd::testing::TempDir;

Checkpoint MakeCheckpoint(std::uint64_t step = 100) {
  Checkpoint c;
  c.global_step = step;
  c.num_workers = 2;
  c.optimizer.spec.type = config::OptimizerSpec::Type::kAdam;
  c.optimizer.spec.learning_rate = 0.001;
  c.optimizer.updates = static_cast<std::int64_t>(step);
  c.optimizer.slot_names = {"m", "v"};
  c.cursors = {{0, 1, 0, 10}, {1, 1, 0, 7}};
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> vars = {
      {"dense/kernel", {3, 4}}, {"dense/bias", {5}}, {"out/kernel", {7}}};
  float x = 0.5f + static_cast<float>(step);
  for (const auto& [name, shape] : vars) {
    NamedTensor t;
    t.name = name;
    t.shape = shape;
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    for (std::int64_t i = 0; i < n; ++i) t.values.push_back(x += 1.0f);
    for (const char* s : {"m", "v"}) {
      Slot slot{s, {}};
      for (std::int64_t i = 0; i < n; ++i) slot.values.push_back(x += 0.25f);
      t.slots.push_back(std::move(slot));
    }
    c.tensors.push_back(std::move(t));
  }
  return c;
}

void RequireSame(const Checkpoint& a, const Checkpoint& b) {
  REQUIRE(a.global_step == b.global_step);
  REQUIRE(a.num_workers == b.num_workers);
  REQUIRE(a.optimizer.spec.type == b.optimizer.spec.type);
  REQUIRE(a.optimizer.spec.learning_rate == b.optimizer.spec.learning_rate);
  REQUIRE(a.optimizer.updates == b.optimizer.updates);
  REQUIRE(a.optimizer.slot_names == b.optimizer.slot_names);
  REQUIRE(a.cursors.size() == b.cursors.size());
  for (std::size_t i = 0; i < a.cursors.size(); ++i) {
    CHECK(a.cursors[i].rank == b.cursors[i].rank);
    CHECK(a.cursors[i].epoch == b.cursors[i].epoch);
    CHECK(a.cursors[i].base == b.cursors[i].base);
    CHECK(a.cursors[i].next == b.cursors[i].next);
  }
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    CHECK(a.tensors[i].name == b.tensors[i].name);
    CHECK(a.tensors[i].shape == b.tensors[i].shape);
    CHECK(a.tensors[i].values == b.tensors[i].values);
    REQUIRE(a.tensors[i].slots.size() == b.tensors[i].slots.size());
    for (std::size_t k = 0; k < a.tensors[i].slots.size(); ++k) {
      CHECK(a.tensors[i].slots[k].name == b.tensors[i].slots[k].name);
      CHECK(a.tensors[i].slots[k].values == b.tensors[i].slots[k].values);
    }
  }
}

std::vector<std::byte> Bytes(const Checkpoint& c) {
  auto b = Serialize(c);
  REQUIRE(b.ok());
  return *b;
}

// Offsets of each record's first byte, then the file size.
std::vector<std::size_t> RecordStarts(const std::vector<std::byte>& b) {
  std::vector<std::size_t> starts;
  std::size_t pos = 8;
  while (pos < b.size()) {
    starts.push_back(pos);
    std::uint32_t len = 0;
    std::memcpy(&len, b.data() + pos + 4, 4);
    pos += 8 + len + 4;
  }
  starts.push_back(b.size());
  return starts;
}

void WriteBytes(const std::string& path, const std::vector<std::byte>& b) {
  tfd::testing::WriteFile(path, std::string(reinterpret_cast<const char*>(b.data()), b.size()));
}

TEST_CASE("a checkpoint survives Serialize and Parse unchanged", "[unit][ckpt]") {
  const Checkpoint c = MakeCheckpoint();
  auto back = Parse(Bytes(c), "mem");
  REQUIRE(back.ok());
  RequireSame(c, *back);
}

TEST_CASE("a checkpoint with no tensors, slots or cursors round-trips", "[unit][ckpt]") {
  Checkpoint c;
  c.global_step = 3;
  auto back = Parse(Bytes(c), "mem");
  REQUIRE(back.ok());
  RequireSame(c, *back);
}

TEST_CASE("a tensor with a zero dimension round-trips with its empty slots", "[unit][ckpt]") {
  Checkpoint c = MakeCheckpoint();
  c.tensors[1].shape = {3, 0};
  c.tensors[1].values.clear();
  for (Slot& s : c.tensors[1].slots) s.values.clear();
  auto back = Parse(Bytes(c), "mem");
  REQUIRE(back.ok());
  RequireSame(c, *back);
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

TEST_CASE("Parse rejects a checkpoint truncated at any byte, naming the fault", "[unit][ckpt]") {
  const std::vector<std::byte> b = Bytes(MakeCheckpoint());
  for (std::size_t n = 0; n < b.size(); ++n) {
    auto got = Parse(std::span<const std::byte>(b).first(n), "cut.tfdckpt");
    INFO("truncated to " << n << " bytes");
    REQUIRE_FALSE(got.ok());
    CHECK(got.status().code() == Code::kCorruption);
    CHECK_THAT(got.status().message(), Contains("cut.tfdckpt: "));
  }
  // At each record boundary the message says the file ends where a record should start.
  const auto starts = RecordStarts(b);
  REQUIRE(starts.size() == 8);  // META, OPTIMIZER, CURSORS, 3 TENSOR, END, then the size
  for (std::size_t i = 0; i + 1 < starts.size(); ++i) {
    auto got = Parse(std::span<const std::byte>(b).first(starts[i]), "cut.tfdckpt");
    REQUIRE_FALSE(got.ok());
    CHECK_THAT(got.status().message(), Contains("truncated") && Contains(fmt::format("record {}", i)));
    auto mid = Parse(std::span<const std::byte>(b).first((starts[i] + starts[i + 1]) / 2), "cut.tfdckpt");
    REQUIRE_FALSE(mid.ok());
    CHECK_THAT(mid.status().message(), Contains(fmt::format("record {}", i)));
  }
}

TEST_CASE("Parse rejects a flipped byte anywhere in any record", "[unit][ckpt]") {
  const std::vector<std::byte> good = Bytes(MakeCheckpoint());
  const auto starts = RecordStarts(good);
  for (std::size_t i = 8; i < good.size(); ++i) {
    std::vector<std::byte> b = good;
    b[i] ^= std::byte{0x5a};
    auto got = Parse(b, "flip.tfdckpt");
    INFO("byte " << i);
    REQUIRE_FALSE(got.ok());
    CHECK(got.status().code() == Code::kCorruption);
    // The record named is the one holding the byte.
    std::size_t rec = 0;
    while (starts[rec + 1] <= i) ++rec;
    CHECK_THAT(got.status().message(), Contains(fmt::format("record {}", rec)));
  }
}

TEST_CASE("Parse rejects a bad magic, another version and an oversized length", "[unit][ckpt]") {
  const std::vector<std::byte> good = Bytes(MakeCheckpoint());
  std::vector<std::byte> b = good;
  b[0] = std::byte{'X'};
  auto got = Parse(b, "m.tfdckpt");
  REQUIRE_FALSE(got.ok());
  CHECK_THAT(got.status().message(), Contains("bad magic"));

  b = good;
  b[4] = std::byte{2};
  got = Parse(b, "v.tfdckpt");
  REQUIRE_FALSE(got.ok());
  CHECK_THAT(got.status().message(), Contains("format version 2"));

  b = good;
  const std::uint32_t huge = 0xfffffff0u;
  std::memcpy(b.data() + RecordStarts(good)[3] + 4, &huge, 4);
  got = Parse(b, "len.tfdckpt");
  REQUIRE_FALSE(got.ok());
  CHECK_THAT(got.status().message(), Contains("record 3 (TENSOR)") && Contains("length 4294967280"));

  got = Parse({}, "empty.tfdckpt");
  REQUIRE_FALSE(got.ok());
  CHECK_THAT(got.status().message(), Contains("too short"));

  b = good;
  b.push_back(std::byte{0});
  got = Parse(b, "tail.tfdckpt");
  REQUIRE_FALSE(got.ok());
  CHECK_THAT(got.status().message(), Contains("after the END record"));
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

TEST_CASE("Serialize refuses an inconsistent checkpoint", "[unit][ckpt]") {
  Checkpoint c = MakeCheckpoint();
  c.tensors[1].shape = {6};
  auto got = Serialize(c);
  REQUIRE_FALSE(got.ok());
  CHECK_THAT(got.status().message(), Contains("dense/bias"));
  c = MakeCheckpoint();
  c.tensors[0].slots[1].name = "w";
  CHECK_FALSE(Serialize(c).ok());
  c = MakeCheckpoint();
  c.cursors.pop_back();
  CHECK_FALSE(Serialize(c).ok());
}

TEST_CASE("CheckOptimizer refuses another optimizer or other hyper-parameters", "[unit][ckpt]") {
  const Checkpoint c = MakeCheckpoint();
  config::OptimizerSpec same = c.optimizer.spec;
  CHECK(CheckOptimizer(c, same, "x").ok());
  config::OptimizerSpec momentum;
  momentum.type = config::OptimizerSpec::Type::kMomentum;
  Status s = CheckOptimizer(c, momentum, "ckpt-1");
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK_THAT(s.message(), Contains("ckpt-1") && Contains("adam") && Contains("momentum"));
  config::OptimizerSpec lr = same;
  lr.learning_rate = 0.01;
  CHECK_FALSE(CheckOptimizer(c, lr, "x").ok());
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

// The test model's variables in flat order: 12 + 5 + 7 = 24 floats.
std::vector<Variable> Variables() { return {{"dense/kernel", 0, 12}, {"dense/bias", 12, 5}, {"out/kernel", 17, 7}}; }
std::vector<std::vector<std::int64_t>> Shapes() { return {{3, 4}, {5}, {7}}; }

TEST_CASE("re-sharding 1 ps to 3 and 3 to 2 preserves every value and slot", "[unit][ckpt]") {
  const Checkpoint c = MakeCheckpoint();
  const std::vector<std::vector<FlatRange>> one = {{{0, 24}}};
  // balanced: ranges cut across variables
  const std::vector<std::vector<FlatRange>> three = {{{0, 8}}, {{8, 8}}, {{16, 8}}};
  // by variable, in a ps's own order
  const std::vector<std::vector<FlatRange>> two = {{{17, 7}, {0, 12}}, {{12, 5}}};

  auto s1 = Reshard(c, Variables(), one);
  REQUIRE(s1.ok());
  REQUIRE((*s1)[0].values.size() == 24);
  REQUIRE((*s1)[0].slots.size() == 48);
  CHECK((*s1)[0].values[12] == c.tensors[1].values[0]);
  CHECK((*s1)[0].slots[24 + 12] == c.tensors[1].slots[1].values[0]);  // slot v of dense/bias[0]

  auto s3 = Reshard(c, Variables(), three);
  REQUIRE(s3.ok());
  CHECK((*s3)[1].values[4] == c.tensors[1].values[0]);              // flat 12
  CHECK((*s3)[2].slots[8 + 1] == c.tensors[2].slots[1].values[0]);  // flat 17, slot v
  auto back3 = Assemble(Variables(), Shapes(), c.optimizer.slot_names, three, *s3);
  REQUIRE(back3.ok());
  Checkpoint c3 = c;
  c3.tensors = *back3;
  RequireSame(c, c3);

  auto s2 = Reshard(c3, Variables(), two);
  REQUIRE(s2.ok());
  CHECK((*s2)[0].values[0] == c.tensors[2].values[0]);
  CHECK((*s2)[0].values[7] == c.tensors[0].values[0]);
  auto back2 = Assemble(Variables(), Shapes(), c.optimizer.slot_names, two, *s2);
  REQUIRE(back2.ok());
  Checkpoint c2 = c;
  c2.tensors = *back2;
  RequireSame(c, c2);
}

TEST_CASE("re-sharding refuses a model the checkpoint does not hold", "[unit][ckpt]") {
  const Checkpoint c = MakeCheckpoint();
  std::vector<Variable> vars = Variables();
  vars[2].name = "other";
  auto got = Reshard(c, vars, {{{0, 24}}});
  REQUIRE_FALSE(got.ok());
  CHECK_THAT(got.status().message(), Contains("other"));
  vars = Variables();
  vars[1].size = 6;
  CHECK_FALSE(Reshard(c, vars, {{{0, 24}}}).ok());
  CHECK_FALSE(Reshard(c, Variables(), {{{0, 25}}}).ok());
  auto gap = Assemble(Variables(), Shapes(), c.optimizer.slot_names, {{{0, 20}}},
                      {ShardState{std::vector<float>(20), std::vector<float>(40)}});
  REQUIRE_FALSE(gap.ok());
  CHECK_THAT(gap.status().message(), Contains("out/kernel"));
}

// The permutation positions worker `d.rank` of `n` has finished.
std::set<std::uint64_t> Finished(const DataCursor& d, std::uint32_t n) {
  std::set<std::uint64_t> s;
  for (std::uint64_t j = 0; j < d.next; ++j) s.insert(d.base + d.rank + j * n);
  return s;
}

TEST_CASE("data cursors resume per rank, or from the lowest unfinished position on another worker count", "[unit][ckpt]") {
  Checkpoint c = MakeCheckpoint();
  auto same = ReshardCursors(c, 2);
  REQUIRE(same.ok());
  CHECK(same->at(1).next == 7);

  c.num_workers = 3;
  c.cursors = {{0, 4, 0, 10}, {1, 4, 0, 7}, {2, 4, 0, 9}};
  auto three_to_two = ReshardCursors(c, 2);
  REQUIRE(three_to_two.ok());
  REQUIRE(three_to_two->size() == 2);
  const std::uint64_t resume = three_to_two->at(0).base;
  CHECK(resume == 1 + 7 * 3);  // worker 1's next position
  std::set<std::uint64_t> done;
  for (const DataCursor& d : c.cursors)
    for (std::uint64_t p : Finished(d, 3)) done.insert(p);
  for (std::uint64_t p = 0; p < resume; ++p) CHECK(done.count(p) == 1);  // nothing before it is skipped
  for (const DataCursor& d : *three_to_two) {
    CHECK(d.epoch == 4);
    CHECK(d.next == 0);
    CHECK(d.base == resume);
  }

  // A worker already in the next epoch counts as done with this one.
  c.cursors = {{0, 5, 0, 1}, {1, 4, 0, 7}, {2, 4, 0, 9}};
  auto ahead = ReshardCursors(c, 4);
  REQUIRE(ahead.ok());
  CHECK(ahead->at(3).epoch == 4);
  CHECK(ahead->at(3).base == 1 + 7 * 3);

  CHECK_FALSE(ReshardCursors(c, 0).ok());
  c.cursors.pop_back();
  CHECK_FALSE(ReshardCursors(c, 2).ok());
}

}  // namespace
}  // namespace tfd::ckpt
