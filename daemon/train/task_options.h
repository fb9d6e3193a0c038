#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/config/cluster.h"
#include "common/config/job.h"
#include "common/metrics/task_metrics.h"
#include "daemon/train/trainer.h"

namespace tfd::train {

// What main() gives every training role of a cluster (a worker of the ps modes, an allreduce
// worker), from tfd's flags. The connection options travel beside it: train/ knows no sockets.
struct WorkerTaskOptions {
  const std::atomic<bool>* stop = nullptr;  // set by a signal handler: finish the step, then return
  std::string params_out;                   // write the final parameters here (raw little-endian floats)
  std::string bind_address;                 // allreduce: listen on this address only ("" = every interface)
  std::int64_t shard_limit = 0;             // allreduce: use at most this many examples of the shard per epoch
  std::chrono::milliseconds startup_timeout{120000};   // to reach every peer and see the cluster ready
  std::chrono::milliseconds step_timeout{300000};      // one exchange (sync waits for the others)
  std::chrono::milliseconds reconnect_timeout{60000};  // ps modes: how long a lost ps is dialed again
  std::vector<TrainObserver*> observers;  // summaries, metrics: told of every step and epoch; not owned
  // The task's Prometheus metrics beyond the observers' (bytes, latencies, peers, checkpoints); the
  // role adds its own (AddPsClientMetrics, AddAllreduceMetrics) before it starts. Null: none. Not owned.
  tfd::metrics::TaskMetrics* metrics = nullptr;
};

// The trainer's options for this task: its rank and shard, per-epoch evaluation on the chief when
// the job's evaluation is "chief", the stop flag, --params-out and --shard-limit.
TrainerOptions TrainerOptionsFor(const config::TfConfig& config, const config::JobSpec& job, const WorkerTaskOptions& options);

}  // namespace tfd::train
