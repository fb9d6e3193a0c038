#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/config/job.h"
#include "daemon/train/observer.h"

namespace tfd::train {

struct StandaloneOptions {
  const std::atomic<bool>* stop = nullptr;  // set by a signal handler: finish the step, then return
  std::string params_out;                   // write the final parameters here (raw little-endian floats)
  std::vector<TrainObserver*> observers;    // summaries, metrics; not owned
};

// Trains `job` in this process: per-epoch log lines and events, test accuracy each epoch and at the
// end, then a `done` event with params_sha256. InvalidArgument/NotFound/Corruption for bad data or
// a model that does not fit it (before training starts); FailedPrecondition when stopped.
Status RunStandalone(const config::JobSpec& job, EventWriter& events, const StandaloneOptions& options);

}  // namespace tfd::train
