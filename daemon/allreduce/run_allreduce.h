#pragma once

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/config/cluster.h"
#include "common/config/job.h"
#include "common/transport/connection.h"
#include "daemon/train/task_options.h"

namespace tfd::allreduce {

// Runs this process as a worker (or the chief) of an allreduce cluster (no ps): listens on this
// task's address, forms the ring with the other workers (in rank order), takes the chief's initial
// parameters and trains, every worker applying the same averaged gradient. Errors name the
// neighbour or field concerned.
Status RunAllreduceWorker(const config::TfConfig& config, const config::JobSpec& job, EventWriter& events,
                          const train::WorkerTaskOptions& options, const transport::ConnectionOptions& connection);

}  // namespace tfd::allreduce
