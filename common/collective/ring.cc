// The whole Ring in one file (about 1,000 lines, over the 600 a file should hold): forming the ring, the reduce-scatter/all-gather
// schedule and the drive loop all work on the lock-guarded state declared in ring.h, and read best
// in the order a collective runs; the socket I/O itself is Link's (link.cc).

#include "common/collective/ring.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <random>

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/transport/dial.h"
#include "common/transport/handshake.h"
#include "common/transport/local_link.h"
#include "common/wire/bytes.h"
#include "common/wire/crc32c.h"

namespace tfd::collective {
namespace {

using transport::Clock;
using transport::Connection;

const char* PhaseName(wire::RingPhase p) {
  switch (p) {
    case wire::RingPhase::kReduceScatter: return "reduce-scatter";
    case wire::RingPhase::kAllGather: return "all-gather";
    case wire::RingPhase::kBroadcast: return "broadcast";
  }
  return "?";
}

// dst[i] = src[i] + dst[i]: the partial sum that arrived plus this member's value. `src` is wire
// bytes (little-endian floats, 4-byte aligned in the payload but read with memcpy all the same).
void AddInto(const std::byte* __restrict src, float* __restrict dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, src + 4 * i, 4);
    dst[i] = v + dst[i];
  }
}

Status FromErrorFrame(const std::string& from, const wire::InFrame& frame) {
  wire::ErrorMessage err;
  if (Status s = wire::Decode(frame.payload, &err); !s.ok()) return Status::Corruption(fmt::format("{}: {}", from, s.message()));
  return Status(CodeFromWire(err.code), fmt::format("{} reports: {}", from, err.message));
}

// A model-parallel stage's activation or gradient, sent to one neighbour rather than around the ring.
bool IsPointToPoint(wire::MessageType t) {
  return t == wire::MessageType::kPipeActivation || t == wire::MessageType::kPipeGradient;
}

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

// Segment c of n over `len` floats: [len * c / n, len * (c + 1) / n).
std::uint64_t SegmentBegin(std::uint64_t len, int c, int n) { return len * static_cast<std::uint64_t>(c) / static_cast<std::uint64_t>(n); }

}  // namespace

std::shared_ptr<Ring> Ring::Create(transport::asio::io_context& ioc, RingOptions options) {
  TFD_CHECK(!options.members.empty() && options.rank >= 0 && options.rank < static_cast<int>(options.members.size()));
  TFD_CHECK(options.chunk_floats > 0);
  TFD_CHECK(options.shm_slots >= 1 && options.shm_slots <= 1024);  // what a receiver accepts
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

Ring::SharedSlots::~SharedSlots() {
  if (base != nullptr) ::munmap(base, size);
}

Ring::~Ring() {
  Close(Status::Ok());
  MutexLock io(&io_mu_);
  if (offer_fd_ >= 0) ::close(offer_fd_);
}

transport::HandshakeIdentity Ring::Identity() const {
  const RingMember& self = options_.members[static_cast<std::size_t>(rank())];
  return {.name = self.task, .kind = self.kind, .index = self.index, .incarnation = options_.incarnation, .cluster_id = options_.cluster_id};
}

std::string Ring::MemberName(int r) const {
  const RingMember& m = options_.members[static_cast<std::size_t>(r)];
  return fmt::format("{} ({}:{})", m.task, m.host, m.port);
}

int Ring::Blamed(const Status& error) const {
  std::string_view text = error.message();
  for (;;) {
    // The member named first in `text`; a report of its passes the blame on to what it reports.
    int found = -1;
    std::size_t at = std::string_view::npos, len = 0;
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      const std::string name = MemberName(r);
      const std::size_t p = text.find(name);
      if (p < at) at = p, len = name.size(), found = r;
    }
    if (found < 0) return -1;
    constexpr std::string_view kReports = " reports: ";
    const std::string_view rest = text.substr(at + len);
    if (!rest.starts_with(kReports)) return found;
    text = rest.substr(kReports.size());
  }
}

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

void Ring::HandleHello(const std::shared_ptr<Connection>& from, const wire::InFrame& frame) {
  wire::Hello hello;
  if (Status s = wire::Decode(frame.payload, &hello); !s.ok()) {
    from->SendErrorAndClose(Status::Corruption(fmt::format("{}: {}", from->peer_name(), s.message())));
    return;
  }
  const transport::HandshakeIdentity self = Identity();
  const RingMember& prev = options_.members[static_cast<std::size_t>(Prev())];
  auto refuse = [&](const Status& why) {
    spdlog::warn("refused {}: {}", from->peer_name(), why.message());
    from->SendErrorAndClose(why);
  };
  if (Status s = transport::CheckHello(hello, self); !s.ok()) return refuse(s);
  if (hello.kind != prev.kind || hello.index != prev.index) {
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

void Ring::RecordFailure(Status why) {
  if (failure_.ok() && !closed_) failure_ = std::move(why);
  cv_.SignalAll();
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

Status Ring::SendChunk(Work& w, wire::RingPhase phase, int hop, int segment, std::uint64_t offset, std::span<const float> values) {
  wire::RingChunk m;
  m.collective = w.id;
  m.phase = phase;
  m.hop = static_cast<std::uint16_t>(hop);
  m.segment = static_cast<std::uint32_t>(segment);
  m.offset = offset;
  if (next_maps_) {  // through a shared slot, in turn after those already waiting for one
    waiting_.push_back({m, values});
    ++w.waiting;
    return FlushWaiting();
  }
  TFD_RETURN_IF_ERROR(next_->Queue(wire::Encode(m, values)));
  w.last_frame = next_->frames_queued();
  return Status::Ok();
}

Status Ring::FlushWaiting() {
  while (!waiting_.empty() && out_.used - out_.freed < out_.slots) {
    const Pending p = waiting_.front();
    waiting_.pop_front();
    Work* w = FindWork(p.head.collective);  // its Wait cannot return while a chunk of it waits
    TFD_CHECK(w != nullptr);
    std::byte* slot = out_.slot(out_.used);
    const std::size_t bytes = p.values.size_bytes();
    TFD_CHECK(bytes <= out_.slot_bytes);
    std::memcpy(slot, p.values.data(), bytes);
    wire::RingChunkShm m;
    m.chunk = p.head;
    m.count = p.values.size();
    m.slot = static_cast<std::uint32_t>(out_.used % out_.slots);
    m.crc = wire::Crc32c(std::span<const std::byte>(slot, bytes));
    TFD_RETURN_IF_ERROR(next_->Queue(wire::Encode(m)));
    ++out_.used;
    --w->waiting;
    w->last_frame = next_->frames_queued();
  }
  return Status::Ok();
}

void Ring::OfferSlots() {
  offered_ = true;
  const std::size_t slot_bytes = (options_.chunk_floats * 4 + 63) / 64 * 64;
  const std::size_t size = SharedSlots::kPage + options_.shm_slots * slot_bytes;
  // Sealed at its size: the next member's mapping can never lose pages under it (SIGBUS).
  const int fd = ::memfd_create("tfd-ring-slots", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void* base = MAP_FAILED;
  if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(size)) == 0 && ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
    base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    spdlog::info("ring: chunks to {} go through the socket: no shared memory here ({})", MemberName(Next()), std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return;
  }
  out_.base = static_cast<std::byte*>(base);
  out_.size = size;
  out_.slot_bytes = slot_bytes;
  out_.slots = options_.shm_slots;
  std::memcpy(out_.base, &shm_nonce_, sizeof shm_nonce_);
  offer_fd_ = fd;
  (void)next_->Queue(wire::Encode(wire::RingShmOffer{static_cast<std::uint32_t>(fd), out_.slots, slot_bytes, shm_nonce_}));  // 24 bytes
}

Status Ring::OnControl(const Link& from, const wire::InFrame& frame, bool* done) {
  switch (frame.header.type) {
    case wire::MessageType::kError: return FromErrorFrame(from.peer_name(), frame);
    case wire::MessageType::kDone: {
      wire::Done d;
      if (Status s = wire::Decode(frame.payload, &d); !s.ok()) return Status::Corruption(fmt::format("{}: {}", from.peer_name(), s.message()));
      *done = true;
      return Status::Ok();
    }
    default:
      return Status::Corruption(fmt::format("{} sent {} on a ring connection where it has no place", from.peer_name(),
                                            wire::MessageTypeName(frame.header.type)));
  }
}

Ring::Work* Ring::FindWork(std::uint64_t id) {
  for (Work& w : works_)
    if (w.id == id) return &w;
  return nullptr;
}

bool Ring::ExpectingFromPrev() const {
  if (finishing_ || awaiting_ >= 0) return true;  // a Receive reads prev too, so its heartbeats count
  for (const Work& w : works_)
    if (w.done < w.plan.size()) return true;
  return false;
}

bool Ring::Complete(const Work& w) const {
  // Its frames (and the chunks waiting for a shared slot) read the caller's buffer.
  return w.done == w.plan.size() && w.waiting == 0 && next_->frames_written() >= w.last_frame;
}

Result<const Ring::Expected*> Ring::Due(const Work& w, const wire::RingChunk& c, std::uint64_t got_count, const char* what) const {
  if (w.done == w.plan.size()) {
    return Status::Corruption(fmt::format("{} sent more {}s of collective {} than the schedule has: the members disagree on "
                                          "the buffer or the schedule", MemberName(Prev()), what, w.id));
  }
  const Expected& e = w.plan[w.done];
  if (c.phase != e.phase || c.hop != e.hop || c.segment != e.segment || c.offset != e.offset || got_count != e.count) {
    return Status::Corruption(fmt::format(
        "{} sent {} (collective {}, {} hop {}, segment {}, floats [{}, {})) where (collective {}, {} hop {}, segment {}, "
        "floats [{}, {})) was due: the members disagree on the buffer or the schedule",
        MemberName(Prev()), what, c.collective, PhaseName(c.phase), c.hop, c.segment, c.offset, c.offset + got_count, w.id,
        PhaseName(e.phase), e.hop, e.segment, e.offset, e.offset + e.count));
  }
  return &e;
}

Status Ring::Apply(Work& w, const wire::RingChunk& c) {
  TFD_ASSIGN_OR_RETURN(const Expected* e, Due(w, c, c.values.size() / 4, "RING_CHUNK"));
  float* dst = w.data.data() + e->offset;
  if (e->add) AddInto(c.values.data(), dst, static_cast<std::size_t>(e->count));
  else if (!prev_->placed()) std::memcpy(dst, c.values.data(), static_cast<std::size_t>(e->count) * 4);
  // (else the floats were read straight into place)
  return Applied(w, *e);
}

Status Ring::ApplyShm(Work& w, const wire::RingChunkShm& m) {
  const std::string& from = MemberName(Prev());
  if (in_.base == nullptr) return Status::Corruption(fmt::format("{} sent RING_CHUNK_SHM, but this member has not mapped its slots", from));
  if (m.slot != in_.used % in_.slots) {
    return Status::Corruption(fmt::format("{} filled shared slot {} where slot {} was next", from, m.slot, in_.used % in_.slots));
  }
  if (m.count > in_.slot_bytes / 4) {
    return Status::Corruption(fmt::format("{} sent {} floats in a shared slot of {} bytes", from, m.count, in_.slot_bytes));
  }
  const wire::RingChunk& c = m.chunk;
  TFD_ASSIGN_OR_RETURN(const Expected* e, Due(w, c, m.count, "RING_CHUNK_SHM"));
  const std::byte* src = in_.slot(in_.used);
  const auto n = static_cast<std::size_t>(e->count);
  if (wire::Crc32c(std::span<const std::byte>(src, n * 4)) != m.crc) {
    return ExplainFromPrev(Status::Corruption(fmt::format(
        "{}'s chunk in shared slot {} (collective {}, {} hop {}, floats [{}, {})) does not match its CRC-32C", from, m.slot, c.collective,
        PhaseName(c.phase), c.hop, c.offset, c.offset + m.count)));
  }
  float* dst = w.data.data() + e->offset;
  if (e->add) AddInto(src, dst, n);
  else std::memcpy(dst, src, n * 4);
  ++in_.used;
  shm_chunks_.fetch_add(1, std::memory_order_relaxed);
  // The slot is free again: the previous member may fill it while this one reduces the next chunk.
  TFD_RETURN_IF_ERROR(prev_->Queue(wire::Encode(wire::RingSlotFree{in_.used})));
  free_frame_ = prev_->frames_queued();
  bool progress = false;
  TFD_RETURN_IF_ERROR(WriteOrExplain(*prev_, &progress));
  return Applied(w, *e);
}

Status Ring::Applied(Work& w, const Expected& e) {
  ++w.done;
  if (!e.forward) return Status::Ok();
  return SendChunk(w, e.forward_phase, e.forward_hop, static_cast<int>(e.segment), e.offset,
                   w.data.subspan(static_cast<std::size_t>(e.offset), static_cast<std::size_t>(e.count)));
}

Status Ring::ExplainFromPrev(Status local) {
  // A member that fails tells its neighbours why, and what it left in a slot may be stale by then:
  // its ERROR (if it comes within a moment) says more than the CRC.
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  while (Clock::now() < until) {
    bool progress = false;
    Result<const wire::InFrame*> f = prev_->Read(&progress);
    if (!f.ok()) return local;
    if (*f != nullptr) {
      if ((*f)->header.type == wire::MessageType::kError) return FromErrorFrame(prev_->peer_name(), **f);
      continue;
    }
    pollfd p{prev_->fd(), POLLIN, 0};
    (void)::poll(&p, 1, 10);
  }
  return local;
}

void Ring::OnShmOffer(const wire::InFrame& frame) {
  wire::RingShmOffer offer;
  const int pid = transport::LocalPeerPid(prev_->fd());
  std::string why;
  int fd = -1;
  void* base = MAP_FAILED;
  std::size_t area = 0;
  // Finishing: DONE may be on its way to the previous member, which then leaves; an answer now
  // would be written to a closed socket. It offered too late to matter anyway.
  if (finishing_) return;
  if (!shared_slots_) why = "shared slots are off here (TFD_RING_SHM=off or the ring's options)";
  else if (Status s = wire::Decode(frame.payload, &offer); !s.ok()) why = s.message();
  else if (in_.base != nullptr) why = "a second offer";
  else if (pid <= 0) why = "the kernel does not name its process";
  else if (offer.slots == 0 || offer.slots > 1024 || offer.slot_bytes == 0 || offer.slot_bytes > max_frame_ || offer.slot_bytes % 4 != 0)
    why = fmt::format("{} slots of {} bytes is out of bounds", offer.slots, offer.slot_bytes);
  else {
    area = SharedSlots::kPage + static_cast<std::size_t>(offer.slots) * offer.slot_bytes;
    const std::string path = fmt::format("/proc/{}/fd/{}", pid, offer.fd);
    struct stat st {};
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // non-blocking: never wait on a FIFO there
    const int seals = fd < 0 ? 0 : ::fcntl(fd, F_GET_SEALS);
    if (fd < 0) why = fmt::format("cannot open {}: {}", path, std::strerror(errno));
    else if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::size_t>(st.st_size) != area)
      why = fmt::format("{} is not a file of {} bytes", path, area);
    else if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) why = fmt::format("{} may shrink under this member's mapping", path);
    else if ((base = ::mmap(nullptr, area, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED) why = fmt::format("mmap: {}", std::strerror(errno));
    else if (std::memcmp(base, &offer.nonce, sizeof offer.nonce) != 0) why = fmt::format("pid {} did not make that offer", pid);
  }
  if (fd >= 0) ::close(fd);
  if (!why.empty()) {
    if (base != MAP_FAILED) ::munmap(base, area);
    spdlog::info("ring: chunks from {} keep coming through the socket: {}", MemberName(Prev()), why);
    return;  // no answer: the previous member goes on sending chunks through the socket
  }
  in_.base = static_cast<std::byte*>(base);
  in_.size = area;
  in_.slot_bytes = offer.slot_bytes;
  in_.slots = offer.slots;
  (void)prev_->Queue(wire::Encode(wire::RingShmAccept{offer.nonce}));
}

Status Ring::OnFromNext(const wire::InFrame& frame) {
  const std::string& from = next_->peer_name();
  if (frame.header.type == wire::MessageType::kRingShmAccept) {
    wire::RingShmAccept a;
    if (Status s = wire::Decode(frame.payload, &a); !s.ok()) return Status::Corruption(fmt::format("{}: {}", from, s.message()));
    if (out_.base == nullptr || next_maps_ || a.nonce != shm_nonce_)
      return Status::Corruption(fmt::format("{} accepted shared slots this member did not offer", from));
    spdlog::info("ring: chunks to {} go through {} shared slots of {} KB", from, out_.slots, out_.slot_bytes / 1024);
    next_maps_ = true;
    if (offer_fd_ >= 0) ::close(offer_fd_);  // the mappings keep the memory
    offer_fd_ = -1;
    return Status::Ok();
  }
  if (frame.header.type == wire::MessageType::kRingSlotFree) {
    wire::RingSlotFree f;
    if (Status s = wire::Decode(frame.payload, &f); !s.ok()) return Status::Corruption(fmt::format("{}: {}", from, s.message()));
    if (f.freed <= out_.freed || f.freed > out_.used) {
      return Status::Corruption(fmt::format("{} freed shared slots up to {}, but {} were freed and {} filled", from, f.freed, out_.freed,
                                            out_.used));
    }
    out_.freed = f.freed;
    return FlushWaiting();
  }
  bool done = next_done_;
  Status s = OnControl(*next_, frame, &done);
  next_done_ = done;
  return s;
}

Status Ring::WriteOrExplain(Link& link, bool* progress) {
  Status s = link.Write(progress);
  if (s.ok()) return s;
  // A neighbour that failed tells us why before it closes: that beats "broken pipe".
  for (;;) {
    Result<const wire::InFrame*> f = link.Read(progress);
    if (!f.ok() || *f == nullptr) return s;
    if ((*f)->header.type == wire::MessageType::kError) return FromErrorFrame(link.peer_name(), **f);
  }
}

Status Ring::Pump(bool* progress) {
  TFD_RETURN_IF_ERROR(WriteOrExplain(*next_, progress));
  TFD_RETURN_IF_ERROR(WriteOrExplain(*prev_, progress));
  // From the next member only control frames come (ERROR, DONE); chunks come from the previous one.
  while (!next_eof_) {
    Result<const wire::InFrame*> f = next_->Read(progress);
    if (!f.ok()) {
      if (next_done_ && f.status().code() == Code::kUnavailable) {  // it left in good order
        next_eof_ = true;
        break;
      }
      return f.status();
    }
    if (*f == nullptr) break;
    if (IsPointToPoint((*f)->header.type)) {
      inbox_[static_cast<int>(Side::kNext)].push_back(**f);
      continue;
    }
    TFD_RETURN_IF_ERROR(OnFromNext(**f));
  }
  // Final values (all-gather, broadcast) are read straight into the caller's buffer; partial sums
  // into the link's buffer, which stays in cache, to be added from there.
  const Link::Placer placer{wire::MessageType::kRingChunk, wire::kRingChunkHeadBytes,
                            [this](std::span<const std::byte> head, std::size_t rest) -> std::span<std::byte> {
                              io_mu_.AssertHeld();  // Read calls it within Pump
                              std::uint64_t id = 0;
                              wire::ByteReader(head).U64(&id);
                              const Work* w = FindWork(id);
                              if (w == nullptr || w->done >= w->plan.size()) return {};
                              const Expected& e = w->plan[w->done];
                              if (e.add || rest != e.count * 4) return {};
                              return std::as_writable_bytes(w->data.subspan(static_cast<std::size_t>(e.offset), static_cast<std::size_t>(e.count)));
                            }};
  while (!prev_eof_ && ExpectingFromPrev()) {
    Result<const wire::InFrame*> f = prev_->Read(progress, &placer);
    if (!f.ok()) {
      if (prev_done_ && f.status().code() == Code::kUnavailable) {
        prev_eof_ = true;
        break;
      }
      return f.status();
    }
    if (*f == nullptr) break;
    const wire::MessageType type = (*f)->header.type;
    if (type == wire::MessageType::kRingChunk || type == wire::MessageType::kRingChunkShm) {
      const bool in_slot = type == wire::MessageType::kRingChunkShm;
      wire::RingChunk c;
      wire::RingChunkShm m;
      if (Status s = in_slot ? wire::Decode((*f)->payload, &m) : wire::Decode((*f)->payload, &c); !s.ok())
        return Status::Corruption(fmt::format("{}: {}", MemberName(Prev()), s.message()));
      const std::uint64_t collective = in_slot ? m.chunk.collective : c.collective;
      if (collective >= started_) {  // the previous member is ahead: this member has not started it yet
        prev_->Hold();
        break;
      }
      Work* w = FindWork(collective);
      if (w == nullptr) {
        return Status::Corruption(fmt::format("{} sent {} of collective {}, which is over here: the members disagree on the "
                                              "buffer or the schedule", MemberName(Prev()), wire::MessageTypeName(type), collective));
      }
      TFD_RETURN_IF_ERROR(in_slot ? ApplyShm(*w, m) : Apply(*w, c));
      TFD_RETURN_IF_ERROR(WriteOrExplain(*next_, progress));  // on its way while the next chunk is read
      continue;
    }
    if (type == wire::MessageType::kRingShmOffer) {
      OnShmOffer(**f);
      TFD_RETURN_IF_ERROR(WriteOrExplain(*prev_, progress));
      continue;
    }
    if (IsPointToPoint((*f)->header.type)) {
      inbox_[static_cast<int>(Side::kPrev)].push_back(**f);
      continue;
    }
    TFD_RETURN_IF_ERROR(OnControl(*prev_, **f, &prev_done_));
    if (prev_done_ && !finishing_) {
      return Status::FailedPrecondition(fmt::format("{} finished its last collective while this member still expected chunks from it: "
                                                    "the members disagree on the schedule", MemberName(Prev())));
    }
  }
  return Status::Ok();
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
    while (!works_.empty() && Complete(works_.front())) works_.pop_front();
    // The previous member may wait for this member's last RING_SLOT_FREE: it leaves before this does.
    return (works_.empty() || works_.front().id > id) && prev_->frames_written() >= free_frame_;
  });
}

Status Ring::Drive(const std::function<bool()>& done) {
  const auto seconds = [](auto d) { return std::chrono::duration<double>(d).count(); };
  const auto peer_timeout = options_.connection.peer_timeout;
  auto progress_deadline = Clock::now() + options_.step_timeout;
  auto last_progress = Clock::now();
  bool formed = false;
  {
    // Heartbeats wait in the socket between collectives: silence counts from here.
    MutexLock io(&io_mu_);
    formed = next_ != nullptr && prev_ != nullptr;
    if (formed) {
      next_->set_last_heard(Clock::now());
      prev_->set_last_heard(Clock::now());
    }
  }
  if (!formed) return Fail(Status::FailedPrecondition("a collective before the ring was formed"));
  for (;;) {
    bool progress = false, complete = false;
    Status st;
    Clock::time_point heard_next, heard_prev;
    bool eof_next = false, eof_prev = false;
    std::array<pollfd, 2> fds{};
    {
      MutexLock io(&io_mu_);
      if (closed_flag_.load()) {
        MutexLock lock(&mu_);
        return failure_.ok() ? Status::FailedPrecondition("the ring is closed") : failure_;
      }
      st = Pump(&progress);
      complete = st.ok() && done();
      heard_next = next_->last_heard();
      heard_prev = prev_->last_heard();
      eof_next = next_eof_;
      eof_prev = prev_eof_;
      const bool read_prev = !prev_eof_ && ExpectingFromPrev() && !prev_->held();
      fds[0] = {next_eof_ ? -1 : next_->fd(), static_cast<short>(POLLIN | (next_->pending_write() ? POLLOUT : 0)), 0};
      fds[1] = {read_prev || prev_->pending_write() ? prev_->fd() : -1,
                static_cast<short>((read_prev ? POLLIN : 0) | (prev_->pending_write() ? POLLOUT : 0)), 0};
    }
    if (!st.ok()) return Fail(st);
    if (complete) return Status::Ok();
    if (options_.stop != nullptr && options_.stop->load()) return Fail(Status::FailedPrecondition("stopped by a signal during a collective"));
    const auto now = Clock::now();
    if (progress) {
      progress_deadline = now + options_.step_timeout;
      last_progress = now;
      continue;
    }
    if (now - last_progress < options_.spin) continue;  // the next chunk is usually microseconds away
    for (const auto& [heard, who] : {std::pair{heard_prev, Prev()}, std::pair{heard_next, Next()}}) {
      if (now - heard >= peer_timeout && !(who == Next() && eof_next) && !(who == Prev() && eof_prev)) {
        return Fail(Status::DeadlineExceeded(fmt::format(
            "{} sent nothing for {:.1f} s (not even a heartbeat): it is stopped, overloaded or unreachable", MemberName(who),
            seconds(peer_timeout))));
      }
    }
    if (now >= progress_deadline) {
      Status stalled;
      {
        MutexLock io(&io_mu_);
        stalled = Status::DeadlineExceeded(Stalled());
      }
      return Fail(stalled);
    }
    const auto wait = std::min<Clock::duration>({std::chrono::milliseconds(100), progress_deadline - now});
    (void)::poll(fds.data(), fds.size(), static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wait).count()) + 1);
  }
}

std::string Ring::Stalled() const {
  const double limit = std::chrono::duration<double>(options_.step_timeout).count();
  if (finishing_)
    return fmt::format("{} did not finish its last collective within {:.0f} s", MemberName(!prev_done_ ? Prev() : Next()), limit);
  if (awaiting_ >= 0)
    return fmt::format("{} sent no pipeline frame for {:.0f} s", MemberName(awaiting_ == static_cast<int>(Side::kNext) ? Next() : Prev()),
                       limit);
  if (!works_.empty() && works_.front().done < works_.front().plan.size()) {
    const Work& w = works_.front();
    const Expected& e = w.plan[w.done];
    return fmt::format("{} sent no ring chunk for {:.0f} s (collective {}, {} hop {})", MemberName(Prev()), limit, w.id,
                       PhaseName(e.phase), e.hop);
  }
  return fmt::format("{} did not take the ring chunks sent to it within {:.0f} s", MemberName(Next()), limit);
}

Result<std::uint64_t> Ring::Start(Work w, const std::vector<std::pair<std::uint64_t, std::uint64_t>>& first_sends, wire::RingPhase phase) {
  Status queued;
  {
    MutexLock io(&io_mu_);
    if (next_ == nullptr || prev_ == nullptr) {
      queued = Status::FailedPrecondition("a collective before the ring was formed");
    } else {
      if (!offered_ && shared_slots_ && transport::LocalPeerPid(next_->fd()) > 0) OfferSlots();  // the next member is on this host
      Work& work = works_.emplace_back(std::move(w));
      ++started_;
      // This member's own first chunks, queued before any chunk of it is applied (which queues what
      // it forwards), so frames leave in schedule order.
      const int own = phase == wire::RingPhase::kBroadcast ? 0 : rank();
      for (const auto& [o, count] : first_sends) {
        queued = SendChunk(work, phase, 0, own, o, work.data.subspan(static_cast<std::size_t>(o), static_cast<std::size_t>(count)));
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
  const int n = size(), r = rank();
  if (n == 1) return collective_++;
  const std::uint64_t id = collective_;
  const std::uint64_t len = data.size();
  const std::uint64_t chunk = options_.chunk_floats;
  auto seg = [&](int c) { return ((c % n) + n) % n; };
  auto begin = [&](int c) { return SegmentBegin(len, c, n); };
  auto end = [&](int c) { return SegmentBegin(len, c + 1, n); };
  const auto last = static_cast<std::uint16_t>(n - 2);
  // Segment c as (offset, count) chunks of at most `chunk` floats, all of about the same size: the
  // first chunk, which the pipeline waits for, is no larger than it must be.
  auto pieces = [&](int c) {
    const std::uint64_t b = begin(c), size = end(c) - b, k = std::max<std::uint64_t>(1, (size + chunk - 1) / chunk);
    std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
    for (std::uint64_t j = 0; j < k; ++j) {
      const std::uint64_t from = b + size * j / k, to = b + size * (j + 1) / k;
      if (to > from) out.emplace_back(from, to - from);
    }
    return out;
  };

  // Reduce-scatter: at hop h segment r - h - 1 arrives; this member adds its own values and
  // passes the sum on at hop h + 1 (after the last hop it holds the final sum of segment r + 1,
  // which starts the all-gather). All-gather: at hop h the final values of segment r - h arrive,
  // are copied and passed on. Chunk by chunk: chunk k travels on while chunk k + 1 is reduced.
  Work w;
  w.id = id;
  w.data = data;
  for (int hop = 0; hop < n - 1; ++hop) {
    const int s = seg(r - hop - 1);
    const auto h = static_cast<std::uint16_t>(hop);
    for (const auto& [o, count] : pieces(s)) {
      const bool final_sum = h == last;
      w.plan.push_back({wire::RingPhase::kReduceScatter, h, static_cast<std::uint32_t>(s), o, count, true, true,
                        final_sum ? wire::RingPhase::kAllGather : wire::RingPhase::kReduceScatter,
                        static_cast<std::uint16_t>(final_sum ? 0 : h + 1)});
    }
  }
  for (int hop = 0; hop < n - 1; ++hop) {
    const int s = seg(r - hop);
    const auto h = static_cast<std::uint16_t>(hop);
    for (const auto& [o, count] : pieces(s))
      w.plan.push_back({wire::RingPhase::kAllGather, h, static_cast<std::uint32_t>(s), o, count, false, h != last,
                        wire::RingPhase::kAllGather, static_cast<std::uint16_t>(h + 1)});
  }
  // Hop 0 of the reduce-scatter: this member's own values of segment r.
  return Start(std::move(w), pieces(seg(r)), wire::RingPhase::kReduceScatter);
}

Status Ring::Broadcast(std::span<float> data) {
  const int n = size(), r = rank();
  if (n == 1) return Status::Ok();
  const std::uint64_t len = data.size(), chunk = options_.chunk_floats;
  Work w;
  w.id = collective_;
  w.data = data;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> first;
  for (std::uint64_t o = 0; o < len; o += chunk) {
    const std::uint64_t count = std::min(chunk, len - o);
    if (r == 0) first.emplace_back(o, count);
    else w.plan.push_back({wire::RingPhase::kBroadcast, 0, 0, o, count, false, r != n - 1, wire::RingPhase::kBroadcast, 0});
  }
  TFD_ASSIGN_OR_RETURN(std::uint64_t id, Start(std::move(w), first, wire::RingPhase::kBroadcast));
  return Wait(id);
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

}  // namespace tfd::collective
