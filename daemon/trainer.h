#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/config/job.h"
#include "common/model/dataset.h"
#include "common/model/model.h"

namespace tfd::daemon {

// How a worker's gradients become new parameters: applied locally (standalone) or pushed to the
// ps tasks and pulled back.
class Updater {
 public:
  virtual ~Updater() = default;
  // Called during backprop each time the gradients grads()[from, end) are final (Model's
  // GradientsReady), before Step: an updater may start sending them while earlier layers compute.
  virtual Status GradientsReady(model::Model&, std::size_t /*from*/) { return Status::Ok(); }
  // Called once the model's gradients for local step `local_step` are computed; leaves the
  // parameters to use next in model.params() and returns the global step they belong to.
  virtual Result<std::int64_t> Step(model::Model& model, std::int64_t local_step) = 0;
  // Called after the last step: leaves the final parameters in model.params().
  virtual Result<std::int64_t> Finish(model::Model& model) = 0;
  // False when Finish never changes the parameters (so the last epoch's evaluation stands).
  virtual bool FinishChangesParams() const { return true; }
  // Extra `key=value` text for the epoch line (e.g. stale gradient counts), may be empty.
  virtual std::string EpochNote() { return ""; }

  // Uneven shards (allreduce). When true, each worker takes every full batch of its own shard;
  // before each Step the trainer says whether this worker has a batch for the step after it, and
  // once out of data it calls JoinStep while OthersHaveData(), so the epoch ends for every worker
  // at the same step. False (the ps modes): every worker takes StepsPerEpoch steps.
  virtual bool JoinsUnevenShards() const { return false; }
  virtual void SetHasNextBatch(bool) {}
  // After a Step or JoinStep: whether some worker has a batch for the next step.
  virtual bool OthersHaveData() const { return false; }
  // Takes part in one step without a gradient of this worker's; returns the global step.
  virtual Result<std::int64_t> JoinStep(model::Model&) { return Status::Internal("JoinStep: not supported by this update mode"); }
};

struct TrainerOptions {
  std::string task = "standalone";  // for log lines: "worker:1"
  int rank = 0, num_workers = 1;    // this worker's shard of the data
  bool evaluate_each_epoch = true;  // the chief (or a standalone run) evaluates every epoch
  const std::atomic<bool>* stop = nullptr;
  std::string params_out;  // when set, the final parameters are written there (raw little-endian floats)
  // Local steps a previous incarnation of this worker already took: a restarted worker goes on
  // from there in the same data order instead of starting its shard again.
  std::int64_t start_local_step = 0;
  // When > 0, this worker uses at most this many examples of its shard each epoch (uneven shards;
  // only with an updater that JoinsUnevenShards).
  std::int64_t shard_limit = 0;
};

// The epoch loop shared by standalone and cluster workers: shards and batches the data, computes
// gradients, hands them to `updater`, logs the seeds' per-epoch line and the JSON events, and at
// the end evaluates the final parameters and emits `done` with params_sha256.
// `data` must give every worker at least one full batch (LoadJobData checks it). FailedPrecondition
// when stopped by a signal; the updater's errors as they come.
Status Train(const config::JobSpec& job, const model::MnistData& data, model::Model& model, Updater& updater,
             EventWriter& events, const TrainerOptions& options);

// Steps per epoch for every worker: the smallest shard's full batches, so all workers take the
// same number of steps (a sync step needs every worker's gradient).
std::int64_t StepsPerEpoch(std::int64_t examples, int num_workers, int batch_size);

}  // namespace tfd::daemon
