#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/base/mutex.h"
#include "common/base/status.h"
#include "common/transport/asio.h"
#include "common/transport/auth.h"
#include "common/transport/detached_link.h"
#include "common/transport/peer_guard.h"
#include "common/transport/token_handshake.h"
#include "common/wire/frame.h"
#include "common/wire/messages.h"

namespace tfd::transport {

struct ConnectionOptions {
  // An idle sender sends a HEARTBEAT this often, so a silent peer is a dead or stuck peer.
  std::chrono::milliseconds heartbeat_interval{1000};
  // Close the connection (DeadlineExceeded) when nothing has arrived for this long.
  std::chrono::milliseconds peer_timeout{10000};
  std::uint32_t max_payload = wire::kMaxPayloadBytes;
  // Until MarkEstablished() (a server: the peer's HELLO checked out), frames are limited to a few
  // KB, no heartbeats are sent, and the connection closes if the handshake takes longer than this.
  std::chrono::milliseconds handshake_timeout{5000};
  std::uint32_t max_handshake_payload = 4096;
  // The cluster token. When set, both sides prove they hold it (docs/protocol.md, "Authentication")
  // before any other frame, and every later frame carries a MAC; until then a frame is at most
  // kPreAuthPayload bytes. A peer without the token, or with another, is refused with a reason.
  std::shared_ptr<const ClusterToken> token;
  // Without a token, only peers on this host (loopback) are accepted or dialed, unless this is set
  // (tfd --insecure: a trusted network).
  bool insecure = false;
  // The server's admission control, shared by every connection it accepts: an accepted connection
  // that has not finished its handshake holds one of its address's slots there (further ones from
  // that address are refused at once while all are taken), and each refused peer is counted there
  // by reason. Without a guard a connection has no per-address cap and counts nothing, so a server
  // that accepts connections from the network gives every one of them its guard.
  std::shared_ptr<PeerGuard> guard;
};

// Before authentication a frame (28-byte header and payload) is under 256 bytes.
inline constexpr std::uint32_t kPreAuthPayload = 224;

class Connection;

// Receives a connection's frames. Knows frames, never sockets.
class FrameHandler {
 public:
  virtual ~FrameHandler() = default;
  // A frame whose header and CRC checked out (HEARTBEATs are consumed by the connection). Runs on
  // the connection's strand, one frame at a time.
  virtual void OnFrame(const std::shared_ptr<Connection>& from, wire::InFrame frame) = 0;
  // Exactly once per started connection, with the reason it closed.
  virtual void OnClosed(const std::shared_ptr<Connection>& from, const Status& why) = 0;
};

// One TCP connection carrying frames. Owns its socket and runs its read loop, write loop and
// watchdog on its own strand; other threads only post to it. Handlers hold shared_from_this().
//
// Threads: the loops, the handler's OnFrame/OnClosed and every *OnStrand function run on the
// strand, and the members marked "strand only" are touched there alone, without a lock. Start,
// MarkEstablished, Send, SendErrorAndClose, Close, CountRefusal and the peer name may be used from
// any thread; name_mu_ guards only the name, which other threads read for their messages.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // `socket` must have been created on a strand. `handler` must outlive the connection, or be
  // owned by `handler_owner`, which the connection keeps until it has told the handler it closed.
  Connection(tcp::socket socket, FrameHandler& handler, std::string peer_name, ConnectionOptions options,
             std::shared_ptr<void> handler_owner = nullptr);

  // `established`: the handshake is already done (the dialing side trusts the peer it dialed).
  void Start(bool established = false);
  // The peer has identified itself: lift the handshake limits. Any thread.
  void MarkEstablished();
  // Seals `frame` (length, CRC) on the calling thread and queues it. Any thread. Frames are written
  // in the order sent, several per system call when they queue up.
  void Send(wire::OutFrame frame);
  // Queues an ERROR frame with `why`'s code and message, then closes once it is written (or after
  // a second). Any thread.
  void SendErrorAndClose(const Status& why);
  // Closes the socket and tells the handler, once. Any thread.
  void Close(const Status& why);
  // From within the handler's OnFrame for this connection only: reads no frame after this one,
  // writes what is queued, then stops its loops and passes the socket and its state to `done` (on
  // the strand) instead of closing. The handler hears OnClosed only if the connection closes first.
  void DetachAfterThisFrame(std::function<void(DetachedLink)> done);

  // The handler refuses this peer (another cluster, say): counts `why` on the guard, if any. Any thread.
  void CountRefusal(Refusal why);

  // "ps:0 (10.0.0.5:2222)"; a server learns the peer's task from its HELLO.
  std::string peer_name() const TFD_EXCLUDES(name_mu_);
  void set_peer_name(std::string name) TFD_EXCLUDES(name_mu_);
  bool closed() const { return closed_flag_.load(); }

 private:
  struct Outgoing {
    wire::OutFrame frame;
    std::array<std::byte, wire::kFrameHeaderBytes> header;
    std::array<std::byte, wire::kMacBytes> mac;
  };

  asio::awaitable<void> ReadLoop();
  asio::awaitable<void> WriteLoop();
  asio::awaitable<void> Watchdog();
  void CloseOnStrand(const Status& why);
  // Strand only. `raw`: a handshake frame (CRC, no MAC), written before any other queued frame.
  void QueueOnStrand(wire::OutFrame frame, bool raw);
  void ErrorAndCloseOnStrand(const Status& why);
  // Passes a frame to the token handshake, and does what it says: sends its answer, refuses the
  // peer, or starts the frame MACs. False when the frame is for the handler.
  bool OnHandshakeFrame(const wire::InFrame& frame);
  void RefuseOnStrand(const Status& why);
  Status Lost(std::string what) const;  // a read or write failed: says so, and names the handshake if it was on
  // A frame that fails its checks (header, MAC or CRC): counts `why`, logs `status` and answers it
  // with an ERROR frame before closing. The read loop reads nothing more. Strand only.
  void RefuseFrame(Refusal why, const Status& status);
  bool app_frames_flow() const { return auth_.frames_flow(); }
  void MaybeFinishDetach();
  std::uint32_t payload_limit() const;

  tcp::socket socket_;
  FrameHandler& handler_;
  std::shared_ptr<void> handler_owner_;  // strand only; released after OnClosed
  ConnectionOptions options_;
  asio::steady_timer wake_writer_;
  asio::steady_timer watchdog_;
  std::deque<Outgoing> outbox_;   // strand only
  std::deque<Outgoing> control_;  // strand only: handshake frames, written before outbox_
  TokenHandshake auth_;           // strand only: off without a token
  std::unique_ptr<FrameMac> send_mac_, recv_mac_;  // strand only, once authenticated
  std::uint64_t send_seq_ = 0, recv_seq_ = 0;      // strand only
  Status close_reason_;           // strand only: why close_after_flush_ was set
  bool close_after_flush_ = false;  // strand only
  bool established_ = false;        // strand only
  bool dialed_ = false;             // strand only: this side connected (the handshake's client)
  std::string handshake_slot_;      // strand only: the address whose handshake slot this holds, or ""
  void ReleaseHandshakeSlot();
  bool closed_ = false;             // strand only
  std::function<void(DetachedLink)> detach_done_;  // strand only: set by DetachAfterThisFrame
  bool read_stopped_ = false, write_stopped_ = false;  // strand only: the loops have handed over
  std::vector<std::byte> detach_buffered_;         // strand only
  std::atomic<bool> closed_flag_{false};
  Clock::time_point last_heard_;    // strand only
  Clock::time_point started_;       // strand only
  Clock::time_point flush_deadline_;  // strand only
  mutable Mutex name_mu_;
  std::string peer_name_ TFD_GUARDED_BY(name_mu_);
};

}  // namespace tfd::transport
