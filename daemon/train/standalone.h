#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/ckpt/checkpoint.h"

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/config/job.h"
#include "common/model/model.h"
#include "daemon/train/observer.h"

namespace tfd::train {

struct StandaloneOptions {
  const std::atomic<bool>* stop = nullptr;  // set by a signal handler: finish the step, then return
  std::string params_out;                   // write the final parameters here (raw little-endian floats)
  std::vector<TrainObserver*> observers;    // summaries, metrics; not owned
  // Resume from this checkpoint, taken at the end of an epoch of this job in one process (as
  // epoch_checkpoint gives it): its parameters, optimizer slots and update count, and its step; the
  // run goes on with the next epoch, in the data order and dropout seeds an uninterrupted run has.
  // Not owned; null: start afresh.
  const ckpt::Checkpoint* resume = nullptr;
  // Called at the end of every epoch, before the observers, with the run's whole state then (the
  // parameters, the optimizer slots and update count, the step and the next epoch's data cursor).
  // Like an observer it may not fail the run.
  std::function<void(int epoch, const ckpt::Checkpoint&)> epoch_checkpoint;
  // Write the task's `start` event (task::EmitStart). A generic worker's trials do not: the worker
  // wrote its own when it reached the coordinator, and a trial is not a (re)start of the task.
  bool emit_start = true;
};

// The run's state after `epoch` (local_step steps): what epoch_checkpoint is given.
// `slots`/`updates`: the optimizer state as optim::OptimizerState keeps it.
ckpt::Checkpoint EpochCheckpoint(const config::JobSpec& job, const model::Model& model, std::span<const float> slots,
                                 std::int64_t updates, int epoch, std::int64_t local_step);
// Checks `c` against `job` and `model` (steps_per_epoch: the job's steps in one process) and
// returns the step to resume from; fills `params` and `slots` (OptimizerState's layout) from it.
// FailedPrecondition naming `source` when it belongs to another optimizer, model or batch size, or
// was not taken at an epoch's end.
Result<std::int64_t> RestoreEpochCheckpoint(const ckpt::Checkpoint& c, const config::JobSpec& job, const model::Model& model,
                                            std::int64_t steps_per_epoch, std::span<float> params, std::span<float> slots,
                                            std::string_view source);

// Trains `job` in this process: per-epoch log lines and events, test accuracy each epoch and at the
// end, then a `done` event with params_sha256. InvalidArgument/NotFound/Corruption for bad data or
// a model that does not fit it (before training starts); FailedPrecondition when stopped.
Status RunStandalone(const config::JobSpec& job, EventWriter& events, const StandaloneOptions& options);

}  // namespace tfd::train
