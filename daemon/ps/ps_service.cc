#include "daemon/ps/ps_service.h"

// One handler per message and what ties them together (acting on the roster's give-ups, the end of
// the run, an elastic job's membership): they share mu_'s state and its invariants, which read best
// side by side. The roster's bookkeeping and rules are in worker_roster.cc.

#include <algorithm>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/base/clock.h"
#include "daemon/ps/wire_convert.h"
#include "daemon/task_kind.h"

namespace tfd::ps {
namespace {

using transport::Connection;
using OnWorkerLoss = config::UpdateSpec::OnWorkerLoss;

template <typename M>
bool DecodeOrRefuse(Connection& from, const wire::InFrame& frame, M* m) {
  Status s = wire::Decode(frame.payload, m);
  if (s.ok()) return true;
  Status why = Status::Corruption(fmt::format("{}: {}", from.peer_name(), s.message()));
  spdlog::warn("{}", why.message());
  from.SendErrorAndClose(why);
  return false;
}

void Reply(Connection& to, wire::OutFrame f, std::uint64_t request_id) {
  f.header.request_id = request_id;
  to.Send(std::move(f));
}

void ReplyError(Connection& to, std::uint64_t request_id, const Status& why) {
  Reply(to, wire::Encode(wire::ErrorMessage{static_cast<std::uint16_t>(why.code()), why.message()}), request_id);
}


WorkerRoster::Limits RosterLimits(const PsService::Limits& l) { return {.return_timeout = l.worker_return_timeout, .startup_timeout = l.startup_timeout}; }

}  // namespace

PsService::PsService(const config::TfConfig& config, std::uint64_t incarnation, ParameterStore& store, EventWriter& events,
                     Limits limits, std::function<void(const Ending&)> on_end, metrics::TaskMetrics* metrics)
    : config_(config),
      store_(store),
      events_(events),
      limits_(limits),
      on_end_(std::move(on_end)),
      metrics_(metrics),
      self_(config.task.ToString()),
      identity_(HandshakeIdentityOf(config, incarnation)),
      roster_(config.cluster.num_workers(), RosterLimits(limits), Clock::now(),
              [&cluster = config.cluster](int rank) { return cluster.WorkerTask(rank).ToString(); }) {}

Status PsService::LayoutMismatch(const Connection& worker) const {
  return Status::InvalidArgument(fmt::format("{} holds another variable layout than {} expects (different model, placement or "
                                             "ps count?)",
                                             self_, worker.peer_name()));
}

int PsService::RankOf(const Connection* c) {
  MutexLock lock(&mu_);
  return roster_.RankOf(c);
}

void PsService::OnFrame(const std::shared_ptr<Connection>& from, wire::InFrame frame) {
  const wire::MessageType type = frame.header.type;
  if (type == wire::MessageType::kHello) return HandleHello(from, frame);
  const int rank = RankOf(from.get());
  if (rank < 0) {
    Status why = Status::FailedPrecondition(fmt::format("{} sent {} before HELLO", from->peer_name(), wire::MessageTypeName(type)));
    spdlog::warn("{}", why.message());
    return from->SendErrorAndClose(why);
  }
  std::optional<Status> ended;
  {
    MutexLock lock(&mu_);
    if (!held_dones_.empty()) AnswerHeardLocked(from.get(), frame.header.request_id);
    ended = ended_;
  }
  if (ended && type != wire::MessageType::kDone && type != wire::MessageType::kError)
    return ReplyError(*from, frame.header.request_id, *ended);  // the run is over: say why
  switch (type) {
    case wire::MessageType::kInit: return HandleInit(from, frame, rank);
    case wire::MessageType::kWaitReady: return HandleWaitReady(from, frame, rank);
    case wire::MessageType::kPull: return HandlePull(from, frame);
    case wire::MessageType::kPush:
    case wire::MessageType::kPushCompressed: return HandlePush(from, frame, rank);
    case wire::MessageType::kStatePull: return HandleStatePull(from, frame);
    case wire::MessageType::kDone: return HandleDone(from, frame, rank);
    case wire::MessageType::kError: return HandleError(from, frame);
    default: {
      Status why = Status::InvalidArgument(fmt::format("{} sent {}, which a ps does not take", from->peer_name(), wire::MessageTypeName(type)));
      spdlog::warn("{}", why.message());
      return from->SendErrorAndClose(why);
    }
  }
}

void PsService::HandleHello(const ConnectionPtr& from, const wire::InFrame& frame) {
  wire::Hello hello;
  if (!DecodeOrRefuse(*from, frame, &hello)) return;
  Result<config::TaskType> type = TaskTypeFromWire(hello.kind);
  if (!type.ok()) {
    spdlog::warn("refused {}: {}", from->peer_name(), type.status().message());
    return from->SendErrorAndClose(type.status());
  }
  const config::TaskId peer{*type, static_cast<int>(hello.index)};
  const std::string peer_name = fmt::format("{} ({})", peer.ToString(), from->peer_name());
  auto refuse = [&](const Status& why) {
    from->CountRefusal(transport::Refusal::kMismatch);
    spdlog::warn("refused {}: {}", peer_name, why.message());
    from->SendErrorAndClose(why);
  };
  if (Status s = transport::CheckHello(hello, identity_); !s.ok()) return refuse(s);
  if (peer.type != config::TaskType::kChief && peer.type != config::TaskType::kWorker)
    return refuse(Status::FailedPrecondition(fmt::format("{} is not a worker: only workers talk to a ps", peer.ToString())));
  const bool listed = peer.index >= 0 && peer.index < static_cast<int>(config_.cluster.Tasks(peer.type).size());
  const int rank = peer.index < 0 ? -1 : config_.cluster.WorkerRank(peer);
  const std::uint32_t max_workers = store_.initialized() ? store_.update().max_workers : 0;
  if (!listed && (peer.type != config::TaskType::kWorker || rank < 0 || rank >= static_cast<int>(max_workers))) {
    return refuse(Status::FailedPrecondition(
        max_workers == 0 ? fmt::format("{} is not in this cluster{}", peer.ToString(),
                                       store_.initialized() ? " (the job is not elastic)" : " (and the chief has not initialised this ps yet)")
                         : fmt::format("{} is not in this cluster: an elastic job takes worker ranks below max_workers {}", peer.ToString(),
                                       max_workers)));
  }
  if (!listed) {
    if (Status s = store_.AddWorker(rank); !s.ok()) return refuse(Status::FailedPrecondition(s.message()));
  }
  from->set_peer_name(peer_name);
  from->MarkEstablished();
  {
    MutexLock lock(&mu_);
    // The run is over: say so, and leave its record as it is. A worker whose DONE was counted may
    // still come back for its ack (its connection was lost on the way).
    if (ended_ || (end_called_ && !roster_.done(rank))) {
      const Status why = ended_ ? *ended_ : Status::FailedPrecondition(fmt::format("{}: the run is over: every worker is done", self_));
      spdlog::info("refused {}: {}", peer_name, why.message());
      return from->SendErrorAndClose(why);
    }
    const WorkerRoster::Arrival arrival = roster_.Connected(from.get(), rank, !listed, Clock::now());
    if (metrics_ != nullptr) metrics_->connected_peers->Set(static_cast<double>(roster_.connections()));
    if (arrival.rejoined) RejoinedLocked(rank, peer_name, hello.incarnation);
    if (arrival.newly_joined || (arrival.was_given_up && max_workers > 0)) MembersChangedLocked(fmt::format("{} joined", peer_name), false);
  }
  spdlog::debug("{} connected (incarnation {:016x})", peer_name, hello.incarnation);
  wire::Welcome w = transport::MakeWelcome(identity_);
  w.initialized = store_.initialized();
  w.global_step = store_.global_step();
  w.resume_step = store_.ResumeStep(rank);
  Reply(*from, wire::Encode(w), frame.header.request_id);
}

void PsService::RejoinedLocked(int rank, const std::string& peer_name, std::uint64_t incarnation) {
  spdlog::info("{} rejoined (incarnation {:016x}); it resumes after step {}", peer_name, incarnation, store_.ResumeStep(rank));
  events_.Emit("peer_rejoined", {{"peer", peer_name}});
  waiting_note_.clear();
  const int quorum = store_.to_aggregate();
  if (store_.sync() && quorum < store_.configured_quorum()) {  // on_worker_loss shrink: grow back
    (void)store_.SetQuorum(quorum + 1);
    spdlog::info("quorum: sync steps aggregate {} of {} gradients again from step {} ({} rejoined)", quorum + 1,
                 store_.configured_quorum(), store_.global_step() + 1, peer_name);
    events_.Emit("quorum", {{"quorum", std::int64_t{quorum + 1}}, {"global_step", static_cast<std::int64_t>(store_.global_step())}});
  }
}

void PsService::HandleInit(const ConnectionPtr& from, const wire::InFrame& frame, int rank) {
  const std::uint64_t id = frame.header.request_id;
  wire::Init msg;
  if (!DecodeOrRefuse(*from, frame, &msg)) return;
  // Another worker initialises a restarted ps once the chief has finished (it says so in the
  // progress it passes on): nobody else would (docs/reliability.md).
  const bool chief_done = std::ranges::find(msg.progress.done, 0u) != msg.progress.done.end();
  if (rank != 0 && !chief_done)
    return ReplyError(*from, id, Status::InvalidArgument(fmt::format("{}: INIT from {}, which is not the chief (and the chief has not finished)",
                                                                    self_, from->peer_name())));
  const StoreInit init = FromWire(msg);
  if (init.update.num_workers != static_cast<std::uint32_t>(config_.cluster.num_workers()))
    return ReplyError(*from, id, Status::InvalidArgument(fmt::format("{}: INIT for {} workers, but the cluster has {}", self_,
                                                                    init.update.num_workers, config_.cluster.num_workers())));
  Status s = store_.Init(init);
  if (!s.ok() && s.code() != Code::kFailedPrecondition) return ReplyError(*from, id, s.WithContext(self_));
  if (s.ok()) {
    spdlog::info("initialised by {}: {} chunks, {} floats, {} mode, at global_step {}{}", from->peer_name(), init.chunks.size(),
                 store_.size(), init.update.mode == config::UpdateSpec::Mode::kSync ? "sync" : "async", init.global_step,
                 init.has_state ? fmt::format(", with optimizer slots ({} floats, {} updates applied)", init.slots.size() / 4, init.updates)
                                : std::string());
    for (const Chunk& c : init.chunks) spdlog::info("  holds {} ({} floats)", c.name, c.length);
    SeedProgress(msg.progress, init.global_step);
    events_.Emit("ready", {{"floats", store_.size()}, {"chunks", static_cast<std::int64_t>(init.chunks.size())}});
  }
  Reply(*from, wire::Encode(ReadyFor(rank, from, id)), id);
  ReleaseWaiters();
}

void PsService::SeedProgress(const wire::Progress& progress, std::uint64_t global_step) {
  if (progress.empty()) return;
  const WorkerRoster::Progress p = FromWire(progress);
  MutexLock lock(&mu_);
  // A loop, not a lambda: the thread-safety analysis checks a lambda's body as a function of its own.
  std::string named[2];
  for (int k = 0; k < 2; ++k) {
    std::vector<std::string> out;
    for (int r : k == 0 ? p.done : p.given_up) out.push_back(roster_.TaskName(r));
    named[k] = out.empty() ? std::string("none") : fmt::format("{}", fmt::join(out, ", "));
  }
  const int limit = std::max(config_.cluster.num_workers(), static_cast<int>(store_.update().max_workers));
  roster_.Seed(p, limit, global_step, Clock::now());
  stopped_early_ = stopped_early_ || progress.stop;
  spdlog::info("the run's progress before this ps restarted: done {}; given up on {}{}", named[0], named[1],
               progress.stop ? "; the chief stopped the run early" : "");
  // Elastic: the finished ones take no share, nor (sync) a place in the steps' quorum.
  if (store_.update().max_workers > 0 && !p.done.empty()) MembersChangedLocked("workers finished before this ps restarted", false);
}

wire::Progress PsService::ProgressLocked() const { return ToWire(roster_.progress(), stopped_early_); }

void PsService::HandleWaitReady(const ConnectionPtr& from, const wire::InFrame& frame, int rank) {
  const std::uint64_t id = frame.header.request_id;
  wire::WaitReady wait;
  if (!DecodeOrRefuse(*from, frame, &wait)) return;
  {
    // Check and enqueue under one lock, so an INIT (or the end of the run) in between is not missed.
    MutexLock lock(&mu_);
    if (ended_) return ReplyError(*from, id, *ended_);
    if (!store_.initialized()) return ready_waiters_.push_back({from, id, wait.layout_hash});
  }
  if (wait.layout_hash != store_.layout_hash()) return ReplyError(*from, id, LayoutMismatch(*from));
  Reply(*from, wire::Encode(ReadyFor(rank, from, id)), id);
}

void PsService::HandlePull(const ConnectionPtr& from, const wire::InFrame& frame) {
  const std::uint64_t id = frame.header.request_id;
  wire::Pull pull;
  if (!DecodeOrRefuse(*from, frame, &pull)) return;
  if (!store_.initialized()) return ReplyError(*from, id, Status::FailedPrecondition(fmt::format("{}: PULL before INIT", self_)));
  bool ready_now;
  {
    // Check and enqueue under one lock, so a step that completes in between cannot be missed.
    MutexLock lock(&mu_);
    if (ended_) return ReplyError(*from, id, *ended_);
    const std::uint64_t step = store_.global_step();
    ready_now = step >= pull.min_step;
    if (!ready_now) {
      // A worker only ever waits for the next step: anything further is refused, which also
      // bounds the waiters a connection can leave here.
      if (pull.min_step > step + 1)
        return ReplyError(*from, id, Status::InvalidArgument(fmt::format("{}: PULL for step {} while at step {}", self_, pull.min_step, step)));
      pull_waiters_.push_back({from, id, pull.min_step});
    }
  }
  if (ready_now) return ReplyParams(*from, id, RankOf(from.get()));
  FailPullsIfStepStuck();
}

void PsService::HandlePush(const ConnectionPtr& from, const wire::InFrame& frame, int rank) {
  wire::Push push;
  if (frame.header.type == wire::MessageType::kPush) {
    if (!DecodeOrRefuse(*from, frame, &push)) return;
    return ApplyPush(from, frame.header.request_id, push, rank);
  }
  // PUSH_COMPRESSED: decoded to float32 here, then applied as any push (update.compression).
  wire::PushCompressed compressed;
  if (!DecodeOrRefuse(*from, frame, &compressed)) return;
  Result<std::vector<float>> dense = DenseGradient(compressed, static_cast<std::uint64_t>(store_.size()));
  if (!dense.ok()) return ReplyError(*from, frame.header.request_id, dense.status().WithContext(self_));
  if (rank == 0 && compressed.save_request != 0) AnnouncedSave(compressed.save_request);
  if (rank > 0 && compressed.deposit_request != 0) {
    // A worker's deposit for the save announced last (one for an older save is dropped). The
    // decoder held it to the gradient's count, which DenseGradient held to the shard's.
    auto values = std::make_shared<std::vector<float>>(static_cast<std::size_t>(compressed.count));
    wire::CopyFloats(compressed.deposit, *values);
    {
      MutexLock lock(&mu_);
      if (compressed.deposit_request == feedback_request_) deposits_[rank] = {compressed.deposit_request, std::move(values)};
    }
    AnswerHeldStatePulls(Clock::now());  // it may have been the last a held save awaits
  }
  push = compressed.push;
  push.grads = std::as_bytes(std::span<const float>(*dense));
  ApplyPush(from, frame.header.request_id, push, rank);
}

void PsService::ApplyPush(const ConnectionPtr& from, std::uint64_t id, const wire::Push& push, int rank) {
  if (static_cast<int>(push.worker) != rank)
    return ReplyError(*from, id, Status::InvalidArgument(fmt::format("{} pushed as worker rank {}", from->peer_name(), push.worker)));
  const Clock::time_point apply_start = Clock::now();
  Result<ParameterStore::PushResult> r = store_.Push(FromWire(push));
  apply_ns_.fetch_add(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - apply_start).count()),
                      std::memory_order_relaxed);
  pushes_.fetch_add(1, std::memory_order_relaxed);
  if (!r.ok()) return ReplyError(*from, id, r.status().WithContext(self_));
  if (metrics_ != nullptr) CountPush(push.based_on_step, *r);
  wire::PushAck ack = ToWire(*r);
  {
    MutexLock lock(&mu_);
    ack.stop = stopped_early_;  // the chief stopped the run: so does this worker
    if (rank == 0 && push.epoch > run_epoch_) run_epoch_ = push.epoch;
    ack.membership = MembershipLocked(rank);
    ack.progress = ProgressLocked();
    MarkToldLocked(rank, from, id);
  }
  Reply(*from, wire::Encode(ack), id);
  if (r->step_advanced) ReleaseWaiters();
}

void PsService::CountPush(std::uint64_t based_on_step, const ParameterStore::PushResult& r) {
  switch (r.outcome) {
    case PushOutcome::kApplied:
      metrics_->pushes_applied->Increment();
      // async: the gradient's own update is global step r.global_step; the ones between its
      // parameters and that were applied without it.
      if (!store_.sync() && r.global_step >= based_on_step + 1) metrics_->staleness->Observe(static_cast<double>(r.global_step - based_on_step - 1));
      break;
    case PushOutcome::kStale: metrics_->pushes_stale->Increment(); break;
    case PushOutcome::kDuplicate: metrics_->pushes_duplicate->Increment(); break;
  }
  metrics_->global_step->Set(static_cast<double>(r.global_step));
}

void PsService::HandleStatePull(const ConnectionPtr& from, const wire::InFrame& frame) {
  const std::uint64_t id = frame.header.request_id;
  wire::StatePull pull;
  if (!DecodeOrRefuse(*from, frame, &pull)) return;
  if (pull.feedback_request != 0) {
    AnnouncedSave(pull.feedback_request);  // a ps that restarted since the announcement asks from now on
    // A long poll: the deposits still on their way come within a step or so, and each answer moves
    // the whole state.
    MutexLock lock(&mu_);
    if (!DepositsInLocked(pull.feedback_request)) {
      spdlog::debug("STATE_PULL for save {} held: deposits on their way", pull.feedback_request);
      held_state_pulls_.push_back({from, id, pull.feedback_request, Clock::now() + limits_.state_hold});
      return;
    }
  }
  ReplyState(*from, id, pull.feedback_request);
}

bool PsService::DepositsInLocked(std::uint64_t request) const {
  if (request != feedback_request_) return true;  // an older save's: its deposits are gone
  for (int r : roster_.Ranks()) {
    if (r == 0 || roster_.done(r) || roster_.given_up(r) || roster_.StateOf(r) == WorkerState::kLost) continue;
    auto d = deposits_.find(r);
    if (d == deposits_.end() || d->second.request != request) return false;
  }
  return true;
}

void PsService::ReplyState(Connection& to, std::uint64_t request_id, std::uint64_t request) {
  Result<ParameterStore::State> st = store_.ReadState();
  if (!st.ok()) return ReplyError(to, request_id, st.status().WithContext(self_));
  std::vector<std::pair<int, std::shared_ptr<const std::vector<float>>>> feedback;  // the deposits for that save
  wire::Progress progress;                                                         // ... who will deposit no more
  std::vector<std::uint32_t> absent;                                               // ... and who has gone
  if (request != 0) {
    MutexLock lock(&mu_);
    for (const auto& [rank, d] : deposits_)
      if (d.request == request) feedback.emplace_back(rank, d.values);
    progress = ProgressLocked();
    // Lost by this ps and not back. Not one it has yet to hear from: at the start, or after this ps
    // restarted, that worker is on its way.
    for (int r : roster_.Ranks())
      if (roster_.StateOf(r) == WorkerState::kLost) absent.push_back(static_cast<std::uint32_t>(r));
  }
  Reply(to, EncodeState(*st, request, feedback, std::move(progress), std::move(absent)), request_id);
}

void PsService::AnswerHeldStatePulls(Clock::time_point now) {
  std::vector<HeldStatePull> due;
  {
    MutexLock lock(&mu_);
    std::vector<HeldStatePull> kept;
    for (HeldStatePull& h : held_state_pulls_) {
      if (h.conn.expired()) continue;  // the chief left: it asks again on its new connection
      (now >= h.until || DepositsInLocked(h.request) ? due : kept).push_back(std::move(h));
    }
    held_state_pulls_ = std::move(kept);
  }
  for (const HeldStatePull& h : due)
    if (ConnectionPtr c = h.conn.lock()) {
      spdlog::debug("STATE for save {} answered after {:.1f} ms held", h.request,
                    std::chrono::duration<double, std::milli>(now - (h.until - limits_.state_hold)).count());
      ReplyState(*c, h.request_id, h.request);
    }
}

void PsService::HandleDone(const ConnectionPtr& from, const wire::InFrame& frame, int rank) {
  wire::Done done;
  if (!DecodeOrRefuse(*from, frame, &done)) return;
  std::optional<Ending> finished;
  std::size_t count = 0;
  bool hold = false;
  {
    // Counted before the ack: a worker holding its ack finds its DONE counted.
    MutexLock lock(&mu_);
    const bool first = roster_.MarkDone(rank);
    stopped_early_ = stopped_early_ || done.stop;
    count = roster_.done_count();
    finished = FinishedLocked();
    // Elastic: a finished worker no longer takes a share, nor (sync) a place in the steps' quorum.
    if (first && !finished && !ended_ && store_.update().max_workers > 0) MembersChangedLocked(fmt::format("{} finished", from->peer_name()), false);
    // The ack waits until a worker still training has heard of this DONE (see the class comment).
    if (finished) AnswerHeldDonesLocked(/*all=*/true, Clock::now());
    hold = !finished && !ended_ && AnyoneToTellLocked(rank);
    if (hold) held_dones_.push_back({.conn = from, .request_id = frame.header.request_id, .rank = rank, .since = Clock::now()});
  }
  if (!hold) Reply(*from, wire::EncodeDoneAck(), frame.header.request_id);
  spdlog::info("{} is done ({} of {} workers){}", from->peer_name(), count, config_.cluster.num_workers(),
               done.stop ? "; it stopped the run early, and the others are told in their PUSH_ACKs" : "");
  events_.Emit("worker_done", {{"peer", from->peer_name()}, {"done", static_cast<std::int64_t>(count)},
                               {"global_step", static_cast<std::int64_t>(store_.global_step())}});
  if (finished) return on_end_(*finished);
  bool release = false;
  {
    MutexLock lock(&mu_);
    release = std::exchange(members_changed_, false);
  }
  if (release) ReleaseWaiters();
  FailPullsIfStepStuck();
}

void PsService::HandleError(const ConnectionPtr& from, const wire::InFrame& frame) {
  // The worker refuses this ps: say why, and let it go.
  wire::ErrorMessage err;
  (void)wire::Decode(frame.payload, &err);
  spdlog::warn("{} refused this ps: {}", from->peer_name(), err.message);
  from->Close(Status::Unavailable(fmt::format("{} refused this ps: {}", from->peer_name(), err.message)));
}

void PsService::AnnouncedSave(std::uint64_t request) {
  MutexLock lock(&mu_);
  if (request <= feedback_request_) return;
  feedback_request_ = request;
  deposits_.clear();  // for an older save: never collected now
}

void PsService::ReplyParams(Connection& to, std::uint64_t request_id, int rank) {
  const Clock::time_point start = Clock::now();
  std::uint64_t ask = 0;
  if (rank > 0) {  // the chief keeps its own
    MutexLock lock(&mu_);
    auto d = deposits_.find(rank);
    if (feedback_request_ != 0 && (d == deposits_.end() || d->second.request != feedback_request_)) ask = feedback_request_;
  }
  wire::OutFrame params = EncodeParams(store_.Read(), ask);
  reply_ns_.fetch_add(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count()),
                      std::memory_order_relaxed);
  replies_.fetch_add(1, std::memory_order_relaxed);
  Reply(to, std::move(params), request_id);
}

PsService::TimeSpent PsService::time_spent() const {
  return {.pushes = pushes_.load(std::memory_order_relaxed),
          .replies = replies_.load(std::memory_order_relaxed),
          .apply_s = static_cast<double>(apply_ns_.load(std::memory_order_relaxed)) * 1e-9,
          .reply_s = static_cast<double>(reply_ns_.load(std::memory_order_relaxed)) * 1e-9};
}

PsService::WorkerState PsService::WorkerStateOf(int rank) const {
  MutexLock lock(&mu_);
  return roster_.StateOf(rank);
}

void PsService::ReleaseWaiters() {
  std::vector<Waiter> ready, pulls;
  std::uint64_t step;
  {
    MutexLock lock(&mu_);
    step = store_.global_step();
    const bool initialized = store_.initialized();
    if (initialized) ready.swap(ready_waiters_);
    auto keep = std::partition(pull_waiters_.begin(), pull_waiters_.end(), [step](const Waiter& w) { return w.min_step > step; });
    pulls.assign(keep, pull_waiters_.end());
    pull_waiters_.erase(keep, pull_waiters_.end());
  }
  for (const Waiter& w : ready) {
    if (auto c = w.conn.lock()) {
      if (w.min_step != store_.layout_hash()) {  // min_step carries the layout hash for WAIT_READY
        ReplyError(*c, w.request_id, LayoutMismatch(*c));
      } else {
        wire::Ready ready = ReadyFor(RankOf(c.get()), c, w.request_id);
        ready.global_step = step;
        Reply(*c, wire::Encode(ready), w.request_id);
      }
    }
  }
  for (const Waiter& w : pulls)
    if (auto c = w.conn.lock()) ReplyParams(*c, w.request_id, RankOf(c.get()));
}

void PsService::OnClosed(const std::shared_ptr<Connection>& from, const Status& why) {
  WorkerRoster::Departure left;
  {
    MutexLock lock(&mu_);
    left = roster_.Closed(from.get(), from->peer_name(), store_.global_step(), Clock::now());
    if (metrics_ != nullptr) metrics_->connected_peers->Set(static_cast<double>(roster_.connections()));
  }
  {
    MutexLock lock(&mu_);
    for (HeldDone& h : held_dones_)
      if (h.told.lock().get() == from.get()) h.told.reset();  // never proven: the next worker told counts
    AnswerHeldDonesLocked(/*all=*/false, Clock::now());  // it may have been the last to tell
  }
  if (left.rank < 0 || left.done) return;
  spdlog::warn("lost {}: {}", from->peer_name(), why.message());
  events_.Emit("peer_lost", {{"peer", from->peer_name()}, {"message", why.message()}});
  FailPullsIfStepStuck();  // async: nothing waits on the others
}

void PsService::Tick(Clock::time_point now) {
  std::optional<Ending> end;
  {
    MutexLock lock(&mu_);
    if (end_called_) return;
    if (!ended_) {
      GiveUpOverdueLocked(now);
      if (const WorkerRoster::Absence* chief = roster_.ChiefGivenUp()) {
        EndRunLocked(Status::FailedPrecondition(fmt::format("{}: the run is over: the chief {}", self_, roster_.GaveUpBecause(*chief))));
      } else {
        end = FinishedLocked();
      }
    }
    AnswerHeldDonesLocked(/*all=*/end.has_value(), now);
    if (ended_ && !end && (roster_.connections() == 0 || now >= *ended_at_ + limits_.end_grace)) {
      end = Ending{false, fmt::format("{}{}; global_step={}", ended_->message(), roster_.AwayNote(ended_->message()), store_.global_step()),
                   static_cast<int>(roster_.done_count())};
      end_called_ = true;
    }
  }
  if (end) return on_end_(*end);
  AnswerHeldStatePulls(now);  // those whose time is up, and those no lost or finished worker holds now
  bool release = false;
  {
    MutexLock lock(&mu_);
    release = std::exchange(members_changed_, false);
  }
  if (release) ReleaseWaiters();  // sync: the smaller membership completed the step
  FailPullsIfStepStuck();  // sync: a step may wait on a worker just given up on
}

void PsService::GiveUpOverdueLocked(Clock::time_point now) {
  const std::vector<WorkerRoster::Absence> gave_up = roster_.GiveUpOverdue(now, store_.global_step());
  for (const WorkerRoster::Absence& away : gave_up) {
    if (away.never_connected) {
      spdlog::warn("gave up on {}: it never connected within {:g} s", away.name, roster_.LimitSeconds(away));
    } else {
      spdlog::warn("gave up on {}: lost at global_step {} and not back within {:g} s", away.name, away.global_step,
                   roster_.LimitSeconds(away));
    }
    events_.Emit("gave_up", {{"peer", away.name}, {"global_step", static_cast<std::int64_t>(away.global_step)}});
  }
  if (!gave_up.empty() && store_.update().max_workers > 0) MembersChangedLocked("a worker left for good", true);
}

std::optional<PsService::Ending> PsService::FinishedLocked() {
  if (end_called_ || ended_) return std::nullopt;
  // With on_worker_loss shrink, a lost worker is written off: the others' DONE ends the run.
  const bool shrink = store_.sync() && store_.update().on_worker_loss == OnWorkerLoss::kShrink;
  const std::optional<std::vector<std::string>> written_off = roster_.Finished(shrink);
  if (!written_off) return std::nullopt;
  std::string gave_up = roster_.AwayNote();
  if (!written_off->empty()) gave_up += fmt::format("; wrote off {} (update.on_worker_loss: shrink)", fmt::join(*written_off, ", "));
  end_called_ = true;  // decided under the lock that EndRunLocked takes too: one end, never both
  const auto done = static_cast<int>(roster_.done_count());
  if (gave_up.empty()) return Ending{true, fmt::format("every worker is done: global_step={}; exiting", store_.global_step()), done};
  return Ending{true, fmt::format("every live worker is done{}; global_step={}; exiting", gave_up, store_.global_step()), done};
}

void PsService::EndRunLocked(const Status& why) {
  if (ended_ || end_called_) return;
  ended_ = why;
  ended_at_ = Clock::now();
  AnswerHeldDonesLocked(/*all=*/true, *ended_at_);  // they finished: the run's failure is not theirs
  spdlog::warn("{}", why.message());
  events_.Emit("run_ended", {{"message", why.message()}, {"global_step", static_cast<std::int64_t>(store_.global_step())}});
  for (std::vector<Waiter>* waiting : {&ready_waiters_, &pull_waiters_}) {
    for (const Waiter& w : *waiting)
      if (auto c = w.conn.lock()) ReplyError(*c, w.request_id, why);
    waiting->clear();
  }
}

void PsService::FailPullsIfStepStuck() {
  if (!store_.sync()) return;
  const std::vector<bool> received = store_.received();
  const UpdateRule update = store_.update();
  using Action = StepVerdict::Action;
  std::vector<Waiter> answer;
  StepVerdict v;
  std::optional<Status> fail;
  {
    MutexLock lock(&mu_);
    if (pull_waiters_.empty() || ended_) return;
    v = JudgeSyncStep(roster_, received, store_.to_aggregate(), update.on_worker_loss, update.min_replicas);
    if (v.action == Action::kWait) return;
    if (v.action == Action::kWaitForLost) {
      const std::string note = fmt::format("sync step {} waits for a lost worker to come back ({}; update.on_worker_loss: wait, for up to {:g} s)",
                                           store_.global_step() + 1, fmt::join(v.missing, ", "), Seconds(limits_.worker_return_timeout));
      if (note != waiting_note_) spdlog::warn("{}", note);
      waiting_note_ = note;
      return;
    }
    if (v.action == Action::kEndRun || v.action == Action::kFailPulls) {
      const bool shrink = update.on_worker_loss == OnWorkerLoss::kShrink;
      const std::string below = shrink ? fmt::format(" (fewer than min_replicas {})", update.min_replicas) : "";
      fail = Status::Unavailable(fmt::format("{}: sync step {} cannot complete: it needs {} gradients, has {}, and {}{}", self_,
                                             store_.global_step() + 1, store_.to_aggregate(), v.held,
                                             v.missing.empty() ? std::string("no other worker can send one")
                                                               : fmt::format("{}", fmt::join(v.missing, ", ")),
                                             below));
      // A worker given up on never sends its gradient: the run is over, and every worker hears why.
      if (v.action == Action::kEndRun) return EndRunLocked(*fail);
    }
    // kFailPulls: the waiting pulls fail now (on_worker_loss fail), and the step still waits for
    // the lost ones: restarted (launch.restart, systemd), the workers go on from it.
    if (v.action != Action::kShrink) answer.swap(pull_waiters_);
  }
  if (fail) {
    spdlog::warn("{}", fail->message());
    for (const Waiter& w : answer)
      if (auto c = w.conn.lock()) ReplyError(*c, w.request_id, *fail);
    return;
  }
  if (v.action == Action::kFinalParams) {
    for (const Waiter& w : answer)
      if (auto c = w.conn.lock()) ReplyParams(*c, w.request_id, RankOf(c.get()));
    return;
  }
  // shrink: go on with the gradients the workers left can send
  const int quorum = v.held + v.can_send;
  spdlog::warn("quorum: sync steps aggregate {} of {} gradients from step {} on ({}; update.on_worker_loss: shrink, "
               "min_replicas {})",
               quorum, store_.configured_quorum(), store_.global_step() + 1, fmt::join(v.missing, ", "), update.min_replicas);
  events_.Emit("quorum", {{"quorum", std::int64_t{quorum}}, {"global_step", static_cast<std::int64_t>(store_.global_step())}});
  if (store_.SetQuorum(quorum)) ReleaseWaiters();
}

std::optional<wire::Membership> PsService::MembershipLocked(int rank) const {
  if (!store_.initialized() || store_.update().max_workers == 0) return std::nullopt;
  const WorkerRoster::Place place = roster_.MemberPlace(rank);
  if (!place.index) return std::nullopt;  // not in the run (given up on): it keeps the share it had
  wire::Membership m;
  m.run_epoch = run_epoch_;
  m.index = static_cast<std::uint32_t>(*place.index);
  m.count = static_cast<std::uint32_t>(place.count);
  return m;
}

wire::Ready PsService::ReadyFor(int rank, const ConnectionPtr& to, std::uint64_t request_id) {
  wire::Ready ready{store_.global_step(), store_.ResumeStep(rank), std::nullopt};
  MutexLock lock(&mu_);
  ready.membership = MembershipLocked(rank);
  ready.progress = ProgressLocked();
  MarkToldLocked(rank, to, request_id);
  return ready;
}

bool PsService::AnyoneToTellLocked(int rank) const {
  for (int r : roster_.Live())  // a loop, not a lambda: the lock analysis sees mu_ held here
    if (r != rank && !roster_.done(r)) return true;
  return false;
}

void PsService::MarkToldLocked(int hearer, const ConnectionPtr& to, std::uint64_t request_id) {
  if (held_dones_.empty() || hearer < 0 || roster_.done(hearer)) return;
  for (HeldDone& h : held_dones_) {
    if (h.rank == hearer || !h.told.expired()) continue;
    h.told = to;
    h.told_request = request_id;
  }
}

void PsService::AnswerHeardLocked(const Connection* from, std::uint64_t request_id) {
  // The request sent along with the one told (a PULL behind its PUSH) may have left before the reply came.
  auto keep = std::partition(held_dones_.begin(), held_dones_.end(), [&](const HeldDone& h) {
    const ConnectionPtr told = h.told.lock();
    return told.get() != from || request_id <= h.told_request + 1;
  });
  for (auto it = keep; it != held_dones_.end(); ++it)
    if (ConnectionPtr c = it->conn.lock()) Reply(*c, wire::EncodeDoneAck(), it->request_id);  // Send only queues
  held_dones_.erase(keep, held_dones_.end());
}

void PsService::AnswerHeldDonesLocked(bool all, Clock::time_point now) {
  std::vector<HeldDone> kept;
  for (HeldDone& h : held_dones_) {
    if (h.conn.expired()) continue;  // its worker left (it sends DONE again on a new connection)
    const bool to_tell = !all && AnyoneToTellLocked(h.rank);
    if (to_tell && now - h.since < limits_.done_hold) {
      kept.push_back(std::move(h));
      continue;
    }
    if (to_tell)
      spdlog::warn("answered {}'s DONE although no worker still training has heard of it within {:g} s: a restart of this ps before "
                   "one does loses it",
                   roster_.TaskName(h.rank), std::chrono::duration<double>(limits_.done_hold).count());
    if (ConnectionPtr c = h.conn.lock()) Reply(*c, wire::EncodeDoneAck(), h.request_id);  // Send only queues
  }
  held_dones_ = std::move(kept);
}

void PsService::MembersChangedLocked(const std::string& why, bool loss) {
  const UpdateRule update = store_.update();
  const int members = roster_.members();
  const std::uint64_t step = store_.global_step();
  spdlog::info("membership: {} workers from global_step {} ({}; elastic min_workers {}, max_workers {}){}", members, step + 1, why,
               update.min_workers, update.max_workers, store_.sync() ? fmt::format("; sync: total_num_replicas {}", members) : "");
  events_.Emit("membership", {{"workers", std::int64_t{members}}, {"global_step", static_cast<std::int64_t>(step)}});
  // Workers that finished their epochs count towards min_workers: the run is ending, not failing.
  if (loss && members + static_cast<int>(roster_.done_count()) < static_cast<int>(update.min_workers)) {
    return EndRunLocked(Status::FailedPrecondition(fmt::format("{}: the run is over: {} workers left, fewer than elastic min_workers {} ({})",
                                                               self_, members, update.min_workers, why)));
  }
  // sync: the steps from the next on aggregate every member's gradient. Waiting pulls are released
  // by the caller's next FailPullsIfStepStuck or push.
  if (store_.sync()) members_changed_ = store_.SetMembers(members) || members_changed_;
}

}  // namespace tfd::ps
