#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp forgets it

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/base/mutex.h"
#include "common/base/status.h"
#include "common/collective/collective.h"
#include "common/collective/link.h"
#include "common/collective/ring_schedule.h"
#include "common/collective/shm_slots.h"
#include "common/compress/half.h"
#include "common/transport/connection.h"
#include "common/transport/handshake.h"
#include "common/wire/messages.h"

namespace tfd::collective {

// One worker of the ring, in ring order: rank r sends to rank (r + 1) % n and receives from
// rank (r - 1 + n) % n.
struct RingMember {
  std::string task;  // "worker:1", for messages
  std::string host;
  std::uint16_t port = 0;
  wire::TaskKind kind = wire::TaskKind::kWorker;  // what its HELLO must say
  std::uint32_t index = 0;
};

struct RingOptions {
  int rank = 0;
  std::vector<RingMember> members;
  std::uint64_t cluster_id = 0;  // HELLOs with another id are refused
  std::uint64_t incarnation = 0;
  // Passed to both ring connections (heartbeats, peer timeout, and whatever else the transport
  // checks on every frame).
  transport::ConnectionOptions connection;
  std::chrono::milliseconds startup_timeout{120000};  // Connect: both neighbours connected
  std::chrono::milliseconds step_timeout{300000};     // the longest wait for one chunk
  // Pipelining granularity: a segment travels as chunks of at most this many floats, so a worker
  // sends chunk k while it reduces chunk k+1.
  std::size_t chunk_floats = 1 << 16;
  // A collective with nothing to read or write polls the sockets again for this long before it
  // sleeps in poll(): a wake-up costs more than the gap between two chunks on a fast link.
  std::chrono::microseconds spin{20};
  const std::atomic<bool>* stop = nullptr;  // a signal: waits end with FailedPrecondition
  // The largest point-to-point frame (Send/Receive) a neighbour may send, in payload bytes; the
  // frame limit is the larger of this and a chunk's. 0: chunks only.
  std::uint32_t max_message_bytes = 0;
  // Connect: a neighbour's connection that fails before its handshake is done (refused by a member
  // that still runs an older ring, closed by one that gave up) is dialed again, or waited for
  // again, until the startup timeout, instead of failing the ring (an elastic ring re-forming).
  bool redial = false;
  // Shared slots on a same-host link (docs/protocol.md, "Shared slots"): chunks to the next member
  // go through `shm_slots` slots of memory shared with it (a chunk each) instead of the socket,
  // once it has mapped them. TFD_RING_SHM=off in the environment turns it off, as false does.
  bool shared_slots = true;
  std::uint32_t shm_slots = 8;
  // Elastic: a HELLO from a task other than this ring's previous member (a worker asking to join
  // the running ring) is offered here first, with its request id, this member's identity and rank;
  // true when it took the connection (it answers and closes it itself). io_context thread.
  std::function<bool(const std::shared_ptr<transport::Connection>&, const wire::Hello&, std::uint64_t request_id,
                     const transport::HandshakeIdentity& self, int rank)>
      on_stranger;
};

// Ring collectives over two connections: the one this worker dials to the next member and the one
// the previous member dials to it (handed over by a Listener through Accept).
//
// AllReduce sums by reduce-scatter then all-gather: the buffer is cut into n segments; segment c
// is summed along the ring starting at rank c, each partial sum being `received + own`, and ends
// complete at rank c - 1, which alone computes its final value and then sends those bits around.
// So the summation order of every element is fixed by the ring and every rank ends with the same
// bits, run after run. Which chunk goes where, and when, is ring_schedule.h's (pure functions).
//
// The class's code is in three files: ring_connect.cc forms the ring (dialing the next member,
// accepting the previous one, HELLO/WELCOME, handing sockets over to Links); ring_drive.cc drives
// collectives in flight (the pump over both Links, applying and forwarding chunks, shared slots);
// ring.cc holds the public collectives, Finish, Close and the heartbeats.
//
// The handshake (token, HELLO/WELCOME) runs on ordinary transport Connections; then each side takes
// the socket over (Connection::DetachAfterThisFrame) and the thread that calls a collective drives
// both sockets itself, non-blocking (Link): it writes chunks, reads the next one into a reused
// buffer, reduces it and forwards it, waiting in poll() only when neither socket can move. Between
// collectives a timer on the io_context sends HEARTBEATs, so a neighbour that is busy computing is
// told apart from one that is stopped or gone.
//
// Collectives are called by one thread (the training thread), in the same order on every member.
// Threads: that collective thread calls Connect, AllReduce, StartAllReduce, Progress, Wait,
// Broadcast and Finish; the io_context thread runs Accept (from the Listener), the connections'
// OnFrame/OnClosed and Adopt, and the heartbeat timer; Close may come from any thread. io_mu_
// guards the links and the collectives in flight, shared by the collective thread, the heartbeat
// timer and Close; mu_ guards the handshakes' state, shared with the io_context thread, and cv_
// wakes Connect when it changes. Lock order: io_mu_ before mu_; neither is held while calling
// Fail or Close, nor a connection that could call back.
// Errors: Unavailable/DeadlineExceeded naming the neighbour that was lost or silent (nothing, not
// even a heartbeat, for the peer timeout; no progress for the step timeout), or the error another
// member reported (which names the member that failed first); Corruption for a chunk that is not
// the one the schedule expects. After any error the ring is closed, and both neighbours are told why.
// The member of `members` that `error` names first (never `self`), following "MEMBER reports: ..."
// chains to the member the report blames; -1 when it names none. A member's name is
// "TASK (HOST:PORT)", as every ring's messages write it, or "TASK at HOST:PORT", as a dial that it
// refused or never answered says (a member lost while the ring re-forms).
int BlamedMember(const std::vector<RingMember>& members, int self, const Status& error);
std::string RingMemberName(const RingMember& m);

class Ring final : public transport::FrameHandler, public Collective, public std::enable_shared_from_this<Ring> {
 public:
  static std::shared_ptr<Ring> Create(transport::asio::io_context& ioc, RingOptions options);
  ~Ring() override;

  // An accepted connection, expected to be the previous member (its HELLO says). Any thread.
  void Accept(transport::tcp::socket socket) TFD_EXCLUDES(mu_) override;
  // Two rings of one task sharing its listener (a model-parallel stage is in the ring of its
  // replica's stages and in the ring of its stage's replicas): a HELLO that is not from this ring's
  // previous member but from `other`'s is handed to `other`, with the connection. The listener
  // gives every socket to this ring. Call before the listener starts and before Connect.
  void ShareListenerWith(std::shared_ptr<Ring> other) TFD_EXCLUDES(mu_);
  // Dials the next member (retrying until the startup timeout) and waits until both neighbours
  // have shaken hands. Blocks the calling thread.
  Status Connect() TFD_EXCLUDES(io_mu_, mu_) override;
  // Sums `data` element-wise over all members, in place. Every member passes the same length.
  // After an error the contents of `data` are unspecified.
  Status AllReduce(std::span<float> data) TFD_EXCLUDES(io_mu_, mu_) override;
  // The same without blocking, so a collective can run while the caller computes (backprop: the
  // last layers' gradients are summed while the first layers' are still being computed). Starts
  // summing `data`, which must stay untouched until Wait(id) returns, and returns its id. Progress()
  // moves every started collective on as far as the sockets allow now; Wait(id) blocks until that
  // collective and every one started before it are done. Every member starts the same collectives
  // in the same order; each one's result is the same bits, whatever the timing.
  Result<std::uint64_t> StartAllReduce(std::span<float> data) TFD_EXCLUDES(io_mu_, mu_) override;
  Status Progress() TFD_EXCLUDES(io_mu_, mu_) override;
  Status Wait(std::uint64_t id) TFD_EXCLUDES(io_mu_, mu_) override;
  // Whether collective `id` and every one started before it are done (their results in place,
  // their buffers free), after moving every collective on as far as the sockets allow now.
  Result<bool> Done(std::uint64_t id) TFD_EXCLUDES(io_mu_, mu_);
  // StartAllReduce's two halves as collectives of their own (ring_schedule.h): after the
  // reduce-scatter member r holds the final sum of segment r + 1 (mod size(), segments as an
  // all-reduce cuts `data`), and may change it before the all-gather sends it around.
  Result<std::uint64_t> StartReduceScatter(std::span<float> data) TFD_EXCLUDES(io_mu_, mu_);
  Result<std::uint64_t> StartAllGatherAfterReduceScatter(std::span<float> data) TFD_EXCLUDES(io_mu_, mu_);
  // Copies rank 0's `data` to every member.
  Status Broadcast(std::span<float> data) TFD_EXCLUDES(io_mu_, mu_) override;
  // The same without blocking, as StartAllReduce: Wait(id) ends it.
  Result<std::uint64_t> StartBroadcast(std::span<float> data) TFD_EXCLUDES(io_mu_, mu_);
  // StartAllReduce with `half` (gradient compression fp16 / bf16): the values travel as 16 bits
  // (RING_CHUNK16), every sum is done in float32 (decode, add, encode again at each hop), and the
  // member that completes a segment's sum rounds it to 16 bits before it sends it around, so every
  // member ends with the same bits. Every member passes the same `half`.
  Result<std::uint64_t> StartAllReduceHalf(std::span<float> data, compress::Half half) TFD_EXCLUDES(io_mu_, mu_) override;
  // Every member's part to every member: `data` is size() equal parts (data.size() a multiple of
  // size()); member r fills part r, and after the call every member holds every part, the bytes
  // as they were sent (copied, never summed: any bit pattern, an index too, travels unchanged).
  Status AllGather(std::span<float> data) TFD_EXCLUDES(io_mu_, mu_) override;
  // After the last collective: tells both neighbours (DONE) and waits for theirs, so no worker
  // closes a connection its neighbour still needs; then closes. A neighbour that closes without
  // DONE is lost; one that closes after it has left in good order.
  Status Finish() TFD_EXCLUDES(io_mu_, mu_) override;
  // Point-to-point frames between neighbours (model parallelism's PIPE_ACTIVATION and
  // PIPE_GRADIENT) on the same two links, beside the collectives. Send copies the frame's tail and
  // queues it to that neighbour; Receive blocks until the next such frame from that neighbour is
  // here (each link keeps its order) and returns it, under the same peer and step timeouts as a
  // collective (an error closes the ring). Collective thread only.
  enum class Side { kNext, kPrev };
  Status Send(Side to, wire::OutFrame frame) TFD_EXCLUDES(io_mu_, mu_);
  Result<wire::InFrame> Receive(Side from) TFD_EXCLUDES(io_mu_, mu_);
  std::string NeighbourName(Side side) const { return MemberName(side == Side::kNext ? Next() : Prev()); }

  // Tells both neighbours `why` (an ERROR frame) unless it is Ok, and closes. Idempotent. Any
  // thread: a collective in progress ends with `why` (or FailedPrecondition when it is Ok).
  void Close(const Status& why) TFD_EXCLUDES(io_mu_, mu_) override;

  int rank() const override { return options_.rank; }
  int size() const override { return static_cast<int>(options_.members.size()); }
  const RingOptions& options() const override { return options_; }
  // Closed, by Close or after an error: it takes no more connections.
  bool closed() const override { return closed_flag_.load(); }
  // The member (rank) an error of this ring blames: the one a neighbour's report names first,
  // through any chain of "MEMBER reports: ..." (each member that fails tells its neighbours why);
  // -1 when `error` names no other member.
  int Blamed(const Status& error) const override { return BlamedMember(options_.members, rank(), error); }
  // The members a frame came from while the ring formed (a HELLO, a WELCOME or an ERROR, even a
  // refused one: they are alive), by task name.
  std::set<std::string> heard() const TFD_EXCLUDES(mu_);
  // Chunks this member has taken from shared slots (the rest came through the socket).
  std::uint64_t shm_chunks() const { return shm_chunks_.load(); }
  // The bytes of chunk values this member has sent to the next one (4 per float, 2 per 16-bit
  // value; socket or shared slot; frame headers and fields not counted), every collective together.
  std::uint64_t value_bytes_sent() const override { return value_bytes_sent_.load(); }

  void OnFrame(const std::shared_ptr<transport::Connection>& from, wire::InFrame frame) TFD_EXCLUDES(io_mu_, mu_) override;
  void OnClosed(const std::shared_ptr<transport::Connection>& from, const Status& why) TFD_EXCLUDES(mu_) override;

 private:
  // A collective started and not yet waited for.
  struct CollectiveInFlight {
    std::uint64_t id = 0;
    std::span<float> data;
    std::vector<ExpectedChunk> expected;  // from the previous member, in order (ring_schedule.h)
    std::size_t applied = 0;              // chunks of `expected` applied
    std::uint64_t last_frame = 0;  // the next link's number of its last frame (which reads `data`)
    std::uint64_t waiting = 0;     // its chunks waiting for a free shared slot (they read `data`)
    std::optional<compress::Half> half;  // values travel as 16 bits
  };
  // A chunk for the next member that waits for a free shared slot.
  struct Pending {
    wire::RingChunk head;  // its fields
    std::span<const float> values;
    std::shared_ptr<const std::vector<std::uint16_t>> coded;  // a 16-bit collective's values, encoded
  };

  Ring(transport::asio::io_context& ioc, RingOptions options);
  std::string MemberName(int rank) const;
  transport::HandshakeIdentity Identity() const;  // this member, as its HELLO and WELCOME present it
  int Next() const { return (rank() + 1) % size(); }
  int Prev() const { return (rank() + size() - 1) % size(); }
  Status SendChunk(CollectiveInFlight& w, wire::RingPhase phase, int hop, int segment, std::uint64_t offset,
                   std::span<const float> values) TFD_REQUIRES(io_mu_);
  // Queues this member's first chunks of `schedule` (from `data`) and adds the collective to
  // in_flight_; Progress() then moves it on.
  Result<std::uint64_t> Start(std::span<float> data, CollectiveSchedule schedule, std::optional<compress::Half> half = std::nullopt)
      TFD_EXCLUDES(io_mu_, mu_);
  // Pumps on the calling thread, waiting in poll(), until `done()` (called with io_mu_ held);
  // closes the ring on any error.
  Status Drive(const std::function<bool()>& done) TFD_EXCLUDES(io_mu_, mu_);
  Status Pump(bool* progress) TFD_REQUIRES(io_mu_);                        // one round of writes and reads
  Status WriteOrExplain(Link& link, bool* progress) TFD_REQUIRES(io_mu_);  // a write error, or the peer's ERROR
  Status Apply(CollectiveInFlight& w, const wire::RingChunk& c) TFD_REQUIRES(io_mu_);    // a chunk from the previous member
  Status ApplyShm(CollectiveInFlight& w, const wire::RingChunkShm& m) TFD_REQUIRES(io_mu_);  // ... in a shared slot
  // A 16-bit chunk's values (count x 2 bytes) into `w`'s buffer as `e` says: decoded, or added in float32.
  void ApplyHalf(const CollectiveInFlight& w, const ExpectedChunk& e, std::span<const std::byte> values) TFD_REQUIRES(io_mu_);
  // `w`'s next expected chunk, if the arrival `c` (with `count` floats) is it; Corruption naming both if not.
  Result<const ExpectedChunk*> MatchArrival(const CollectiveInFlight& w, const wire::RingChunk& c, std::uint64_t count,
                                            const char* what) const TFD_REQUIRES(io_mu_);
  // `e` is applied: counts it and, when the schedule says so, forwards the result to the next member.
  Status CountAndForward(CollectiveInFlight& w, const ExpectedChunk& e) TFD_REQUIRES(io_mu_);
  Status FlushWaiting() TFD_REQUIRES(io_mu_);  // waiting chunks into the free shared slots, in order
  void OfferSlots() TFD_REQUIRES(io_mu_);      // maps this member's slots and offers them to the next member
  void OnShmOffer(const wire::InFrame& frame) TFD_REQUIRES(io_mu_);
  Status ExplainFromPrev(Status local) TFD_REQUIRES(io_mu_);  // `local`, or the ERROR the previous member sent
  Status OnFromNext(const wire::InFrame& frame) TFD_REQUIRES(io_mu_);  // a control frame from the next member
  Status OnControl(const Link& from, const wire::InFrame& frame, bool* done) TFD_REQUIRES(io_mu_);
  CollectiveInFlight* FindInFlight(std::uint64_t id) TFD_REQUIRES(io_mu_);
  bool ExpectingFromPrev() const TFD_REQUIRES(io_mu_);
  bool Complete(const CollectiveInFlight& w) const TFD_REQUIRES(io_mu_);
  // The step deadline's message: what it waited for (a chunk, a pipeline frame, a DONE) from whom.
  std::string WhatTheStepWaitedFor() const TFD_REQUIRES(io_mu_);
  // Whether that neighbour's Link is in place. next_ and prev_ are set once, under both locks, so
  // mu_ alone is enough to see whether they are (the analysis knows one lock per member only).
  bool LinkedLocked(bool next) const TFD_REQUIRES(mu_) TFD_NO_THREAD_SAFETY_ANALYSIS {
    return (next ? next_ : prev_) != nullptr;
  }
  // A connection's handshake is done: its socket becomes the Link to that neighbour.
  void Adopt(bool next, transport::DetachedLink detached) TFD_EXCLUDES(io_mu_, mu_);
  void ScheduleHeartbeat();  // io_context thread (or before the timer is shared)
  void Heartbeat() TFD_EXCLUDES(io_mu_);
  Status Fail(const Status& why) TFD_EXCLUDES(io_mu_, mu_);  // closes the ring telling the neighbours; returns why
  void HandleHello(const std::shared_ptr<transport::Connection>& from, const wire::InFrame& frame) TFD_EXCLUDES(mu_);
  void RecordFailure(Status why) TFD_REQUIRES(mu_);

  transport::asio::io_context& ioc_;
  const RingOptions options_;
  const std::uint32_t max_frame_;  // the largest payload a neighbour may send: a chunk and its fields
  std::uint64_t collective_ = 0;   // collective thread only: the next collective's id

  // Lock order: io_mu_ before mu_.
  Mutex io_mu_;  // the links' I/O: the collective thread, the heartbeat timer, Close
  std::unique_ptr<Link> next_ TFD_GUARDED_BY(io_mu_);  // set once, under mu_ as well (LinkedLocked)
  std::unique_ptr<Link> prev_ TFD_GUARDED_BY(io_mu_);  // set once, under mu_ as well (LinkedLocked)
  bool next_done_ TFD_GUARDED_BY(io_mu_) = false;  // its DONE came
  bool prev_done_ TFD_GUARDED_BY(io_mu_) = false;
  bool next_eof_ TFD_GUARDED_BY(io_mu_) = false;  // closed after its DONE
  bool prev_eof_ TFD_GUARDED_BY(io_mu_) = false;
  std::deque<CollectiveInFlight> in_flight_ TFD_GUARDED_BY(io_mu_);  // started, not yet waited for, in order
  std::uint64_t started_ TFD_GUARDED_BY(io_mu_) = 0;    // collectives started (ids below it)
  bool finishing_ TFD_GUARDED_BY(io_mu_) = false;       // Finish() waits for the DONEs
  int awaiting_ TFD_GUARDED_BY(io_mu_) = -1;            // the Side a Receive waits on (frames from prev are read meanwhile); -1: none
  std::deque<wire::InFrame> inbox_[2] TFD_GUARDED_BY(io_mu_);  // point-to-point frames received, per Side
  transport::asio::steady_timer heartbeat_;             // io_context thread
  // Shared slots. This member offers its slots to the next member at its first collective; the next
  // member maps them, finds `shm_nonce_` at their start and accepts.
  const bool shared_slots_;                           // options_.shared_slots, unless TFD_RING_SHM=off
  const std::uint64_t shm_nonce_;                     // random
  bool offered_ TFD_GUARDED_BY(io_mu_) = false;
  bool next_maps_ TFD_GUARDED_BY(io_mu_) = false;     // the next member accepted: chunks go through out_
  ShmSlots out_ TFD_GUARDED_BY(io_mu_);  // to the next member (its memfd kept open until then)
  ShmSlots in_ TFD_GUARDED_BY(io_mu_);   // from the previous member, once accepted
  std::deque<Pending> waiting_ TFD_GUARDED_BY(io_mu_);  // chunks for out_, in order, when every slot is in use
  std::uint64_t free_frame_ TFD_GUARDED_BY(io_mu_) = 0;  // the prev link's number of the last RING_SLOT_FREE queued
  std::atomic<std::uint64_t> shm_chunks_{0};
  std::atomic<std::uint64_t> value_bytes_sent_{0};

  mutable Mutex mu_;
  CondVar cv_{&mu_};  // signalled when a Link is adopted, a handshake fails or the ring closes
  std::shared_ptr<transport::Connection> next_conn_ TFD_GUARDED_BY(mu_);  // until its handshake is done
  std::shared_ptr<transport::Connection> prev_conn_ TFD_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<transport::Connection>> unidentified_ TFD_GUARDED_BY(mu_);  // accepted, no HELLO yet
  Status failure_ TFD_GUARDED_BY(mu_);
  bool redial_ TFD_GUARDED_BY(mu_) = false;  // options_.redial: the next member's handshake failed, dial again
  bool closed_ TFD_GUARDED_BY(mu_) = false;
  std::weak_ptr<Ring> shares_listener_with_ TFD_GUARDED_BY(mu_);  // ShareListenerWith
  std::set<std::string> heard_ TFD_GUARDED_BY(mu_);  // heard()
  std::atomic<bool> closed_flag_{false};  // closed_, for the collective loop and the heartbeat timer
};

}  // namespace tfd::collective
