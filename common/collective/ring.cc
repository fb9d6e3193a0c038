#include "common/collective/ring.h"

#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

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

Status FromErrorFrame(const Connection& from, const wire::InFrame& frame) {
  wire::ErrorMessage err;
  if (Status s = wire::Decode(frame.payload, &err); !s.ok()) return Status::Corruption(fmt::format("{}: {}", from.peer_name(), s.message()));
  // A peer's code is untrusted: anything but a known failure code becomes Internal.
  const bool known = err.code > 0 && err.code <= static_cast<std::uint16_t>(Code::kInternal);
  return Status(known ? static_cast<Code>(err.code) : Code::kInternal, fmt::format("{} reports: {}", from.peer_name(), err.message));
}

// Segment c of n over `len` floats: [len * c / n, len * (c + 1) / n).
std::uint64_t SegmentBegin(std::uint64_t len, int c, int n) { return len * static_cast<std::uint64_t>(c) / static_cast<std::uint64_t>(n); }

}  // namespace

std::shared_ptr<Ring> Ring::Create(transport::asio::io_context& ioc, RingOptions options) {
  TFD_CHECK(!options.members.empty() && options.rank >= 0 && options.rank < static_cast<int>(options.members.size()));
  TFD_CHECK(options.chunk_floats > 0);
  return std::shared_ptr<Ring>(new Ring(ioc, std::move(options)));
}

Ring::Ring(transport::asio::io_context& ioc, RingOptions options) : ioc_(ioc), options_(std::move(options)) {}

Ring::~Ring() { Close(Status::Ok()); }

std::string Ring::MemberName(int r) const {
  const RingMember& m = options_.members[static_cast<std::size_t>(r)];
  return fmt::format("{} ({}:{})", m.task, m.host, m.port);
}

void Ring::Accept(transport::tcp::socket socket) {
  boost::system::error_code ec;
  const auto remote = socket.remote_endpoint(ec);
  const std::string name = ec ? std::string("an unidentified peer") : fmt::format("an unidentified peer ({}:{})", remote.address().to_string(), remote.port());
  auto conn = std::make_shared<Connection>(std::move(socket), *this, name, options_.connection, shared_from_this());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;  // the socket closes with `conn`
    unidentified_.push_back(conn);
  }
  conn->Start(/*established=*/false);
}

Status Ring::Connect() {
  if (size() == 1) return Status::Ok();
  const auto deadline = Clock::now() + options_.startup_timeout;
  const RingMember& next = options_.members[static_cast<std::size_t>(Next())];
  TFD_ASSIGN_OR_RETURN(transport::tcp::socket socket, transport::Dial(ioc_, next.host, next.port, next.task, deadline));
  auto conn = std::make_shared<Connection>(std::move(socket), *this, MemberName(Next()), options_.connection, shared_from_this());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_;
    next_ = conn;
  }
  conn->Start(/*established=*/true);  // we dialed the address of the member we expect
  const RingMember& self = options_.members[static_cast<std::size_t>(rank())];
  wire::Hello hello;
  hello.kind = self.kind;
  hello.index = self.index;
  hello.incarnation = options_.incarnation;
  hello.cluster_id = options_.cluster_id;
  conn->Send(wire::Encode(hello));

  std::unique_lock<std::mutex> lock(mu_);
  auto next_log = Clock::now() + std::chrono::seconds(5);
  while (failure_.ok() && !(welcomed_ && prev_ != nullptr)) {
    const auto now = Clock::now();
    if (options_.stop != nullptr && options_.stop->load()) {
      lock.unlock();
      return Fail(Status::FailedPrecondition("stopped by a signal while the ring was forming"));
    }
    if (now >= deadline) {
      const std::string missing = !welcomed_ ? fmt::format("{} did not answer our HELLO", MemberName(Next()))
                                             : fmt::format("{} did not connect to this worker", MemberName(Prev()));
      lock.unlock();
      return Fail(Status::DeadlineExceeded(fmt::format("ring not formed within {:.0f} s: {}",
                                                       std::chrono::duration<double>(options_.startup_timeout).count(), missing)));
    }
    if (now >= next_log) {
      spdlog::info("waiting for {} to connect to this worker", MemberName(Prev()));
      next_log = now + std::chrono::seconds(5);
    }
    cv_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(100)));
  }
  if (!failure_.ok()) {
    Status why = failure_;
    lock.unlock();
    return Fail(why);
  }
  return Status::Ok();
}

void Ring::HandleHello(const std::shared_ptr<Connection>& from, const wire::InFrame& frame) {
  wire::Hello hello;
  if (Status s = wire::Decode(frame.payload, &hello); !s.ok()) {
    from->SendErrorAndClose(Status::Corruption(fmt::format("{}: {}", from->peer_name(), s.message())));
    return;
  }
  const RingMember& self = options_.members[static_cast<std::size_t>(rank())];
  const RingMember& prev = options_.members[static_cast<std::size_t>(Prev())];
  auto refuse = [&](const std::string& reason) {
    spdlog::warn("refused {}: {}", from->peer_name(), reason);
    from->SendErrorAndClose(Status::FailedPrecondition(reason));
  };
  if (hello.cluster_id != options_.cluster_id) {
    return refuse(fmt::format("cluster id mismatch: the peer has cluster id {:016x}, {} has {:016x}: their TF_CONFIG cluster "
                              "specs differ",
                              hello.cluster_id, self.task, options_.cluster_id));
  }
  if (hello.kind != prev.kind || hello.index != prev.index) {
    return refuse(fmt::format("{} takes ring connections from {} only", self.task, prev.task));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (prev_ != nullptr) return refuse(fmt::format("{} is already connected to {}", self.task, prev.task));
    std::erase(unidentified_, from);
    prev_ = from;
  }
  from->set_peer_name(MemberName(Prev()));
  from->MarkEstablished();
  wire::Welcome w;
  w.kind = self.kind;
  w.index = self.index;
  w.incarnation = options_.incarnation;
  from->Send(wire::Encode(w));
  cv_.notify_all();
}

void Ring::OnFrame(const std::shared_ptr<Connection>& from, wire::InFrame frame) {
  const wire::MessageType type = frame.header.type;
  std::unique_lock<std::mutex> lock(mu_);
  const bool is_prev = from == prev_, is_next = from == next_;
  if (!is_prev && !is_next) {
    lock.unlock();
    if (type == wire::MessageType::kHello) return HandleHello(from, frame);
    Status why = Status::FailedPrecondition(fmt::format("{} sent {} before HELLO", from->peer_name(), wire::MessageTypeName(type)));
    spdlog::warn("{}", why.message());
    return from->SendErrorAndClose(why);
  }
  if (type == wire::MessageType::kError) {
    RecordFailure(FromErrorFrame(*from, frame));
    return;
  }
  if (is_prev && type == wire::MessageType::kRingChunk) {
    inbox_.push_back(std::move(frame));
    lock.unlock();
    cv_.notify_all();
    return;
  }
  if (is_next && type == wire::MessageType::kWelcome && !welcomed_) {
    wire::Welcome w;
    if (Status s = wire::Decode(frame.payload, &w); !s.ok()) {
      RecordFailure(Status::Corruption(fmt::format("{}: {}", from->peer_name(), s.message())));
    } else {
      welcomed_ = true;
      cv_.notify_all();
    }
    return;
  }
  RecordFailure(Status::Corruption(fmt::format("{} sent {} on a ring connection where it has no place", from->peer_name(),
                                               wire::MessageTypeName(type))));
}

void Ring::OnClosed(const std::shared_ptr<Connection>& from, const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (from == prev_ || from == next_) {
    RecordFailure(why.ok() ? Status::Unavailable(fmt::format("{} closed the ring connection", from->peer_name())) : why);
  } else {
    std::erase(unidentified_, from);
  }
}

void Ring::RecordFailure(Status why) {
  if (failure_.ok() && !closed_) failure_ = std::move(why);
  cv_.notify_all();
}

void Ring::Close(const Status& why) {
  std::vector<std::shared_ptr<Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    if (failure_.ok() && !why.ok()) failure_ = why;
    closed_ = true;
    for (auto* c : {&next_, &prev_})
      if (*c != nullptr) conns.push_back(*c);
    conns.insert(conns.end(), unidentified_.begin(), unidentified_.end());
    cv_.notify_all();
  }
  for (const auto& c : conns) {
    if (why.ok()) c->Close(Status::Unavailable("ring closed"));
    else c->SendErrorAndClose(why);
  }
}

Status Ring::Fail(const Status& why) {
  Close(why);
  return why;
}

void Ring::SendChunk(std::uint64_t collective, wire::RingPhase phase, int hop, int segment, std::uint64_t offset,
                     std::span<const float> values) {
  wire::RingChunk m;
  m.collective = collective;
  m.phase = phase;
  m.hop = static_cast<std::uint16_t>(hop);
  m.segment = static_cast<std::uint32_t>(segment);
  m.offset = offset;
  wire::OutFrame f = wire::Encode(m, values);
  {
    std::lock_guard<std::mutex> lock(in_flight_->mu);
    ++in_flight_->frames;
  }
  // Released once the connection has written (or dropped) the frame.
  f.keepalive = std::shared_ptr<const void>(static_cast<const void*>(nullptr), [flight = in_flight_](const void*) {
    std::lock_guard<std::mutex> lock(flight->mu);
    if (--flight->frames == 0) flight->cv.notify_all();
  });
  next_->Send(std::move(f));  // next_ is set once, before the first collective
}

Result<Ring::Received> Ring::Receive(std::uint64_t collective, wire::RingPhase phase, int hop, int segment,
                                     std::uint64_t offset, std::uint64_t count) {
  const auto deadline = Clock::now() + options_.step_timeout;
  wire::InFrame frame;
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (inbox_.empty()) {
      if (!failure_.ok()) return failure_;
      if (closed_) return Status::FailedPrecondition("the ring is closed");
      const auto now = Clock::now();
      if (options_.stop != nullptr && options_.stop->load()) return Status::FailedPrecondition("stopped by a signal during an all-reduce");
      if (now >= deadline) {
        return Status::DeadlineExceeded(fmt::format("{} sent no ring chunk for {:.0f} s (collective {}, {} hop {})", MemberName(Prev()),
                                                    std::chrono::duration<double>(options_.step_timeout).count(), collective,
                                                    PhaseName(phase), hop));
      }
      cv_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(100)));
    }
    frame = std::move(inbox_.front());
    inbox_.pop_front();
  }
  Received r;
  r.frame = std::move(frame);
  if (Status s = wire::Decode(r.frame.payload, &r.chunk); !s.ok()) return Status::Corruption(fmt::format("{}: {}", MemberName(Prev()), s.message()));
  const wire::RingChunk& c = r.chunk;
  const std::uint64_t got_count = c.values.size() / 4;
  if (c.collective != collective || c.phase != phase || c.hop != hop || c.segment != static_cast<std::uint32_t>(segment) ||
      c.offset != offset || got_count != count) {
    return Status::Corruption(fmt::format(
        "{} sent RING_CHUNK (collective {}, {} hop {}, segment {}, floats [{}, {})) where (collective {}, {} hop {}, segment {}, "
        "floats [{}, {})) was due: the members disagree on the buffer or the schedule",
        MemberName(Prev()), c.collective, PhaseName(c.phase), c.hop, c.segment, c.offset, c.offset + got_count, collective,
        PhaseName(phase), hop, segment, offset, offset + count));
  }
  return r;
}

Status Ring::WaitSent() {
  const auto deadline = Clock::now() + options_.step_timeout;
  std::unique_lock<std::mutex> lock(in_flight_->mu);
  while (in_flight_->frames > 0) {
    if (in_flight_->cv.wait_until(lock, deadline) == std::cv_status::timeout && in_flight_->frames > 0) {
      return Status::DeadlineExceeded(fmt::format("{} did not take the ring chunks sent to it within {:.0f} s", MemberName(Next()),
                                                  std::chrono::duration<double>(options_.step_timeout).count()));
    }
  }
  return Status::Ok();
}

Status Ring::AllReduce(std::span<float> data) {
  const int n = size(), r = rank();
  if (n == 1) return Status::Ok();
  const std::uint64_t id = collective_++;
  const std::uint64_t len = data.size();
  const std::uint64_t chunk = options_.chunk_floats;
  auto seg = [&](int c) { return ((c % n) + n) % n; };
  auto begin = [&](int c) { return SegmentBegin(len, c, n); };
  auto end = [&](int c) { return SegmentBegin(len, c + 1, n); };
  auto span_of = [&](std::uint64_t o, std::uint64_t count) { return data.subspan(static_cast<std::size_t>(o), static_cast<std::size_t>(count)); };
  auto fail = [&](const Status& s) {
    Status why = Fail(s);
    (void)WaitSent();  // the closed connections drop what they hold
    return why;
  };

  // Reduce-scatter. Hop 0 sends this member's own values of segment r; at hop h it receives
  // segment r - h - 1, adds its own values and passes the sum on, chunk by chunk, so the next hop
  // (or, after the last hop, the all-gather) starts while later chunks are still arriving.
  const int own = seg(r);
  for (std::uint64_t o = begin(own); o < end(own); o += chunk)
    SendChunk(id, wire::RingPhase::kReduceScatter, 0, own, o, span_of(o, std::min(chunk, end(own) - o)));
  for (int hop = 0; hop < n - 1; ++hop) {
    const int s = seg(r - hop - 1);
    for (std::uint64_t o = begin(s); o < end(s); o += chunk) {
      const std::uint64_t count = std::min(chunk, end(s) - o);
      Result<Received> got = Receive(id, wire::RingPhase::kReduceScatter, hop, s, o, count);
      if (!got.ok()) return fail(got.status());
      AddInto(got->chunk.values.data(), data.data() + o, static_cast<std::size_t>(count));
      if (hop + 1 < n - 1) SendChunk(id, wire::RingPhase::kReduceScatter, hop + 1, s, o, span_of(o, count));
      else SendChunk(id, wire::RingPhase::kAllGather, 0, s, o, span_of(o, count));  // final: segment r + 1
    }
  }
  // All-gather: at hop h the final values of segment r - h arrive and go on to the next member.
  for (int hop = 0; hop < n - 1; ++hop) {
    const int s = seg(r - hop);
    for (std::uint64_t o = begin(s); o < end(s); o += chunk) {
      const std::uint64_t count = std::min(chunk, end(s) - o);
      Result<Received> got = Receive(id, wire::RingPhase::kAllGather, hop, s, o, count);
      if (!got.ok()) return fail(got.status());
      std::memcpy(data.data() + o, got->chunk.values.data(), static_cast<std::size_t>(count) * 4);
      if (hop + 1 < n - 1) SendChunk(id, wire::RingPhase::kAllGather, hop + 1, s, o, span_of(o, count));
    }
  }
  if (Status s = WaitSent(); !s.ok()) return fail(s);
  return Status::Ok();
}

Status Ring::Broadcast(std::span<float> data) {
  const int n = size(), r = rank();
  if (n == 1) return Status::Ok();
  const std::uint64_t id = collective_++;
  const std::uint64_t len = data.size(), chunk = options_.chunk_floats;
  for (std::uint64_t o = 0; o < len; o += chunk) {
    const std::uint64_t count = std::min(chunk, len - o);
    if (r != 0) {
      Result<Received> got = Receive(id, wire::RingPhase::kBroadcast, 0, 0, o, count);
      if (!got.ok()) {
        Status why = Fail(got.status());
        (void)WaitSent();
        return why;
      }
      std::memcpy(data.data() + o, got->chunk.values.data(), static_cast<std::size_t>(count) * 4);
    }
    if (r != n - 1) SendChunk(id, wire::RingPhase::kBroadcast, 0, 0, o, data.subspan(static_cast<std::size_t>(o), static_cast<std::size_t>(count)));
  }
  if (Status s = WaitSent(); !s.ok()) return Fail(s);
  return Status::Ok();
}

}  // namespace tfd::collective
