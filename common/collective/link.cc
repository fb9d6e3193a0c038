#include "common/collective/link.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "common/transport/frame_check.h"

namespace tfd::collective {
namespace {

// How far a read goes past the frame being assembled: the next header and small frames, little
// enough that copying a large payload's first bytes out of it costs next to nothing.
constexpr std::size_t kReadAhead = 8 << 10;
constexpr int kMaxIov = 64;
// What one sendmsg() takes at most: enough for the socket buffer to stay fed, little enough that
// the frames' checksums are computed while their bytes are still in cache for the kernel's copy.
constexpr std::size_t kWriteWindow = 256 << 10;

}  // namespace

Link::Link(transport::DetachedLink detached, std::string peer_name, std::uint32_t max_payload)
    : fd_(detached.fd),
      peer_name_(std::move(peer_name)),
      max_payload_(max_payload),
      send_mac_(std::move(detached.send_mac)),
      recv_mac_(std::move(detached.recv_mac)),
      send_seq_(detached.send_seq),
      recv_seq_(detached.recv_seq),
      rx_(std::max(kReadAhead, detached.buffered.size())) {
  std::copy(detached.buffered.begin(), detached.buffered.end(), rx_.begin());
  rx_end_ = detached.buffered.size();
  const int flags = fcntl(fd_, F_GETFL);
  if (flags >= 0) (void)fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
}

Link::~Link() {
  if (fd_ >= 0) ::close(fd_);
}

void Link::Shutdown() {
  if (shut_) return;
  shut_ = true;
  ::shutdown(fd_, SHUT_RDWR);
}

Status Link::Queue(wire::OutFrame frame) {
  // Only the length now: the CRC or MAC is computed just before the frame is written (Seal),
  // while its bytes are about to be copied by the kernel anyway, not when a whole segment is queued.
  if (Status s = frame.Seal(/*with_crc=*/false); !s.ok()) return s.WithContext(fmt::format("sending to {}", peer_name_));
  Outgoing& o = outbox_.emplace_back();
  o.frame = std::move(frame);
  o.with_mac = send_mac_ != nullptr;
  last_sent_ = Clock::now();
  ++frames_queued_;
  return Status::Ok();
}

void Link::Seal(Outgoing& o) {
  if (o.sealed) return;
  o.sealed = true;
  if (!o.with_mac) (void)o.frame.Seal(/*with_crc=*/true);  // the length was checked in Queue
  if (o.with_mac) o.frame.header.flags |= wire::kFlagMac;
  wire::EncodeHeader(o.frame.header, o.header);
  // Frames are sealed in queue order, so the sequence numbers are the order they are written in.
  if (o.with_mac) send_mac_->TagFrame(send_seq_++, o.header, o.frame.head, o.frame.tail, o.mac);
}

Status Link::Write(bool* progress) {
  std::array<iovec, kMaxIov> iov;
  while (!outbox_.empty()) {
    int count = 0;
    std::size_t skip = written_;
    auto add = [&](const void* p, std::size_t n) {
      if (n == 0 || count == kMaxIov) return;
      if (skip >= n) {
        skip -= n;
        return;
      }
      iov[static_cast<std::size_t>(count++)] = {const_cast<std::byte*>(static_cast<const std::byte*>(p)) + skip, n - skip};
      skip = 0;
    };
    std::size_t window = 0;  // bytes in this write: a few frames, sealed just before the kernel copies them
    for (Outgoing& o : outbox_) {
      if (count == kMaxIov || window >= kWriteWindow) break;
      Seal(o);
      window += o.header.size() + o.frame.payload_size();
      add(o.header.data(), o.header.size());
      add(o.frame.head.data(), o.frame.head.size());
      for (const auto& t : o.frame.tail) add(t.data(), t.size());
      if (o.with_mac) add(o.mac.data(), o.mac.size());
    }
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = static_cast<std::size_t>(count);
    const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
      return Status::Unavailable(fmt::format("{}: write: {}", peer_name_, std::strerror(errno)));
    }
    *progress = true;
    auto left = static_cast<std::size_t>(n);
    while (left > 0 && !outbox_.empty()) {
      const Outgoing& o = outbox_.front();
      const std::size_t total = o.header.size() + o.frame.payload_size() + (o.with_mac ? o.mac.size() : 0);
      const std::size_t rest = total - written_;
      if (left < rest) {
        written_ += left;
        left = 0;
      } else {
        left -= rest;
        written_ = 0;
        outbox_.pop_front();
        ++frames_written_;
      }
    }
  }
  return Status::Ok();
}

Result<bool> Link::ParseHeader(const Placer* placer) {
  std::memcpy(raw_header_.data(), rx_.data() + rx_begin_, raw_header_.size());
  rx_begin_ += raw_header_.size();
  TFD_ASSIGN_OR_RETURN(const wire::FrameHeader header, transport::CheckFrameHeader(raw_header_, max_payload_, peer_name_));
  TFD_RETURN_IF_ERROR(transport::CheckMacFlag(header, recv_mac_ != nullptr, peer_name_, "on a connection without a token"));
  frame_.header = header;
  frame_.payload.resize(header.payload_len);  // bounded above; the capacity is kept frame to frame
  payload_have_ = 0;
  dest_ = {};
  const bool placeable = placer != nullptr && placer->type == header.type && header.payload_len > placer->head;
  split_ = placeable ? placer->head : header.payload_len;
  decided_ = !placeable;
  in_frame_ = true;
  return true;
}

std::size_t Link::body_size() const { return frame_.payload.size() + (recv_mac_ != nullptr ? mac_.size() : 0); }

std::span<std::byte> Link::RegionAt(std::size_t pos) {
  const std::size_t len = frame_.payload.size();
  if (pos < split_) return std::span<std::byte>(frame_.payload).subspan(pos, split_ - pos);
  if (pos < len) return dest_.empty() ? std::span<std::byte>(frame_.payload).subspan(pos, len - pos) : dest_.subspan(pos - split_);
  return std::span<std::byte>(mac_).subspan(pos - len, body_size() - pos);
}

Result<const wire::InFrame*> Link::Read(bool* progress, const Placer* placer) {
  if (held_) {
    held_ = false;
    return &frame_;
  }
  for (;;) {
    if (!in_frame_) {
      if (rx_end_ - rx_begin_ >= raw_header_.size()) {
        TFD_ASSIGN_OR_RETURN(bool ignored, ParseHeader(placer));
        (void)ignored;
      } else {
        if (rx_begin_ > 0) {
          std::memmove(rx_.data(), rx_.data() + rx_begin_, rx_end_ - rx_begin_);
          rx_end_ -= rx_begin_;
          rx_begin_ = 0;
        }
        const ssize_t n = ::recv(fd_, rx_.data() + rx_end_, rx_.size() - rx_end_, MSG_DONTWAIT);
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) return nullptr;
          return Status::Unavailable(fmt::format("{}: read: {}", peer_name_, std::strerror(errno)));
        }
        if (n == 0) return Status::Unavailable(fmt::format("{} closed the connection", peer_name_));
        *progress = true;
        last_heard_ = Clock::now();
        rx_end_ += static_cast<std::size_t>(n);
        continue;
      }
    }
    // The payload (its head, then the rest, maybe where the placer says), then the MAC: first what
    // is buffered, then straight from the socket.
    const std::size_t need = body_size();
    while (payload_have_ < need) {
      if (!decided_ && payload_have_ >= split_) {
        decided_ = true;
        const std::size_t rest = frame_.payload.size() - split_;
        std::span<std::byte> to =
            placer != nullptr ? placer->place(std::span<const std::byte>(frame_.payload).first(split_), rest) : std::span<std::byte>();
        if (to.size() == rest) dest_ = to;
      }
      const std::size_t limit = decided_ ? need : split_;
      if (rx_end_ > rx_begin_) {
        const std::span<std::byte> region = RegionAt(payload_have_);
        const std::size_t take = std::min({region.size(), rx_end_ - rx_begin_, limit - payload_have_});
        std::memcpy(region.data(), rx_.data() + rx_begin_, take);
        rx_begin_ += take;
        payload_have_ += take;
        if (rx_begin_ == rx_end_) rx_begin_ = rx_end_ = 0;
        continue;
      }
      std::array<iovec, 4> iov;
      int count = 0;
      for (std::size_t pos = payload_have_; pos < limit;) {
        const std::span<std::byte> region = RegionAt(pos).first(std::min(RegionAt(pos).size(), limit - pos));
        iov[static_cast<std::size_t>(count++)] = {region.data(), region.size()};
        pos += region.size();
      }
      iov[static_cast<std::size_t>(count++)] = {rx_.data(), kReadAhead};
      const ssize_t n = ::readv(fd_, iov.data(), count);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return nullptr;
        return Status::Unavailable(fmt::format("{}: read: {} (in a {} frame)", peer_name_, std::strerror(errno),
                                               wire::MessageTypeName(frame_.header.type)));
      }
      if (n == 0) {
        return Status::Unavailable(fmt::format("{} closed the connection (in a {} frame)", peer_name_,
                                               wire::MessageTypeName(frame_.header.type)));
      }
      *progress = true;
      last_heard_ = Clock::now();
      const auto got = static_cast<std::size_t>(n);
      const std::size_t into_frame = std::min(got, limit - payload_have_);
      payload_have_ += into_frame;
      rx_begin_ = 0;  // rx_ was empty: what came past the frame is read ahead into it
      rx_end_ = got - into_frame;
    }
    in_frame_ = false;
    const std::span<const std::byte> head = std::span<const std::byte>(frame_.payload).first(split_);
    const std::span<const std::byte> rest =
        dest_.empty() ? std::span<const std::byte>(frame_.payload).subspan(split_) : std::span<const std::byte>(dest_);
    const std::array<std::span<const std::byte>, 2> parts = {head, rest};
    TFD_RETURN_IF_ERROR(transport::CheckFrameBody(frame_.header, raw_header_, parts, recv_mac_.get(),
                                                  recv_mac_ != nullptr ? recv_seq_++ : 0, mac_, peer_name_));
    if (frame_.header.type == wire::MessageType::kHeartbeat) continue;
    return &frame_;
  }
}

Status FromErrorFrame(std::string_view from, const wire::InFrame& frame) {
  wire::ErrorMessage err;
  if (Status s = wire::Decode(frame.payload, &err); !s.ok()) return Status::Corruption(fmt::format("{}: {}", from, s.message()));
  return Status(CodeFromWire(err.code), fmt::format("{} reports: {}", from, err.message));
}

}  // namespace tfd::collective
