// Ring (ring.h): creating it, its public collectives (each one's schedule comes from
// ring_schedule.h and ring_drive.cc moves it on), point-to-point frames, heartbeats between
// collectives, and Finish and Close. Forming the ring is ring_connect.cc's.

#include "common/collective/ring.h"

#include <poll.h>

#include <algorithm>
#include <random>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "common/transport/local_link.h"

namespace tfd::collective {
namespace {

using transport::Clock;
using transport::Connection;

// How long Close() keeps writing an ERROR frame to a neighbour that is slow to read it.
constexpr auto kErrorFlushLimit = std::chrono::seconds(1);

bool SharedSlotsAllowed() {
  const char* v = std::getenv("TFD_RING_SHM");
  return v == nullptr || std::string_view(v) != "off";
}

std::uint64_t RandomNonce() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ 1;  // never 0
}

}  // namespace

std::shared_ptr<Ring> Ring::Create(transport::asio::io_context& ioc, RingOptions options) {
  TFD_CHECK(!options.members.empty() && options.rank >= 0 && options.rank < static_cast<int>(options.members.size()));
  TFD_CHECK(options.chunk_floats > 0);
  TFD_CHECK(options.shm_slots >= 1 && options.shm_slots <= ShmSlots::kMaxSlots);  // what a receiver accepts
  return std::shared_ptr<Ring>(new Ring(ioc, std::move(options)));
}

Ring::Ring(transport::asio::io_context& ioc, RingOptions options)
    : ioc_(ioc),
      options_(std::move(options)),
      // A chunk's 32 bytes of fields and its floats, or an ERROR with a long message.
      max_frame_(static_cast<std::uint32_t>(std::min<std::uint64_t>(
          wire::kMaxPayloadBytes, std::max<std::uint64_t>(32 + 4 * static_cast<std::uint64_t>(options_.chunk_floats) + (64 << 10),
                                                          options_.max_message_bytes)))),
      heartbeat_(ioc),
      shared_slots_(options_.shared_slots && SharedSlotsAllowed()),
      shm_nonce_(RandomNonce()) {}

Ring::~Ring() { Close(Status::Ok()); }  // out_ and in_ unmap their slots, and close a memfd never opened

transport::HandshakeIdentity Ring::Identity() const {
  const RingMember& self = options_.members[static_cast<std::size_t>(rank())];
  return {.name = self.task, .kind = self.kind, .index = self.index, .incarnation = options_.incarnation, .cluster_id = options_.cluster_id};
}

std::string Ring::MemberName(int r) const { return RingMemberName(options_.members[static_cast<std::size_t>(r)]); }

std::string RingMemberName(const RingMember& m) { return fmt::format("{} ({}:{})", m.task, m.host, m.port); }

int BlamedMember(const std::vector<RingMember>& members, int self, const Status& error) {
  std::string_view text = error.message();
  for (;;) {
    // The member named first in `text`; a report of its passes the blame on to what it reports.
    int found = -1;
    std::size_t at = std::string_view::npos, len = 0;
    for (int r = 0; r < static_cast<int>(members.size()); ++r) {
      if (r == self) continue;
      const RingMember& m = members[static_cast<std::size_t>(r)];
      // Its ring name, or the dialler's "worker:2 at HOST:PORT" (transport/dial.h) when it refused
      // or never answered a connection.
      for (const std::string& name : {RingMemberName(m), fmt::format("{} at {}:{}", m.task, m.host, m.port)}) {
        const std::size_t p = text.find(name);
        if (p < at) at = p, len = name.size(), found = r;
      }
    }
    if (found < 0) return -1;
    constexpr std::string_view kReports = " reports: ";
    const std::string_view rest = text.substr(at + len);
    if (!rest.starts_with(kReports)) return found;
    text = rest.substr(kReports.size());
  }
}

void Ring::ScheduleHeartbeat() {
  heartbeat_.expires_after(options_.connection.heartbeat_interval);
  heartbeat_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (self == nullptr || ec || self->closed_flag_.load()) return;
    self->Heartbeat();
    self->ScheduleHeartbeat();
  });
}

void Ring::Heartbeat() {
  MutexLock io(&io_mu_);
  if (closed_flag_.load()) return;
  const auto now = Clock::now();
  for (Link* link : {next_.get(), prev_.get()}) {
    if (link == nullptr) continue;
    // A neighbour that sent DONE needs nothing more and closes once it has this member's DONE: a
    // heartbeat after that would meet a closed socket (a broken pipe) while this member still
    // waits for its other neighbour's DONE, as a slow member of a big ring makes it.
    if ((link == next_.get() && next_done_) || (link == prev_.get() && prev_done_)) continue;
    if (!link->pending_write() && now - link->last_sent() >= options_.connection.heartbeat_interval) (void)link->Queue(wire::EncodeHeartbeat());
    bool progress = false;
    (void)link->Write(&progress);  // a broken link is the collective's to report
  }
}

Result<std::uint64_t> Ring::Start(std::span<float> data, CollectiveSchedule schedule, std::optional<compress::Half> half) {
  Status queued;
  {
    MutexLock io(&io_mu_);
    if (next_ == nullptr || prev_ == nullptr) {
      queued = Status::FailedPrecondition("a collective before the ring was formed");
    } else {
      if (!offered_ && shared_slots_ && transport::LocalPeerPid(next_->fd()) > 0) OfferSlots();  // the next member is on this host
      CollectiveInFlight& w =
          in_flight_.emplace_back(CollectiveInFlight{.id = collective_, .data = data, .expected = std::move(schedule.expected), .half = half});
      ++started_;
      // This member's own first chunks, queued before any chunk of it is applied (which queues what
      // it forwards), so frames leave in schedule order.
      for (const auto& [o, count] : schedule.first_sends) {
        queued = SendChunk(w, schedule.first_phase, 0, static_cast<int>(schedule.first_segment), o,
                           w.data.subspan(static_cast<std::size_t>(o), static_cast<std::size_t>(count)));
        if (!queued.ok()) break;
      }
    }
  }
  if (!queued.ok()) return Fail(queued);
  TFD_RETURN_IF_ERROR(Progress());  // on the wire now
  return collective_++;
}

Status Ring::AllReduce(std::span<float> data) {
  TFD_ASSIGN_OR_RETURN(std::uint64_t id, StartAllReduce(data));
  return Wait(id);
}

Result<std::uint64_t> Ring::StartAllReduce(std::span<float> data) {
  if (size() == 1) return collective_++;
  return Start(data, AllReduceSchedule(rank(), size(), data.size(), options_.chunk_floats));
}

Result<std::uint64_t> Ring::StartReduceScatter(std::span<float> data) {
  if (size() == 1) return collective_++;
  return Start(data, ReduceScatterSchedule(rank(), size(), data.size(), options_.chunk_floats));
}

Result<std::uint64_t> Ring::StartAllGatherAfterReduceScatter(std::span<float> data) {
  if (size() == 1) return collective_++;
  return Start(data, AllGatherAfterReduceScatterSchedule(rank(), size(), data.size(), options_.chunk_floats));
}

Result<std::uint64_t> Ring::StartAllReduceHalf(std::span<float> data, compress::Half half) {
  if (size() == 1) {
    compress::RoundHalf(half, data);  // what a ring would have made of the sum
    return collective_++;
  }
  return Start(data, AllReduceSchedule(rank(), size(), data.size(), options_.chunk_floats), half);
}

Status Ring::AllGather(std::span<float> data) {
  TFD_CHECK(data.size() % static_cast<std::size_t>(size()) == 0);
  if (size() == 1) return Status::Ok();
  TFD_ASSIGN_OR_RETURN(std::uint64_t id, Start(data, AllGatherSchedule(rank(), size(), data.size(), options_.chunk_floats)));
  return Wait(id);
}

Status Ring::Broadcast(std::span<float> data) {
  if (size() == 1) return Status::Ok();
  TFD_ASSIGN_OR_RETURN(std::uint64_t id, StartBroadcast(data));
  return Wait(id);
}

Result<std::uint64_t> Ring::StartBroadcast(std::span<float> data) {
  if (size() == 1) return collective_++;
  return Start(data, BroadcastSchedule(rank(), size(), data.size(), options_.chunk_floats));
}

Result<bool> Ring::Done(std::uint64_t id) {
  if (size() == 1) return true;
  TFD_RETURN_IF_ERROR(Progress());
  MutexLock io(&io_mu_);
  while (!in_flight_.empty() && Complete(in_flight_.front())) in_flight_.pop_front();
  return in_flight_.empty() || in_flight_.front().id > id;
}

Status Ring::Progress() {
  if (size() == 1) return Status::Ok();
  Status st;
  {
    MutexLock io(&io_mu_);
    if (closed_flag_.load()) {
      MutexLock lock(&mu_);
      return failure_.ok() ? Status::FailedPrecondition("the ring is closed") : failure_;
    }
    if (next_ == nullptr || prev_ == nullptr) return Status::FailedPrecondition("a collective before the ring was formed");
    bool progress = false;
    st = Pump(&progress);
  }
  return st.ok() ? st : Fail(st);
}

Status Ring::Wait(std::uint64_t id) {
  if (size() == 1) return Status::Ok();
  return Drive([this, id] {
    io_mu_.AssertHeld();  // Drive calls it under io_mu_
    while (!in_flight_.empty() && Complete(in_flight_.front())) in_flight_.pop_front();
    // The previous member may wait for this member's last RING_SLOT_FREE: it leaves before this does.
    return (in_flight_.empty() || in_flight_.front().id > id) && prev_->frames_written() >= free_frame_;
  });
}

Status Ring::Send(Side to, wire::OutFrame frame) {
  if (size() == 1) return Status::FailedPrecondition("a point-to-point frame on a ring of one");
  auto owned = std::make_shared<std::vector<std::byte>>();
  for (std::span<const std::byte> t : frame.tail) owned->insert(owned->end(), t.begin(), t.end());
  frame.tail.assign(1, std::span<const std::byte>(*owned));
  frame.keepalive = owned;
  Status queued;
  {
    MutexLock io(&io_mu_);
    if (next_ == nullptr || prev_ == nullptr) {
      queued = Status::FailedPrecondition("a point-to-point frame before the ring was formed");
    } else {
      queued = (to == Side::kNext ? next_ : prev_)->Queue(std::move(frame));
    }
  }
  if (!queued.ok()) return Fail(queued);
  return Progress();
}

Result<wire::InFrame> Ring::Receive(Side from) {
  if (size() == 1) return Status::FailedPrecondition("a point-to-point frame on a ring of one");
  {
    MutexLock io(&io_mu_);
    awaiting_ = static_cast<int>(from);
  }
  wire::InFrame out;
  Status s = Drive([this, from, &out] {
    io_mu_.AssertHeld();  // Drive calls it under io_mu_
    std::deque<wire::InFrame>& q = inbox_[static_cast<int>(from)];
    if (q.empty()) return false;
    out = std::move(q.front());
    q.pop_front();
    return true;
  });
  {
    MutexLock io(&io_mu_);
    awaiting_ = -1;
  }
  TFD_RETURN_IF_ERROR(s);
  return out;
}

Status Ring::Finish() {
  if (size() == 1) {
    Close(Status::Ok());
    return Status::Ok();
  }
  if (collective_ > 0) TFD_RETURN_IF_ERROR(Wait(collective_ - 1));
  bool formed = false;
  {
    MutexLock io(&io_mu_);
    formed = next_ != nullptr && prev_ != nullptr;
    const wire::Done done{static_cast<std::uint32_t>(rank())};
    if (formed) (void)next_->Queue(wire::Encode(done));
    if (formed) (void)prev_->Queue(wire::Encode(done));
    finishing_ = true;
  }
  if (!formed) return Fail(Status::FailedPrecondition("Finish() before the ring was formed"));
  TFD_RETURN_IF_ERROR(Drive([this] {
    io_mu_.AssertHeld();  // Drive calls it under io_mu_
    return prev_done_ && next_done_ && !next_->pending_write() && !prev_->pending_write();
  }));
  Close(Status::Ok());
  return Status::Ok();
}

void Ring::Close(const Status& why) {
  std::vector<std::shared_ptr<Connection>> conns;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    if (failure_.ok() && !why.ok()) failure_ = why;
    closed_ = true;
    closed_flag_.store(true);
    for (auto* c : {&next_conn_, &prev_conn_})
      if (*c != nullptr) conns.push_back(*c);
    conns.insert(conns.end(), unidentified_.begin(), unidentified_.end());
    cv_.SignalAll();
  }
  // The heartbeat timer is the io_context thread's: cancelled there, so that a caller who then
  // runs the io_context to its end (a test's member, a task's shutdown) does not wait out an interval.
  // (From ~Ring there is no owner left to post for: the timer's own destructor cancels it.)
  if (std::weak_ptr<Ring> weak = weak_from_this(); !weak.expired()) {
    transport::asio::post(ioc_, [weak] {
      if (auto self = weak.lock()) self->heartbeat_.cancel();
    });
  }
  for (const auto& c : conns) {
    if (why.ok()) c->Close(Status::Unavailable("ring closed"));
    else c->SendErrorAndClose(why);
  }
  MutexLock io(&io_mu_);
  std::vector<Link*> links;
  for (Link* link : {next_.get(), prev_.get()})
    if (link != nullptr) links.push_back(link);
  if (!why.ok()) {
    for (Link* link : links) (void)link->Queue(wire::Encode(wire::ErrorMessage{static_cast<std::uint16_t>(why.code()), why.message()}));
  }
  // What is queued (an ERROR, a DONE) goes out before the sockets close, unless the peer does not read.
  const auto deadline = Clock::now() + kErrorFlushLimit;
  for (Link* link : links) {
    bool progress = false;
    while (link->pending_write() && link->Write(&progress).ok() && Clock::now() < deadline) {
      if (!link->pending_write()) break;
      pollfd p{link->fd(), POLLOUT, 0};
      (void)::poll(&p, 1, 10);
    }
    link->Shutdown();
  }
}

Status Ring::Fail(const Status& why) {
  Close(why);
  return why;
}

}  // namespace tfd::collective
