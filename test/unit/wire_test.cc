// The frame header, every message's payload and CRC-32C: round trips, and every malformed input
// rejected as Corruption with a message naming the fault.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/wire/bytes.h"
#include "common/wire/crc32c.h"
#include "common/wire/frame.h"
#include "common/wire/messages.h"

namespace tfd::wire {
namespace {

using Catch::Matchers::Contains;
using HeaderBytes = std::array<std::byte, kFrameHeaderBytes>;

HeaderBytes EncodedHeader(const FrameHeader& h) {
  HeaderBytes raw{};
  EncodeHeader(h, raw);
  return raw;
}

template <typename T>
void Poke(HeaderBytes& raw, std::size_t offset, T v) {
  std::memcpy(raw.data() + offset, &v, sizeof v);
}
template <typename T>
void Poke(std::vector<std::byte>& raw, std::size_t offset, T v) {
  REQUIRE(offset + sizeof v <= raw.size());
  std::memcpy(raw.data() + offset, &v, sizeof v);
}

std::span<const std::byte> Bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

// The payload of a frame as it goes on the wire: head, then every tail span.
std::vector<std::byte> Flatten(const OutFrame& f) {
  std::vector<std::byte> out(f.head.begin(), f.head.end());
  for (const auto& t : f.tail) out.insert(out.end(), t.begin(), t.end());
  return out;
}

// Seals `f`, sends its header through Encode/DecodeHeader and checks the payload against it, as a
// receiver does; returns the payload for Decode.
std::vector<std::byte> Transmit(OutFrame& f, MessageType expected_type) {
  REQUIRE(f.Seal().ok());
  std::vector<std::byte> payload = Flatten(f);
  CHECK(f.header.payload_len == payload.size());
  CHECK(f.payload_size() == payload.size());
  Result<FrameHeader> h = DecodeHeader(EncodedHeader(f.header));
  REQUIRE(h.ok());
  CHECK(h->type == expected_type);
  CHECK(h->payload_len == payload.size());
  Status verified = VerifyPayload(*h, payload);
  CHECK(verified.ok());
  return payload;
}

std::vector<float> FloatsOf(std::span<const std::byte> bytes) {
  REQUIRE(bytes.size() % 4 == 0);
  std::vector<float> out(bytes.size() / 4);
  CopyFloats(bytes, out);
  return out;
}

// Every proper prefix of `payload` (lengths 0 .. size-1) decodes to Corruption.
template <typename M>
void CheckEveryTruncationRejected(const std::vector<std::byte>& payload) {
  for (std::size_t n = 0; n < payload.size(); ++n) {
    INFO("truncated to " << n << " of " << payload.size() << " bytes");
    M m;
    Status s = Decode(std::span(payload).first(n), &m);
    CHECK(s.code() == Code::kCorruption);
  }
}

// As CheckEveryTruncationRejected, but the prefixes of the lengths in `valid` (an older form of
// the message, without its optional fields) must decode.
template <typename M>
void CheckTruncationsRejectedExcept(const std::vector<std::byte>& payload, std::vector<std::size_t> valid) {
  for (std::size_t n = 0; n < payload.size(); ++n) {
    INFO("truncated to " << n << " of " << payload.size() << " bytes");
    M m;
    Status s = Decode(std::span(payload).first(n), &m);
    if (std::find(valid.begin(), valid.end(), n) != valid.end()) {
      CHECK(s.ok());
    } else {
      CHECK(s.code() == Code::kCorruption);
    }
  }
}

// `payload` with extra bytes after it decodes to Corruption naming the trailing bytes.
template <typename M>
void CheckTrailingBytesRejected(std::vector<std::byte> payload) {
  payload.push_back(std::byte{0});
  M m;
  Status s = Decode(payload, &m);
  CHECK(s.code() == Code::kCorruption);
  CHECK_THAT(s.message(), Contains("1 unexpected trailing bytes"));
  payload.insert(payload.end(), 4, std::byte{0});
  M m2;
  s = Decode(payload, &m2);
  CHECK(s.code() == Code::kCorruption);
  CHECK_THAT(s.message(), Contains("5 unexpected trailing bytes"));
}

template <typename M>
void CheckMalformedRejected(const std::vector<std::byte>& payload) {
  CheckEveryTruncationRejected<M>(payload);
  CheckTrailingBytesRejected<M>(payload);
}

// ---------------------------------------------------------------------------------------------
// Frame header

TEST_CASE("DecodeHeader refuses flags and reserved bytes that version 1 does not define", "[unit][wire]") {
  FrameHeader h;
  h.type = MessageType::kPull;
  h.flags = 0x0002;
  HeaderBytes raw = EncodedHeader(h);
  Result<FrameHeader> got = DecodeHeader(raw);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kCorruption);
  CHECK(got.status().message() == "unknown header flags 0x0002 (version 1 defines only 0x0001, MAC)");
  h.flags = kFlagMac;  // the one defined flag: whether a MAC is expected is the connection's business
  got = DecodeHeader(EncodedHeader(h));
  REQUIRE(got.ok());
  CHECK(got->flags == kFlagMac);
  h.flags = 0;
  raw = EncodedHeader(h);
  raw[10] = std::byte{1};
  got = DecodeHeader(raw);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().message() == "reserved header bytes are not zero");
}

TEST_CASE("a frame header survives EncodeHeader then DecodeHeader with every field", "[unit][wire]") {
  FrameHeader h;
  h.type = MessageType::kPush;
  h.request_id = 0x0123456789ABCDEFull;
  h.payload_len = 0x00ABCDEF;
  h.payload_crc = 0xFEDCBA98;
  const HeaderBytes raw = EncodedHeader(h);
  // The magic is the bytes "TFD1"; the reserved field is zero.
  CHECK(std::memcmp(raw.data(), "TFD1", 4) == 0);
  CHECK(raw[10] == std::byte{0});
  CHECK(raw[11] == std::byte{0});
  Result<FrameHeader> got = DecodeHeader(raw);
  REQUIRE(got.ok());
  CHECK(got->version == kProtocolVersion);
  CHECK(got->type == MessageType::kPush);
  CHECK(got->flags == 0);
  CHECK(got->request_id == 0x0123456789ABCDEFull);
  CHECK(got->payload_len == 0x00ABCDEFu);
  CHECK(got->payload_crc == 0xFEDCBA98u);
}

TEST_CASE("every known message type is accepted in a header and named", "[unit][wire]") {
  const MessageType all[] = {MessageType::kHello,    MessageType::kWelcome, MessageType::kInit,     MessageType::kWaitReady,
                             MessageType::kReady,    MessageType::kPull,    MessageType::kParams,   MessageType::kPush,
                             MessageType::kPushAck,  MessageType::kDone,    MessageType::kDoneAck,  MessageType::kHeartbeat,
                             MessageType::kError,    MessageType::kAuthHello, MessageType::kAuthChallenge,
                             MessageType::kAuthProof, MessageType::kRingChunk, MessageType::kStatePull, MessageType::kState};
  for (MessageType t : all) {
    INFO("type " << static_cast<int>(t));
    CHECK(IsKnownType(static_cast<std::uint16_t>(t)));
    CHECK(std::string(MessageTypeName(t)) != "UNKNOWN");
    FrameHeader h;
    h.type = t;
    Result<FrameHeader> got = DecodeHeader(EncodedHeader(h));
    REQUIRE(got.ok());
    CHECK(got->type == t);
  }
  for (std::uint16_t t : {0, 9, 16, 19, 23, 29, 31, 39, 41, 49, 0xffff}) CHECK_FALSE(IsKnownType(t));
}

TEST_CASE("a header with bad magic is Corruption naming the magic", "[unit][wire]") {
  HeaderBytes raw = EncodedHeader(FrameHeader{});
  std::memcpy(raw.data(), "GET ", 4);  // an HTTP client knocking on the port
  Result<FrameHeader> got = DecodeHeader(raw);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kCorruption);
  CHECK(got.status().message() == "bad magic 0x20544547 (expected 0x31444654, \"TFD1\"): not a tfd peer");
}

TEST_CASE("a header of another protocol version is Corruption naming both versions", "[unit][wire]") {
  FrameHeader h;
  h.version = 2;
  Result<FrameHeader> got = DecodeHeader(EncodedHeader(h));
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kCorruption);
  CHECK(got.status().message() == "protocol version 2 (this tfd speaks version 1)");
  h.version = 0;
  got = DecodeHeader(EncodedHeader(h));
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kCorruption);
  CHECK(got.status().message() == "protocol version 0 (this tfd speaks version 1)");
}

TEST_CASE("a header of an unknown message type is Corruption naming the type", "[unit][wire]") {
  for (std::uint16_t t : {0, 9, 99, 0xffff}) {
    HeaderBytes raw = EncodedHeader(FrameHeader{});
    Poke<std::uint16_t>(raw, 6, t);
    Result<FrameHeader> got = DecodeHeader(raw);
    REQUIRE_FALSE(got.ok());
    CHECK(got.status().code() == Code::kCorruption);
    CHECK(got.status().message() == "unknown message type " + std::to_string(t));
  }
}

TEST_CASE("a payload length over the limit is refused from the 28 header bytes alone", "[unit][wire]") {
  // DecodeHeader's input is a fixed 28-byte span: it cannot see (or need) any payload, so a length
  // it refuses is refused before the receiver allocates anything for the payload.
  static_assert(std::is_same_v<decltype(&DecodeHeader),
                               Result<FrameHeader> (*)(std::span<const std::byte, kFrameHeaderBytes>, std::uint32_t)>);
  FrameHeader h;
  h.type = MessageType::kParams;
  h.payload_len = std::numeric_limits<std::uint32_t>::max();  // 4 GiB, far more than this test has
  Result<FrameHeader> got = DecodeHeader(EncodedHeader(h));
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kCorruption);
  CHECK(got.status().message() == "PARAMS payload of 4294967295 bytes is over the limit of 268435456");

  h.payload_len = kMaxPayloadBytes + 1;
  got = DecodeHeader(EncodedHeader(h));
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kCorruption);

  h.payload_len = kMaxPayloadBytes;  // exactly the limit is allowed
  CHECK(DecodeHeader(EncodedHeader(h)).ok());

  // A receiver's own, smaller limit.
  h.type = MessageType::kHello;
  h.payload_len = 1025;
  got = DecodeHeader(EncodedHeader(h), 1024);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kCorruption);
  CHECK(got.status().message() == "HELLO payload of 1025 bytes is over the limit of 1024");
  h.payload_len = 1024;
  CHECK(DecodeHeader(EncodedHeader(h), 1024).ok());
}

TEST_CASE("VerifyPayload rejects a truncated payload and a flipped byte", "[unit][wire]") {
  OutFrame f = Encode(Pull{42});
  std::vector<std::byte> payload = Transmit(f, MessageType::kPull);
  REQUIRE(payload.size() == 8);

  Status s = VerifyPayload(f.header, std::span(payload).first(7));
  CHECK(s.code() == Code::kCorruption);
  CHECK(s.message() == "PULL payload is 7 bytes, header says 8");
  s = VerifyPayload(f.header, {});
  CHECK(s.code() == Code::kCorruption);
  CHECK(s.message() == "PULL payload is 0 bytes, header says 8");

  for (std::size_t i = 0; i < payload.size(); ++i) {
    std::vector<std::byte> bad = payload;
    bad[i] ^= std::byte{0x01};
    s = VerifyPayload(f.header, bad);
    INFO("flipped byte " << i);
    CHECK(s.code() == Code::kCorruption);
    CHECK_THAT(s.message(), Contains("PULL payload CRC") && Contains("does not match the header's"));
  }
  // A wrong CRC in the header is caught the same way.
  FrameHeader wrong = f.header;
  wrong.payload_crc ^= 0x80000000u;
  CHECK(VerifyPayload(wrong, payload).code() == Code::kCorruption);
}

TEST_CASE("Seal sets the length and CRC of head and tail together", "[unit][wire]") {
  std::vector<float> values = {1.5f, -2.25f, 3.0f};
  OutFrame f = Encode(Params{7, {}}, values);
  REQUIRE(f.tail.size() == 1);
  REQUIRE(f.Seal().ok());
  const std::vector<std::byte> payload = Flatten(f);
  CHECK(f.header.payload_len == 16 + 12);
  CHECK(f.header.payload_crc == Crc32c(payload));
}

TEST_CASE("Seal refuses a payload over the limit without reading it", "[unit][wire]") {
  // 257 spans of the same 1 MiB: 257 MiB of payload from 1 MiB of memory.
  std::vector<std::byte> mib(1u << 20);
  OutFrame f = Encode(Params{1, {}}, {});
  for (int i = 0; i < 257; ++i) f.tail.push_back(mib);
  Status s = f.Seal();
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK_THAT(s.message(), Contains("PARAMS payload of") && Contains("over the limit of 268435456"));
}

// ---------------------------------------------------------------------------------------------
// Messages

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

Init SampleInit() {
  Init m;
  m.layout_hash = 0xABCDEF0123456789ull;
  m.optimizer.type = OptimizerKind::kAdam;
  m.optimizer.learning_rate = 0.001;
  m.optimizer.momentum = 0.9;
  m.optimizer.beta1 = 0.8;
  m.optimizer.beta2 = 0.999;
  m.optimizer.epsilon = 1e-7;
  m.optimizer.use_nesterov = true;
  m.update.mode = UpdateMode::kSync;
  m.update.scale_stale = true;
  m.update.replicas_to_aggregate = 2;
  m.update.total_num_replicas = 3;
  m.update.num_workers = 3;
  m.update.on_worker_loss = WorkerLossPolicy::kShrink;
  m.update.min_replicas = 2;
  m.global_step = 0x0a0b0c0d0e0f1011ull;
  m.chunks = {{"dense/kernel[0:3]", 3}, {"dense/bias", 2}, {"dense_1/bias", 1}};
  return m;
}
const std::vector<float> kInitValues = {0.5f, -1.25f, 3.0e-38f, -0.0f, 1.0e30f, 42.0f};

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
  SECTION("a state flag other than 1") {
    std::vector<std::byte> p = payload;
    p[plain_size] = std::byte{2};
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
    Poke<std::uint8_t>(p, 2, 4);  // kind after the u16 version
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

// ---------------------------------------------------------------------------------------------
// CRC-32C

// Bit by bit, from the definition: independent of both the table and the SSE4.2 paths.
std::uint32_t ReferenceCrc32c(std::span<const std::byte> data) {
  std::uint32_t crc = 0xffffffffu;
  for (std::byte b : data) {
    crc ^= static_cast<std::uint8_t>(b);
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
  }
  return ~crc;
}

TEST_CASE("Crc32c gives the standard check value and RFC 3720's test vectors", "[unit][wire][crc]") {
  CHECK(Crc32c(Bytes("123456789")) == 0xE3069283u);
  CHECK(Crc32c({}) == 0u);
  std::vector<std::byte> v(32, std::byte{0});
  CHECK(Crc32c(v) == 0x8A9136AAu);
  std::fill(v.begin(), v.end(), std::byte{0xff});
  CHECK(Crc32c(v) == 0x62A8AB43u);
  for (std::size_t i = 0; i < 32; ++i) v[i] = static_cast<std::byte>(i);
  CHECK(Crc32c(v) == 0x46DD794Eu);
  for (std::size_t i = 0; i < 32; ++i) v[i] = static_cast<std::byte>(31 - i);
  CHECK(Crc32c(v) == 0x113FDB5Cu);
}

TEST_CASE("Crc32c matches a bitwise reference for every length and alignment", "[unit][wire][crc]") {
  std::vector<std::byte> buf(80);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
  for (std::size_t start = 0; start < 8; ++start) {
    for (std::size_t len = 0; start + len <= 72; ++len) {
      auto s = std::span<const std::byte>(buf).subspan(start, len);
      INFO("start " << start << " length " << len);
      CHECK(Crc32c(s) == ReferenceCrc32c(s));
    }
  }
}

TEST_CASE("Crc32c chains: Crc32c(b, Crc32c(a)) is the CRC of a then b", "[unit][wire][crc]") {
  // Lengths around multiples of 8 exercise the 8-byte loop and the byte tail on both sides.
  std::vector<std::byte> buf(67);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>((i * 37 + 11) & 0xff);
  const std::span<const std::byte> all(buf);
  for (std::size_t total : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9},
                            std::size_t{16}, std::size_t{23}, std::size_t{64}, std::size_t{67}}) {
    const auto whole = all.first(total);
    const std::uint32_t expected = Crc32c(whole);
    CHECK(expected == ReferenceCrc32c(whole));
    for (std::size_t cut = 0; cut <= total; ++cut) {
      INFO("length " << total << " cut at " << cut);
      CHECK(Crc32c(whole.subspan(cut), Crc32c(whole.first(cut))) == expected);
    }
  }
  // Three pieces, as Seal chains head and tails.
  const std::uint32_t three = Crc32c(all.subspan(40), Crc32c(all.subspan(13, 27), Crc32c(all.first(13))));
  CHECK(three == Crc32c(all));
}

TEST_CASE("Crc32c agrees with the table and the bitwise reference on long, interleaved lengths", "[unit][wire][crc]") {
  // The hardware path runs three streams over blocks of 8192 and then 256 bytes while three blocks
  // remain; these lengths land on, just short of and just past those thresholds, at every alignment.
  std::vector<std::byte> buf(3 * 3 * 8192 + 3 * 256 + 64);
  std::uint32_t x = 12345;
  for (auto& b : buf) {
    x = x * 1103515245u + 12345u;
    b = static_cast<std::byte>(x >> 24);
  }
  const std::span<const std::byte> all(buf);
  for (std::size_t len : {std::size_t{255}, std::size_t{256}, std::size_t{767}, std::size_t{768}, std::size_t{769},
                          std::size_t{775}, std::size_t{776}, std::size_t{3 * 256 * 2 + 5}, std::size_t{8192},
                          std::size_t{3 * 8192 - 1}, std::size_t{3 * 8192}, std::size_t{3 * 8192 + 1},
                          std::size_t{3 * 8192 + 3 * 256 + 13}, std::size_t{2 * 3 * 8192 + 7}, std::size_t{3 * 3 * 8192 + 3 * 256 + 3}}) {
    for (std::size_t start : {std::size_t{0}, std::size_t{1}, std::size_t{5}}) {
      INFO("start " << start << " length " << len);
      const auto s = all.subspan(start, len);
      const std::uint32_t reference = ReferenceCrc32c(s);
      CHECK(Crc32c(s) == reference);
      CHECK(Crc32cPortable(s) == reference);
    }
  }
  CHECK(Crc32cPortable(Bytes("123456789")) == 0xE3069283u);

  // Chaining across block boundaries gives the same CRC as one pass.
  const std::uint32_t whole = Crc32c(all);
  CHECK(whole == ReferenceCrc32c(all));
  for (std::size_t cut : {std::size_t{1}, std::size_t{8}, std::size_t{767}, std::size_t{768}, std::size_t{3 * 8192},
                          std::size_t{3 * 8192 + 1}, std::size_t{buf.size() - 768}, std::size_t{buf.size() - 1}}) {
    INFO("cut at " << cut);
    CHECK(Crc32c(all.subspan(cut), Crc32c(all.first(cut))) == whole);
    CHECK(Crc32cPortable(all.subspan(cut), Crc32c(all.first(cut))) == whole);
    CHECK(Crc32c(all.subspan(cut), Crc32cPortable(all.first(cut))) == whole);
  }
}

TEST_CASE("Crc32c's folding path agrees with the table at its thresholds and at every lane alignment", "[unit][wire][crc]") {
  // On CPUs with VPCLMULQDQ, 1024 bytes and more are folded 256, then 64, then 16 bytes at a time,
  // and the last 0-15 bytes go through the crc32 instruction: lengths on and around each step.
  std::vector<std::byte> buf(131072 + 64 + 300);
  std::uint32_t x = 777;
  for (auto& b : buf) {
    x = x * 1103515245u + 12345u;
    b = static_cast<std::byte>(x >> 24);
  }
  const std::span<const std::byte> all(buf);
  for (std::size_t len : {std::size_t{1023}, std::size_t{1024}, std::size_t{1025}, std::size_t{1024 + 15}, std::size_t{1024 + 16},
                          std::size_t{1024 + 63}, std::size_t{1024 + 64}, std::size_t{1024 + 255}, std::size_t{1280},
                          std::size_t{1280 + 64 + 16 + 7}, std::size_t{4096 - 1}, std::size_t{32 + 32768 * 4},
                          std::size_t{131072 + 64 + 17}}) {
    for (std::size_t start : {std::size_t{0}, std::size_t{3}, std::size_t{16}, std::size_t{61}}) {
      for (std::uint32_t crc : {0u, 0xdeadbeefu}) {
        INFO("start " << start << " length " << len << " crc " << crc);
        const auto s = all.subspan(start, len);
        CHECK(Crc32c(s, crc) == Crc32cPortable(s, crc));
      }
    }
  }
}

}  // namespace
}  // namespace tfd::wire
