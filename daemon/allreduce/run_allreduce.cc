#include "daemon/allreduce/run_allreduce.h"

#include <unistd.h>


#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/base/service.h"
#include "common/transport/io_thread.h"
#include "common/transport/listener.h"
#include "daemon/allreduce/allreduce_updater.h"
#include "daemon/ring_options.h"
#include "daemon/train/device.h"
#include "daemon/train/job_data.h"
#include "daemon/train/trainer.h"

namespace tfd::allreduce {

Status RunAllreduceWorker(const config::TfConfig& config, const config::JobSpec& job, EventWriter& events,
                          const train::WorkerTaskOptions& options, const transport::ConnectionOptions& connection) {
  const int num_workers = config.cluster.num_workers();
  const int rank = config.cluster.WorkerRank(config.task);
  if (!config.cluster.ps.empty())
    return Status::InvalidArgument(fmt::format("cluster.ps: {} ps tasks, but allreduce mode has none (workers all-reduce among "
                                               "themselves): remove them or use async or sync mode",
                                               config.cluster.ps.size()));
  TFD_ASSIGN_OR_RETURN(train::LoadedJob loaded, train::LoadJobData(job, num_workers));
  if (options.shard_limit > 0 && options.shard_limit < job.batch_size)
    return Status::InvalidArgument(fmt::format("--shard-limit: {} is less than one batch ({})", options.shard_limit, job.batch_size));
  model::Model& model = *loaded.model;
  TFD_ASSIGN_OR_RETURN(auto device_compute, train::DeviceGradients(job, model));  // device "cuda:N": gradients on the GPU
  std::unique_ptr<optim::Optimizer> optimizer = optim::MakeOptimizer(job.optimizer);
  const bool chief = config.is_chief();
  spdlog::info("{} (rank {} of {}{}); allreduce; model: {}", config.task.ToString(), rank, num_workers, chief ? ", chief" : "",
               model.Summary());
  events.Emit("start", {{"role", std::string("worker")}, {"rank", std::int64_t{rank}}, {"chief", chief},
                        {"mode", std::string("allreduce")}, {"pid", std::int64_t{getpid()}}});

  std::unique_ptr<transport::Listener> listener;
  std::shared_ptr<collective::Ring> ring;
  // On every return: close the ring and the listener, let their closes run, stop the I/O thread.
  transport::IoThread io([&] {
    if (ring != nullptr) ring->Close(Status::Ok());
    if (listener != nullptr) listener->Stop();
  });

  const collective::RingOptions ro = RingOptionsFor(config, 0, num_workers, rank, options, connection);
  ring = collective::Ring::Create(io.context(), ro);
  if (num_workers > 1) {
    const config::Endpoint& self = config.self();
    TFD_ASSIGN_OR_RETURN(listener, transport::Listener::Bind(io.context(), options.bind_address, self.port,
                                                             [r = ring](transport::tcp::socket s) { r->Accept(std::move(s)); }));
    listener->Start();
    spdlog::info("listening on {}:{} for {}", options.bind_address.empty() ? "*" : options.bind_address, self.port,
                 ro.members[static_cast<std::size_t>((rank + num_workers - 1) % num_workers)].task);
  }
  TFD_RETURN_IF_ERROR(train::AtStartup(ring->Connect()));
  // Every worker starts from the chief's parameters.
  TFD_RETURN_IF_ERROR(train::AtStartup(ring->Broadcast(model.params()).WithContext("broadcast of the initial parameters")));
  spdlog::info("ready: ring of {} workers formed", num_workers);
  events.Emit("ready", {{"global_step", std::int64_t{0}}});
  NotifyReady(fmt::format("{} in a ring of {} workers", config.task.ToString(), num_workers));

  metrics::TaskMetrics* m = options.metrics;
  if (m != nullptr) m->AddAllreduceMetrics();
  if (m != nullptr) m->connected_peers->Set(num_workers > 1 ? 2 : 0);  // the ring's links to the previous and next member
  AllreduceUpdater updater(*ring, *optimizer, model, job.update.bucket_kb, m != nullptr ? m->allreduce_bytes : nullptr);
  train::TrainerOptions topts = train::TrainerOptionsFor(config, job, options);
  if (device_compute) topts.compute = device_compute;
  return train::Train(job, loaded.data, model, updater, events, topts);
}

}  // namespace tfd::allreduce
