#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/transport/detached_link.h"
#include "common/wire/frame.h"
#include "common/wire/messages.h"

namespace tfd::collective {

// One ring connection after its handshake, driven by the thread that runs the collective instead
// of an I/O thread: non-blocking reads and writes of whole frames straight on the socket, in the
// same frame format (header, CRC or, after a token handshake, a MAC with the sequence number the
// connection reached). The caller serialises every call (the ring holds its I/O lock).
//
// A chunk's life on this path: one sendmsg() of header, fields and the caller's floats; one
// recvmsg() into a payload buffer that is reused frame after frame (so it stays in cache); one pass
// that adds or copies it. No thread hand-off, no queue, no allocation once warm.
class Link {
 public:
  using Clock = std::chrono::steady_clock;

  // Frames carry a CRC, or a MAC when `detached` has MAC state (a token). Frames from the peer
  // longer than `max_payload` are refused before anything is allocated.
  Link(transport::DetachedLink detached, std::string peer_name, std::uint32_t max_payload);
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  int fd() const { return fd_; }
  const std::string& peer_name() const { return peer_name_; }

  // Queues `frame`; Write() seals it (CRC, or MAC and sequence number) and sends it. Its tail
  // spans must stay valid, and unchanged, until it is written (frames_written()).
  // InvalidArgument when the payload is over the frame limit.
  Status Queue(wire::OutFrame frame);
  bool pending_write() const { return !outbox_.empty(); }
  // Frames queued and frames written since the link was made: frame number k (from 1) is written
  // once frames_written() >= k.
  std::uint64_t frames_queued() const { return frames_queued_; }
  std::uint64_t frames_written() const { return frames_written_; }
  // Writes as much of the queue as the socket takes now. Unavailable naming the peer when the
  // connection is gone. `progress` is set when any byte was written.
  Status Write(bool* progress);

  // Where the payload of frames of one type goes past their first `head` bytes: once those are
  // here, `place(head, rest)` returns a span of exactly `rest` bytes to read the remainder straight
  // into (no copy afterwards; the CRC or MAC is still checked before Read returns the frame), or an
  // empty span to keep the whole payload in the frame's own buffer.
  struct Placer {
    wire::MessageType type;
    std::size_t head;
    std::function<std::span<std::byte>(std::span<const std::byte> head, std::size_t rest)> place;
  };

  // Reads until one whole frame is here and checked (HEARTBEATs are consumed), without blocking.
  // Returns the frame (valid until the next call), or nullptr when it is not all here yet.
  // Unavailable when the peer closed or reset the connection; Corruption / PermissionDenied when a
  // header, CRC or MAC does not check out. `progress` is set when any byte was read. When `placer`
  // put the payload's remainder elsewhere, placed() is true and the frame's buffer holds only the
  // head's bytes in place (the rest of it is stale).
  Result<const wire::InFrame*> Read(bool* progress, const Placer* placer = nullptr);
  bool placed() const { return !dest_.empty(); }
  // The frame Read() returned last is not taken yet: the next Read() returns it again.
  void Hold() { held_ = true; }
  bool held() const { return held_; }

  // When a byte last came from the peer (a frame, a heartbeat, part of either).
  Clock::time_point last_heard() const { return last_heard_; }
  void set_last_heard(Clock::time_point t) { last_heard_ = t; }
  // When a frame was last queued for the peer.
  Clock::time_point last_sent() const { return last_sent_; }

  // Ends both directions (wakes a poll() on the socket); the descriptor closes with the Link.
  void Shutdown();

 private:
  struct Outgoing {
    wire::OutFrame frame;
    std::array<std::byte, wire::kFrameHeaderBytes> header;
    std::array<std::byte, wire::kMacBytes> mac;
    bool with_mac = false;
    bool sealed = false;  // CRC or MAC computed, header encoded
  };
  void Seal(Outgoing& o);
  Result<bool> ParseHeader(const Placer* placer);  // rx_ holds a header: decode it and size the payload
  // The rest of the region (head, remainder, MAC) that byte `pos` of the frame's body falls in.
  std::span<std::byte> RegionAt(std::size_t pos);
  std::size_t body_size() const;

  int fd_ = -1;
  std::string peer_name_;
  std::uint32_t max_payload_;
  std::unique_ptr<transport::FrameMac> send_mac_, recv_mac_;
  std::uint64_t send_seq_ = 0, recv_seq_ = 0;
  std::deque<Outgoing> outbox_;
  std::size_t written_ = 0;  // bytes of outbox_.front() already written
  // Read side: bytes read past the frame being assembled, [rx_begin_, rx_end_) of rx_.
  std::vector<std::byte> rx_;
  std::size_t rx_begin_ = 0, rx_end_ = 0;
  std::array<std::byte, wire::kFrameHeaderBytes> raw_header_{};
  bool in_frame_ = false;  // the header is decoded; payload_have_ of the payload (then MAC) is here
  std::size_t payload_have_ = 0;
  std::size_t split_ = 0;    // payload bytes that go to frame_.payload before the placer decides
  bool decided_ = true;      // where the payload's remainder goes is settled
  std::span<std::byte> dest_;  // the placer's span for the remainder, or empty
  std::array<std::byte, wire::kMacBytes> mac_{};
  wire::InFrame frame_;
  Clock::time_point last_heard_ = Clock::now(), last_sent_ = Clock::now();
  bool shut_ = false;
  bool held_ = false;
  std::uint64_t frames_queued_ = 0, frames_written_ = 0;
};

// What a neighbour's ERROR frame reports, with its code, as "FROM reports: ..." (Ring::Blamed
// follows such chains); Corruption naming `from` if the frame does not decode.
Status FromErrorFrame(std::string_view from, const wire::InFrame& frame);

}  // namespace tfd::collective
