// One class's strand: the read loop, write loop, watchdog, token handshake and closing all share
// the strand-only state declared in connection.h, so they stay in one file that reads in the order
// things happen on the strand (Dial, Listener and PeerGuard live in their own files).

#include "common/transport/connection.h"

#include "common/transport/frame_check.h"
#include "common/transport/local_link.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/wire/messages.h"

namespace tfd::transport {
namespace {

using asio::redirect_error;
using asio::use_awaitable;
using boost::system::error_code;

constexpr auto kErrorFlushLimit = std::chrono::seconds(1);
// How far ReadLoop reads past a frame: enough for the next header and the small frames (requests,
// acks, heartbeats), little enough that copying a large payload's first bytes out of it is cheap.
constexpr std::size_t kReadAhead = 8 << 10;
// Payload bytes still to come above which ReadLoop asks the kernel (SO_RCVLOWAT) to wake it only
// once they are all here (at most kMaxLowWatermark at a time, well under the receive buffer).
constexpr std::size_t kWakeForAtLeast = 32 << 10;
constexpr std::size_t kMaxLowWatermark = 256 << 10;

bool IsLoopback(const asio::ip::address& a) {
  if (a.is_loopback()) return true;
  return a.is_v6() && a.to_v6().is_v4_mapped() && asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6()).is_loopback();
}

}  // namespace

Connection::Connection(tcp::socket socket, FrameHandler& handler, std::string peer_name, ConnectionOptions options,
                       std::shared_ptr<void> handler_owner)
    : socket_(std::move(socket)),
      handler_(handler),
      handler_owner_(std::move(handler_owner)),
      options_(options),
      wake_writer_(socket_.get_executor()),
      watchdog_(socket_.get_executor()),
      peer_name_(std::move(peer_name)) {}

std::string Connection::peer_name() const {
  MutexLock lock(&name_mu_);
  return peer_name_;
}

void Connection::set_peer_name(std::string name) {
  MutexLock lock(&name_mu_);
  peer_name_ = std::move(name);
}

void Connection::CountRefusal(Refusal why) {
  if (options_.guard != nullptr) options_.guard->Count(why);
}

void Connection::ReleaseHandshakeSlot() {
  if (handshake_slot_.empty()) return;
  options_.guard->ReleaseHandshakeSlot(handshake_slot_);
  handshake_slot_.clear();
}

void Connection::Start(bool established) {
  error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);  // small request frames must not wait for Nagle
  // Room for a whole tensor frame each way, so a 318 KB push is one write and few reads.
  socket_.set_option(asio::socket_base::send_buffer_size(4 << 20), ec);
  socket_.set_option(asio::socket_base::receive_buffer_size(4 << 20), ec);
  asio::dispatch(socket_.get_executor(), [self = shared_from_this(), established] {
    self->established_ = established;
    self->dialed_ = established;
    self->last_heard_ = self->started_ = Clock::now();
    // An exception out of a loop (bad_alloc for a large payload, say) closes the connection with
    // the reason instead of vanishing with the coroutine.
    auto on_exit = [self](std::exception_ptr e) {
      if (!e) return;
      std::string what = "unknown exception";
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        what = ex.what();
      } catch (...) {
      }
      asio::dispatch(self->socket_.get_executor(), [self, what] {
        self->CloseOnStrand(Status::Internal(fmt::format("connection to {} failed: {}", self->peer_name(), what)));
      });
    };
    asio::co_spawn(self->socket_.get_executor(), self->ReadLoop(), on_exit);
    asio::co_spawn(self->socket_.get_executor(), self->WriteLoop(), on_exit);
    asio::co_spawn(self->socket_.get_executor(), self->Watchdog(), on_exit);
    if (!established && self->options_.guard != nullptr) {
      const std::string peer = PeerAddress(self->socket_);
      const std::string address = peer.empty() ? std::string("?") : peer;
      if (!self->options_.guard->TakeHandshakeSlot(address))  // counted and logged there
        return self->CloseOnStrand(Status::Unavailable(fmt::format("{}: too many handshakes in progress", address)));
      self->handshake_slot_ = address;
    }
    if (self->options_.token != nullptr) {
      wire::Nonce nonce;
      RandomBytes(nonce);
      if (established) {  // we dialed: open the handshake
        self->auth_ = TokenHandshake::Client(self->options_.token, nonce);
        self->QueueOnStrand(self->auth_.Hello(), /*raw=*/true);
      } else {
        self->auth_ = TokenHandshake::Server(self->options_.token, nonce);
      }
      return;
    }
    error_code ec;
    const tcp::endpoint remote = self->socket_.remote_endpoint(ec);
    // A same-host link (a Unix socket) is as local as loopback.
    if (!ec && !IsLocalSocket(self->socket_) && !self->options_.insecure && !IsLoopback(remote.address())) {
      Status why = Status::PermissionDenied(fmt::format(
          "{} is on another host and this task has no cluster token: give every task --token-file FILE (made by tfctl "
          "gen-token), or --insecure on a trusted network",
          established ? self->peer_name() : remote.address().to_string()));
      if (established) return self->CloseOnStrand(why);
      self->CountRefusal(Refusal::kAuthentication);
      spdlog::warn("refused {}", why.message());
      self->ErrorAndCloseOnStrand(why);
    }
  });
}

void Connection::MarkEstablished() {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    self->established_ = true;
    self->ReleaseHandshakeSlot();
    self->watchdog_.cancel();  // re-arm with the peer timeout
  });
}

void Connection::Send(wire::OutFrame frame) {
  // An authenticated connection MACs every frame, which is the stronger check: no CRC then.
  Status sealed = frame.Seal(/*with_crc=*/options_.token == nullptr);
  if (!sealed.ok()) {
    Close(sealed.WithContext(fmt::format("sending to {}", peer_name())));
    return;
  }
  asio::post(socket_.get_executor(), [self = shared_from_this(), frame = std::move(frame)]() mutable {
    self->QueueOnStrand(std::move(frame), /*raw=*/false);
  });
}

void Connection::QueueOnStrand(wire::OutFrame frame, bool raw) {
  if (closed_) return;
  if (raw) (void)frame.Seal();  // handshake frames are tiny
  Outgoing& out = (raw ? control_ : outbox_).emplace_back();
  out.frame = std::move(frame);
  wake_writer_.cancel();
}

void Connection::SendErrorAndClose(const Status& why) {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this(), why] { self->ErrorAndCloseOnStrand(why); });
}

void Connection::ErrorAndCloseOnStrand(const Status& why) {
  if (closed_ || close_after_flush_) return;
  // Before authentication the peer has no key yet, and takes only small frames.
  const bool raw = !app_frames_flow();
  wire::OutFrame f = wire::Encode(
      wire::ErrorMessage{static_cast<std::uint16_t>(why.code()), raw ? why.message().substr(0, kPreAuthPayload - 8) : why.message()});
  if (!raw) (void)f.Seal(/*with_crc=*/options_.token == nullptr);
  QueueOnStrand(std::move(f), raw);
  close_after_flush_ = true;
  close_reason_ = why;
  flush_deadline_ = Clock::now() + kErrorFlushLimit;  // do not wait on a peer that does not read
  wake_writer_.cancel();
  watchdog_.cancel();
}

void Connection::Close(const Status& why) {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this(), why] { self->CloseOnStrand(why); });
}

void Connection::CloseOnStrand(const Status& why) {
  if (closed_) return;
  closed_ = true;
  closed_flag_.store(true);
  error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  wake_writer_.cancel();
  watchdog_.cancel();
  outbox_.clear();
  control_.clear();
  ReleaseHandshakeSlot();
  handler_.OnClosed(shared_from_this(), why);
  handler_owner_.reset();
}

void Connection::DetachAfterThisFrame(std::function<void(DetachedLink)> done) {
  detach_done_ = std::move(done);  // on the strand: called from OnFrame
  wake_writer_.cancel();
  watchdog_.cancel();
}

void Connection::MaybeFinishDetach() {
  if (closed_ || !read_stopped_ || !write_stopped_) return;
  closed_ = true;  // to this object: the socket lives on with its new owner
  closed_flag_.store(true);
  watchdog_.cancel();
  wake_writer_.cancel();
  ReleaseHandshakeSlot();
  DetachedLink link;
  error_code ec;
  link.fd = socket_.release(ec);
  if (ec) {
    closed_ = false;
    CloseOnStrand(Status::Internal(fmt::format("{}: could not hand the socket over: {}", peer_name(), ec.message())));
    return;
  }
  link.buffered = std::move(detach_buffered_);
  link.send_mac = std::move(send_mac_);
  link.recv_mac = std::move(recv_mac_);
  link.send_seq = send_seq_;
  link.recv_seq = recv_seq_;
  auto done = std::move(detach_done_);
  done(std::move(link));
  handler_owner_.reset();
}

Status Connection::Lost(std::string what) const {
  // A peer that refuses our token closes at once; its log says why, ours can only point there.
  if (!app_frames_flow()) what += " during the token handshake (a peer with another --token-file refuses so; its log says why)";
  return Status::Unavailable(std::move(what));
}

void Connection::RefuseFrame(Refusal why, const Status& status) {
  CountRefusal(why);
  spdlog::warn("{}", status.message());
  ErrorAndCloseOnStrand(status);
}

void Connection::RefuseOnStrand(const Status& why) {
  if (!dialed_) {  // a dialing side's handler reports it
    CountRefusal(Refusal::kAuthentication);
    spdlog::warn("refused: {}", why.message());
  }
  ErrorAndCloseOnStrand(why);
}

std::uint32_t Connection::payload_limit() const {
  if (auth_.server_waiting()) return kPreAuthPayload;
  return established_ ? options_.max_payload : options_.max_handshake_payload;
}

bool Connection::OnHandshakeFrame(const wire::InFrame& frame) {
  TokenHandshake::Step step = auth_.Receive(frame, peer_name());
  if (step.send) QueueOnStrand(std::move(*step.send), /*raw=*/true);
  if (step.refuse) {
    RefuseOnStrand(*step.refuse);
  } else if (step.closed) {
    spdlog::warn("refused: {}", step.closed->message());
    CloseOnStrand(*step.closed);
  } else if (step.authenticated) {
    send_mac_ = std::make_unique<FrameMac>(auth_.send_key());
    recv_mac_ = std::make_unique<FrameMac>(auth_.recv_key());
    wake_writer_.cancel();  // the frames queued behind the handshake may go
  }
  return !step.for_handler;
}

asio::awaitable<void> Connection::ReadLoop() {
  auto self = shared_from_this();
  // Bytes read past the end of the last frame, [rx_begin, rx_end): the next header, or all of a
  // small frame, so a stream of frames costs about one read each. A payload that is not all here
  // yet is read straight into the frame, together with up to rx.size() bytes of what follows it.
  std::vector<std::byte> rx(kReadAhead);
  std::size_t rx_begin = 0, rx_end = 0;
  std::array<std::byte, wire::kFrameHeaderBytes> raw;
  std::array<std::byte, wire::kMacBytes> mac;
  for (;;) {
    error_code ec;
    while (rx_end - rx_begin < raw.size()) {
      if (rx_begin > 0) {
        std::memmove(rx.data(), rx.data() + rx_begin, rx_end - rx_begin);
        rx_end -= rx_begin;
        rx_begin = 0;
      }
      const std::size_t n = co_await socket_.async_read_some(asio::buffer(rx.data() + rx_end, rx.size() - rx_end),
                                                             redirect_error(use_awaitable, ec));
      if (ec) {
        if (!closed_) {
          CloseOnStrand(Lost(ec == asio::error::eof ? fmt::format("{} closed the connection", peer_name())
                                                    : fmt::format("{}: read: {}", peer_name(), ec.message())));
        }
        co_return;
      }
      rx_end += n;
    }
    std::memcpy(raw.data(), rx.data() + rx_begin, raw.size());
    rx_begin += raw.size();
    if (closed_ || close_after_flush_) co_return;  // refused: read nothing more
    Result<wire::FrameHeader> header = CheckFrameHeader(raw, payload_limit(), peer_name());
    if (!header.ok()) {
      RefuseFrame(Refusal::kMalformed, header.status());
      co_return;
    }
    const bool has_mac = (header->flags & wire::kFlagMac) != 0;
    // After the handshake every frame has a MAC, except the ERROR a server sends instead of
    // accepting our proof (before it has sent any MAC'd frame); before it, none has.
    const bool refused_proof = auth_.authenticated() && dialed_ && recv_seq_ == 0 &&
                               header->type == wire::MessageType::kError;
    if (Status s = CheckMacFlag(*header, auth_.authenticated() && !refused_proof, peer_name(), "before authenticating");
        !s.ok() && !(refused_proof && has_mac)) {
      RefuseFrame(Refusal::kAuthentication, s);
      co_return;
    }
    wire::InFrame frame;
    frame.header = *header;
    frame.payload.resize(frame.header.payload_len);  // bounded by the limit above
    // The payload, then the MAC: first what is buffered, then from the socket.
    const std::array<std::span<std::byte>, 2> parts = {std::span<std::byte>(frame.payload),
                                                       has_mac ? std::span<std::byte>(mac) : std::span<std::byte>()};
    std::array<std::size_t, 2> have = {0, 0};
    for (std::size_t i = 0; i < parts.size(); ++i) {
      have[i] = std::min(parts[i].size(), rx_end - rx_begin);
      std::memcpy(parts[i].data(), rx.data() + rx_begin, have[i]);
      rx_begin += have[i];
    }
    if (rx_begin == rx_end) rx_begin = rx_end = 0;
    bool low_watermark = false;
    error_code ignored;  // without the option, the reads wake as before
    while (have[0] < parts[0].size() || have[1] < parts[1].size()) {  // rx is empty
      // A large payload arrives in many segments: wake when the rest of it is here, not at each.
      const std::size_t missing = parts[0].size() - have[0] + parts[1].size() - have[1];
      if (missing >= kWakeForAtLeast || low_watermark) {
        low_watermark = missing >= kWakeForAtLeast;
        socket_.set_option(asio::socket_base::receive_low_watermark(
                               static_cast<int>(low_watermark ? std::min(missing, kMaxLowWatermark) : 1)),
                           ignored);
      }
      const std::array<asio::mutable_buffer, 3> bufs = {asio::buffer(parts[0].subspan(have[0]).data(), parts[0].size() - have[0]),
                                                        asio::buffer(parts[1].subspan(have[1]).data(), parts[1].size() - have[1]),
                                                        asio::buffer(rx)};
      std::size_t n = co_await socket_.async_read_some(bufs, redirect_error(use_awaitable, ec));
      if (ec) {
        if (!closed_) CloseOnStrand(Status::Unavailable(fmt::format("{}: read: {} (in a {} frame)", peer_name(), ec.message(), wire::MessageTypeName(frame.header.type))));
        co_return;
      }
      for (std::size_t i = 0; i < parts.size(); ++i) {
        const std::size_t take = std::min(n, parts[i].size() - have[i]);
        have[i] += take;
        n -= take;
      }
      rx_end = n;  // read ahead into rx
    }
    if (low_watermark) socket_.set_option(asio::socket_base::receive_low_watermark(1), ignored);
    last_heard_ = Clock::now();
    if (closed_) co_return;
    const std::array<std::span<const std::byte>, 1> payload = {std::span<const std::byte>(frame.payload)};
    if (Status s = CheckFrameBody(frame.header, raw, payload, has_mac ? recv_mac_.get() : nullptr, has_mac ? recv_seq_++ : 0, mac,
                                  peer_name());
        !s.ok()) {
      RefuseFrame(has_mac ? Refusal::kAuthentication : Refusal::kMalformed, s);
      co_return;
    }
    // Before authentication the handshake takes the frame; after it (or without a token) it
    // refuses an AUTH_* frame, and the read loop stops there.
    const bool flowing = app_frames_flow();
    if (auth_.Takes(frame.header.type) && OnHandshakeFrame(frame)) {
      if (flowing) co_return;
      continue;
    }
    if (frame.header.type == wire::MessageType::kHeartbeat) continue;
    handler_.OnFrame(self, std::move(frame));
    if (closed_) co_return;
    if (detach_done_) {  // the handler takes the socket from here
      detach_buffered_.assign(rx.begin() + static_cast<std::ptrdiff_t>(rx_begin), rx.begin() + static_cast<std::ptrdiff_t>(rx_end));
      read_stopped_ = true;
      MaybeFinishDetach();
      co_return;
    }
  }
}

asio::awaitable<void> Connection::WriteLoop() {
  auto self = shared_from_this();
  std::vector<asio::const_buffer> buffers;
  while (!closed_) {
    if (detach_done_ && control_.empty() && outbox_.empty()) {  // all written: hand the socket over
      write_stopped_ = true;
      MaybeFinishDetach();
      co_return;
    }
    // Handshake frames first; the others wait until the handshake is done.
    const bool raw = !control_.empty();
    std::deque<Outgoing>& queue = raw ? control_ : outbox_;
    if (!raw && (outbox_.empty() || !app_frames_flow())) {
      if (close_after_flush_) {
        CloseOnStrand(close_reason_.ok() ? Status::Unavailable(fmt::format("closed the connection to {} after an error", peer_name()))
                                         : close_reason_);
        co_return;
      }
      wake_writer_.expires_after(options_.heartbeat_interval);
      error_code ec;
      co_await wake_writer_.async_wait(redirect_error(use_awaitable, ec));
      if (closed_) co_return;
      if (!ec && outbox_.empty() && established_ && app_frames_flow() && !detach_done_) {  // a quiet interval: tell the peer we are alive
        Outgoing& hb = outbox_.emplace_back();
        hb.frame = wire::EncodeHeartbeat();
        (void)hb.frame.Seal(/*with_crc=*/options_.token == nullptr);
      }
      continue;
    }
    // Gather every queued frame into one write: header, fields, then tensor data in place.
    const bool with_mac = !raw && auth_.authenticated();
    std::size_t count = queue.size();
    buffers.clear();
    for (std::size_t i = 0; i < count; ++i) {
      Outgoing& o = queue[i];
      if (with_mac) o.frame.header.flags |= wire::kFlagMac;
      wire::EncodeHeader(o.frame.header, o.header);
      buffers.emplace_back(o.header.data(), o.header.size());
      if (!o.frame.head.empty()) buffers.emplace_back(o.frame.head.data(), o.frame.head.size());
      for (const auto& t : o.frame.tail)
        if (!t.empty()) buffers.emplace_back(t.data(), t.size());
      if (with_mac) {
        send_mac_->TagFrame(send_seq_++, o.header, o.frame.head, o.frame.tail, o.mac);
        buffers.emplace_back(o.mac.data(), o.mac.size());
      }
    }
    error_code ec;
    co_await asio::async_write(socket_, buffers, redirect_error(use_awaitable, ec));
    if (ec) {
      if (!closed_) CloseOnStrand(Lost(fmt::format("{}: write: {}", peer_name(), ec.message())));
      co_return;
    }
    for (std::size_t i = 0; i < count && !queue.empty(); ++i) queue.pop_front();
  }
}

asio::awaitable<void> Connection::Watchdog() {
  auto self = shared_from_this();
  while (!closed_ && !detach_done_) {
    const auto limit = established_ ? options_.peer_timeout : options_.handshake_timeout;
    watchdog_.expires_at(close_after_flush_ ? flush_deadline_ : (established_ ? last_heard_ : started_) + limit);
    error_code ec;
    co_await watchdog_.async_wait(redirect_error(use_awaitable, ec));
    if (closed_) co_return;
    if (ec) continue;  // re-armed (an error frame is on its way): look again
    const auto now = Clock::now();
    if (close_after_flush_ && now >= flush_deadline_) {
      CloseOnStrand(Status::Unavailable(fmt::format("{} did not take the error frame", peer_name())));
    } else if (!close_after_flush_ && !established_ && now - started_ >= options_.handshake_timeout) {
      CountRefusal(Refusal::kHandshakeTimeout);
      CloseOnStrand(Status::DeadlineExceeded(fmt::format("{} did not complete the handshake within {:.1f} s", peer_name(),
                                                         std::chrono::duration<double>(options_.handshake_timeout).count())));
    } else if (!close_after_flush_ && established_ && now - last_heard_ >= options_.peer_timeout) {
      CloseOnStrand(Status::DeadlineExceeded(fmt::format(
          "{} sent nothing for {:.1f} s (not even a heartbeat): it is stopped, overloaded or unreachable", peer_name(),
          std::chrono::duration<double>(options_.peer_timeout).count())));
    }
  }
}

}  // namespace tfd::transport
