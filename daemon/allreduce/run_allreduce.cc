#include "daemon/allreduce/run_allreduce.h"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/base/mutex.h"
#include "common/base/service.h"
#include "common/collective/hier_ring.h"
#include "common/transport/dial.h"
#include "common/transport/io_thread.h"
#include "common/transport/listener.h"
#include "daemon/allreduce/allreduce_updater.h"
#include "daemon/allreduce/join_door.h"
#include "daemon/ring_options.h"
#include "daemon/ring_restore.h"
#include "daemon/train/device.h"
#include "daemon/train/job_data.h"
#include "daemon/train/trainer.h"
#include "daemon/task/lifecycle.h"

namespace tfd::allreduce {
namespace {

using Clock = std::chrono::steady_clock;

// The listener's way to the ring: connections go to the current ring while it is open, and wait
// while it is closed, for the ring that replaces it (an elastic ring re-forming: a survivor may
// dial this one before it has noticed the loss).
class RingHolder {
 public:
  void Accept(transport::tcp::socket socket) TFD_EXCLUDES(mu_) {
    std::shared_ptr<collective::Collective> ring;
    {
      MutexLock lock(&mu_);
      if (ring_ == nullptr || ring_->closed()) {
        if (waiting_.size() >= kMaxWaiting) waiting_.pop_front();  // closes it
        waiting_.push_back(std::move(socket));
        return;
      }
      ring = ring_;
    }
    ring->Accept(std::move(socket));
  }
  // `ring` takes the connections from now on, and those that waited.
  void Set(std::shared_ptr<collective::Collective> ring) TFD_EXCLUDES(mu_) {
    std::deque<transport::tcp::socket> waited;
    {
      MutexLock lock(&mu_);
      ring_ = ring;
      waited.swap(waiting_);
    }
    for (transport::tcp::socket& s : waited) ring->Accept(std::move(s));
  }
  std::shared_ptr<collective::Collective> Get() TFD_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return ring_;
  }

 private:
  static constexpr std::size_t kMaxWaiting = 16;  // a ring takes two: the rest are strangers or stale
  Mutex mu_;
  std::shared_ptr<collective::Collective> ring_ TFD_GUARDED_BY(mu_);
  std::deque<transport::tcp::socket> waiting_ TFD_GUARDED_BY(mu_);
};



// The cluster id of a ring of `members` in the run whose cluster id is `base`: a member that still
// runs another membership refuses this ring's HELLO (and this one its).
std::uint64_t MembershipId(std::uint64_t base, const std::vector<collective::RingMember>& members) {
  std::uint64_t id = base;
  for (const collective::RingMember& m : members) {
    for (char ch : m.task) id = (id ^ static_cast<unsigned char>(ch)) * 0x100000001b3ULL;
    id = (id ^ 0xff) * 0x100000001b3ULL;
  }
  return id;
}

std::string MemberName(const collective::RingMember& m) { return fmt::format("{} ({}:{})", m.task, m.host, m.port); }

// What every elastic ring change shares: where connections go, the I/O, the job's bounds, events.
struct ElasticContext {
  RingHolder& holder;
  transport::asio::io_context& ioc;
  const config::ElasticSpec& elastic;
  EventWriter& events;
  const std::atomic<bool>* stop;
  std::uint64_t base_id;  // the cluster id the run started with
};

// Whether `m` still runs: its listener takes a connection within a second (a process that ended
// refuses it; a host that is down lets it time out). The connection is closed unused: the member
// sees a peer that said nothing and left.
bool Answers(transport::asio::io_context& ioc, const collective::RingMember& m) {
  Result<transport::tcp::socket> socket = transport::Dial(ioc, m.host, m.port, m.task, Clock::now() + std::chrono::seconds(1));
  if (!socket.ok()) return false;
  boost::system::error_code ignored;
  socket->close(ignored);
  return true;
}

// Forms the ring `ro` (its members and this member's rank; its cluster id is set here), each member
// retrying until `settle` is over (they notice a change at different times; a member that still runs
// the old ring refuses the new one's HELLO until it does), then they agree in one all-reduce on the
// newest commit every member holds: the largest current commit step (a joiner holds none: 0). A
// member that no longer runs when `settle` is over is dropped (a loss while the ring re-forms) and
// the others start again, while at least min_workers remain: the one the last attempt's error
// names, else a neighbour, whichever does not answer a connection (Answers). While every one of them
// answers, each is re-forming too, only later (it noticed the change later, or a second loss): the
// ring gets up to two more settle periods before the old rule (a neighbour nothing came from, else
// the one the error names) drops one. `joined` and `lost` name the change for the log and the
// `membership` event.
Result<AllreduceUpdater::Reformed> FormRing(const ElasticContext& cx, collective::RingOptions ro, std::int64_t commit_step,
                                            const std::string& joined, std::string lost) {
  // Long enough for every member to notice the change: a silent member takes a peer timeout.
  const auto settle = std::max<Clock::duration>(2 * ro.connection.peer_timeout, std::chrono::seconds(5));
  constexpr int kMaxExtensions = 2;
  ro.redial = true;
  for (;;) {
    const int n = static_cast<int>(ro.members.size());
    ro.cluster_id = MembershipId(cx.base_id, ro.members);
    const std::string change = joined.empty() ? lost : lost.empty() ? joined : joined + ", " + lost;
    if (n < cx.elastic.min_workers) {
      return Status::FailedPrecondition(fmt::format("elastic: the run is over: {} workers left, fewer than elastic min_workers {} ({})", n,
                                                    cx.elastic.min_workers, change));
    }
    spdlog::warn("elastic: {}; forming the ring of {} workers", change, n);
    auto deadline = Clock::now() + settle;
    Status why;
    std::shared_ptr<collective::Ring> ring;
    std::set<std::string> heard;  // members a frame came from in any attempt: alive
    int extensions = 0;           // settle periods added while every suspect answered
    int blamed = -1;
    for (int attempt = 1;; ++attempt) {
      ro.incarnation = task::NewIncarnation();
      ro.startup_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      ring = collective::Ring::Create(cx.ioc, ro);
      cx.holder.Set(ring);
      why = ring->Connect();
      // Each member's current commit step, in its slot (two floats: exact sums whatever the step).
      std::vector<float> commits(static_cast<std::size_t>(2 * n), 0.0f);
      commits[static_cast<std::size_t>(2 * ro.rank)] = static_cast<float>(commit_step >> 20);
      commits[static_cast<std::size_t>(2 * ro.rank + 1)] = static_cast<float>(commit_step & 0xfffff);
      if (why.ok()) why = ring->AllReduce(commits).WithContext("agreeing on the commit to roll back to");
      if (why.ok()) {
        std::int64_t agreed = 0;
        for (int r = 0; r < n; ++r) {
          agreed = std::max(agreed, (static_cast<std::int64_t>(commits[static_cast<std::size_t>(2 * r)]) << 20) +
                                        static_cast<std::int64_t>(commits[static_cast<std::size_t>(2 * r + 1)]));
        }
        spdlog::info("membership: {} workers from global_step {} ({}; elastic min_workers {}, max_workers {}); rolled back to the "
                     "commit at global_step {}; this worker is rank {} of the ring",
                     n, agreed + 1, change, cx.elastic.min_workers, cx.elastic.max_workers, agreed, ro.rank);
        std::vector<EventField> fields = {{"workers", std::int64_t{n}}, {"global_step", agreed + 1}, {"commit_step", agreed},
                                          {"rank", std::int64_t{ro.rank}}};
        if (!lost.empty()) fields.push_back({"lost", lost});
        if (!joined.empty()) fields.push_back({"joined", joined});
        cx.events.Emit("membership", fields);
        return AllreduceUpdater::Reformed{.ring = ring, .commit_step = agreed};
      }
      ring->Close(Status::Ok());  // quietly: a neighbour's next attempt must not read this one's error
      heard.merge(ring->heard());
      if (cx.stop != nullptr && cx.stop->load()) break;
      if (Clock::now() >= deadline) {
        // The suspects: the member the error names, then each neighbour; the first that does not
        // answer is gone.
        std::vector<int> suspects;
        for (int r : {ring->Blamed(why), (ro.rank + n - 1) % n, (ro.rank + 1) % n})
          if (r >= 0 && r != ro.rank && std::find(suspects.begin(), suspects.end(), r) == suspects.end()) suspects.push_back(r);
        for (int r : suspects)
          if (blamed < 0 && !Answers(cx.ioc, ro.members[static_cast<std::size_t>(r)])) blamed = r;
        if (blamed >= 0 || extensions == kMaxExtensions) break;
        ++extensions;
        deadline = Clock::now() + settle;
        spdlog::info("elastic: the ring of {} workers did not form (attempt {}: {}), but its members answer: waiting {:.0f} s more", n,
                     attempt, why.message(), std::chrono::duration<double>(settle).count());
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        continue;
      }
      spdlog::info("elastic: the ring of {} workers did not form (attempt {}: {}); trying again", n, attempt, why.message());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    // Else blame a neighbour nothing came from in any attempt (a member that refused this ring's
    // HELLO, running another membership, is alive); else the one the error names.
    for (int r : {(ro.rank + n - 1) % n, (ro.rank + 1) % n})
      if (blamed < 0 && !heard.contains(ro.members[static_cast<std::size_t>(r)].task)) blamed = r;
    if (blamed < 0) blamed = ring->Blamed(why);
    if (blamed < 0 || blamed == ro.rank || (cx.stop != nullptr && cx.stop->load())) {
      return Status::Unavailable(fmt::format("elastic: the ring of {} workers ({}) did not form within {:.0f} s: {}", n, change,
                                             std::chrono::duration<double>(settle * (1 + extensions)).count(), why.message()));
    }
    // A loss while the ring re-forms: again, without that member.
    const std::string name = MemberName(ro.members[static_cast<std::size_t>(blamed)]);
    lost = lost.empty() ? name + " lost" : fmt::format("{}, then {} lost", lost, name);
    ro.members.erase(ro.members.begin() + blamed);
    if (blamed < ro.rank) --ro.rank;
  }
}

// A membership change re-forms a flat ring, even where the run started hierarchical: the log says so.
void NoteFlatFallback(const collective::Collective& old) {
  if (dynamic_cast<const collective::HierarchicalRing*>(&old) == nullptr) return;
  spdlog::warn("topology: flat ring from now on: a membership change re-forms the flat ring of every worker, not the hierarchy "
               "(update.hierarchical)");
}

// After `error` of the holder's ring: the ring of the members left without the one the error blames.
Result<AllreduceUpdater::Reformed> Reform(const ElasticContext& cx, const Status& error, std::int64_t commit_step) {
  const std::shared_ptr<collective::Collective> old = cx.holder.Get();
  const int blamed = old->Blamed(error);
  if (blamed < 0) return error;  // it names no member to drop: not a loss this can recover from
  collective::RingOptions ro = old->options();
  const std::string lost = MemberName(ro.members[static_cast<std::size_t>(blamed)]);
  ro.members.erase(ro.members.begin() + blamed);
  if (blamed < ro.rank) --ro.rank;
  if (static_cast<int>(ro.members.size()) < cx.elastic.min_workers) {
    return Status::FailedPrecondition(fmt::format("elastic: the run is over: {} workers left, fewer than elastic min_workers {} ({} lost: {})",
                                                  ro.members.size(), cx.elastic.min_workers, lost, error.message()));
  }
  spdlog::warn("elastic: lost {}: {}", lost, error.message());
  NoteFlatFallback(*old);
  return FormRing(cx, std::move(ro), commit_step, "", lost + " lost");
}

// Rank 0's bytes to every member of `ring`, as one float per byte (exact), after their count.
Status BroadcastBytes(collective::Collective& ring, std::vector<std::byte>* bytes) {
  std::vector<float> count{static_cast<float>(bytes->size())};
  TFD_RETURN_IF_ERROR(ring.Broadcast(count));
  if (count[0] < 0 || count[0] > static_cast<float>(JoinDoor::kMaxJoinFrameBytes))
    return Status::Corruption(fmt::format("elastic: rank 0 announced a membership of {} bytes", count[0]));
  std::vector<float> f(static_cast<std::size_t>(count[0]));
  if (ring.rank() == 0)
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>((*bytes)[i]);
  TFD_RETURN_IF_ERROR(ring.Broadcast(f));
  bytes->resize(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) (*bytes)[i] = static_cast<std::byte>(static_cast<unsigned>(f[i]) & 0xff);
  return Status::Ok();
}

collective::RingMember FromWire(const wire::RingJoinMember& m) { return {m.task, m.host, m.port, m.kind, m.index}; }

// After a commit step whose sums carried rank 0's request: rank 0 tells the ring (over the old ring)
// and the joiners (RING_JOIN_ACCEPT) who the members are now; every member leaves the old ring in
// good order and forms the new one.
Result<AllreduceUpdater::Reformed> Grow(const ElasticContext& cx, JoinDoor& door, std::int64_t commit_step) {
  const std::shared_ptr<collective::Collective> old = cx.holder.Get();
  collective::RingOptions ro = old->options();
  std::vector<std::byte> bytes;
  std::string joined;
  if (ro.rank == 0) {
    wire::RingJoinAccept accept{.commit_step = commit_step};
    for (const collective::RingMember& m : ro.members) accept.members.push_back({m.kind, m.index, m.port, m.task, m.host});
    for (wire::RingJoinMember& m : door.TakeReady(ro.members)) accept.members.push_back(std::move(m));
    std::vector<collective::RingMember> members;
    for (const wire::RingJoinMember& m : accept.members) members.push_back(FromWire(m));
    accept.cluster_id = MembershipId(cx.base_id, members);
    bytes = wire::Encode(accept).head;
    TFD_RETURN_IF_ERROR(BroadcastBytes(*old, &bytes).WithContext("announcing the joiners"));
    if (accept.members.size() > ro.members.size()) door.Answer(accept);
  } else {
    TFD_RETURN_IF_ERROR(BroadcastBytes(*old, &bytes).WithContext("announcing the joiners"));
  }
  wire::RingJoinAccept now;
  TFD_RETURN_IF_ERROR(wire::Decode(bytes, &now).WithContext("the membership rank 0 announced"));
  if (now.members.size() <= ro.members.size()) return AllreduceUpdater::Reformed{.ring = old, .commit_step = commit_step};
  for (std::size_t i = ro.members.size(); i < now.members.size(); ++i)
    joined += (joined.empty() ? "" : ", ") + MemberName(FromWire(now.members[i])) + " joined";
  TFD_RETURN_IF_ERROR(old->Finish().WithContext("leaving the ring before it grows"));
  NoteFlatFallback(*old);
  const std::string self = ro.members[static_cast<std::size_t>(ro.rank)].task;
  ro.members.clear();
  for (const wire::RingJoinMember& m : now.members) {
    if (m.task == self) ro.rank = static_cast<int>(ro.members.size());
    ro.members.push_back(FromWire(m));
  }
  return FormRing(cx, std::move(ro), commit_step, joined, "");
}

// A joiner: asks the ring's rank 0 to take this worker in and, at the commit it is let in at, forms
// the new ring with the members rank 0 announced (`ro` gives the rest of the ring's options).
Result<AllreduceUpdater::Reformed> JoinRunningRing(const ElasticContext& cx, const config::TfConfig& config, const config::JobSpec& job,
                                                   const model::Model& model, collective::RingOptions ro,
                                                   const train::WorkerTaskOptions& options) {
  spdlog::info("{} joins the running ring (TF_CONFIG tfd.base_workers: the run started with {} workers)", config.task.ToString(),
               config.cluster.base_num_workers());
  TFD_ASSIGN_OR_RETURN(wire::RingJoinAccept accept,
                       AskToJoin(cx.ioc, config, JobFingerprint(job, model), ro.incarnation, ro.connection,
                                 Clock::now() + options.startup_timeout, options.stop));
  ro.members.clear();
  for (const wire::RingJoinMember& m : accept.members) ro.members.push_back(FromWire(m));
  ro.rank = static_cast<int>(accept.rank);
  const std::string joined = MemberName(ro.members[accept.rank]) + " joined";
  return FormRing(cx, std::move(ro), 0, joined, "");
}

collective::HierarchyMode ModeOf(config::UpdateSpec::Hierarchical h) {
  switch (h) {
    case config::UpdateSpec::Hierarchical::kOn: return collective::HierarchyMode::kOn;
    case config::UpdateSpec::Hierarchical::kOff: return collective::HierarchyMode::kOff;
    case config::UpdateSpec::Hierarchical::kAuto: break;
  }
  return collective::HierarchyMode::kAuto;
}

// The flat ring or the hierarchy (update.hierarchical and the workers' addresses), said in the log
// and a `topology` event.
std::shared_ptr<collective::Collective> MakeCollective(transport::asio::io_context& ioc, const config::JobSpec& job,
                                                       const collective::RingOptions& ro, EventWriter& events) {
  const std::vector<collective::HostGroup> hosts = collective::GroupByHost(ro.members);
  // Compression's collectives are the flat ring's (collective.h): a job with it runs flat.
  const bool compressed = job.update.compression.enabled();
  if (compressed) spdlog::info("topology: flat, as update.compression {} needs", config::CompressionName(job.update.compression.method));
  const collective::TopologyChoice choice =
      collective::ChooseTopology(compressed ? collective::HierarchyMode::kOff : ModeOf(job.update.hierarchical), hosts);
  std::shared_ptr<collective::Collective> made;
  std::string detail;
  if (choice.hierarchical) {
    auto h = collective::HierarchicalRing::Create(ioc, ro);
    const collective::HierarchyPlan& plan = h->plan();
    detail = fmt::format("; this worker is rank {} of the {} on {}{}", plan.local.rank, plan.local.members.size(),
                         plan.hosts[static_cast<std::size_t>(plan.host)].host,
                         plan.split    ? fmt::format(", crossing its part of each bucket in the ring of local rank {} on {} hosts",
                                                     plan.local.rank, plan.hosts.size())
                         : plan.leader ? fmt::format(", its leader in the ring of {} hosts", plan.hosts.size())
                                       : "");
    made = std::move(h);
  } else {
    made = collective::Ring::Create(ioc, ro);
  }
  const char* name = choice.hierarchical ? "hierarchical" : "flat";
  spdlog::info("topology: {} ({}){}", name, choice.why, detail);
  events.Emit("topology", {{"topology", std::string(name)}, {"why", choice.why}, {"hosts", static_cast<std::int64_t>(hosts.size())}});
  return made;
}

}  // namespace

Status RunAllreduceWorker(const config::TfConfig& config, const config::JobSpec& job, EventWriter& events,
                          const train::WorkerTaskOptions& options, const transport::ConnectionOptions& connection) {
  const int num_workers = config.cluster.num_workers();
  const int rank = config.cluster.WorkerRank(config.task);
  const config::ElasticSpec& elastic = job.elastic;  // the cluster checked against it (config::CheckJobOnCluster)
  TFD_ASSIGN_OR_RETURN(train::LoadedJob loaded, train::LoadJobData(job, num_workers));
  if (options.shard_limit > 0 && options.shard_limit < job.batch_size)
    return Status::InvalidArgument(fmt::format("--shard-limit: {} is less than one batch ({})", options.shard_limit, job.batch_size));
  model::Model& model = *loaded.model;
  TFD_ASSIGN_OR_RETURN(auto device_compute, train::DeviceGradients(job, model));  // device "cuda:N": gradients on the GPU
  std::unique_ptr<optim::Optimizer> optimizer = optim::MakeOptimizer(job.optimizer);
  const bool chief = config.is_chief();
  spdlog::info("{} (rank {} of {}{}); allreduce; model: {}", config.task.ToString(), rank, num_workers, chief ? ", chief" : "",
               model.Summary());
  task::EmitStart(events, {.role = "worker", .mode = "allreduce", .rank = rank, .chief = chief});
  // A rank past the workers the run started with joins the running ring (elastic only: config::CheckJobOnCluster).
  const bool joiner = rank >= config.cluster.base_num_workers();
  // Checkpoints: the chief reads the newest now, and every member gets it once the ring is formed.
  // Every worker knows the card (the model, the data's fingerprint): whoever is the ring's rank 0 writes.
  const bool checkpoints = !job.checkpoint.dir.empty();
  const std::int64_t steps_per_epoch = train::StepsPerEpoch(loaded.data.train.size, num_workers, job.batch_size);
  const exporting::ModelCard card = checkpoints ? exporting::CardFor(job, loaded.data.train) : exporting::ModelCard{};
  Result<train::WholeRestore> restore =
      chief && !joiner ? train::LoadWholeRestore(job, model, card, num_workers, steps_per_epoch) : train::WholeRestore{};

  std::unique_ptr<transport::Listener> listener;
  std::shared_ptr<collective::Collective> ring;
  auto holder = std::make_shared<RingHolder>();  // the listener's way to the ring of the moment
  // On every return: close the ring and the listener, let their closes run, stop the I/O thread.
  transport::IoThread io([&] {
    if (ring != nullptr) ring->Close(Status::Ok());
    if (std::shared_ptr<collective::Collective> now = holder->Get(); now != nullptr) now->Close(Status::Ok());
    if (listener != nullptr) listener->Stop();
  });

  collective::RingOptions ro = RingOptionsFor(config, 0, num_workers, rank, options, connection);
  std::shared_ptr<JoinDoor> door;
  if (elastic.enabled()) {
    door = std::make_shared<JoinDoor>(config.cluster.Id(), JobFingerprint(job, model), elastic.max_workers,
                                      static_cast<int>(config.cluster.chief.size()));
    ro.on_stranger = [door](const std::shared_ptr<transport::Connection>& from, const wire::Hello& hello, std::uint64_t request_id,
                            const transport::HandshakeIdentity& self, int r) { return door->Offer(from, hello, request_id, self, r); };
  }
  if (num_workers > 1) {
    const config::Endpoint& self = config.self();
    TFD_ASSIGN_OR_RETURN(listener, transport::Listener::Bind(io.context(), options.bind_address, self.port,
                                                             [holder](transport::tcp::socket s) { holder->Accept(std::move(s)); }));
    listener->Start();
    spdlog::info("listening on {}:{} for {}", options.bind_address.empty() ? "*" : options.bind_address, self.port,
                 joiner ? std::string("the ring this worker joins")
                        : ro.members[static_cast<std::size_t>((rank + num_workers - 1) % num_workers)].task);
  }
  const ElasticContext cx{*holder, io.context(), elastic, events, options.stop, config.cluster.Id()};
  std::optional<AllreduceUpdater::Reformed> joined;
  if (joiner) {
    Result<AllreduceUpdater::Reformed> formed = JoinRunningRing(cx, config, job, model, ro, options);
    if (!formed.ok()) return train::AtStartup(formed.status());
    ring = formed->ring;
    joined = std::move(*formed);
  } else {
    ring = MakeCollective(io.context(), job, ro, events);
    holder->Set(ring);
    TFD_RETURN_IF_ERROR(train::AtStartup(ring->Connect()));
    // Every worker starts from the chief's parameters.
    TFD_RETURN_IF_ERROR(train::AtStartup(ring->Broadcast(model.params()).WithContext("broadcast of the initial parameters")));
    if (!restore.ok()) {  // the chief's checkpoint does not fit: every worker ends with its reason
      ring->Close(restore.status());
      return restore.status();
    }
  }

  metrics::TaskMetrics* m = options.metrics;
  if (m != nullptr) m->AddAllreduceMetrics();
  if (m != nullptr) m->connected_peers->Set(num_workers > 1 ? 2 : 0);  // the ring's links to the previous and next member
  AllreduceUpdater updater(ring, *optimizer, model, job.update.bucket_kb, m != nullptr ? m->allreduce_bytes : nullptr, job.update.compression,
                           job.seed, steps_per_epoch);
  if (model.has_sync_layers()) {
    model.SetCrossReplicaSum(&updater);
    spdlog::info("batch_norm sync: each step's batch statistics are all-reduced over the {} workers (gradients go out after backprop)",
                 num_workers);
  }
  train::TrainerOptions topts = train::TrainerOptionsFor(config, job, options);
  if (checkpoints && !joiner) {
    TFD_RETURN_IF_ERROR(
        train::AtStartup(ShareWholeRestore(nullptr, *ring, model.params().size(), optimizer->num_slots(), &*restore)));
    if (restore->found) {
      TFD_RETURN_IF_ERROR(train::AtStartup(updater.Restore(model, *restore, steps_per_epoch)));
      topts.start_local_step = static_cast<std::int64_t>(restore->resume_step);
      if (restore->early_stopping) topts.early_stopping.push_back(*restore->early_stopping);  // the chief's: it judges
      if (chief) {
        spdlog::info("restored {} at global_step {} onto {} workers: resuming after local step {}", restore->path, restore->global_step,
                     num_workers, restore->resume_step);
        events.Emit("restored", {{"path", restore->path}, {"global_step", static_cast<std::int64_t>(restore->global_step)}});
      }
      restore->params = {};  // the model and the updater hold them now
      restore->slots = {};
      restore->feedback.reset();
    }
  }
  if (checkpoints) {
    updater.EnableCheckpoints({.spec = job.checkpoint,
                               .optimizer = job.optimizer,
                               .slot_names = optimizer->SlotNames(),
                               .batch_size = job.batch_size,
                               .model_card = exporting::CardText(card),
                               .events = &events},
                              model, chief && job.can_stop_early() && topts.evaluate_each_epoch);
  }
  if (elastic.enabled()) {
    updater.EnableElastic(model, elastic.commit_every_steps,
                          {.reform = [&](const Status& error, std::int64_t commit_step) { return Reform(cx, error, commit_step); },
                           .joiners_waiting = [&] {
                             const std::shared_ptr<collective::Collective> now = holder->Get();
                             return now != nullptr && now->rank() == 0 && door->Poll(now->options().members);
                           },
                           .grow = [&](std::int64_t commit_step) { return Grow(cx, *door, commit_step); }});
    spdlog::info("elastic: a commit every {} global steps, kept in memory; the ring goes on without a lost worker while at least "
                 "min_workers {} remain, and takes workers that join at a commit (up to max_workers {})",
                 elastic.commit_every_steps, elastic.min_workers, elastic.max_workers);
  }
  if (joined) {
    const std::int64_t at = joined->commit_step;
    Result<train::Updater::Position> joined_at = updater.Join(model, std::move(*joined));
    if (!joined_at.ok()) return train::AtStartup(joined_at.status());
    const train::Updater::Position start = *joined_at;
    const int size = updater.EpochShare()->count;
    spdlog::info("joined the ring at the commit of global_step {}: {} workers; this worker trains from epoch {} step {}", at, size,
                 start.epoch, start.epoch_steps + 1);
    events.Emit("joined", {{"global_step", at}, {"workers", std::int64_t{size}}, {"epoch", std::int64_t{start.epoch}},
                           {"rank", std::int64_t{updater.EpochShare()->index}}});
    topts.start_at = start;
  }
  spdlog::info("ready: ring of {} workers formed", joined ? updater.EpochShare()->count : num_workers);
  task::EmitReady(events, 0, fmt::format("{} in a ring of {} workers", config.task.ToString(),
                                         joined ? updater.EpochShare()->count : num_workers));
  if (device_compute) topts.compute = device_compute;
  Status trained = train::Train(job, loaded.data, model, updater, events, topts);
  model.SetCrossReplicaSum(nullptr);  // the updater goes before the model
  return trained;
}

}  // namespace tfd::allreduce
