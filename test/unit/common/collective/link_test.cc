// collective::Link, a ring socket read and written by the collective thread: frames arrive whole
// however the bytes are split, placed payloads land where the placer says, corruption is refused.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <vector>

#include <catch2/catch.hpp>

#include "common/collective/link.h"
#include "common/wire/messages.h"

namespace tfd::collective {
namespace {

std::vector<std::byte> Bytes(wire::OutFrame f) {
  REQUIRE(f.Seal().ok());
  std::vector<std::byte> out(wire::kFrameHeaderBytes + f.payload_size());
  wire::EncodeHeader(f.header, std::span<std::byte, wire::kFrameHeaderBytes>(out.data(), wire::kFrameHeaderBytes));
  // (Written into a buffer of the final size: GCC 12 misreads insert() after a 28-byte array.)
  std::copy(f.head.begin(), f.head.end(), out.begin() + wire::kFrameHeaderBytes);
  std::size_t at = wire::kFrameHeaderBytes + f.head.size();
  for (std::span<const std::byte> part : f.tail) {
    std::copy(part.begin(), part.end(), out.begin() + static_cast<std::ptrdiff_t>(at));
    at += part.size();
  }
  return out;
}

struct Pair {
  Pair() {
    int fds[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    transport::DetachedLink d;
    d.fd = fds[0];
    link = std::make_unique<Link>(std::move(d), "worker:1 (test)", 1 << 20);
    peer = fds[1];
  }
  ~Pair() { ::close(peer); }
  std::unique_ptr<Link> link;
  int peer = -1;
};

TEST_CASE("a link reassembles frames fed a byte at a time, places final values and skips heartbeats", "[unit][link]") {
  const std::vector<float> partial = {1, 2, 3}, final = {4, 5, 6, 7};
  std::vector<std::byte> stream;
  for (auto f : {wire::Encode(wire::RingChunk{.collective = 1, .phase = wire::RingPhase::kReduceScatter, .offset = 0}, partial),
                 wire::EncodeHeartbeat(),
                 wire::Encode(wire::RingChunk{.collective = 1, .phase = wire::RingPhase::kAllGather, .offset = 3}, final),
                 wire::Encode(wire::Done{.worker = 1})}) {
    auto b = Bytes(std::move(f));
    stream.insert(stream.end(), b.begin(), b.end());
  }
  Pair p;
  std::vector<float> dest(4, 0.0f);
  const Link::Placer placer{wire::MessageType::kRingChunk, wire::kRingChunkHeadBytes,
                            [&](std::span<const std::byte> head, std::size_t rest) -> std::span<std::byte> {
                              wire::RingChunk c;
                              c.phase = static_cast<wire::RingPhase>(head[8]);
                              if (c.phase != wire::RingPhase::kAllGather || rest != 16) return {};
                              return std::as_writable_bytes(std::span<float>(dest));
                            }};
  std::vector<wire::MessageType> got;
  std::vector<bool> placed;
  std::vector<float> partial_got;
  for (std::byte b : stream) {
    REQUIRE(::write(p.peer, &b, 1) == 1);
    bool progress = false;
    auto f = p.link->Read(&progress, &placer);
    REQUIRE(f.ok());
    CHECK(progress);
    if (*f == nullptr) continue;
    got.push_back((*f)->header.type);
    placed.push_back(p.link->placed());
    if (!p.link->placed() && (*f)->header.type == wire::MessageType::kRingChunk) {
      wire::RingChunk c;
      REQUIRE(wire::Decode((*f)->payload, &c).ok());
      partial_got.resize(c.values.size() / 4);
      wire::CopyFloats(c.values, partial_got);
    }
  }
  REQUIRE(got == std::vector<wire::MessageType>{wire::MessageType::kRingChunk, wire::MessageType::kRingChunk, wire::MessageType::kDone});
  CHECK(placed == std::vector<bool>{false, true, false});
  CHECK(partial_got == partial);
  CHECK(dest == final);
  bool progress = false;
  auto none = p.link->Read(&progress, &placer);
  REQUIRE(none.ok());
  CHECK(*none == nullptr);  // nothing more: not an error, not a frame
  ::shutdown(p.peer, SHUT_WR);
  auto eof = p.link->Read(&progress, &placer);
  CHECK(eof.status().code() == Code::kUnavailable);
  CHECK(eof.status().message().find("worker:1 (test) closed the connection") != std::string::npos);
}

TEST_CASE("a link refuses a payload whose CRC does not match, and a length over its limit", "[unit][link]") {
  const std::vector<float> v = {1, 2, 3, 4};
  SECTION("a flipped bit in a placed payload") {
    auto b = Bytes(wire::Encode(wire::RingChunk{.collective = 0, .phase = wire::RingPhase::kAllGather}, v));
    b.back() ^= std::byte{1};
    Pair p;
    std::vector<float> dest(4);
    const Link::Placer placer{wire::MessageType::kRingChunk, wire::kRingChunkHeadBytes,
                              [&](std::span<const std::byte>, std::size_t) { return std::as_writable_bytes(std::span<float>(dest)); }};
    REQUIRE(::write(p.peer, b.data(), b.size()) == static_cast<ssize_t>(b.size()));
    bool progress = false;
    auto f = p.link->Read(&progress, &placer);
    CHECK(f.status().code() == Code::kCorruption);
    CHECK(f.status().message().find("CRC") != std::string::npos);
  }
  SECTION("a header announcing more than the limit") {
    std::vector<float> big(300000);
    auto b = Bytes(wire::Encode(wire::RingChunk{}, big));
    Pair p;
    REQUIRE(::write(p.peer, b.data(), wire::kFrameHeaderBytes) == static_cast<ssize_t>(wire::kFrameHeaderBytes));
    bool progress = false;
    auto f = p.link->Read(&progress);
    CHECK(f.status().code() == Code::kCorruption);
    CHECK(f.status().message().find("worker:1 (test)") != std::string::npos);
  }
}

}  // namespace
}  // namespace tfd::collective
