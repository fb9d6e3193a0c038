#pragma once

#include <atomic>

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/config/job.h"
#include "common/model/dataset.h"
#include "common/model/model.h"

namespace tfd::daemon {

struct StandaloneOptions {
  const std::atomic<bool>* stop = nullptr;  // set by a signal handler: finish the step, then return
  std::string params_out;                   // write the final parameters here (raw little-endian floats)
};

// A job's data and its model, built and initialised from the seed.
struct LoadedJob {
  model::MnistData data;
  std::unique_ptr<model::Model> model;
};

// Loads the data and builds the model for one of `num_workers` workers. InvalidArgument/NotFound/
// Corruption naming the file or field when the data or model does not fit (exit code 2).
Result<LoadedJob> LoadJobData(const config::JobSpec& job, int num_workers);

// Trains `job` in this process: per-epoch log lines and events, test accuracy each epoch and at the
// end, then a `done` event with params_sha256. InvalidArgument/NotFound/Corruption for bad data or
// a model that does not fit it (before training starts); FailedPrecondition when stopped.
Status RunStandalone(const config::JobSpec& job, EventWriter& events, const StandaloneOptions& options);

}  // namespace tfd::daemon
