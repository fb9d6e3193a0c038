#include "daemon/worker/run_allreduce.h"

#include <random>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/base/service.h"
#include "daemon/standalone.h"

namespace tfd::worker {

AllreduceUpdater::AllreduceUpdater(collective::Ring& ring, const optim::Optimizer& optimizer, const model::Model& model, int bucket_kb)
    : ring_(ring), state_(optimizer, model.params().size()), buffer_(model.params().size() + 2) {
  const std::size_t min_floats = static_cast<std::size_t>(bucket_kb) * 1024 / 4;
  const std::vector<std::size_t>& starts = model.layer_starts();
  std::size_t end = buffer_.size();  // the last bucket also carries the two floats
  for (std::size_t i = starts.size() - 1; i-- > 0;) {
    const std::size_t begin = starts[i];
    if (begin == 0 || (bucket_kb > 0 && end - begin >= min_floats)) {
      buckets_.push_back({begin, end});
      end = begin;
    }
  }
  if (buckets_.empty() || buckets_.back().begin != 0) buckets_.push_back({0, end});  // a model without parameters
}

Status AllreduceUpdater::StartBucket(model::Model& model, bool contributes) {
  const Bucket& b = buckets_[next_bucket_++];
  const std::span<float> grads = model.grads();
  const std::size_t n = grads.size(), grad_end = std::min(b.end, n);
  if (contributes) std::copy(grads.begin() + static_cast<std::ptrdiff_t>(b.begin), grads.begin() + static_cast<std::ptrdiff_t>(grad_end),
                             buffer_.begin() + static_cast<std::ptrdiff_t>(b.begin));
  else std::fill(buffer_.begin() + static_cast<std::ptrdiff_t>(b.begin), buffer_.begin() + static_cast<std::ptrdiff_t>(grad_end), 0.0f);
  if (b.end == buffer_.size()) {
    buffer_[n] = contributes ? 1.0f : 0.0f;
    buffer_[n + 1] = has_next_ ? 1.0f : 0.0f;
  }
  TFD_ASSIGN_OR_RETURN(last_id_, ring_.StartAllReduce(std::span<float>(buffer_).subspan(b.begin, b.end - b.begin)));
  return Status::Ok();
}

Status AllreduceUpdater::GradientsReady(model::Model& model, std::size_t from) {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= from) TFD_RETURN_IF_ERROR(StartBucket(model, true));
  return next_bucket_ > 0 ? ring_.Progress() : Status::Ok();  // nothing in flight before the first bucket
}

Result<std::int64_t> AllreduceUpdater::Step(model::Model& model, std::int64_t) { return Exchange(model, true); }

Result<std::int64_t> AllreduceUpdater::JoinStep(model::Model& model) {
  ++joined_;
  return Exchange(model, false);
}

Result<std::int64_t> AllreduceUpdater::Finish(model::Model&) {
  TFD_RETURN_IF_ERROR(ring_.Finish().WithContext("leaving the ring"));
  return global_step_;
}

std::string AllreduceUpdater::EpochNote() {
  std::string note = joined_ > 0 ? fmt::format("joined_without_data={}", joined_) : "";
  joined_ = 0;
  return note;
}

Result<std::int64_t> AllreduceUpdater::Exchange(model::Model& model, bool contributes) {
  std::span<float> grads = model.grads();
  const std::size_t n = grads.size();
  // The buckets backprop has not started (all of them for a join step, or without the hook).
  Status sent;
  while (sent.ok() && next_bucket_ < buckets_.size()) sent = StartBucket(model, contributes);
  next_bucket_ = 0;
  has_next_ = false;  // a join step never brings data of this worker's
  if (sent.ok()) sent = ring_.Wait(last_id_);
  TFD_RETURN_IF_ERROR(sent.WithContext(fmt::format("all-reduce of global step {}", global_step_ + 1)));
  // Small integers: the sums are exact, and the same bits on every worker.
  const float contributors = buffer_[n];
  others_have_data_ = buffer_[n + 1] > 0.0f;
  ++global_step_;
  if (contributors > 0.0f) {
    const float scale = 1.0f / contributors;
    for (std::size_t i = 0; i < n; ++i) grads[i] = buffer_[i] * scale;
    state_.Apply(model.params(), grads);
  }
  return global_step_;
}

Status RunAllreduceWorker(const config::TfConfig& config, const config::JobSpec& job, EventWriter& events,
                          const WorkerOptions& options) {
  const int num_workers = config.cluster.num_workers();
  const int rank = config.cluster.WorkerRank(config.task);
  if (!config.cluster.ps.empty())
    return Status::InvalidArgument(fmt::format("cluster.ps: {} ps tasks, but allreduce mode has none (workers all-reduce among "
                                               "themselves): remove them or use async or sync mode",
                                               config.cluster.ps.size()));
  TFD_ASSIGN_OR_RETURN(daemon::LoadedJob loaded, daemon::LoadJobData(job, num_workers));
  if (options.shard_limit > 0 && options.shard_limit < job.batch_size)
    return Status::InvalidArgument(fmt::format("--shard-limit: {} is less than one batch ({})", options.shard_limit, job.batch_size));
  model::Model& model = *loaded.model;
  std::unique_ptr<optim::Optimizer> optimizer = optim::MakeOptimizer(job.optimizer);
  const bool chief = config.is_chief();
  spdlog::info("{} (rank {} of {}{}); allreduce; model: {}", config.task.ToString(), rank, num_workers, chief ? ", chief" : "",
               model.Summary());
  events.Emit("start", {{"role", std::string("worker")}, {"rank", std::int64_t{rank}}, {"chief", chief},
                        {"mode", std::string("allreduce")}});

  transport::asio::io_context ioc(1);
  auto work = transport::asio::make_work_guard(ioc);
  std::thread io([&ioc] { ioc.run(); });
  std::unique_ptr<transport::Listener> listener;
  std::shared_ptr<collective::Ring> ring;
  struct Joiner {
    transport::asio::io_context& ioc;
    decltype(work)& guard;
    std::thread& thread;
    std::unique_ptr<transport::Listener>& listener;
    std::shared_ptr<collective::Ring>& ring;
    ~Joiner() {
      if (ring != nullptr) ring->Close(Status::Ok());
      if (listener != nullptr) listener->Stop();
      guard.reset();
      transport::asio::steady_timer limit(ioc, std::chrono::milliseconds(200));
      limit.async_wait([this](const boost::system::error_code&) { ioc.stop(); });
      thread.join();
    }
  } joiner{ioc, work, io, listener, ring};

  collective::RingOptions ro;
  ro.rank = rank;
  for (int r = 0; r < num_workers; ++r) {
    const config::TaskId t = config.cluster.WorkerTask(r);
    const config::Endpoint& ep = config.cluster.EndpointOf(t);
    ro.members.push_back({t.ToString(), ep.host, ep.port, static_cast<wire::TaskKind>(t.type), static_cast<std::uint32_t>(t.index)});
  }
  ro.cluster_id = config.cluster.Id();
  ro.incarnation = (static_cast<std::uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
  ro.connection = options.ps.connection;
  ro.startup_timeout = options.ps.startup_timeout;
  ro.step_timeout = options.ps.step_timeout;
  ro.stop = options.stop;
  ring = collective::Ring::Create(ioc, ro);
  if (num_workers > 1) {
    const config::Endpoint& self = config.self();
    TFD_ASSIGN_OR_RETURN(listener, transport::Listener::Bind(ioc, options.bind_address, self.port,
                                                             [r = ring](transport::tcp::socket s) { r->Accept(std::move(s)); }));
    listener->Start();
    spdlog::info("listening on {}:{} for {}", options.bind_address.empty() ? "*" : options.bind_address, self.port,
                 ro.members[static_cast<std::size_t>((rank + num_workers - 1) % num_workers)].task);
  }
  TFD_RETURN_IF_ERROR(ring->Connect());
  // Every worker starts from the chief's parameters.
  TFD_RETURN_IF_ERROR(ring->Broadcast(model.params()).WithContext("broadcast of the initial parameters"));
  spdlog::info("ready: ring of {} workers formed", num_workers);
  events.Emit("ready", {{"global_step", std::int64_t{0}}});
  NotifyReady(fmt::format("{} in a ring of {} workers", config.task.ToString(), num_workers));

  AllreduceUpdater updater(*ring, *optimizer, model, job.update.bucket_kb);
  return daemon::Train(job, loaded.data, model, updater, events, TrainerOptionsFor(config, options));
}

}  // namespace tfd::worker
