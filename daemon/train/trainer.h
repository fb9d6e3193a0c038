#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/config/job.h"
#include "common/data/dataset.h"
#include "common/model/model.h"
#include "daemon/train/observer.h"
#include "daemon/train/updater.h"

namespace tfd::train {

struct TrainerOptions {
  std::string task = "standalone";  // for log lines: "worker:1"
  int rank = 0, num_workers = 1;    // this worker's shard of the data
  bool evaluate_each_epoch = true;  // the chief (or a standalone run) evaluates every epoch
  const std::atomic<bool>* stop = nullptr;
  std::string params_out;  // when set, the final parameters are written there (raw little-endian floats)
  // Local steps a previous incarnation of this worker already took: a restarted worker goes on
  // from there in the same data order instead of starting its shard again.
  std::int64_t start_local_step = 0;
  // The early-stopping rule's saved states (the chief: the checkpoint's, the record of its last
  // judgement): the newest one before the first epoch this run trains is resumed, so patience goes
  // on counting where it was.
  std::vector<ckpt::EarlyStopping> early_stopping;
  // A worker that joined an elastic run starts at this epoch (0: where start_local_step puts it).
  int first_epoch = 0;
  // A worker that joined a running allreduce ring starts here (the commit it received), at local
  // step 0; overrides start_local_step and first_epoch.
  std::optional<Updater::Position> start_at;
  // When > 0, this worker uses at most this many examples of its shard each epoch (uneven shards;
  // only with an updater that JoinsUnevenShards).
  std::int64_t shard_limit = 0;
  // The chief (or a standalone run): writes the trained model into the job's export.dir, when set,
  // at the end (and every export.every_epochs epochs), emitting `exported`.
  bool exports = false;
  std::vector<TrainObserver*> observers;  // told of every step and epoch; not owned
  // Gather step s + 1's batch on a thread of its own while step s computes (model::BatchInput):
  // on for a GPU step, which leaves the host idle; the same batches either way.
  bool prefetch = false;
  // When set, computes each step's gradient into model.grads() instead of model.ComputeGradients
  // (micro-batches, a model-parallel stage's schedule), from the batch and the step's dropout
  // seed; its error ends the run as an updater's does. Updater::GradientsReady is not called then.
  std::function<Result<tensor::LossResult>(const float* x, const tensor::Labels& y, std::uint64_t dropout_seed)> compute;
};

// The epoch loop shared by standalone and cluster workers: shards and batches the data, computes
// gradients, hands them to `updater`, logs the seeds' per-epoch line and the JSON events, and at
// the end evaluates the final parameters and emits `done` with params_sha256.
// `data` must give every worker at least one full batch (train::LoadJobData checks it). FailedPrecondition
// when stopped by a signal; the updater's errors as they come.
Status Train(const config::JobSpec& job, const data::DataSplits& data, model::Model& model, Updater& updater,
             EventWriter& events, const TrainerOptions& options);

// The dropout seed of the batch a worker takes after `local_step` of its steps: a function of the
// job seed, the worker rank and the step only, so a run (and a restarted worker) is reproducible.
std::uint64_t DropoutSeed(std::uint64_t job_seed, int rank, std::int64_t local_step);

// `s` with where the worker was: still starting, before its first step (a lost peer's error then
// says so in the task's last line, as Train's errors name the epoch and steps).
Status AtStartup(const Status& s);

// Steps per epoch for every worker: the smallest shard's full batches, so all workers take the
// same number of steps (a sync step needs every worker's gradient).
std::int64_t StepsPerEpoch(std::int64_t examples, int num_workers, int batch_size);

}  // namespace tfd::train
