// Forming the ring (ring.h): dialing the next member and shaking hands with it, taking the previous
// member's connection from the listener (or passing it to the ring that shares the listener), and
// handing each socket over to a Link once its handshake is done. Runs on the thread that calls
// Connect and on the io_context thread; the collectives start only once both Links are in place.

#include "common/collective/ring.h"

#include <algorithm>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/transport/dial.h"
#include "common/transport/handshake.h"
#include "common/transport/local_link.h"

namespace tfd::collective {

using transport::Clock;
using transport::Connection;

void Ring::Accept(transport::tcp::socket socket) {
  const std::string remote = transport::PeerAddress(socket, /*with_port=*/true);
  const std::string name = remote.empty() ? std::string("an unidentified peer") : fmt::format("an unidentified peer ({})", remote);
  auto conn = std::make_shared<Connection>(std::move(socket), *this, name, options_.connection, shared_from_this());
  {
    MutexLock lock(&mu_);
    if (closed_) return;  // the socket closes with `conn`
    unidentified_.push_back(conn);
  }
  conn->Start(/*established=*/false);
}

void Ring::ShareListenerWith(std::shared_ptr<Ring> other) {
  MutexLock lock(&mu_);
  shares_listener_with_ = other;
}

Status Ring::Connect() {
  if (size() == 1) return Status::Ok();
  const auto deadline = Clock::now() + options_.startup_timeout;
  const RingMember& next = options_.members[static_cast<std::size_t>(Next())];
  auto dial = [&]() -> Status {
    TFD_ASSIGN_OR_RETURN(transport::tcp::socket socket, transport::Dial(ioc_, next.host, next.port, next.task, deadline));
    auto conn = std::make_shared<Connection>(std::move(socket), *this, MemberName(Next()), options_.connection, shared_from_this());
    {
      MutexLock lock(&mu_);
      if (!failure_.ok()) return failure_;
      if (closed_) return Status::FailedPrecondition("the ring is closed");
      next_conn_ = conn;
    }
    conn->Start(/*established=*/true);  // we dialed the address of the member we expect
    conn->Send(wire::Encode(transport::MakeHello(Identity())));
    return Status::Ok();
  };
  TFD_RETURN_IF_ERROR(dial());
  // Heartbeats start now: a link formed while the other neighbour is still starting (a big ring
  // starts over many seconds) must not look silent to the member at its other end.
  transport::asio::post(ioc_, [self = shared_from_this()] { self->ScheduleHeartbeat(); });

  mu_.Lock();
  auto next_log = Clock::now() + std::chrono::seconds(5);
  while (failure_.ok() && !closed_ && !(LinkedLocked(/*next=*/true) && LinkedLocked(/*next=*/false))) {
    const auto now = Clock::now();
    if (options_.stop != nullptr && options_.stop->load()) {
      mu_.Unlock();
      return Fail(Status::FailedPrecondition("stopped by a signal while the ring was forming"));
    }
    if (now >= deadline) {
      const std::string missing = !LinkedLocked(/*next=*/true) ? fmt::format("{} did not answer our HELLO", MemberName(Next()))
                                                               : fmt::format("{} did not connect to this worker", MemberName(Prev()));
      mu_.Unlock();
      return Fail(Status::DeadlineExceeded(fmt::format("ring not formed within {:.0f} s: {}",
                                                       std::chrono::duration<double>(options_.startup_timeout).count(), missing)));
    }
    if (redial_ && now < deadline) {
      redial_ = false;
      mu_.Unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (Status s = dial(); !s.ok()) return Fail(s);
      mu_.Lock();
      continue;
    }
    if (now >= next_log) {
      spdlog::info("waiting for {} to connect to this worker", MemberName(Prev()));
      next_log = now + std::chrono::seconds(5);
    }
    cv_.WaitUntil(std::min(deadline, now + std::chrono::milliseconds(100)));
  }
  if (!failure_.ok() || closed_) {
    Status why = failure_.ok() ? Status::FailedPrecondition("the ring is closed") : failure_;
    mu_.Unlock();
    return Fail(why);
  }
  mu_.Unlock();
  return Status::Ok();
}

void Ring::Adopt(bool next, transport::DetachedLink detached) {
  auto link = std::make_unique<Link>(std::move(detached), MemberName(next ? Next() : Prev()), max_frame_);
  MutexLock io(&io_mu_);
  MutexLock lock(&mu_);
  (next ? next_conn_ : prev_conn_).reset();
  if (closed_) return;  // the socket closes with `link`
  (next ? next_ : prev_) = std::move(link);
  cv_.SignalAll();
}

void Ring::HandleHello(const std::shared_ptr<Connection>& from, const wire::InFrame& frame) {
  wire::Hello hello;
  if (Status s = wire::Decode(frame.payload, &hello); !s.ok()) {
    from->SendErrorAndClose(Status::Corruption(fmt::format("{}: {}", from->peer_name(), s.message())));
    return;
  }
  const transport::HandshakeIdentity self = Identity();
  const RingMember& prev = options_.members[static_cast<std::size_t>(Prev())];
  {
    MutexLock lock(&mu_);
    for (const RingMember& m : options_.members)
      if (m.kind == hello.kind && m.index == hello.index) heard_.insert(m.task);
  }
  auto refuse = [&](const Status& why) {
    spdlog::warn("refused {}: {}", from->peer_name(), why.message());
    from->SendErrorAndClose(why);
  };
  // A joiner's HELLO carries the cluster id the run started with, not this membership's.
  const bool from_prev = hello.kind == prev.kind && hello.index == prev.index;
  const Status checked = transport::CheckHello(hello, self);
  if (!checked.ok() && (from_prev || !options_.on_stranger)) return refuse(checked);
  if (!from_prev) {
    std::shared_ptr<Ring> other;
    {
      MutexLock lock(&mu_);
      other = shares_listener_with_.lock();
    }
    if (other != nullptr) {
      const RingMember& theirs = other->options_.members[static_cast<std::size_t>(other->Prev())];
      if (other->size() > 1 && hello.kind == theirs.kind && hello.index == theirs.index) {
        {
          MutexLock lock(&mu_);
          std::erase(unidentified_, from);
        }
        return other->HandleHello(from, frame);  // its OnClosed, until the link is adopted, comes here and is passed on
      }
    }
    if (options_.on_stranger && options_.on_stranger(from, hello, frame.header.request_id, self, rank())) {
      MutexLock lock(&mu_);
      std::erase(unidentified_, from);
      return;
    }
    if (!checked.ok()) return refuse(checked);
    return refuse(Status::FailedPrecondition(fmt::format("{} takes ring connections from {} only", self.name, prev.task)));
  }
  {
    MutexLock lock(&mu_);
    if (prev_conn_ != nullptr || LinkedLocked(/*next=*/false))
      return refuse(Status::FailedPrecondition(fmt::format("{} is already connected to {}", self.name, prev.task)));
    std::erase(unidentified_, from);
    prev_conn_ = from;
  }
  from->set_peer_name(MemberName(Prev()));
  from->MarkEstablished();
  from->Send(wire::Encode(transport::MakeWelcome(self)));
  // The WELCOME is written first; then the collective thread drives the socket.
  from->DetachAfterThisFrame([weak = weak_from_this()](transport::DetachedLink d) {
    if (auto self = weak.lock()) self->Adopt(/*next=*/false, std::move(d));
  });
}

void Ring::OnFrame(const std::shared_ptr<Connection>& from, wire::InFrame frame) {
  const wire::MessageType type = frame.header.type;
  mu_.Lock();
  const bool is_next = from == next_conn_, is_prev = from == prev_conn_;
  if (is_next) heard_.insert(options_.members[static_cast<std::size_t>(Next())].task);
  mu_.Unlock();
  if (!is_prev && !is_next) {
    if (type == wire::MessageType::kHello) return HandleHello(from, frame);
    Status why = Status::FailedPrecondition(fmt::format("{} sent {} before HELLO", from->peer_name(), wire::MessageTypeName(type)));
    spdlog::warn("{}", why.message());
    return from->SendErrorAndClose(why);
  }
  Status why;
  if (type == wire::MessageType::kError) {
    why = FromErrorFrame(from->peer_name(), frame);
  } else if (is_next && type == wire::MessageType::kWelcome) {
    const RingMember& next = options_.members[static_cast<std::size_t>(Next())];
    wire::Welcome w;
    if (Status s = wire::Decode(frame.payload, &w); !s.ok()) {
      why = Status::Corruption(fmt::format("{}: {}", from->peer_name(), s.message()));
    } else if (Status checked = transport::CheckWelcome(w, from->peer_name(), next.kind, next.index); !checked.ok()) {
      why = checked;
    } else {
      from->DetachAfterThisFrame([weak = weak_from_this()](transport::DetachedLink d) {
        if (auto self = weak.lock()) self->Adopt(/*next=*/true, std::move(d));
      });
      return;
    }
  } else {
    why = Status::Corruption(fmt::format("{} sent {} before its handshake was done", from->peer_name(), wire::MessageTypeName(type)));
  }
  mu_.Lock();
  if (options_.redial && !closed_) {  // try again: this connection is dropped
    if (is_next) next_conn_.reset(), redial_ = true;
    else prev_conn_.reset();
    cv_.SignalAll();
  } else {
    RecordFailure(why);
  }
  mu_.Unlock();
  from->Close(why);
}

void Ring::OnClosed(const std::shared_ptr<Connection>& from, const Status& why) {
  std::shared_ptr<Ring> other;
  {
    MutexLock lock(&mu_);
    if (options_.redial && (from == prev_conn_ || from == next_conn_)) {  // try again
      if (from == next_conn_) next_conn_.reset(), redial_ = true;
      else prev_conn_.reset();
      cv_.SignalAll();
      return;
    }
    if (from == prev_conn_ || from == next_conn_) {  // before its handshake was done
      RecordFailure(why.ok() ? Status::Unavailable(fmt::format("{} closed the ring connection", from->peer_name())) : why);
      return;
    }
    std::erase(unidentified_, from);
    other = shares_listener_with_.lock();
  }
  if (other != nullptr) other->OnClosed(from, why);  // perhaps a connection handed over to it
}

std::set<std::string> Ring::heard() const {
  MutexLock lock(&mu_);
  return heard_;
}

void Ring::RecordFailure(Status why) {
  if (failure_.ok() && !closed_) failure_ = std::move(why);
  cv_.SignalAll();
}

}  // namespace tfd::collective
