// The drive loop of Ring (ring.h): the collective thread pumps both Links (writes what is queued,
// reads what has come), applies each chunk from the previous member as its schedule
// (ring_schedule.h) expects and forwards it, passes chunks through shared slots (shm_slots.h) to a
// same-host neighbour, and times out a silent neighbour or a stalled step. Everything here runs
// with io_mu_ held, but for Drive, which takes it for each round.

#include "common/collective/ring.h"

#include <poll.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/transport/local_link.h"
#include "common/wire/bytes.h"
#include "common/wire/compressed_messages.h"
#include "common/wire/crc32c.h"

namespace tfd::collective {
namespace {

using transport::Clock;

// dst[i] = src[i] + dst[i]: the partial sum that arrived plus this member's value. `src` is wire
// bytes (little-endian floats, 4-byte aligned in the payload but read with memcpy all the same).
void AddInto(const std::byte* __restrict src, float* __restrict dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, src + 4 * i, 4);
    dst[i] = v + dst[i];
  }
}

// A model-parallel stage's activation or gradient, sent to one neighbour rather than around the ring.
bool IsPointToPoint(wire::MessageType t) {
  return t == wire::MessageType::kPipeActivation || t == wire::MessageType::kPipeGradient;
}

}  // namespace

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
        stalled = Status::DeadlineExceeded(WhatTheStepWaitedFor());
      }
      return Fail(stalled);
    }
    const auto wait = std::min<Clock::duration>({std::chrono::milliseconds(100), progress_deadline - now});
    (void)::poll(fds.data(), fds.size(), static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wait).count()) + 1);
  }
}

std::string Ring::WhatTheStepWaitedFor() const {
  const double limit = std::chrono::duration<double>(options_.step_timeout).count();
  if (finishing_)
    return fmt::format("{} did not finish its last collective within {:.0f} s", MemberName(!prev_done_ ? Prev() : Next()), limit);
  if (awaiting_ >= 0)
    return fmt::format("{} sent no pipeline frame for {:.0f} s", MemberName(awaiting_ == static_cast<int>(Side::kNext) ? Next() : Prev()),
                       limit);
  if (!in_flight_.empty() && in_flight_.front().applied < in_flight_.front().expected.size()) {
    const CollectiveInFlight& w = in_flight_.front();
    const ExpectedChunk& e = w.expected[w.applied];
    return fmt::format("{} sent no ring chunk for {:.0f} s (collective {}, {} hop {})", MemberName(Prev()), limit, w.id,
                       PhaseName(e.phase), e.hop);
  }
  return fmt::format("{} did not take the ring chunks sent to it within {:.0f} s", MemberName(Next()), limit);
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
                              const CollectiveInFlight* w = FindInFlight(id);
                              if (w == nullptr || w->applied >= w->expected.size()) return {};
                              const ExpectedChunk& e = w->expected[w->applied];
                              if (e.add || w->half || rest != e.count * 4) return {};
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
    if (type == wire::MessageType::kRingChunk || type == wire::MessageType::kRingChunkShm || type == wire::MessageType::kRingChunk16) {
      const bool in_slot = type == wire::MessageType::kRingChunkShm;
      wire::RingChunk c;
      wire::RingChunkShm m;
      const Status s = in_slot ? wire::Decode((*f)->payload, &m)
                       : type == wire::MessageType::kRingChunk16 ? wire::DecodeRingChunk16((*f)->payload, &c)
                                                                 : wire::Decode((*f)->payload, &c);
      if (!s.ok()) return Status::Corruption(fmt::format("{}: {}", MemberName(Prev()), s.message()));
      const std::uint64_t collective = in_slot ? m.chunk.collective : c.collective;
      if (collective >= started_) {  // the previous member is ahead: this member has not started it yet
        prev_->Hold();
        break;
      }
      CollectiveInFlight* w = FindInFlight(collective);
      if (w == nullptr) {
        return Status::Corruption(fmt::format("{} sent {} of collective {}, which is over here: the members disagree on the "
                                              "buffer or the schedule", MemberName(Prev()), wire::MessageTypeName(type), collective));
      }
      if (!in_slot && w->half.has_value() != (type == wire::MessageType::kRingChunk16)) {
        return Status::Corruption(fmt::format("{} sent {} in collective {}, whose values travel as {}: the members disagree on "
                                              "update.compression", MemberName(Prev()), wire::MessageTypeName(type), collective,
                                              w->half ? "16 bits" : "float32"));
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

Status Ring::OnFromNext(const wire::InFrame& frame) {
  const std::string& from = next_->peer_name();
  if (frame.header.type == wire::MessageType::kRingShmAccept) {
    wire::RingShmAccept a;
    if (Status s = wire::Decode(frame.payload, &a); !s.ok()) return Status::Corruption(fmt::format("{}: {}", from, s.message()));
    if (!out_.mapped() || next_maps_ || a.nonce != shm_nonce_)
      return Status::Corruption(fmt::format("{} accepted shared slots this member did not offer", from));
    spdlog::info("ring: chunks to {} go through {} shared slots of {} KB", from, out_.slots(), out_.slot_bytes() / 1024);
    next_maps_ = true;
    out_.CloseFd();  // the mappings keep the memory
    return Status::Ok();
  }
  if (frame.header.type == wire::MessageType::kRingSlotFree) {
    wire::RingSlotFree f;
    if (Status s = wire::Decode(frame.payload, &f); !s.ok()) return Status::Corruption(fmt::format("{}: {}", from, s.message()));
    TFD_RETURN_IF_ERROR(out_.Free(f.freed, from));
    return FlushWaiting();
  }
  bool done = next_done_;
  Status s = OnControl(*next_, frame, &done);
  next_done_ = done;
  return s;
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

Ring::CollectiveInFlight* Ring::FindInFlight(std::uint64_t id) {
  for (CollectiveInFlight& w : in_flight_)
    if (w.id == id) return &w;
  return nullptr;
}

bool Ring::ExpectingFromPrev() const {
  if (finishing_ || awaiting_ >= 0) return true;  // a Receive reads prev too, so its heartbeats count
  for (const CollectiveInFlight& w : in_flight_)
    if (w.applied < w.expected.size()) return true;
  return false;
}

bool Ring::Complete(const CollectiveInFlight& w) const {
  // Its frames (and the chunks waiting for a shared slot) read the caller's buffer.
  return w.applied == w.expected.size() && w.waiting == 0 && next_->frames_written() >= w.last_frame;
}

Result<const ExpectedChunk*> Ring::MatchArrival(const CollectiveInFlight& w, const wire::RingChunk& c, std::uint64_t count,
                                                const char* what) const {
  return collective::MatchArrival(w.expected, w.applied, w.id, c, count, MemberName(Prev()), what);
}

Status Ring::Apply(CollectiveInFlight& w, const wire::RingChunk& c) {
  if (w.half) {
    TFD_ASSIGN_OR_RETURN(const ExpectedChunk* e, MatchArrival(w, c, c.values.size() / 2, "RING_CHUNK16"));
    ApplyHalf(w, *e, c.values);
    return CountAndForward(w, *e);
  }
  TFD_ASSIGN_OR_RETURN(const ExpectedChunk* e, MatchArrival(w, c, c.values.size() / 4, "RING_CHUNK"));
  float* dst = w.data.data() + e->offset;
  if (e->add) AddInto(c.values.data(), dst, static_cast<std::size_t>(e->count));
  else if (!prev_->placed()) std::memcpy(dst, c.values.data(), static_cast<std::size_t>(e->count) * 4);
  // (else the floats were read straight into place)
  return CountAndForward(w, *e);
}

void Ring::ApplyHalf(const CollectiveInFlight& w, const ExpectedChunk& e, std::span<const std::byte> values) {
  const std::span<float> dst = w.data.subspan(static_cast<std::size_t>(e.offset), static_cast<std::size_t>(e.count));
  if (!e.add) return compress::DecodeHalf(*w.half, values, dst);
  compress::AddHalf(*w.half, values, dst);
  // The segment's sum is complete here: the others will see it as 16 bits, so this member keeps those bits too.
  if (e.forward && e.forward_phase == wire::RingPhase::kAllGather) compress::RoundHalf(*w.half, dst);
}

Status Ring::ApplyShm(CollectiveInFlight& w, const wire::RingChunkShm& m) {
  const std::string& from = MemberName(Prev());
  if (!in_.mapped()) return Status::Corruption(fmt::format("{} sent RING_CHUNK_SHM, but this member has not mapped its slots", from));
  TFD_RETURN_IF_ERROR(in_.CheckNext(m.slot, m.count, from));
  const wire::RingChunk& c = m.chunk;
  TFD_ASSIGN_OR_RETURN(const ExpectedChunk* e, MatchArrival(w, c, m.count, "RING_CHUNK_SHM"));
  const auto n = static_cast<std::size_t>(e->count);
  const std::span<const std::byte> bytes = in_.NextBytes(n * (w.half ? 2 : 4));
  if (wire::Crc32c(bytes) != m.crc) {
    return ExplainFromPrev(Status::Corruption(fmt::format(
        "{}'s chunk in shared slot {} (collective {}, {} hop {}, floats [{}, {})) does not match its CRC-32C", from, m.slot, c.collective,
        PhaseName(c.phase), c.hop, c.offset, c.offset + m.count)));
  }
  float* dst = w.data.data() + e->offset;
  if (w.half) ApplyHalf(w, *e, bytes);
  else if (e->add) AddInto(bytes.data(), dst, n);
  else std::memcpy(dst, bytes.data(), n * 4);
  const std::uint64_t read = in_.MarkRead();
  shm_chunks_.fetch_add(1, std::memory_order_relaxed);
  // The slot is free again: the previous member may fill it while this one reduces the next chunk.
  TFD_RETURN_IF_ERROR(prev_->Queue(wire::Encode(wire::RingSlotFree{read})));
  free_frame_ = prev_->frames_queued();
  bool progress = false;
  TFD_RETURN_IF_ERROR(WriteOrExplain(*prev_, &progress));
  return CountAndForward(w, *e);
}

Status Ring::CountAndForward(CollectiveInFlight& w, const ExpectedChunk& e) {
  ++w.applied;
  if (!e.forward) return Status::Ok();
  return SendChunk(w, e.forward_phase, e.forward_hop, static_cast<int>(e.segment), e.offset,
                   w.data.subspan(static_cast<std::size_t>(e.offset), static_cast<std::size_t>(e.count)));
}

Status Ring::SendChunk(CollectiveInFlight& w, wire::RingPhase phase, int hop, int segment, std::uint64_t offset, std::span<const float> values) {
  wire::RingChunk m;
  m.collective = w.id;
  m.phase = phase;
  m.hop = static_cast<std::uint16_t>(hop);
  m.segment = static_cast<std::uint32_t>(segment);
  m.offset = offset;
  value_bytes_sent_.fetch_add(values.size() * (w.half ? 2 : 4), std::memory_order_relaxed);
  std::shared_ptr<std::vector<std::uint16_t>> coded;
  if (w.half) {
    coded = std::make_shared<std::vector<std::uint16_t>>(values.size());
    compress::EncodeHalf(*w.half, values, *coded);
  }
  if (next_maps_) {  // through a shared slot, in turn after those already waiting for one
    waiting_.push_back({m, values, coded});
    ++w.waiting;
    return FlushWaiting();
  }
  TFD_RETURN_IF_ERROR(next_->Queue(coded ? wire::EncodeRingChunk16(m, *coded, coded) : wire::Encode(m, values)));
  w.last_frame = next_->frames_queued();
  return Status::Ok();
}

Status Ring::FlushWaiting() {
  while (!waiting_.empty() && out_.HasFreeSlot()) {
    const Pending p = waiting_.front();
    waiting_.pop_front();
    CollectiveInFlight* w = FindInFlight(p.head.collective);  // its Wait cannot return while a chunk of it waits
    TFD_CHECK(w != nullptr);
    const ShmSlots::Filled filled = out_.Fill(p.coded ? std::as_bytes(std::span(*p.coded)) : std::as_bytes(p.values));
    wire::RingChunkShm m;
    m.chunk = p.head;
    m.count = p.values.size();
    m.slot = filled.slot;
    m.crc = filled.crc;
    TFD_RETURN_IF_ERROR(next_->Queue(wire::Encode(m)));
    --w->waiting;
    w->last_frame = next_->frames_queued();
  }
  return Status::Ok();
}

void Ring::OfferSlots() {
  offered_ = true;
  Result<ShmSlots> slots = ShmSlots::Create(options_.shm_slots, options_.chunk_floats * 4, shm_nonce_);
  if (!slots.ok()) {
    spdlog::info("ring: chunks to {} go through the socket: no shared memory here ({})", MemberName(Next()), slots.status().message());
    return;
  }
  out_ = std::move(slots).value();
  (void)next_->Queue(wire::Encode(wire::RingShmOffer{static_cast<std::uint32_t>(out_.fd()), out_.slots(), out_.slot_bytes(), shm_nonce_}));  // 24 bytes
}

void Ring::OnShmOffer(const wire::InFrame& frame) {
  wire::RingShmOffer offer;
  const int pid = transport::LocalPeerPid(prev_->fd());
  std::string why;
  // Finishing: DONE may be on its way to the previous member, which then leaves; an answer now
  // would be written to a closed socket. It offered too late to matter anyway.
  if (finishing_) return;
  if (!shared_slots_) why = "shared slots are off here (TFD_RING_SHM=off or the ring's options)";
  else if (Status s = wire::Decode(frame.payload, &offer); !s.ok()) why = s.message();
  else if (in_.mapped()) why = "a second offer";
  else if (pid <= 0) why = "the kernel does not name its process";
  else if (Result<ShmSlots> slots = ShmSlots::Open(pid, offer, max_frame_); !slots.ok()) why = slots.status().message();
  else in_ = std::move(slots).value();
  if (!why.empty()) {
    spdlog::info("ring: chunks from {} keep coming through the socket: {}", MemberName(Prev()), why);
    return;  // no answer: the previous member goes on sending chunks through the socket
  }
  (void)prev_->Queue(wire::Encode(wire::RingShmAccept{offer.nonce}));
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

}  // namespace tfd::collective
