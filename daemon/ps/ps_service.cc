#include "daemon/ps/ps_service.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

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

}  // namespace

PsService::PsService(const config::TfConfig& config, std::uint64_t incarnation, ParameterStore& store, EventWriter& events,
                     std::function<void()> on_all_done)
    : config_(config),
      store_(store),
      events_(events),
      on_all_done_(std::move(on_all_done)),
      self_(config.task.ToString()),
      identity_(HandshakeIdentityOf(config, incarnation)) {}

Status PsService::LayoutMismatch(const Connection& worker) const {
  return Status::InvalidArgument(fmt::format("{} holds another variable layout than {} expects (different model, placement or "
                                             "ps count?)",
                                             self_, worker.peer_name()));
}

int PsService::RankOf(const Connection* c) {
  MutexLock lock(&mu_);
  return RankOfLocked(c);
}

int PsService::RankOfLocked(const Connection* c) const {
  auto it = ranks_.find(c);
  return it == ranks_.end() ? -1 : it->second;
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
  switch (type) {
    case wire::MessageType::kInit: return HandleInit(from, frame, rank);
    case wire::MessageType::kWaitReady: return HandleWaitReady(from, frame, rank);
    case wire::MessageType::kPull: return HandlePull(from, frame);
    case wire::MessageType::kPush: return HandlePush(from, frame, rank);
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
  if (peer.index < 0 || peer.index >= static_cast<int>(config_.cluster.Tasks(peer.type).size()))
    return refuse(Status::FailedPrecondition(fmt::format("{} is not in this cluster", peer.ToString())));
  from->set_peer_name(peer_name);
  from->MarkEstablished();
  const int rank = config_.cluster.WorkerRank(peer);
  {
    MutexLock lock(&mu_);
    ranks_[from.get()] = rank;
    if (gone_.erase(rank) > 0) RejoinedLocked(rank, peer_name, hello.incarnation);
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
  if (rank != 0)
    return ReplyError(*from, id, Status::InvalidArgument(fmt::format("{}: INIT from {}, which is not the chief", self_, from->peer_name())));
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
    events_.Emit("ready", {{"floats", store_.size()}, {"chunks", static_cast<std::int64_t>(init.chunks.size())}});
  }
  Reply(*from, wire::Encode(wire::Ready{store_.global_step(), store_.ResumeStep(rank)}), id);
  ReleaseWaiters();
}

void PsService::HandleWaitReady(const ConnectionPtr& from, const wire::InFrame& frame, int rank) {
  const std::uint64_t id = frame.header.request_id;
  wire::WaitReady wait;
  if (!DecodeOrRefuse(*from, frame, &wait)) return;
  if (store_.initialized()) {
    if (wait.layout_hash != store_.layout_hash()) return ReplyError(*from, id, LayoutMismatch(*from));
    return Reply(*from, wire::Encode(wire::Ready{store_.global_step(), store_.ResumeStep(rank)}), id);
  }
  MutexLock lock(&mu_);
  ready_waiters_.push_back({from, id, wait.layout_hash});
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
  if (ready_now) return ReplyParams(*from, id);
  FailPullsIfStepStuck();
}

void PsService::HandlePush(const ConnectionPtr& from, const wire::InFrame& frame, int rank) {
  const std::uint64_t id = frame.header.request_id;
  wire::Push push;
  if (!DecodeOrRefuse(*from, frame, &push)) return;
  if (static_cast<int>(push.worker) != rank)
    return ReplyError(*from, id, Status::InvalidArgument(fmt::format("{} pushed as worker rank {}", from->peer_name(), push.worker)));
  Result<ParameterStore::PushResult> r = store_.Push(FromWire(push));
  if (!r.ok()) return ReplyError(*from, id, r.status().WithContext(self_));
  wire::PushAck ack = ToWire(*r);
  {
    MutexLock lock(&mu_);
    ack.stop = stopped_early_;  // the chief stopped the run: so does this worker
  }
  Reply(*from, wire::Encode(ack), id);
  if (r->step_advanced) ReleaseWaiters();
}

void PsService::HandleStatePull(const ConnectionPtr& from, const wire::InFrame& frame) {
  const std::uint64_t id = frame.header.request_id;
  wire::StatePull pull;
  if (!DecodeOrRefuse(*from, frame, &pull)) return;
  Result<ParameterStore::State> st = store_.ReadState();
  if (!st.ok()) return ReplyError(*from, id, st.status().WithContext(self_));
  Reply(*from, EncodeState(*st), id);
}

void PsService::HandleDone(const ConnectionPtr& from, const wire::InFrame& frame, int rank) {
  wire::Done done;
  if (!DecodeOrRefuse(*from, frame, &done)) return;
  Reply(*from, wire::EncodeDoneAck(), frame.header.request_id);
  bool finished = false;
  std::size_t count = 0;
  {
    MutexLock lock(&mu_);
    done_.insert(rank);
    stopped_early_ = stopped_early_ || done.stop;
    count = done_.size();
    // With on_worker_loss shrink, a lost worker is written off: the others' DONE ends the run.
    const std::size_t written_off = store_.sync() && store_.update().on_worker_loss == OnWorkerLoss::kShrink ? gone_.size() : 0;
    if (!all_done_ && static_cast<int>(done_.size() + written_off) == config_.cluster.num_workers()) finished = all_done_ = true;
  }
  spdlog::info("{} is done ({} of {} workers){}", from->peer_name(), count, config_.cluster.num_workers(),
               done.stop ? "; it stopped the run early, and the others are told in their PUSH_ACKs" : "");
  if (finished) on_all_done_();
  FailPullsIfStepStuck();
}

void PsService::HandleError(const ConnectionPtr& from, const wire::InFrame& frame) {
  // The worker refuses this ps: say why, and let it go.
  wire::ErrorMessage err;
  (void)wire::Decode(frame.payload, &err);
  spdlog::warn("{} refused this ps: {}", from->peer_name(), err.message);
  from->Close(Status::Unavailable(fmt::format("{} refused this ps: {}", from->peer_name(), err.message)));
}

void PsService::ReplyParams(Connection& to, std::uint64_t request_id) { Reply(to, EncodeParams(store_.Read()), request_id); }

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
        Reply(*c, wire::Encode(wire::Ready{step, store_.ResumeStep(RankOf(c.get()))}), w.request_id);
      }
    }
  }
  for (const Waiter& w : pulls)
    if (auto c = w.conn.lock()) ReplyParams(*c, w.request_id);
}

void PsService::OnClosed(const std::shared_ptr<Connection>& from, const Status& why) {
  int rank;
  bool done;
  {
    MutexLock lock(&mu_);
    rank = RankOfLocked(from.get());
    done = done_.contains(rank);
    ranks_.erase(from.get());
  }
  if (rank < 0 || done) return;
  spdlog::warn("lost {}: {}", from->peer_name(), why.message());
  events_.Emit("peer_lost", {{"peer", from->peer_name()}, {"message", why.message()}});
  {
    MutexLock lock(&mu_);
    gone_[rank] = from->peer_name();
  }
  FailPullsIfStepStuck();  // async: nothing waits on the others
}

void PsService::FailPullsIfStepStuck() {
  if (!store_.sync()) return;
  const std::vector<bool> received = store_.received();
  const UpdateRule update = store_.update();
  std::vector<Waiter> pulls;
  int held = 0, can_send = 0;
  bool lost = false;
  std::vector<std::string> missing;
  {
    MutexLock lock(&mu_);
    if (pull_waiters_.empty()) return;
    std::set<int> live;
    for (const auto& [conn, r] : ranks_) live.insert(r);
    for (int r = 0; r < config_.cluster.num_workers(); ++r) {
      const bool has = r < static_cast<int>(received.size()) && received[r];
      held += has;
      if (has) continue;
      if (done_.contains(r)) {
        missing.push_back(fmt::format("{} has finished", config_.cluster.WorkerTask(r).ToString()));
      } else if (gone_.contains(r) && !live.contains(r)) {
        missing.push_back(fmt::format("{} was lost", gone_[r]));
        lost = true;
      } else {
        ++can_send;  // connected, or not connected yet: it may still send its gradient
      }
    }
    if (held + can_send >= store_.to_aggregate()) return;
    if (lost && update.on_worker_loss == OnWorkerLoss::kWait) {  // wait: a restarted worker resumes at this step
      const std::string note = fmt::format("sync step {} waits for {} to come back (update.on_worker_loss: wait)",
                                           store_.global_step() + 1, fmt::join(missing, ", "));
      if (note != waiting_note_) spdlog::warn("{}", note);
      waiting_note_ = note;
      return;
    }
    if (!(lost && update.on_worker_loss == OnWorkerLoss::kShrink && held + can_send >= static_cast<int>(update.min_replicas)))
      pulls.swap(pull_waiters_);
  }
  if (pulls.empty()) {  // shrink: go on with the gradients the workers left can send
    const int quorum = held + can_send;
    spdlog::warn("quorum: sync steps aggregate {} of {} gradients from step {} on ({}; update.on_worker_loss: shrink, "
                 "min_replicas {})",
                 quorum, store_.configured_quorum(), store_.global_step() + 1, fmt::join(missing, ", "), update.min_replicas);
    events_.Emit("quorum", {{"quorum", std::int64_t{quorum}}, {"global_step", static_cast<std::int64_t>(store_.global_step())}});
    if (store_.SetQuorum(quorum)) ReleaseWaiters();
    return;
  }
  if (!lost) {
    // Only finished workers are missing (a backup worker's last steps, when the others are done):
    // nothing more will be aggregated, so let it finish on the final parameters.
    for (const Waiter& w : pulls)
      if (auto c = w.conn.lock()) ReplyParams(*c, w.request_id);
    return;
  }
  const std::string below = update.on_worker_loss == OnWorkerLoss::kShrink ? fmt::format(" (fewer than min_replicas {})", update.min_replicas) : "";
  const Status fail = Status::Unavailable(fmt::format("{}: sync step {} cannot complete: it needs {} gradients, has {}, and {}{}", self_,
                                                      store_.global_step() + 1, store_.to_aggregate(), held,
                                                      missing.empty() ? std::string("no other worker can send one")
                                                                      : fmt::format("{}", fmt::join(missing, ", ")),
                                                      below));
  spdlog::warn("{}", fail.message());
  for (const Waiter& w : pulls)
    if (auto c = w.conn.lock()) ReplyError(*c, w.request_id, fail);
}

}  // namespace tfd::ps
