// The frame header and payload checks: every field round-trips, and bad magic, versions, types,
// flags, reserved bytes, lengths and CRCs are refused as Corruption naming the fault.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <vector>

#include "common/wire/crc32c.h"
#include "common/wire/frame.h"
#include "common/wire/messages.h"
#include "test/unit/common/wire/wire_fixtures.h"

namespace tfd::wire {
namespace {

using Catch::Matchers::Contains;
using namespace fixtures;  // Transmit, Flatten, Poke, CheckMalformedRejected, SampleInit, ...

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
                             MessageType::kAuthProof, MessageType::kRingChunk, MessageType::kStatePull, MessageType::kState,
                             MessageType::kPipeActivation, MessageType::kPipeGradient, MessageType::kRingChunkShm,
                             MessageType::kRingShmOffer, MessageType::kRingShmAccept, MessageType::kRingSlotFree,
                             MessageType::kRingJoin, MessageType::kRingJoinAccept, MessageType::kPushCompressed,
                             MessageType::kRingChunk16};
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
  for (std::uint16_t t : {0, 9, 17, 19, 23, 29, 31, 39, 57, 0xffff}) CHECK_FALSE(IsKnownType(t));
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

}  // namespace
}  // namespace tfd::wire
