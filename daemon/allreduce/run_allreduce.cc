#include "daemon/allreduce/run_allreduce.h"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/base/mutex.h"
#include "common/base/service.h"
#include "common/transport/io_thread.h"
#include "common/transport/listener.h"
#include "daemon/allreduce/allreduce_updater.h"
#include "daemon/ring_options.h"
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
    std::shared_ptr<collective::Ring> ring;
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
  void Set(std::shared_ptr<collective::Ring> ring) TFD_EXCLUDES(mu_) {
    std::deque<transport::tcp::socket> waited;
    {
      MutexLock lock(&mu_);
      ring_ = ring;
      waited.swap(waiting_);
    }
    for (transport::tcp::socket& s : waited) ring->Accept(std::move(s));
  }
  std::shared_ptr<collective::Ring> Get() TFD_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return ring_;
  }

 private:
  static constexpr std::size_t kMaxWaiting = 16;  // a ring takes two: the rest are strangers or stale
  Mutex mu_;
  std::shared_ptr<collective::Ring> ring_ TFD_GUARDED_BY(mu_);
  std::deque<transport::tcp::socket> waiting_ TFD_GUARDED_BY(mu_);
};



// Elastic: after `error` of `holder`'s ring, the ring of the members left without the one the error
// blames. Each survivor forms it (new incarnation, so the old ring's frames are refused; retried
// until `settle` is over, as the survivors notice the loss at different times), then they agree in
// one all-reduce on the newest commit every member holds: the largest current commit step.
Result<AllreduceUpdater::Reformed> Reform(RingHolder& holder, transport::asio::io_context& ioc, const config::ElasticSpec& elastic,
                                          EventWriter& events, const std::atomic<bool>* stop, const Status& error,
                                          std::int64_t commit_step) {
  const std::shared_ptr<collective::Ring> old = holder.Get();
  const int blamed = old->Blamed(error);
  if (blamed < 0) return error;  // it names no member to drop: not a loss this can recover from
  const collective::RingOptions& before = old->options();
  const std::string lost = fmt::format("{} ({}:{})", before.members[static_cast<std::size_t>(blamed)].task,
                                       before.members[static_cast<std::size_t>(blamed)].host, before.members[static_cast<std::size_t>(blamed)].port);
  collective::RingOptions ro = before;
  ro.members.erase(ro.members.begin() + blamed);
  if (blamed < before.rank) --ro.rank;
  const int n = static_cast<int>(ro.members.size());
  // The cluster id of this membership: a member that still runs the old ring, or sees another
  // membership, refuses this ring's HELLO (and this one its).
  for (const collective::RingMember& m : ro.members) {
    for (char ch : m.task) ro.cluster_id = (ro.cluster_id ^ static_cast<unsigned char>(ch)) * 0x100000001b3ULL;
    ro.cluster_id = (ro.cluster_id ^ 0xff) * 0x100000001b3ULL;
  }
  if (n < elastic.min_workers) {
    return Status::FailedPrecondition(fmt::format("elastic: the run is over: {} workers left, fewer than elastic min_workers {} ({} lost: {})",
                                                  n, elastic.min_workers, lost, error.message()));
  }
  spdlog::warn("elastic: lost {}: {}; re-forming the ring with the {} workers left", lost, error.message(), n);
  // Long enough for every survivor to notice the loss: a silent member takes a peer timeout.
  const auto settle = std::max<Clock::duration>(2 * before.connection.peer_timeout, std::chrono::seconds(5));
  const auto deadline = Clock::now() + settle;
  Status why;
  ro.redial = true;  // a survivor that has not noticed the loss yet refuses this ring's HELLO until it does
  for (int attempt = 1;; ++attempt) {
    ro.incarnation = task::NewIncarnation();
    ro.startup_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::shared_ptr<collective::Ring> ring = collective::Ring::Create(ioc, ro);
    holder.Set(ring);
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
      spdlog::info("membership: {} workers from global_step {} ({} lost; elastic min_workers {}, max_workers {}); rolled back to the "
                   "commit at global_step {}; this worker is rank {} of the ring",
                   n, agreed + 1, lost, elastic.min_workers, elastic.max_workers, agreed, ro.rank);
      events.Emit("membership", {{"workers", std::int64_t{n}}, {"global_step", agreed + 1}, {"commit_step", agreed}, {"lost", lost},
                                 {"rank", std::int64_t{ro.rank}}});
      return AllreduceUpdater::Reformed{.ring = ring, .commit_step = agreed};
    }
    ring->Close(Status::Ok());  // quietly: a neighbour's next attempt must not read this one's error
    if (Clock::now() >= deadline || (stop != nullptr && stop->load())) break;
    spdlog::info("elastic: the ring of {} workers did not form (attempt {}: {}); trying again", n, attempt, why.message());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return Status::Unavailable(fmt::format("elastic: the ring of the {} workers left after {} was lost did not re-form within {:.0f} s: {}",
                                         n, lost, std::chrono::duration<double>(settle).count(), why.message()));
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

  std::unique_ptr<transport::Listener> listener;
  std::shared_ptr<collective::Ring> ring;
  auto holder = std::make_shared<RingHolder>();  // the listener's way to the ring of the moment
  // On every return: close the ring and the listener, let their closes run, stop the I/O thread.
  transport::IoThread io([&] {
    if (ring != nullptr) ring->Close(Status::Ok());
    if (std::shared_ptr<collective::Ring> now = holder->Get(); now != nullptr) now->Close(Status::Ok());
    if (listener != nullptr) listener->Stop();
  });

  const collective::RingOptions ro = RingOptionsFor(config, 0, num_workers, rank, options, connection);
  ring = collective::Ring::Create(io.context(), ro);
  holder->Set(ring);
  if (num_workers > 1) {
    const config::Endpoint& self = config.self();
    TFD_ASSIGN_OR_RETURN(listener, transport::Listener::Bind(io.context(), options.bind_address, self.port,
                                                             [holder](transport::tcp::socket s) { holder->Accept(std::move(s)); }));
    listener->Start();
    spdlog::info("listening on {}:{} for {}", options.bind_address.empty() ? "*" : options.bind_address, self.port,
                 ro.members[static_cast<std::size_t>((rank + num_workers - 1) % num_workers)].task);
  }
  TFD_RETURN_IF_ERROR(train::AtStartup(ring->Connect()));
  // Every worker starts from the chief's parameters.
  TFD_RETURN_IF_ERROR(train::AtStartup(ring->Broadcast(model.params()).WithContext("broadcast of the initial parameters")));
  spdlog::info("ready: ring of {} workers formed", num_workers);
  task::EmitReady(events, 0, fmt::format("{} in a ring of {} workers", config.task.ToString(), num_workers));

  metrics::TaskMetrics* m = options.metrics;
  if (m != nullptr) m->AddAllreduceMetrics();
  if (m != nullptr) m->connected_peers->Set(num_workers > 1 ? 2 : 0);  // the ring's links to the previous and next member
  AllreduceUpdater updater(ring, *optimizer, model, job.update.bucket_kb, m != nullptr ? m->allreduce_bytes : nullptr);
  if (elastic.enabled()) {
    updater.EnableElastic(model, elastic.commit_every_steps, [&](const Status& error, std::int64_t commit_step) {
      return Reform(*holder, io.context(), elastic, events, options.stop, error, commit_step);
    });
    spdlog::info("elastic: a commit every {} global steps, kept in memory; the ring goes on without a lost worker while at least "
                 "min_workers {} remain", elastic.commit_every_steps, elastic.min_workers);
  }
  train::TrainerOptions topts = train::TrainerOptionsFor(config, job, options);
  if (device_compute) topts.compute = device_compute;
  return train::Train(job, loaded.data, model, updater, events, topts);
}

}  // namespace tfd::allreduce
