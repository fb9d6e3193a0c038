#pragma once

#include <atomic>

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/config/cluster.h"
#include "common/config/job.h"
#include "daemon/trainer.h"
#include "daemon/worker/ps_client.h"

namespace tfd::worker {

struct WorkerOptions {
  PsClientOptions ps;
  const std::atomic<bool>* stop = nullptr;
  std::string params_out;  // write the final parameters here (raw little-endian floats)
  std::string bind_address;  // allreduce: listen on this address only ("" = every interface)
  std::int64_t shard_limit = 0;  // allreduce: use at most this many examples of the shard per epoch
};

// Runs this process as a chief or worker task of `config` training `job` against the cluster's ps
// tasks (or, in allreduce mode, in a ring with the other workers): the chief initialises every ps, each worker trains on its shard and reports per epoch,
// the chief evaluates each epoch, and every worker ends with its final test accuracy and
// params_sha256. Errors name the ps or field concerned.
Status RunWorker(const config::TfConfig& config, const config::JobSpec& job, EventWriter& events, const WorkerOptions& options);

// The trainer's options for this task: its rank and shard, evaluation on the chief, the stop flag,
// --params-out and --shard-limit.
daemon::TrainerOptions TrainerOptionsFor(const config::TfConfig& config, const WorkerOptions& options);

}  // namespace tfd::worker
