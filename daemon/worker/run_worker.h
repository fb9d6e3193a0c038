#pragma once

#include <atomic>

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/config/cluster.h"
#include "common/config/job.h"
#include "common/transport/connection.h"
#include "daemon/train/task_options.h"

namespace tfd::worker {

// Runs this process as a chief or worker task of `config` training `job` against the cluster's ps
// tasks (async or sync mode): the chief initialises every ps, each worker trains on its shard and
// reports per epoch, the chief evaluates each epoch and writes checkpoints, and every worker ends
// with its final test accuracy and params_sha256. Errors name the ps or field concerned.
Status RunWorker(const config::TfConfig& config, const config::JobSpec& job, EventWriter& events,
                 const train::WorkerTaskOptions& options, const transport::ConnectionOptions& connection);

}  // namespace tfd::worker
