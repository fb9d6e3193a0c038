#include "common/collective/ring.h"

#include <algorithm>
#include <cstring>
#include <utility>

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
  return Status(CodeFromWire(err.code), fmt::format("{} reports: {}", from.peer_name(), err.message));
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
    Drain();
    return;
  }
  if (type == wire::MessageType::kDone) {
    wire::Done d;
    if (Status s = wire::Decode(frame.payload, &d); !s.ok()) {
      RecordFailure(Status::Corruption(fmt::format("{}: {}", from->peer_name(), s.message())));
      return;
    }
    (is_prev ? prev_done_ : next_done_) = true;
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
  if ((from == prev_ && !prev_done_) || (from == next_ && !next_done_)) {
    RecordFailure(why.ok() ? Status::Unavailable(fmt::format("{} closed the ring connection", from->peer_name())) : why);
  } else {
    std::erase(unidentified_, from);
  }
}

Status Ring::Finish() {
  if (size() == 1) {
    Close(Status::Ok());
    return Status::Ok();
  }
  std::shared_ptr<Connection> next, prev;
  {
    std::lock_guard<std::mutex> lock(mu_);
    next = next_;
    prev = prev_;
  }
  const wire::Done done{static_cast<std::uint32_t>(rank())};
  if (next != nullptr) SendCounted(*next, wire::Encode(done));
  if (prev != nullptr) SendCounted(*prev, wire::Encode(done));
  const auto deadline = Clock::now() + options_.step_timeout;
  std::unique_lock<std::mutex> lock(mu_);
  while (!(prev_done_ && next_done_)) {
    if (!failure_.ok()) {
      Status why = failure_;
      lock.unlock();
      return Fail(why);
    }
    if (Clock::now() >= deadline) {
      const std::string who = !prev_done_ ? MemberName(Prev()) : MemberName(Next());
      lock.unlock();
      return Fail(Status::DeadlineExceeded(fmt::format("{} did not finish its last collective within {:.0f} s", who,
                                                       std::chrono::duration<double>(options_.step_timeout).count())));
    }
    cv_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
  }
  lock.unlock();
  // Our DONEs must be on the wire before the sockets close (a close drops unwritten frames).
  Status sent = WaitSent();
  Close(Status::Ok());
  return sent;
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
  SendCounted(*next_, wire::Encode(m, values));  // next_ is set once, before the first collective
}

void Ring::SendCounted(Connection& to, wire::OutFrame f) {
  {
    std::lock_guard<std::mutex> lock(in_flight_->mu);
    ++in_flight_->frames;
  }
  // Released once the connection has written (or dropped) the frame.
  f.keepalive = std::shared_ptr<const void>(static_cast<const void*>(nullptr), [flight = in_flight_](const void*) {
    std::lock_guard<std::mutex> lock(flight->mu);
    if (--flight->frames == 0) flight->cv.notify_all();
  });
  to.Send(std::move(f));
}

void Ring::Drain() {
  if (!active_.has_value() || !failure_.ok()) return;
  Active& a = *active_;
  while (a.done < a.plan.size() && !inbox_.empty()) {
    wire::InFrame frame = std::move(inbox_.front());
    inbox_.pop_front();
    const Expected& e = a.plan[a.done];
    wire::RingChunk c;
    if (Status s = wire::Decode(frame.payload, &c); !s.ok()) {
      RecordFailure(Status::Corruption(fmt::format("{}: {}", MemberName(Prev()), s.message())));
      return;
    }
    const std::uint64_t got_count = c.values.size() / 4;
    if (c.collective != a.id || c.phase != e.phase || c.hop != e.hop || c.segment != e.segment || c.offset != e.offset ||
        got_count != e.count) {
      RecordFailure(Status::Corruption(fmt::format(
          "{} sent RING_CHUNK (collective {}, {} hop {}, segment {}, floats [{}, {})) where (collective {}, {} hop {}, segment {}, "
          "floats [{}, {})) was due: the members disagree on the buffer or the schedule",
          MemberName(Prev()), c.collective, PhaseName(c.phase), c.hop, c.segment, c.offset, c.offset + got_count, a.id,
          PhaseName(e.phase), e.hop, e.segment, e.offset, e.offset + e.count)));
      return;
    }
    float* dst = a.data.data() + e.offset;
    if (e.add) AddInto(c.values.data(), dst, static_cast<std::size_t>(e.count));
    else std::memcpy(dst, c.values.data(), static_cast<std::size_t>(e.count) * 4);
    if (e.forward)
      SendChunk(a.id, e.forward_phase, e.forward_hop, static_cast<int>(e.segment), e.offset,
                a.data.subspan(static_cast<std::size_t>(e.offset), static_cast<std::size_t>(e.count)));
    if (++a.done == a.plan.size()) cv_.notify_all();
  }
}

Status Ring::Run(std::uint64_t id, std::span<float> data, std::vector<Expected> plan) {
  std::unique_lock<std::mutex> lock(mu_);
  active_.emplace();
  active_->id = id;
  active_->data = data;
  active_->plan = std::move(plan);
  Drain();  // chunks that came before this member got here
  auto deadline = Clock::now() + options_.step_timeout;
  std::size_t seen = active_->done;
  Status result;
  while (active_->done < active_->plan.size()) {
    if (!failure_.ok()) {
      result = failure_;
      break;
    }
    if (closed_) {
      result = Status::FailedPrecondition("the ring is closed");
      break;
    }
    if (options_.stop != nullptr && options_.stop->load()) {
      result = Status::FailedPrecondition("stopped by a signal during a collective");
      break;
    }
    const auto now = Clock::now();
    if (active_->done != seen) {
      seen = active_->done;
      deadline = now + options_.step_timeout;
    } else if (now >= deadline) {
      const Expected& e = active_->plan[active_->done];
      result = Status::DeadlineExceeded(fmt::format("{} sent no ring chunk for {:.0f} s (collective {}, {} hop {})", MemberName(Prev()),
                                                    std::chrono::duration<double>(options_.step_timeout).count(), id,
                                                    PhaseName(e.phase), e.hop));
      break;
    }
    cv_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(100)));
  }
  active_.reset();
  lock.unlock();
  if (!result.ok()) {
    (void)Fail(result);
    (void)WaitSent();  // the closed connections drop what they hold
    return result;
  }
  if (Status s = WaitSent(); !s.ok()) return Fail(s);
  return Status::Ok();
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
  std::vector<Expected> plan;
  for (int hop = 0; hop < n - 1; ++hop) {
    const int s = seg(r - hop - 1);
    const auto h = static_cast<std::uint16_t>(hop);
    for (const auto& [o, count] : pieces(s)) {
      const bool final_sum = h == last;
      plan.push_back({wire::RingPhase::kReduceScatter, h, static_cast<std::uint32_t>(s), o, count, true, true,
                      final_sum ? wire::RingPhase::kAllGather : wire::RingPhase::kReduceScatter,
                      static_cast<std::uint16_t>(final_sum ? 0 : h + 1)});
    }
  }
  for (int hop = 0; hop < n - 1; ++hop) {
    const int s = seg(r - hop);
    const auto h = static_cast<std::uint16_t>(hop);
    for (const auto& [o, count] : pieces(s))
      plan.push_back({wire::RingPhase::kAllGather, h, static_cast<std::uint32_t>(s), o, count, false, h != last,
                      wire::RingPhase::kAllGather, static_cast<std::uint16_t>(h + 1)});
  }
  // Hop 0 of the reduce-scatter: this member's own values of segment r, sent before any chunk is
  // applied (which sends from the I/O thread), so frames leave in schedule order.
  const int own = seg(r);
  for (const auto& [o, count] : pieces(own))
    SendChunk(id, wire::RingPhase::kReduceScatter, 0, own, o, data.subspan(static_cast<std::size_t>(o), static_cast<std::size_t>(count)));
  return Run(id, data, std::move(plan));
}

Status Ring::Broadcast(std::span<float> data) {
  const int n = size(), r = rank();
  if (n == 1) return Status::Ok();
  const std::uint64_t id = collective_++;
  const std::uint64_t len = data.size(), chunk = options_.chunk_floats;
  std::vector<Expected> plan;
  for (std::uint64_t o = 0; o < len; o += chunk) {
    const std::uint64_t count = std::min(chunk, len - o);
    if (r == 0) SendChunk(id, wire::RingPhase::kBroadcast, 0, 0, o, data.subspan(static_cast<std::size_t>(o), static_cast<std::size_t>(count)));
    else plan.push_back({wire::RingPhase::kBroadcast, 0, 0, o, count, false, r != n - 1, wire::RingPhase::kBroadcast, 0});
  }
  return Run(id, data, std::move(plan));
}

}  // namespace tfd::collective
