// A ring link's frame reader (collective::Link::Read), which parses bytes from a neighbour
// incrementally: headers, payloads split between a read-ahead buffer and a placer's destination,
// CRCs. Input: two selector bytes, then the byte stream as the neighbour would send it. The first
// selector sets the payload limit and how many bytes arrive before each Read; the second whether
// RING_CHUNK payloads are placed into a buffer of the harness's (as the ring does with final values)
// and how large that buffer's slots are. Every frame Read returns is checked against its header.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "common/collective/link.h"
#include "common/wire/messages.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tfd;
  if (size < 2 || size > (1 << 20)) return 0;
  const std::uint8_t s0 = data[0], s1 = data[1];
  const auto stream = std::span<const std::uint8_t>(data + 2, size - 2);
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 0;
  transport::DetachedLink d;
  d.fd = fds[0];
  collective::Link link(std::move(d), "fuzz peer", /*max_payload=*/64u << (s0 & 7));  // 64 B .. 8 KiB
  const std::size_t piece = 1 + (s0 >> 3) * 7;  // 1 .. 218 bytes arrive between reads
  std::vector<std::byte> placed(4096);
  const std::size_t slot = 4 << (s1 & 7);
  const collective::Link::Placer placer{wire::MessageType::kRingChunk, wire::kRingChunkHeadBytes,
                                        [&](std::span<const std::byte>, std::size_t rest) -> std::span<std::byte> {
                                          if (rest > slot || rest > placed.size()) return {};
                                          return std::span<std::byte>(placed).first(rest);
                                        }};
  const collective::Link::Placer* use = (s1 & 8) != 0 ? &placer : nullptr;
  std::size_t sent = 0;
  bool open = true, shut = false;
  while (open) {
    if (sent < stream.size()) {
      const std::size_t n = std::min(piece, stream.size() - sent);
      if (::write(fds[1], stream.data() + sent, n) != static_cast<ssize_t>(n)) break;
      sent += n;
    }
    if (sent == stream.size() && !shut) {
      ::shutdown(fds[1], SHUT_WR);  // then the reader sees the end
      shut = true;
    }
    for (;;) {
      bool progress = false;
      Result<const wire::InFrame*> f = link.Read(&progress, use);
      if (!f.ok()) {
        open = false;  // a refused frame or the end of the stream: the ring would fail here
        break;
      }
      if (*f == nullptr) break;
      if ((*f)->payload.size() != (*f)->header.payload_len) std::abort();
      if ((*f)->header.type == wire::MessageType::kHeartbeat) std::abort();  // consumed by the link
    }
  }
  ::close(fds[1]);
  return 0;
}
