#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "common/base/status.h"
#include "common/ckpt/checkpoint.h"
#include "common/model/model.h"

namespace tfd::train {

// The seam between the epoch loop and a role: how a worker's gradients become new parameters.
// Applied locally (train/standalone), pushed to the ps tasks and pulled back (worker/), or
// all-reduced among the workers (allreduce/). Called by the training thread only.
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
  // At the end of every epoch but the last, when the job can stop early (job.can_stop_early()), on
  // every worker: `stop` is the chief's decision (always false elsewhere); returns whether every
  // worker stops now. The ps modes return `stop` (the others learn it from the ps: StopRequested);
  // allreduce agrees on it in a collective.
  virtual Result<bool> EndOfEpoch(bool stop) { return stop; }
  // At the end of every epoch on the chief of a job that can stop early, before EndOfEpoch: the
  // early-stopping rule's state after it, for the checkpoints this updater writes.
  virtual void EpochJudged(const ckpt::EarlyStopping&) {}
  // After a Step: whether the chief has stopped the run early, so this worker stops too.
  virtual bool StopRequested() const { return false; }
  // An elastic job: this worker's share of the data for the epoch about to start, as last heard
  // (its place among the workers in the run, and their count); nullopt: the cluster's rank and size.
  struct Share {
    int index = 0, count = 1;
    bool operator==(const Share&) const = default;
  };
  virtual std::optional<Share> EpochShare() { return std::nullopt; }
  // At the start of every epoch, before its first step.
  virtual void StartingEpoch(int /*epoch*/) {}
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

  // Where the epoch loop is: the epoch, the global steps of it taken (every worker of an allreduce
  // ring takes them in lockstep, a join step counting), and this worker's local and global steps.
  struct Position {
    int epoch = 1;
    std::int64_t epoch_steps = 0, local_step = 0, global_step = 0;
  };
  // Before each Step and JoinStep: where the loop will be once that step is done (an updater that
  // commits the training state keeps it with the commit).
  virtual void AtStep(const Position&) {}
  // After an updater error (`failure`, as the updater returned it): recovers when it can (an
  // elastic allreduce ring re-forms without a lost worker and rolls the model back to its last
  // commit) and returns where the loop goes on from; otherwise returns `failure`.
  virtual Result<Position> Recover(model::Model&, const Status& failure) { return failure; }
  // After a Step or JoinStep that succeeded: where the loop goes on from when the membership
  // changed with that step (an elastic allreduce ring that grew), once; the epoch in progress then
  // goes on from there with the shares EpochShare gives. nullopt: no change.
  virtual std::optional<Position> Regrouped() { return std::nullopt; }
};

}  // namespace tfd::train
