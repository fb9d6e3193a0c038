#pragma once

#include <memory>

#include "common/base/status.h"
#include "common/config/job.h"
#include "common/data/dataset.h"
#include "common/model/model.h"

namespace tfd::train {

// A job's data and its model, built and initialised from the seed.
struct LoadedJob {
  data::DataSplits data;
  std::unique_ptr<model::Model> model;
};

// Loads the data and builds the model for one of `num_workers` workers. InvalidArgument/NotFound/
// Corruption naming the file or field when the data or model does not fit (exit code 2), or, for a
// task that `trains`, when the job's device "cuda:N" cannot be used here (cuda::CheckDevice's
// reason) or the job is model parallel (which trains on the CPU only).
Result<LoadedJob> LoadJobData(const config::JobSpec& job, int num_workers, bool trains = true);

}  // namespace tfd::train
