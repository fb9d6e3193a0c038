// common/transport/frame_check.h: the checks a received frame passes in Connection and in a ring
// Link alike.
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/transport/auth.h"
#include "common/transport/frame_check.h"
#include "common/wire/crc32c.h"
#include "common/wire/frame.h"

namespace tfd::transport {
namespace {

struct Frame {
  wire::FrameHeader header;
  std::array<std::byte, wire::kFrameHeaderBytes> raw{};
  std::vector<std::byte> payload;
};

Frame MakeFrame(const std::string& text, bool with_mac) {
  Frame f;
  for (char c : text) f.payload.push_back(static_cast<std::byte>(c));
  f.header.type = wire::MessageType::kHello;
  f.header.payload_len = static_cast<std::uint32_t>(f.payload.size());
  f.header.payload_crc = wire::Crc32c(f.payload);
  if (with_mac) f.header.flags = wire::kFlagMac;
  wire::EncodeHeader(f.header, f.raw);
  return f;
}

}  // namespace

TEST_CASE("CheckFrameHeader refuses bad bytes and a payload over the limit, naming the peer", "[unit][transport]") {
  Frame f = MakeFrame("hello", false);
  Result<wire::FrameHeader> ok = CheckFrameHeader(f.raw, 1024, "worker:1");
  REQUIRE(ok.ok());
  CHECK(ok->payload_len == 5);
  Result<wire::FrameHeader> long_payload = CheckFrameHeader(f.raw, 4, "worker:1");
  REQUIRE_FALSE(long_payload.ok());
  CHECK(long_payload.status().code() == Code::kCorruption);
  CHECK(long_payload.status().message().starts_with("worker:1: "));
  f.raw[0] = std::byte{0};  // the magic
  CHECK(CheckFrameHeader(f.raw, 1024, "worker:1").status().code() == Code::kCorruption);
}

TEST_CASE("CheckMacFlag refuses a MAC where none is expected and a frame without one after authentication", "[unit][transport]") {
  const Frame plain = MakeFrame("x", false), maced = MakeFrame("x", true);
  CHECK(CheckMacFlag(plain.header, false, "ps:0", "before authenticating").ok());
  CHECK(CheckMacFlag(maced.header, true, "ps:0", "before authenticating").ok());
  const Status early = CheckMacFlag(maced.header, false, "ps:0", "before authenticating");
  CHECK(early.code() == Code::kPermissionDenied);
  CHECK(early.message() == "ps:0 sent a MAC'd HELLO frame before authenticating");
  const Status missing = CheckMacFlag(plain.header, true, "ps:0", "before authenticating");
  CHECK(missing.code() == Code::kPermissionDenied);
  CHECK(missing.message() == "ps:0 sent a HELLO frame without a MAC on an authenticated connection");
}

TEST_CASE("CheckFrameBody checks the CRC without a MAC, and the MAC over header and payload with one", "[unit][transport]") {
  const std::array<std::byte, wire::kMacBytes> no_tag{};
  Frame f = MakeFrame("payload", false);
  std::array<std::span<const std::byte>, 1> parts = {std::span<const std::byte>(f.payload)};
  CHECK(CheckFrameBody(f.header, f.raw, parts, nullptr, 0, no_tag, "ps:0").ok());
  f.payload[0] = std::byte{'P'};  // altered on the way: the CRC no longer matches
  const Status crc = CheckFrameBody(f.header, f.raw, parts, nullptr, 0, no_tag, "ps:0");
  CHECK(crc.code() == Code::kCorruption);
  CHECK(crc.message().starts_with("ps:0: "));

  SessionKey key{};
  key[0] = std::byte{7};
  FrameMac sender(key), receiver(key);
  Frame m = MakeFrame("payload", true);
  // Split as a Link reads a large frame: the MAC covers the parts as one payload.
  const std::array<std::span<const std::byte>, 2> split = {std::span<const std::byte>(m.payload).first(3),
                                                           std::span<const std::byte>(m.payload).subspan(3)};
  const std::array<std::span<const std::byte>, 2> whole = {std::span<const std::byte>(m.raw), std::span<const std::byte>(m.payload)};
  std::array<std::byte, wire::kMacBytes> tag{};
  sender.Tag(5, whole, tag);
  CHECK(CheckFrameBody(m.header, m.raw, split, &receiver, 5, tag, "ps:0").ok());
  const Status replayed = CheckFrameBody(m.header, m.raw, split, &receiver, 6, tag, "ps:0");  // another frame number
  CHECK(replayed.code() == Code::kPermissionDenied);
  CHECK(replayed.message() == "ps:0: the MAC of a HELLO frame does not verify: the frame was altered, injected or replayed on the way");
}

}  // namespace tfd::transport
