// Checkpoint bytes: round trips, and every truncation, flipped byte or bad header field rejected
// with a message naming the record; an inconsistent checkpoint refused before it is written.
#include <catch2/catch.hpp>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/ckpt/format.h"
#include "common/wire/crc32c.h"
#include "test/unit/common/ckpt/ckpt_fixtures.h"

namespace tfd::ckpt {
namespace {

using Catch::Matchers::Contains;
using namespace fixtures;  // MakeCheckpoint, RequireSame, Bytes, RecordStarts

TEST_CASE("a checkpoint survives Serialize and Parse unchanged", "[unit][ckpt]") {
  const Checkpoint c = MakeCheckpoint();
  auto back = Parse(Bytes(c), "mem");
  REQUIRE(back.ok());
  RequireSame(c, *back);
}

TEST_CASE("a checkpoint records the learning-rate schedule and weight decay", "[unit][ckpt][schedule]") {
  Checkpoint c = MakeCheckpoint();
  config::OptimizerSpec& s = c.optimizer.spec;
  s.weight_decay = 1e-4;
  s.schedule.kind = config::LrSchedule::Kind::kPiecewiseConstant;
  s.schedule.warmup_steps = 7;
  s.schedule.boundaries = {10, 20};
  s.schedule.values = {0.001, 0.0005, 0.0001};
  auto bytes = Serialize(c);
  REQUIRE(bytes.ok());
  auto back = Parse(*bytes, "x");
  REQUIRE(back.ok());
  RequireSame(c, *back);
  const config::OptimizerSpec& got = back->optimizer.spec;
  CHECK(got.weight_decay == 1e-4);
  CHECK(got.schedule.kind == config::LrSchedule::Kind::kPiecewiseConstant);
  CHECK(got.schedule.warmup_steps == 7);
  CHECK(got.schedule.boundaries == s.schedule.boundaries);
  CHECK(got.schedule.values == s.schedule.values);
  CHECK(CheckOptimizer(*back, s, "x").ok());
}

TEST_CASE("the final mark round-trips, and a checkpoint without it keeps the old 16-byte META", "[unit][ckpt][evaluator]") {
  Checkpoint c = MakeCheckpoint();
  const std::vector<std::byte> plain = Bytes(c);
  std::uint32_t meta_len = 0;
  std::memcpy(&meta_len, plain.data() + 8 + 4, 4);
  CHECK(meta_len == 16);  // what files written before the mark hold: they load as not final
  auto old = Parse(plain, "old");
  REQUIRE(old.ok());
  CHECK_FALSE(old->final);
  c.final = true;
  const std::vector<std::byte> marked = Bytes(c);
  CHECK(marked.size() == plain.size() + 4);
  auto back = Parse(marked, "final");
  REQUIRE(back.ok());
  CHECK(back->final);
  RequireSame(c, *back);
}

TEST_CASE("an unknown META flag is Corruption naming the record", "[unit][ckpt][evaluator]") {
  Checkpoint c = MakeCheckpoint();
  c.final = true;
  std::vector<std::byte> b = Bytes(c);
  const std::size_t meta = RecordStarts(b)[0];
  const std::uint32_t flags = kMetaFlagFinal | 4u;
  std::memcpy(b.data() + meta + 8 + 16, &flags, 4);
  const std::uint32_t crc = wire::Crc32c(std::span(b).subspan(meta, 8 + 20));
  std::memcpy(b.data() + meta + 8 + 20, &crc, 4);
  auto got = Parse(b, "f");
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kCorruption);
  CHECK_THAT(got.status().message(), Contains("f: record 0 (META)") && Contains("unknown flags 0x00000004"));
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

TEST_CASE("Serialize refuses an inconsistent checkpoint", "[unit][ckpt]") {
  Checkpoint c = MakeCheckpoint();
  c.tensors[1].shape = {6};
  auto got = Serialize(c);
  REQUIRE_FALSE(got.ok());
  CHECK_THAT(got.status().message(), Contains("dense/bias"));
  c = MakeCheckpoint();
  c.tensors[0].slots[1].name = std::string("w");  // not the literal: GCC 12 -Wrestrict misfires on that assignment
  CHECK_FALSE(Serialize(c).ok());
  c = MakeCheckpoint();
  c.cursors.pop_back();
  CHECK_FALSE(Serialize(c).ok());
}

TEST_CASE("a checkpoint carries its model card in a CARD record; a file without one reads as before", "[unit][ckpt]") {
  Checkpoint c = MakeCheckpoint();
  const auto plain = Serialize(c);
  REQUIRE(plain.ok());
  c.model_card = R"({"model":"mlp","data_fingerprint":"ab"})";
  const auto carded = Serialize(c);
  REQUIRE(carded.ok());
  CHECK(carded->size() == plain->size() + 8 + c.model_card.size() + 4);  // header, JSON, CRC
  auto back = Parse(*carded, "mem");
  REQUIRE(back.ok());
  RequireSame(c, *back);
  auto old = Parse(*plain, "mem");
  REQUIRE(old.ok());
  CHECK(old->model_card.empty());
  // The card's bytes are under the record's CRC like every other record's.
  std::vector<std::byte> flipped = *carded;
  const std::size_t at = std::string_view(reinterpret_cast<const char*>(flipped.data()), flipped.size()).find("mlp");
  REQUIRE(at != std::string_view::npos);
  flipped[at] = std::byte{'x'};
  auto bad = Parse(flipped, "f");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Contains("CARD") && Contains("CRC"));
}

TEST_CASE("a checkpoint carries the early-stopping state in an EARLY_STOPPING record; a file without one reads as before",
          "[unit][ckpt][early_stopping]") {
  Checkpoint c = MakeCheckpoint();
  c.model_card = R"({"model":"mlp"})";
  const auto plain = Serialize(c);
  REQUIRE(plain.ok());
  c.early_stopping = EarlyStopping{.epoch = 5, .have_best = true, .best = 0.25, .best_epoch = 3, .wait = 2};
  const auto with = Serialize(c);
  REQUIRE(with.ok());
  CHECK(with->size() == plain->size() + 8 + 21 + 4);  // header, epoch u32 have_best u8 best f64 best_epoch u32 wait u32, CRC
  auto back = Parse(*with, "mem");
  REQUIRE(back.ok());
  RequireSame(c, *back);
  REQUIRE(back->early_stopping.has_value());
  CHECK(back->early_stopping->best == 0.25);
  auto old = Parse(*plain, "mem");
  REQUIRE(old.ok());
  CHECK_FALSE(old->early_stopping.has_value());
  // A best epoch past the epoch judged is refused, naming the record (its CRC made right).
  c.early_stopping->best_epoch = 9;
  auto bad_bytes = Serialize(c);
  REQUIRE(bad_bytes.ok());
  auto bad = Parse(*bad_bytes, "f");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Contains("EARLY_STOPPING") && Contains("best epoch 9") && Contains("after epoch 5"));
}

TEST_CASE("a checkpoint carries every worker's error feedback in a FEEDBACK record; a file without one reads as before",
          "[unit][ckpt][compression]") {
  Checkpoint c = MakeCheckpoint();
  const auto plain = Serialize(c);
  REQUIRE(plain.ok());
  c.feedback = ErrorFeedback{.method = config::CompressionSpec::Method::kPowerSgd,
                             .residuals = {{0.5f, -1.0f, 2.0f}, {0.25f, 0.0f, -3.0f}},
                             .shared = {1.0f, 2.0f},
                             .rank = 2};
  const auto with = Serialize(c);
  REQUIRE(with.ok());
  CHECK(with->size() == plain->size() + 8 + (1 + 4 + 4 + 8 + 8) + 4 * 8 + 4);  // header, method rank workers count shared, 6 + 2 floats, CRC
  auto back = Parse(*with, "mem");
  REQUIRE(back.ok());
  RequireSame(c, *back);
  auto old = Parse(*plain, "mem");
  REQUIRE(old.ok());
  CHECK_FALSE(old->feedback.has_value());
  // topk keeps no shared part.
  c.feedback = ErrorFeedback{.method = config::CompressionSpec::Method::kTopK, .residuals = {{1.5f}}, .shared = {}};
  auto topk = Parse(*Serialize(c), "mem");
  REQUIRE(topk.ok());
  RequireSame(c, *topk);
  // Residuals of unequal sizes, or a method without feedback, are refused before anything is written.
  c.feedback = ErrorFeedback{.method = config::CompressionSpec::Method::kTopK, .residuals = {{1.0f}, {1.0f, 2.0f}}, .shared = {}};
  CHECK_THAT(Serialize(c).status().message(), Contains("residuals of 1 and 2 values"));
  c.feedback = ErrorFeedback{.method = config::CompressionSpec::Method::kFp16, .residuals = {{1.0f}}, .shared = {}};
  CHECK_FALSE(Serialize(c).ok());
}

TEST_CASE("a FEEDBACK record claiming more values than it holds, or an unknown method, is Corruption naming it", "[unit][ckpt][compression]") {
  Checkpoint c = MakeCheckpoint();
  c.feedback = ErrorFeedback{.method = config::CompressionSpec::Method::kTopK, .residuals = {{1.0f, 2.0f}, {3.0f, 4.0f}}, .shared = {}};
  const auto good = Serialize(c);
  REQUIRE(good.ok());
  const auto starts = RecordStarts(*good);
  const std::size_t at = starts[3];  // META, OPTIMIZER, CURSORS, FEEDBACK
  // Rewrites a field of the FEEDBACK payload and makes its CRC right again.
  auto with = [&](std::size_t offset, const void* value, std::size_t size) {
    std::vector<std::byte> b = *good;
    std::memcpy(b.data() + at + 8 + offset, value, size);
    std::uint32_t len = 0;
    std::memcpy(&len, b.data() + at + 4, 4);
    const std::uint32_t crc = wire::Crc32c(std::span<const std::byte>(b).subspan(at, 8 + len));
    std::memcpy(b.data() + at + 8 + len, &crc, 4);
    return Parse(b, "f");
  };
  const std::uint64_t huge = std::uint64_t{1} << 40;
  auto count = with(9, &huge, 8);
  REQUIRE_FALSE(count.ok());
  CHECK_THAT(count.status().message(), Contains("FEEDBACK") && Contains("more than the"));
  auto shared = with(17, &huge, 8);
  REQUIRE_FALSE(shared.ok());
  CHECK_THAT(shared.status().message(), Contains("FEEDBACK") && Contains("more than the"));
  const std::uint32_t none = 0;
  auto workers = with(5, &none, 4);
  REQUIRE_FALSE(workers.ok());
  CHECK_THAT(workers.status().message(), Contains("FEEDBACK") && Contains("0 workers"));
  const std::uint8_t method = 7;
  auto unknown = with(0, &method, 1);
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.status().message(), Contains("FEEDBACK") && Contains("unknown method 7"));
  // One value fewer per worker than the payload holds: bytes left over.
  const std::uint64_t fewer = 1;
  auto extra = with(9, &fewer, 8);
  REQUIRE_FALSE(extra.ok());
  CHECK_THAT(extra.status().message(), Contains("FEEDBACK") && Contains("unexpected bytes"));
}

}  // namespace
}  // namespace tfd::ckpt
