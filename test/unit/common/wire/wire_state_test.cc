// The parameter-state messages: INIT (optimizer, update rule, chunks, values, and optional slots
// and resume steps) and STATE_PULL/STATE round-trip, and inconsistent counts are Corruption.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/wire/compressed_messages.h"
#include "common/wire/frame.h"
#include "common/wire/messages.h"
#include "test/unit/common/wire/wire_fixtures.h"

namespace tfd::wire {
namespace {

using Catch::Matchers::Contains;
using namespace fixtures;  // Transmit, Flatten, Poke, CheckMalformedRejected, SampleInit, ...

TEST_CASE("INIT round-trips the optimizer, update rule, several chunks and their values", "[unit][wire]") {
  const Init m = SampleInit();
  OutFrame f = Encode(m, kInitValues);
  const auto payload = Transmit(f, MessageType::kInit);
  Init got;
  REQUIRE(Decode(payload, &got).ok());
  CHECK(got.layout_hash == 0xABCDEF0123456789ull);
  CHECK(got.optimizer.type == OptimizerKind::kAdam);
  CHECK(got.optimizer.learning_rate == 0.001);
  CHECK(got.optimizer.momentum == 0.9);
  CHECK(got.optimizer.beta1 == 0.8);
  CHECK(got.optimizer.beta2 == 0.999);
  CHECK(got.optimizer.epsilon == 1e-7);
  CHECK(got.optimizer.use_nesterov);
  CHECK(got.update.mode == UpdateMode::kSync);
  CHECK(got.update.scale_stale);
  CHECK(got.update.replicas_to_aggregate == 2);
  CHECK(got.update.total_num_replicas == 3);
  CHECK(got.update.num_workers == 3);
  CHECK(got.update.on_worker_loss == WorkerLossPolicy::kShrink);
  CHECK(got.update.min_replicas == 2);
  CHECK(got.global_step == 0x0a0b0c0d0e0f1011ull);
  REQUIRE(got.chunks.size() == 3);
  CHECK(got.chunks[0].name == "dense/kernel[0:3]");
  CHECK(got.chunks[0].length == 3);
  CHECK(got.chunks[1].name == "dense/bias");
  CHECK(got.chunks[1].length == 2);
  CHECK(got.chunks[2].name == "dense_1/bias");
  CHECK(got.chunks[2].length == 1);
  REQUIRE(got.values.size() == kInitValues.size() * 4);
  CHECK(std::memcmp(got.values.data(), kInitValues.data(), got.values.size()) == 0);  // bit for bit (-0.0 too)
  CHECK(FloatsOf(got.values) == kInitValues);
  CheckMalformedRejected<Init>(payload);
}

// Adam (2 slots per value) over SampleInit's 6 values: 12 slot floats.
const std::vector<float> kInitSlots = {0.1f, 0.2f, -0.3f, 0.4f, 0.5f, 0.6f, 1e-8f, 2e-8f, 3.0f, 4.0f, 5.0f, 6.0f};

TEST_CASE("INIT with optimizer state round-trips slots, update count and resume steps", "[unit][wire]") {
  Init m = SampleInit();
  m.has_state = true;
  m.updates = 0x0102030405060708ull;
  m.resume_steps = {7, 0, 0xfffffffffull};
  OutFrame f = Encode(m, kInitValues, kInitSlots);
  const auto payload = Transmit(f, MessageType::kInit);
  Init got;
  REQUIRE(Decode(payload, &got).ok());
  CHECK(got.has_state);
  CHECK(got.updates == 0x0102030405060708ull);
  CHECK(got.resume_steps == m.resume_steps);
  CHECK(FloatsOf(got.values) == kInitValues);
  CHECK(FloatsOf(got.slots) == kInitSlots);
  // Cut where the values end, it is an INIT without state; every other cut is Corruption.
  OutFrame plain = Encode(SampleInit(), kInitValues);
  REQUIRE(plain.Seal().ok());
  const std::size_t plain_size = Flatten(plain).size();
  Init cut;
  REQUIRE(Decode(std::span(payload).first(plain_size), &cut).ok());
  CHECK_FALSE(cut.has_state);
  CheckTruncationsRejectedExcept<Init>(payload, {plain_size});
  CheckTrailingBytesRejected<Init>(payload);

  SECTION("no resume steps") {
    m.resume_steps.clear();
    OutFrame g = Encode(m, kInitValues, kInitSlots);
    REQUIRE(g.Seal().ok());
    Init back;
    REQUIRE(Decode(Flatten(g), &back).ok());
    CHECK(back.resume_steps.empty());
    CHECK(FloatsOf(back.slots) == kInitSlots);
  }
  SECTION("a section tag other than 1, 2, 3 or 4") {
    std::vector<std::byte> p = payload;
    p[plain_size] = std::byte{5};
    Init back;
    CHECK(Decode(p, &back).message() == fmt::format("INIT: {} unexpected trailing bytes", payload.size() - plain_size));
  }
  SECTION("resume steps for another worker count") {
    m.resume_steps = {1, 2};
    OutFrame g = Encode(m, kInitValues, kInitSlots);
    REQUIRE(g.Seal().ok());
    Init back;
    CHECK(Decode(Flatten(g), &back).message() == "INIT: 2 resume steps for 3 workers");
  }
  SECTION("slots that do not fit the optimizer") {
    const std::vector<float> one_slot(kInitValues.size(), 1.0f);  // momentum's count, but the INIT says adam
    OutFrame g = Encode(m, kInitValues, one_slot);
    REQUIRE(g.Seal().ok());
    Init back;
    CHECK(Decode(Flatten(g), &back).message() == "INIT: 6 slot floats for 6 values and optimizer type 2");
  }
}

TEST_CASE("INIT carries a learning-rate schedule and weight decay, with or without state", "[unit][wire][schedule]") {
  Init m = SampleInit();
  m.optimizer.weight_decay = 5e-4;
  m.optimizer.schedule = LrScheduleKind::kPiecewiseConstant;
  m.optimizer.warmup_steps = 100;
  m.optimizer.boundaries = {1000, 2000};
  m.optimizer.values = {0.1, 0.01, 0.001};
  for (bool state : {false, true}) {
    INFO("with state " << state);
    m.has_state = state;
    m.updates = 9;
    OutFrame f = state ? Encode(m, kInitValues, kInitSlots) : Encode(m, kInitValues);
    const auto payload = Transmit(f, MessageType::kInit);
    Init got;
    REQUIRE(Decode(payload, &got).ok());
    CHECK(got.has_state == state);
    CHECK(got.optimizer.weight_decay == 5e-4);
    CHECK(got.optimizer.schedule == LrScheduleKind::kPiecewiseConstant);
    CHECK(got.optimizer.warmup_steps == 100);
    CHECK(got.optimizer.boundaries == m.optimizer.boundaries);
    CHECK(got.optimizer.values == m.optimizer.values);
    CHECK(FloatsOf(got.values) == kInitValues);
    if (state) CHECK(FloatsOf(got.slots) == kInitSlots);
    CheckTrailingBytesRejected<Init>(payload);
  }
  SECTION("an unknown schedule, a bad count or decreasing boundaries are Corruption") {
    m.has_state = false;
    OutFrame plain = Encode(SampleInit(), kInitValues);
    REQUIRE(plain.Seal().ok());
    const std::size_t section = Flatten(plain).size();  // where the schedule section starts
    OutFrame f = Encode(m, kInitValues);
    REQUIRE(f.Seal().ok());
    const std::vector<std::byte> good = Flatten(f);
    std::vector<std::byte> p = good;
    p[section + 9] = std::byte{9};  // the schedule code, after the tag and weight_decay
    Init back;
    CHECK(Decode(p, &back).message() == "INIT: unknown learning-rate schedule 9");
    p = good;
    p[section + 43] = std::byte{0xff};  // the boundary count's low byte: 255 boundaries
    CHECK_THAT(Decode(p, &back).message(), Contains("schedule boundaries is more than the payload can hold"));
    m.optimizer.boundaries = {2000, 1000};
    OutFrame g = Encode(m, kInitValues);
    REQUIRE(g.Seal().ok());
    CHECK(Decode(Flatten(g), &back).message() == "INIT: schedule boundaries do not increase");
    m.optimizer.schedule = LrScheduleKind::kCosineDecay;
    m.optimizer.boundaries.clear();
    m.optimizer.values.clear();
    OutFrame h = Encode(m, kInitValues);
    REQUIRE(h.Seal().ok());
    CHECK(Decode(Flatten(h), &back).message() == "INIT: decay_steps 0 out of range");
  }
}

TEST_CASE("STATE_PULL is empty; STATE round-trips values, slots, counts and resume steps", "[unit][wire]") {
  {
    OutFrame f = Encode(StatePull{});
    const auto payload = Transmit(f, MessageType::kStatePull);
    CHECK(payload.empty());
    StatePull got;
    CHECK(Decode(payload, &got).ok());
    CheckTrailingBytesRejected<StatePull>(payload);
  }
  State m;
  m.global_step = 0x1112131415161718ull;
  m.updates = 0x2122232425262728ull;
  m.resume_steps = {5, 0, 9};
  OutFrame f = Encode(m, kInitValues, kInitSlots);
  const auto payload = Transmit(f, MessageType::kState);
  State got;
  REQUIRE(Decode(payload, &got).ok());
  CHECK(got.global_step == m.global_step);
  CHECK(got.updates == m.updates);
  CHECK(got.resume_steps == m.resume_steps);
  CHECK(FloatsOf(got.values) == kInitValues);
  CHECK(FloatsOf(got.slots) == kInitSlots);
  CheckMalformedRejected<State>(payload);

  SECTION("no slots (sgd)") {
    OutFrame g = Encode(m, kInitValues, {});
    REQUIRE(g.Seal().ok());
    State back;
    REQUIRE(Decode(Flatten(g), &back).ok());
    CHECK(back.slots.empty());
  }
  SECTION("slots that are not a whole multiple of the values") {
    const std::vector<float> odd(7, 1.0f);
    OutFrame g = Encode(m, kInitValues, odd);
    REQUIRE(g.Seal().ok());
    State back;
    CHECK(Decode(Flatten(g), &back).message() == "STATE: 7 slot floats for 6 values");
  }
  SECTION("a resume step count larger than the payload could hold") {
    std::vector<std::byte> p = payload;
    Poke<std::uint32_t>(p, 16, 0x10000u);
    State back;
    CHECK(Decode(p, &back).code() == Code::kCorruption);
    CHECK(back.resume_steps.size() <= 3);
  }
}

TEST_CASE("INIT with a chunk count larger than the payload could hold is Corruption", "[unit][wire]") {
  OutFrame f = Encode(SampleInit(), kInitValues);
  REQUIRE(f.Seal().ok());
  const std::vector<std::byte> good = Flatten(f);
  // layout_hash u64, optimizer (u8, 5 x f64, u8), update (u8 mode, u8 scale_stale, 3 x u32,
  // u8 on_worker_loss, u32 min_replicas), global_step u64, then the chunk count u32.
  constexpr std::size_t kChunkCountOffset = 8 + 1 + 5 * 8 + 1 + 1 + 1 + 3 * 4 + 1 + 4 + 8;
  std::uint32_t count = 0;
  std::memcpy(&count, good.data() + kChunkCountOffset, 4);
  REQUIRE(count == 3);  // the offset is right
  for (std::uint32_t bad : {4u, 1000u, kMaxChunks, kMaxChunks + 1, 0xffffffffu}) {
    std::vector<std::byte> p = good;
    Poke<std::uint32_t>(p, kChunkCountOffset, bad);
    Init got;
    Status s = Decode(p, &got);
    INFO("chunk count " << bad);
    CHECK(s.code() == Code::kCorruption);
    CHECK(got.chunks.size() <= 4);  // nothing was reserved for the claimed count
  }
  std::vector<std::byte> p = good;
  Poke<std::uint32_t>(p, kChunkCountOffset, 1000u);
  Init got;
  CHECK(Decode(p, &got).message() == "INIT: 1000 chunks is more than the payload can hold");
}

TEST_CASE("INIT whose value count does not match the chunk lengths is Corruption", "[unit][wire]") {
  const Init m = SampleInit();
  OutFrame f = Encode(m, kInitValues);
  REQUIRE(f.Seal().ok());
  const std::vector<std::byte> good = Flatten(f);
  const std::size_t count_offset = f.head.size() - 8;  // the value count ends the head
  std::uint64_t count = 0;
  std::memcpy(&count, good.data() + count_offset, 8);
  REQUIRE(count == kInitValues.size());

  SECTION("value count one more than the chunks' total") {
    // (with the payload grown to match, so only the mismatch is wrong)
    std::vector<std::byte> p = good;
    Poke<std::uint64_t>(p, count_offset, count + 1);
    p.insert(p.end(), 4, std::byte{0});
    Init got;
    Status s = Decode(p, &got);
    CHECK(s.code() == Code::kCorruption);
    CHECK(s.message() == "INIT: value count does not match the chunks' lengths");
  }
  SECTION("value count one less than the chunks' total") {
    std::vector<std::byte> p = good;
    Poke<std::uint64_t>(p, count_offset, count - 1);
    p.resize(p.size() - 4);
    Init got;
    Status s = Decode(p, &got);
    CHECK(s.code() == Code::kCorruption);
    CHECK(s.message() == "INIT: value count does not match the chunks' lengths");
  }
  SECTION("chunk lengths that do not add up to the values sent") {
    Init lying = m;
    lying.chunks[1].length = 3;  // 3 + 3 + 1 = 7 floats claimed, 6 sent
    OutFrame g = Encode(lying, kInitValues);
    REQUIRE(g.Seal().ok());
    Init got;
    Status s = Decode(Flatten(g), &got);
    CHECK(s.code() == Code::kCorruption);
    CHECK(s.message() == "INIT: value count does not match the chunks' lengths");
  }
  SECTION("a chunk longer than any payload could carry") {
    Init lying = m;
    lying.chunks[0].length = (kMaxPayloadBytes / 4) + 1;
    OutFrame g = Encode(lying, kInitValues);
    REQUIRE(g.Seal().ok());
    Init got;
    Status s = Decode(Flatten(g), &got);
    CHECK(s.code() == Code::kCorruption);
    CHECK(s.message() == "INIT: a chunk is longer than any payload");
  }
}

TEST_CASE("INIT with an unknown optimizer, update mode or inconsistent worker counts is Corruption", "[unit][wire]") {
  auto decode = [](const Init& m) {
    OutFrame f = Encode(m, kInitValues);
    REQUIRE(f.Seal().ok());
    Init got;
    return Decode(Flatten(f), &got);
  };
  Init m = SampleInit();
  m.optimizer.type = static_cast<OptimizerKind>(3);
  CHECK(decode(m).message() == "INIT: unknown optimizer type 3");
  m = SampleInit();
  m.update.mode = static_cast<UpdateMode>(2);
  CHECK(decode(m).message() == "INIT: unknown update mode 2");
  m = SampleInit();
  m.update.num_workers = 0;
  CHECK(decode(m).message() == "INIT: inconsistent worker counts or worker-loss policy");
  m = SampleInit();
  m.update.num_workers = kMaxWorkers + 1;
  CHECK(decode(m).message() == "INIT: inconsistent worker counts or worker-loss policy");
  m = SampleInit();
  m.update.replicas_to_aggregate = 4;  // of total_num_replicas 3
  CHECK(decode(m).message() == "INIT: inconsistent worker counts or worker-loss policy");
  m = SampleInit();
  m.update.on_worker_loss = static_cast<WorkerLossPolicy>(3);
  CHECK(decode(m).message() == "INIT: unknown worker-loss policy 3");
  m = SampleInit();
  m.update.min_replicas = 0;
  CHECK(decode(m).message() == "INIT: inconsistent worker counts or worker-loss policy");
  m = SampleInit();
  m.update.min_replicas = 4;  // of 3 workers
  CHECK(decode(m).message() == "INIT: inconsistent worker counts or worker-loss policy");
  CHECK(decode(SampleInit()).ok());
}

}  // namespace
}  // namespace tfd::wire

namespace tfd::wire {
namespace {

using Catch::Matchers::Contains;
using namespace fixtures;

// The error feedback of the ps modes' checkpoints (docs/checkpoints.md, "Error feedback"): the save
// a PARAMS asks for, the save STATE_PULL names, the deposits and progress STATE carries, and the
// announcement and deposit a PUSH_COMPRESSED carries; their counts bounded by the payload.
TEST_CASE("the error feedback sections of PARAMS, STATE_PULL, STATE and PUSH_COMPRESSED round-trip, bounded", "[unit][wire]") {
  SECTION("PARAMS asks for a save's feedback after its values") {
    const std::vector<float> values = {1.0f, 2.0f};
    OutFrame f = Encode(Params{.global_step = 7, .values = {}, .feedback_request = 0x0102030405060708ull}, values);
    const auto payload = Transmit(f, MessageType::kParams);
    Params got;
    REQUIRE(Decode(payload, &got).ok());
    CHECK(got.global_step == 7);
    CHECK(FloatsOf(got.values) == values);
    CHECK(got.feedback_request == 0x0102030405060708ull);
    CheckTruncationsRejectedExcept<Params>(payload, {payload.size() - 9});  // without the section: an older PARAMS
    CheckTrailingBytesRejected<Params>(payload);
  }
  SECTION("STATE_PULL names the save") {
    OutFrame f = Encode(StatePull{.feedback_request = 42});
    const auto payload = Transmit(f, MessageType::kStatePull);
    CHECK(payload.size() == 8);
    StatePull got;
    REQUIRE(Decode(payload, &got).ok());
    CHECK(got.feedback_request == 42);
    CheckTruncationsRejectedExcept<StatePull>(payload, {0});
    std::vector<std::byte> longer = payload;
    longer.push_back(std::byte{0});
    CHECK_THAT(Decode(longer, &got).message(), Contains("9 unexpected trailing bytes"));
  }
  State m;
  m.global_step = 12;
  m.resume_steps = {3, 4, 5};
  m.feedback_request = 10;
  const std::vector<float> one = {0.5f, -1.0f, 2.0f, 0.0f, 3.0f, -4.0f}, two = {9.0f, 8.0f, 7.0f, 6.0f, 5.0f, 4.0f};
  m.feedback = {{.worker = 1, .values = std::as_bytes(std::span<const float>(one))}, {.worker = 2, .values = std::as_bytes(std::span<const float>(two))}};
  m.progress.done = {2};
  m.absent = {3, 5};
  OutFrame f = Encode(m, kInitValues, kInitSlots);
  const auto payload = Transmit(f, MessageType::kState);
  // After the 8 + 8 + 4 + 3 x 8 head, the values (count and floats), the slots (count and floats): the section's tag.
  const std::size_t section = 8 + 8 + 4 + 3 * 8 + 8 + kInitValues.size() * 4 + 8 + kInitSlots.size() * 4;
  const std::size_t progress_bytes = 1 + 1 + 4 + 4 + 4;  // tag, flags, one done rank, no given-up ones
  const std::size_t absent_bytes = 1 + 4 + 2 * 4;        // tag, count, two ranks
  SECTION("STATE carries the deposits, the ps's progress and the ranks away from it") {
    State got;
    REQUIRE(Decode(payload, &got).ok());
    CHECK(FloatsOf(got.values) == kInitValues);
    CHECK(FloatsOf(got.slots) == kInitSlots);
    CHECK(got.feedback_request == 10);
    REQUIRE(got.feedback.size() == 2);
    CHECK(got.feedback[0].worker == 1);
    CHECK(FloatsOf(got.feedback[0].values) == one);
    CHECK(got.feedback[1].worker == 2);
    CHECK(FloatsOf(got.feedback[1].values) == two);
    CHECK(got.progress.done == std::vector<std::uint32_t>{2});
    CHECK(got.absent == std::vector<std::uint32_t>{3, 5});
    // Without the section, without the progress and the absent ranks after it, or without the
    // absent ranks: as a ps sends them (an older ps sends none).
    CheckTruncationsRejectedExcept<State>(payload, {section, payload.size() - absent_bytes - progress_bytes, payload.size() - absent_bytes});
    CheckTrailingBytesRejected<State>(payload);
  }
  SECTION("absent ranks out of order, past the limit or more than the payload holds are Corruption") {
    State back;
    std::vector<std::byte> p = payload;
    Poke<std::uint32_t>(p, payload.size() - 4, 3);  // 3, 3
    CHECK_THAT(Decode(p, &back).message(), Contains("absent ranks must increase"));
    p = payload;
    Poke<std::uint32_t>(p, payload.size() - 4, kMaxWorkers);
    CHECK_THAT(Decode(p, &back).message(), Contains("absent ranks must increase and stay below"));
    p = payload;
    Poke<std::uint32_t>(p, payload.size() - 8 - 4, 3);  // three ranks where two are
    CHECK_THAT(Decode(p, &back).message(), Contains("3 absent ranks is more than the payload can hold"));
  }
  SECTION("a deposit count larger than the payload could hold, or a worker past the limit, is Corruption") {
    std::vector<std::byte> p = payload;
    Poke<std::uint32_t>(p, section + 1 + 8, 0x10000u);
    State back;
    CHECK(Decode(p, &back).code() == Code::kCorruption);
    CHECK(back.feedback.size() <= 2);
    p = payload;
    Poke<std::uint32_t>(p, section + 1 + 8 + 4, kMaxWorkers);
    CHECK_THAT(Decode(p, &back).message(), Contains("error feedback of worker 65536"));
  }
  SECTION("without a request, no section") {
    State plain = m;
    plain.feedback_request = 0;
    OutFrame g = Encode(plain, kInitValues, kInitSlots);
    State back;
    REQUIRE(Decode(Transmit(g, MessageType::kState), &back).ok());
    CHECK(back.feedback.empty());
    CHECK(back.progress.empty());
    CHECK(back.absent.empty());
  }
}

TEST_CASE("PUSH_COMPRESSED's announcement and deposit round-trip after the epoch, in order", "[unit][wire]") {
  const std::vector<std::uint16_t> halves = {1, 2, 3};
  const std::vector<float> deposit = {0.25f, -0.5f, 1.5f};
  PushCompressed m;
  m.push.worker = 1;
  m.push.local_step = 9;
  m.push.epoch = 2;
  m.encoding = GradEncoding::kFp16;
  m.count = 3;
  m.values = std::as_bytes(std::span<const std::uint16_t>(halves));
  m.save_request = 77;
  m.deposit_request = 70;
  m.deposit = std::as_bytes(std::span<const float>(deposit));
  OutFrame f = Encode(m, nullptr);
  const auto payload = Transmit(f, MessageType::kPushCompressed);
  PushCompressed got;
  REQUIRE(Decode(payload, &got).ok());
  CHECK(got.push.epoch == 2);
  CHECK(got.save_request == 77);
  CHECK(got.deposit_request == 70);
  CHECK(FloatsOf(got.deposit) == deposit);
  // Each optional section may be left out from its start: the epoch (5 bytes), the save (9), the deposit (9 + 12).
  const std::size_t head = payload.size() - 5 - 9 - 9 - 12;
  CheckTruncationsRejectedExcept<PushCompressed>(payload, {head, head + 5, head + 5 + 9});
  CheckTrailingBytesRejected<PushCompressed>(payload);
  SECTION("a deposit shorter than the gradient's count is refused") {
    std::vector<std::byte> p = payload;
    p.resize(p.size() - 4);
    PushCompressed back;
    CHECK(Decode(p, &back).code() == Code::kCorruption);
  }
  SECTION("each section alone") {
    PushCompressed only = m;
    only.push.epoch = 0;
    only.deposit_request = 0;
    OutFrame g = Encode(only, nullptr);
    PushCompressed back;
    REQUIRE(Decode(Transmit(g, MessageType::kPushCompressed), &back).ok());
    CHECK(back.save_request == 77);
    CHECK(back.deposit_request == 0);
    CHECK(back.deposit.empty());
  }
}

}  // namespace
}  // namespace tfd::wire
