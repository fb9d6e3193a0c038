#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/config/cluster.h"
#include "common/metrics/task_metrics.h"
#include "common/transport/connection.h"

namespace tfd::ps {

struct PsOptions {
  std::string bind_address;  // "" = every interface, as TensorFlow listens
  // For every accepted connection. Without a guard RunPs makes its own; give one to share it or to
  // read the refusal counts as they grow.
  transport::ConnectionOptions connection;
  const std::atomic<bool>* stop = nullptr;  // set by a signal handler
  // How long a lost (or never connected) worker may stay away before the ps gives up on it (tfd's
  // --reconnect-timeout: the same deadline the workers give a lost ps).
  std::chrono::milliseconds worker_return_timeout{60000};
  // How long a worker may take to connect at all (tfd's --startup-timeout, which a worker also
  // gives the ps), counted from the first worker's connection, or from this ps's start.
  std::chrono::milliseconds startup_timeout{120000};
  // When set, TensorBoard summaries of the updates (rate, async staleness) go to summaries_dir/<task>.
  std::string summaries_dir;
  // The ps's Prometheus metrics (RunPs adds its own with AddPsMetrics); null: none. Not owned.
  tfd::metrics::TaskMetrics* metrics = nullptr;
};

// Runs this process as the ps task of `config`: listens on its endpoint's port, serves the workers
// and returns Ok once the chief and every other worker has sent DONE or been given up on (see
// PsService). Unavailable if it cannot listen; FailedPrecondition when stopped by a signal, or when
// the run ended without the chief finishing (the chief given up on, a sync step that can never
// complete), with a message naming what was lost and the global step.
Status RunPs(const config::TfConfig& config, EventWriter& events, const PsOptions& options);

}  // namespace tfd::ps
