// Each message's payload except INIT and STATE (wire_state_test.cc): round trips of every field,
// and truncations, trailing bytes, out-of-range enums and float counts refused as Corruption.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "common/wire/frame.h"
#include "common/wire/messages.h"
#include "test/unit/common/wire/wire_fixtures.h"

namespace tfd::wire {
namespace {

using Catch::Matchers::Contains;
using namespace fixtures;  // Transmit, Flatten, Poke, CheckMalformedRejected, SampleInit, ...

TEST_CASE("HELLO round-trips every field", "[unit][wire]") {
  Hello m;
  m.version = 1;
  m.kind = TaskKind::kChief;
  m.index = 0xDEADBEEF;
  m.incarnation = 0x0123456789ABCDEFull;
  m.cluster_id = 0xFEDCBA9876543210ull;
  OutFrame f = Encode(m);
  const auto payload = Transmit(f, MessageType::kHello);
  Hello got;
  REQUIRE(Decode(payload, &got).ok());
  CHECK(got.version == 1);
  CHECK(got.kind == TaskKind::kChief);
  CHECK(got.index == 0xDEADBEEFu);
  CHECK(got.incarnation == 0x0123456789ABCDEFull);
  CHECK(got.cluster_id == 0xFEDCBA9876543210ull);
  CheckMalformedRejected<Hello>(payload);
}

TEST_CASE("WELCOME round-trips every field", "[unit][wire]") {
  for (bool initialized : {false, true}) {
    Welcome m;
    m.kind = TaskKind::kPs;
    m.index = 3;
    m.incarnation = 0x1122334455667788ull;
    m.initialized = initialized;
    m.global_step = 0x8000000000000001ull;
    m.resume_step = 0x0102030405060708ull;
    OutFrame f = Encode(m);
    const auto payload = Transmit(f, MessageType::kWelcome);
    Welcome got;
    got.initialized = !initialized;
    REQUIRE(Decode(payload, &got).ok());
    CHECK(got.kind == TaskKind::kPs);
    CHECK(got.index == 3);
    CHECK(got.incarnation == 0x1122334455667788ull);
    CHECK(got.initialized == initialized);
    CHECK(got.global_step == 0x8000000000000001ull);
    CHECK(got.resume_step == 0x0102030405060708ull);
    CheckMalformedRejected<Welcome>(payload);
  }
}

TEST_CASE("WAIT_READY, READY and PULL round-trip their u64", "[unit][wire]") {
  {
    OutFrame f = Encode(WaitReady{0x0102030405060708ull});
    const auto payload = Transmit(f, MessageType::kWaitReady);
    CHECK(payload.size() == 8);
    WaitReady got;
    REQUIRE(Decode(payload, &got).ok());
    CHECK(got.layout_hash == 0x0102030405060708ull);
    CheckMalformedRejected<WaitReady>(payload);
  }
  {
    OutFrame f = Encode(Ready{0x8877665544332211ull, 0x0102030405060708ull});
    const auto payload = Transmit(f, MessageType::kReady);
    Ready got;
    REQUIRE(Decode(payload, &got).ok());
    CHECK(got.global_step == 0x8877665544332211ull);
    CHECK(got.resume_step == 0x0102030405060708ull);
    // The 8-byte READY of a ps without the resume step still decodes (resume_step 0); any other
    // truncation is Corruption.
    Ready old;
    old.resume_step = 9;
    REQUIRE(Decode(std::span(payload).first(8), &old).ok());
    CHECK(old.global_step == 0x8877665544332211ull);
    CHECK(old.resume_step == 0);
    CheckTruncationsRejectedExcept<Ready>(payload, {8});
    CheckTrailingBytesRejected<Ready>(payload);
  }
  {
    OutFrame f = Encode(Pull{12345});
    const auto payload = Transmit(f, MessageType::kPull);
    Pull got;
    REQUIRE(Decode(payload, &got).ok());
    CHECK(got.min_step == 12345);
    CheckMalformedRejected<Pull>(payload);
  }
}

TEST_CASE("PARAMS round-trips the step and the values", "[unit][wire]") {
  const std::vector<float> values = {1.0f, -2.5f, 1e-20f, 7.75f};
  OutFrame f = Encode(Params{99, {}}, values);
  const auto payload = Transmit(f, MessageType::kParams);
  Params got;
  REQUIRE(Decode(payload, &got).ok());
  CHECK(got.global_step == 99);
  CHECK(FloatsOf(got.values) == values);
  CheckMalformedRejected<Params>(payload);

  OutFrame empty = Encode(Params{5, {}}, {});
  const auto empty_payload = Transmit(empty, MessageType::kParams);
  Params got_empty;
  REQUIRE(Decode(empty_payload, &got_empty).ok());
  CHECK(got_empty.global_step == 5);
  CHECK(got_empty.values.empty());
}

TEST_CASE("PUSH round-trips its fields and concatenates several gradient spans", "[unit][wire]") {
  const std::vector<float> g0 = {0.1f, 0.2f, 0.3f}, g1 = {-4.0f}, g2 = {}, g3 = {5.5f, 6.5f};
  const std::vector<std::span<const float>> grads = {g0, g1, g2, g3};
  Push m;
  m.worker = 2;
  m.incarnation = 0xCAFEBABE12345678ull;
  m.local_step = 77;
  m.based_on_step = 76;
  OutFrame f = Encode(m, grads);
  const auto payload = Transmit(f, MessageType::kPush);
  Push got;
  REQUIRE(Decode(payload, &got).ok());
  CHECK(got.worker == 2);
  CHECK(got.incarnation == 0xCAFEBABE12345678ull);
  CHECK(got.local_step == 77);
  CHECK(got.based_on_step == 76);
  CHECK(FloatsOf(got.grads) == std::vector<float>{0.1f, 0.2f, 0.3f, -4.0f, 5.5f, 6.5f});
  CheckMalformedRejected<Push>(payload);
}

TEST_CASE("PIPE_ACTIVATION and PIPE_GRADIENT round-trip every field; rows that do not divide the floats are refused", "[unit][wire]") {
  const std::vector<float> values = {1.0f, -2.5f, 1e-20f, 7.75f, 3.0f, -0.0f};
  PipeTensor m{.step = 1234567, .microbatch = 5, .stage = 2, .replica = 1, .rows = 3, .correct = 2, .loss = 0.625,
               .abs_error = 1.5, .squared_error = 3.25};
  OutFrame f = Encode(MessageType::kPipeGradient, m, values);
  CHECK(f.head.size() == kPipeTensorHeadBytes);
  const auto payload = Transmit(f, MessageType::kPipeGradient);
  PipeTensor got;
  REQUIRE(Decode(payload, &got).ok());
  CHECK(got.step == 1234567);
  CHECK(got.microbatch == 5);
  CHECK(got.stage == 2);
  CHECK(got.replica == 1);
  CHECK(got.rows == 3);
  CHECK(got.correct == 2);
  CHECK(got.loss == 0.625);
  CHECK(got.abs_error == 1.5);
  CHECK(got.squared_error == 3.25);
  CHECK(FloatsOf(got.values) == values);
  CheckMalformedRejected<PipeTensor>(payload);
  m.rows = 4;  // 6 floats are not 4 rows
  OutFrame bad = Encode(MessageType::kPipeActivation, m, values);
  CHECK_THAT(Decode(Transmit(bad, MessageType::kPipeActivation), &got).message(), Catch::Contains("not 4 rows"));
}

TEST_CASE("RING_CHUNK_SHM and the shared-slot control frames round-trip every field", "[unit][wire]") {
  RingChunkShm m;
  m.chunk.collective = 77;
  m.chunk.phase = RingPhase::kReduceScatter;
  m.chunk.hop = 1;
  m.chunk.segment = 2;
  m.chunk.offset = 4096;
  m.count = 32768;
  m.slot = 5;
  m.crc = 0xCAFEF00Du;
  OutFrame f = Encode(m);
  const auto payload = Transmit(f, MessageType::kRingChunkShm);
  CHECK(payload.size() == 40);
  RingChunkShm got;
  REQUIRE(Decode(payload, &got).ok());
  CHECK(got.chunk.collective == 77);
  CHECK(got.chunk.phase == RingPhase::kReduceScatter);
  CHECK(got.chunk.hop == 1);
  CHECK(got.chunk.segment == 2);
  CHECK(got.chunk.offset == 4096);
  CHECK(got.count == 32768);
  CHECK(got.slot == 5);
  CHECK(got.crc == 0xCAFEF00Du);
  CheckMalformedRejected<RingChunkShm>(payload);
  auto bad = payload;
  bad[8] = std::byte{3};  // phase
  CHECK(Decode(bad, &got).code() == Code::kCorruption);

  RingShmOffer offer{17, 8, 131072, 0x9876543210ull};
  RingShmOffer offer_got;
  OutFrame offer_frame = Encode(offer);
  const auto offer_payload = Transmit(offer_frame, MessageType::kRingShmOffer);
  REQUIRE(Decode(offer_payload, &offer_got).ok());
  CHECK(offer_got.fd == 17);
  CHECK(offer_got.slots == 8);
  CHECK(offer_got.slot_bytes == 131072);
  CHECK(offer_got.nonce == 0x9876543210ull);
  CheckMalformedRejected<RingShmOffer>(offer_payload);

  RingShmAccept accept_got;
  OutFrame accept_frame = Encode(RingShmAccept{42});
  const auto accept_payload = Transmit(accept_frame, MessageType::kRingShmAccept);
  REQUIRE(Decode(accept_payload, &accept_got).ok());
  CHECK(accept_got.nonce == 42);
  CheckMalformedRejected<RingShmAccept>(accept_payload);

  RingSlotFree free_got;
  OutFrame free_frame = Encode(RingSlotFree{9});
  const auto free_payload = Transmit(free_frame, MessageType::kRingSlotFree);
  REQUIRE(Decode(free_payload, &free_got).ok());
  CHECK(free_got.freed == 9);
  CheckMalformedRejected<RingSlotFree>(free_payload);
}

TEST_CASE("RING_CHUNK round-trips every field; its floats start 4-byte aligned in the payload", "[unit][wire]") {
  const std::vector<float> values = {1.0f, -2.5f, 1e-20f, 7.75f, 3.0f};
  RingChunk m;
  m.collective = 12345;
  m.phase = RingPhase::kAllGather;
  m.hop = 3;
  m.segment = 4;
  m.offset = 1000003;
  OutFrame f = Encode(m, values);
  CHECK(f.head.size() == 32);
  const auto payload = Transmit(f, MessageType::kRingChunk);
  RingChunk got;
  REQUIRE(Decode(payload, &got).ok());
  CHECK(got.collective == 12345);
  CHECK(got.phase == RingPhase::kAllGather);
  CHECK(got.hop == 3);
  CHECK(got.segment == 4);
  CHECK(got.offset == 1000003);
  CHECK(FloatsOf(got.values) == values);
  CheckMalformedRejected<RingChunk>(payload);

  auto bad = payload;
  bad[8] = std::byte{3};  // phase
  CHECK(Decode(bad, &got).code() == Code::kCorruption);
  bad = payload;
  bad[9] = std::byte{1};  // reserved
  CHECK(Decode(bad, &got).code() == Code::kCorruption);
  bad = payload;
  bad[24] = std::byte{6};  // count 6 where 5 floats follow
  CHECK(Decode(bad, &got).code() == Code::kCorruption);
  bad = payload;
  bad.push_back(std::byte{0});  // a trailing byte
  CHECK(Decode(bad, &got).code() == Code::kCorruption);
}

TEST_CASE("PUSH_ACK round-trips the step and every outcome", "[unit][wire]") {
  for (PushOutcome o : {PushOutcome::kApplied, PushOutcome::kStale, PushOutcome::kDuplicate}) {
    OutFrame f = Encode(PushAck{1000, o});
    const auto payload = Transmit(f, MessageType::kPushAck);
    PushAck got;
    got.outcome = o == PushOutcome::kApplied ? PushOutcome::kStale : PushOutcome::kApplied;
    REQUIRE(Decode(payload, &got).ok());
    CHECK(got.global_step == 1000);
    CHECK(got.outcome == o);
    CheckMalformedRejected<PushAck>(payload);
  }
}

TEST_CASE("DONE round-trips the worker; DONE_ACK and HEARTBEAT are empty", "[unit][wire]") {
  OutFrame f = Encode(Done{0xFFFFFFFEu});
  const auto payload = Transmit(f, MessageType::kDone);
  Done got;
  REQUIRE(Decode(payload, &got).ok());
  CHECK(got.worker == 0xFFFFFFFEu);
  CheckMalformedRejected<Done>(payload);

  OutFrame ack = EncodeDoneAck();
  CHECK(Transmit(ack, MessageType::kDoneAck).empty());
  OutFrame hb = EncodeHeartbeat();
  CHECK(Transmit(hb, MessageType::kHeartbeat).empty());
}

TEST_CASE("ERROR round-trips the code and message", "[unit][wire]") {
  ErrorMessage m;
  m.code = static_cast<std::uint16_t>(Code::kFailedPrecondition);
  m.message = "ps:1: not initialised \xe2\x9c\x97";
  OutFrame f = Encode(m);
  const auto payload = Transmit(f, MessageType::kError);
  ErrorMessage got;
  REQUIRE(Decode(payload, &got).ok());
  CHECK(got.code == static_cast<std::uint16_t>(Code::kFailedPrecondition));
  CHECK(got.message == m.message);
  CheckMalformedRejected<ErrorMessage>(payload);

  // An empty message, and one longer than a u16 length can say (cut at 65535 bytes).
  OutFrame e = Encode(ErrorMessage{3, ""});
  const auto empty_payload = Transmit(e, MessageType::kError);
  ErrorMessage got_empty;
  REQUIRE(Decode(empty_payload, &got_empty).ok());
  CHECK(got_empty.code == 3);
  CHECK(got_empty.message.empty());
  OutFrame l = Encode(ErrorMessage{4, std::string(70000, 'x')});
  const auto long_payload = Transmit(l, MessageType::kError);
  ErrorMessage got_long;
  REQUIRE(Decode(long_payload, &got_long).ok());
  CHECK(got_long.message == std::string(65535, 'x'));
}

TEST_CASE("enum and bool fields out of range are Corruption", "[unit][wire]") {
  {
    OutFrame f = Encode(Hello{});
    auto p = Flatten(f);
    Poke<std::uint8_t>(p, 2, 5);  // kind after the u16 version
    Hello got;
    CHECK(Decode(p, &got).code() == Code::kCorruption);
  }
  {
    OutFrame f = Encode(Welcome{});
    auto p = Flatten(f);
    Poke<std::uint8_t>(p, 0, 9);  // kind
    Welcome got;
    CHECK(Decode(p, &got).code() == Code::kCorruption);
    p = Flatten(f);
    Poke<std::uint8_t>(p, 1 + 4 + 8, 2);  // initialized
    CHECK(Decode(p, &got).code() == Code::kCorruption);
  }
  {
    OutFrame f = Encode(PushAck{1, PushOutcome::kApplied});
    auto p = Flatten(f);
    Poke<std::uint8_t>(p, 8, 3);  // outcome
    PushAck got;
    CHECK(Decode(p, &got).code() == Code::kCorruption);
  }
  {
    OutFrame f = Encode(SampleInit(), kInitValues);
    auto p = Flatten(f);
    Poke<std::uint8_t>(p, 8 + 1 + 5 * 8, 2);  // use_nesterov
    Init got;
    CHECK(Decode(p, &got).code() == Code::kCorruption);
  }
}

TEST_CASE("a float count larger than the bytes that remain is Corruption", "[unit][wire]") {
  const std::vector<float> values = {1.0f, 2.0f};
  OutFrame f = Encode(Params{3, {}}, values);
  auto p = Flatten(f);
  for (std::uint64_t n : {std::uint64_t{3}, std::uint64_t{1} << 62, ~std::uint64_t{0}}) {
    Poke<std::uint64_t>(p, 8, n);
    Params got;
    CHECK(Decode(p, &got).code() == Code::kCorruption);
  }
}

TEST_CASE("elastic sections: INIT's min/max workers, READY and PUSH_ACK's membership, PUSH's epoch", "[unit][wire]") {
  {
    Init m = SampleInit();
    m.update.min_workers = 2;
    m.update.max_workers = 7;
    OutFrame f = Encode(m, kInitValues);
    const auto payload = Transmit(f, MessageType::kInit);
    Init got;
    REQUIRE(Decode(payload, &got).ok());
    CHECK(got.update.min_workers == 2);
    CHECK(got.update.max_workers == 7);
    CheckTrailingBytesRejected<Init>(payload);
    Init plain;
    OutFrame g = Encode(SampleInit(), kInitValues);
    REQUIRE(Decode(Transmit(g, MessageType::kInit), &plain).ok());
    CHECK(plain.update.max_workers == 0);  // absent: not elastic
  }
  {
    OutFrame f = Encode(Ready{5, 6, Membership{1, 3, 4}});
    const auto payload = Transmit(f, MessageType::kReady);
    Ready got;
    REQUIRE(Decode(payload, &got).ok());
    REQUIRE(got.membership.has_value());
    CHECK(*got.membership == Membership{1, 3, 4});
    CheckTrailingBytesRejected<Ready>(payload);
    Ready bad;
    OutFrame g = Encode(Ready{5, 6, Membership{3, 3, 0}});  // index beyond the count
    CHECK(Decode(Transmit(g, MessageType::kReady), &bad).code() == Code::kCorruption);
  }
  for (bool stop : {false, true}) {
    PushAck m{9, PushOutcome::kApplied, stop, Membership{0, 2, 1}};
    OutFrame f = Encode(m);
    const auto payload = Transmit(f, MessageType::kPushAck);
    PushAck got;
    REQUIRE(Decode(payload, &got).ok());
    CHECK(got.stop == stop);
    REQUIRE(got.membership.has_value());
    CHECK(*got.membership == Membership{0, 2, 1});
    CheckTrailingBytesRejected<PushAck>(payload);
  }
  {
    const std::vector<float> g0 = {1.0f, 2.0f};
    const std::vector<std::span<const float>> grads = {g0};
    Push m;
    m.worker = 1;
    m.epoch = 12;
    OutFrame f = Encode(m, grads);
    const auto payload = Transmit(f, MessageType::kPush);
    Push got;
    REQUIRE(Decode(payload, &got).ok());
    CHECK(got.epoch == 12);
    CHECK(FloatsOf(got.grads) == g0);
    CheckTrailingBytesRejected<Push>(payload);
  }
}

TEST_CASE("progress sections: INIT, READY and PUSH_ACK carry the done and given-up ranks; frames without one still decode", "[unit][wire]") {
  const Progress progress{{0, 2}, {1}, true};
  {
    Init m = SampleInit();
    m.update.min_workers = 1;
    m.update.max_workers = 4;  // the progress section comes after the elastic one
    m.progress = progress;
    OutFrame f = Encode(m, kInitValues);
    const auto payload = Transmit(f, MessageType::kInit);
    Init got;
    REQUIRE(Decode(payload, &got).ok());
    CHECK(got.progress == progress);
    CHECK(got.update.max_workers == 4);
    CheckTrailingBytesRejected<Init>(payload);
    Init plain;
    OutFrame g = Encode(SampleInit(), kInitValues);
    REQUIRE(Decode(Transmit(g, MessageType::kInit), &plain).ok());
    CHECK(plain.progress.empty());  // an INIT from before progress existed
  }
  {
    Ready m{5, 6, std::nullopt, progress};
    OutFrame f = Encode(m);
    const auto payload = Transmit(f, MessageType::kReady);
    Ready got;
    REQUIRE(Decode(payload, &got).ok());
    CHECK(got.progress == progress);
    CHECK_FALSE(got.membership.has_value());
    CheckTrailingBytesRejected<Ready>(payload);
  }
  for (bool stop : {false, true}) {
    PushAck m{9, PushOutcome::kApplied, stop, Membership{0, 2, 1}, Progress{{1}, {}, false}};
    OutFrame f = Encode(m);
    const auto payload = Transmit(f, MessageType::kPushAck);
    PushAck got;
    REQUIRE(Decode(payload, &got).ok());
    CHECK(got.stop == stop);
    CHECK(got.progress == Progress{{1}, {}, false});
    CheckTrailingBytesRejected<PushAck>(payload);
  }
  {
    PushAck m{9, PushOutcome::kApplied, false, std::nullopt, Progress{}};
    OutFrame f = Encode(m);
    CHECK(Transmit(f, MessageType::kPushAck).size() == 9);  // an empty progress is not sent
  }
  // Ranks that do not increase, a rank in both lists, and unknown flags are refused.
  for (const Progress& bad : {Progress{{2, 1}, {}, false}, Progress{{1}, {1}, false}, Progress{{}, {3, 3}, false}}) {
    OutFrame f = Encode(Ready{5, 6, std::nullopt, bad});
    Ready got;
    CHECK(Decode(Transmit(f, MessageType::kReady), &got).code() == Code::kCorruption);
  }
  {
    OutFrame f = Encode(Ready{5, 6, std::nullopt, Progress{{}, {}, true}});
    std::vector<std::byte> payload = Transmit(f, MessageType::kReady);
    payload[17] = std::byte{2};  // the flags byte, after global step, resume step and the tag
    Ready got;
    CHECK(Decode(payload, &got).code() == Code::kCorruption);
    payload[17] = std::byte{1};
    payload[18] = std::byte{0xff};  // a done count larger than the bytes that remain
    CHECK(Decode(payload, &got).code() == Code::kCorruption);
  }
}

}  // namespace
}  // namespace tfd::wire
