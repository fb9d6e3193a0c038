#include "daemon/ps/ps_service.h"

#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace tfd::ps {
namespace {

using transport::Connection;

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
      incarnation_(incarnation),
      store_(store),
      events_(events),
      on_all_done_(std::move(on_all_done)),
      self_(config.task.ToString()) {}

Status PsService::LayoutMismatch(const Connection& worker) const {
  return Status::InvalidArgument(fmt::format("{} holds another variable layout than {} expects (different model, placement or "
                                             "ps count?)",
                                             self_, worker.peer_name()));
}

int PsService::RankOf(const Connection* c) const {
  auto it = ranks_.find(c);
  return it == ranks_.end() ? -1 : it->second;
}

void PsService::HandleHello(const std::shared_ptr<Connection>& from, const wire::InFrame& frame) {
  wire::Hello hello;
  if (!DecodeOrRefuse(*from, frame, &hello)) return;
  const config::TaskId peer{static_cast<config::TaskType>(hello.kind), static_cast<int>(hello.index)};
  const std::string peer_name = fmt::format("{} ({})", peer.ToString(), from->peer_name());
  auto refuse = [&](const std::string& reason) {
    Status why = Status::FailedPrecondition(reason);
    from->CountRefusal(transport::Refusal::kMismatch);
    spdlog::warn("refused {}: {}", peer_name, reason);
    from->SendErrorAndClose(why);
  };
  if (hello.cluster_id != config_.cluster.Id()) {
    return refuse(fmt::format("cluster id mismatch: {} has cluster id {:016x}, {} has {:016x}: their TF_CONFIG cluster "
                              "specs differ",
                              peer.ToString(), hello.cluster_id, self_, config_.cluster.Id()));
  }
  if (peer.type != config::TaskType::kChief && peer.type != config::TaskType::kWorker)
    return refuse(fmt::format("{} is not a worker: only workers talk to a ps", peer.ToString()));
  if (peer.index < 0 || peer.index >= static_cast<int>(config_.cluster.Tasks(peer.type).size()))
    return refuse(fmt::format("{} is not in this cluster", peer.ToString()));
  from->set_peer_name(peer_name);
  from->MarkEstablished();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ranks_[from.get()] = config_.cluster.WorkerRank(peer);
    if (gone_.erase(config_.cluster.WorkerRank(peer)) > 0) {  // back again
      spdlog::info("{} rejoined (incarnation {:016x}); it resumes after step {}", peer_name, hello.incarnation,
                   store_.ResumeStep(config_.cluster.WorkerRank(peer)));
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
  }
  spdlog::debug("{} connected (incarnation {:016x})", peer_name, hello.incarnation);
  wire::Welcome w;
  w.kind = wire::TaskKind::kPs;
  w.index = static_cast<std::uint32_t>(config_.task.index);
  w.incarnation = incarnation_;
  w.initialized = store_.initialized();
  w.global_step = store_.global_step();
  w.resume_step = store_.ResumeStep(config_.cluster.WorkerRank(peer));
  Reply(*from, wire::Encode(w), frame.header.request_id);
}

void PsService::OnFrame(const std::shared_ptr<Connection>& from, wire::InFrame frame) {
  const std::uint64_t id = frame.header.request_id;
  if (frame.header.type == wire::MessageType::kHello) return HandleHello(from, frame);
  int rank;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rank = RankOf(from.get());
  }
  if (rank < 0) {
    Status why = Status::FailedPrecondition(fmt::format("{} sent {} before HELLO", from->peer_name(), wire::MessageTypeName(frame.header.type)));
    spdlog::warn("{}", why.message());
    return from->SendErrorAndClose(why);
  }
  switch (frame.header.type) {
    case wire::MessageType::kInit: {
      wire::Init init;
      if (!DecodeOrRefuse(*from, frame, &init)) return;
      if (rank != 0)
        return ReplyError(*from, id, Status::InvalidArgument(fmt::format("{}: INIT from {}, which is not the chief", self_, from->peer_name())));
      if (init.update.num_workers != static_cast<std::uint32_t>(config_.cluster.num_workers()))
        return ReplyError(*from, id, Status::InvalidArgument(fmt::format("{}: INIT for {} workers, but the cluster has {}", self_,
                                                                        init.update.num_workers, config_.cluster.num_workers())));
      Status s = store_.Init(init);
      if (!s.ok() && s.code() != Code::kFailedPrecondition) return ReplyError(*from, id, s.WithContext(self_));
      if (s.ok()) {
        spdlog::info("initialised by {}: {} chunks, {} floats, {} mode, at global_step {}{}", from->peer_name(), init.chunks.size(),
                     store_.size(), init.update.mode == 0 ? "async" : "sync", init.global_step,
                     init.has_state ? fmt::format(", with optimizer slots ({} floats, {} updates applied)", init.slots.size() / 4, init.updates)
                                    : std::string());
        for (const wire::Chunk& c : init.chunks) spdlog::info("  holds {} ({} floats)", c.name, c.length);
        events_.Emit("ready", {{"floats", store_.size()}, {"chunks", static_cast<std::int64_t>(init.chunks.size())}});
      }
      Reply(*from, wire::Encode(wire::Ready{store_.global_step(), store_.ResumeStep(rank)}), id);
      ReleaseWaiters();
      return;
    }
    case wire::MessageType::kWaitReady: {
      wire::WaitReady wait;
      if (!DecodeOrRefuse(*from, frame, &wait)) return;
      if (store_.initialized()) {
        if (wait.layout_hash != store_.layout_hash()) return ReplyError(*from, id, LayoutMismatch(*from));
        return Reply(*from, wire::Encode(wire::Ready{store_.global_step(), store_.ResumeStep(rank)}), id);
      }
      std::lock_guard<std::mutex> lock(mu_);
      ready_waiters_.push_back({from, id, wait.layout_hash});
      return;
    }
    case wire::MessageType::kPull: {
      wire::Pull pull;
      if (!DecodeOrRefuse(*from, frame, &pull)) return;
      if (!store_.initialized()) return ReplyError(*from, id, Status::FailedPrecondition(fmt::format("{}: PULL before INIT", self_)));
      bool ready_now;
      {
        // Check and enqueue under one lock, so a step that completes in between cannot be missed.
        std::lock_guard<std::mutex> lock(mu_);
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
      return;
    }
    case wire::MessageType::kPush: {
      wire::Push push;
      if (!DecodeOrRefuse(*from, frame, &push)) return;
      if (static_cast<int>(push.worker) != rank)
        return ReplyError(*from, id, Status::InvalidArgument(fmt::format("{} pushed as worker rank {}", from->peer_name(), push.worker)));
      Result<ParameterStore::PushResult> r = store_.Push(push);
      if (!r.ok()) return ReplyError(*from, id, r.status().WithContext(self_));
      Reply(*from, wire::Encode(wire::PushAck{r->global_step, r->outcome}), id);
      if (r->step_advanced) ReleaseWaiters();
      return;
    }
    case wire::MessageType::kStatePull: {
      wire::StatePull pull;
      if (!DecodeOrRefuse(*from, frame, &pull)) return;
      Result<ParameterStore::State> st = store_.ReadState();
      if (!st.ok()) return ReplyError(*from, id, st.status().WithContext(self_));
      wire::State m;
      m.global_step = st->params->global_step;
      m.updates = st->updates;
      m.resume_steps = st->resume_steps;
      wire::OutFrame f = wire::Encode(m, st->params->values, *st->slots);
      // The tail points into the snapshot, the slots and the encoder's trailer: the frame owns all three.
      f.keepalive = std::make_shared<std::tuple<std::shared_ptr<const void>, std::shared_ptr<const void>, std::shared_ptr<const void>>>(
          std::move(f.keepalive), st->params, st->slots);
      return Reply(*from, std::move(f), id);
    }
    case wire::MessageType::kDone: {
      wire::Done done;
      if (!DecodeOrRefuse(*from, frame, &done)) return;
      Reply(*from, wire::EncodeDoneAck(), id);
      bool finished = false;
      std::size_t count = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        done_.insert(rank);
        count = done_.size();
        // With on_worker_loss shrink, a lost worker is written off: the others' DONE ends the run.
        const std::size_t written_off = store_.sync() && store_.update().on_worker_loss == 2 ? gone_.size() : 0;
        if (!all_done_ && static_cast<int>(done_.size() + written_off) == config_.cluster.num_workers()) finished = all_done_ = true;
      }
      spdlog::info("{} is done ({} of {} workers)", from->peer_name(), count, config_.cluster.num_workers());
      if (finished) on_all_done_();
      FailPullsIfStepStuck();
      return;
    }
    case wire::MessageType::kError: {  // the worker refuses this ps: say why, and let it go
      wire::ErrorMessage err;
      (void)wire::Decode(frame.payload, &err);
      spdlog::warn("{} refused this ps: {}", from->peer_name(), err.message);
      return from->Close(Status::Unavailable(fmt::format("{} refused this ps: {}", from->peer_name(), err.message)));
    }
    default: {
      Status why = Status::InvalidArgument(fmt::format("{} sent {}, which a ps does not take", from->peer_name(),
                                                       wire::MessageTypeName(frame.header.type)));
      spdlog::warn("{}", why.message());
      return from->SendErrorAndClose(why);
    }
  }
}

void PsService::ReplyParams(Connection& to, std::uint64_t request_id) {
  std::shared_ptr<const ParameterStore::Snapshot> snap = store_.Read();
  wire::OutFrame f = wire::Encode(wire::Params{snap->global_step, {}}, snap->values);
  f.keepalive = snap;  // the frame's tail points into the snapshot
  Reply(to, std::move(f), request_id);
}

void PsService::ReleaseWaiters() {
  std::vector<Waiter> ready, pulls;
  std::uint64_t step;
  {
    std::lock_guard<std::mutex> lock(mu_);
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
        int rank;
        {
          std::lock_guard<std::mutex> lock(mu_);
          rank = RankOf(c.get());
        }
        Reply(*c, wire::Encode(wire::Ready{step, store_.ResumeStep(rank)}), w.request_id);
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
    std::lock_guard<std::mutex> lock(mu_);
    rank = RankOf(from.get());
    done = done_.contains(rank);
    ranks_.erase(from.get());
  }
  if (rank < 0 || done) return;
  spdlog::warn("lost {}: {}", from->peer_name(), why.message());
  events_.Emit("peer_lost", {{"peer", from->peer_name()}, {"message", why.message()}});
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone_[rank] = from->peer_name();
  }
  FailPullsIfStepStuck();  // async: nothing waits on the others
}

void PsService::FailPullsIfStepStuck() {
  if (!store_.sync()) return;
  const std::vector<bool> received = store_.received();
  const wire::UpdateParams update = store_.update();
  std::vector<Waiter> pulls;
  int held = 0, can_send = 0;
  bool lost = false;
  std::vector<std::string> missing;
  {
    std::lock_guard<std::mutex> lock(mu_);
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
    if (lost && update.on_worker_loss == 1) {  // wait: a restarted worker resumes at this step
      const std::string note = fmt::format("sync step {} waits for {} to come back (update.on_worker_loss: wait)",
                                           store_.global_step() + 1, fmt::join(missing, ", "));
      if (note != waiting_note_) spdlog::warn("{}", note);
      waiting_note_ = note;
      return;
    }
    if (!(lost && update.on_worker_loss == 2 && held + can_send >= static_cast<int>(update.min_replicas))) pulls.swap(pull_waiters_);
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
  const std::string below = update.on_worker_loss == 2 ? fmt::format(" (fewer than min_replicas {})", update.min_replicas) : "";
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
