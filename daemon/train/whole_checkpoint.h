#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/ckpt/checkpoint.h"
#include "common/ckpt/file.h"
#include "common/config/job.h"
#include "common/export/model_card.h"
#include "common/model/model.h"

namespace tfd::train {

// Checkpoints of the whole network, for the roles whose workers hold it (or gather it) themselves:
// the allreduce ring, where every worker holds the same parameters, and a model-parallel replica,
// whose stages gather it. The files are a ps mode's (docs/checkpoints.md): the variables under their
// usual names, so a run restores from any mode's checkpoint onto any mode.

// A checkpoint to resume from: the whole network and its optimizer slots.
struct WholeRestore {
  bool found = false;
  std::string path;                 // the chief's only
  std::uint64_t global_step = 0;    // as saved
  std::uint64_t resume_step = 0;    // the local step every replica resumes after
  std::int64_t updates = 0;         // the optimizer's update count
  std::vector<float> params;        // model.params() order
  std::vector<float> slots;         // slot k of every parameter, then slot k + 1 (OptimizerState's layout)
  std::optional<ckpt::EarlyStopping> early_stopping;  // the chief's only: the rule's state as saved
  // update.compression's error feedback, when the checkpoint has the job's method: a residual per
  // replica (the checkpoint had as many workers), or one for every replica (the mean of the saved
  // ones, what the average update still owes them, when the count differs). FeedbackFor picks.
  // After ShareWholeRestore, only the one this replica takes.
  std::optional<ckpt::ErrorFeedback> feedback;
};
// The residual replica `rank` resumes with (restore.feedback set); empty when there is none for it.
std::span<const float> FeedbackFor(const WholeRestore& restore, int rank);

// The chief, before the ring forms: the newest valid checkpoint in job.checkpoint.dir, matched to
// `model` by variable name and to job.optimizer. None there: found = false. InvalidArgument naming
// the file and what does not match (another optimizer, a variable missing or of another size).
// Resume step: with as many replicas as the checkpoint has workers, each resumes after the batches
// its cursor finished, and every replica takes the lowest of them (the replicas step together);
// with another count, every replica starts again the oldest epoch any worker was in.
Result<WholeRestore> LoadWholeRestore(const config::JobSpec& job, const model::Model& model, const exporting::ModelCard& card, int replicas,
                                      std::int64_t steps_per_epoch);

// One save of the whole network: parameters in model.params() order, slots in OptimizerState's
// layout (slot k of every parameter, then slot k + 1), named `slot_names`.
struct WholeState {
  std::uint64_t global_step = 0;
  std::int64_t updates = 0;
  // The data cursors: each of `replicas` has finished `epoch_steps` batches of its shard of `epoch`.
  int replicas = 1;
  int epoch = 1;
  std::int64_t epoch_steps = 0;
  bool final = false;
  std::vector<float> params, slots;
  std::optional<ckpt::EarlyStopping> early_stopping;
  std::optional<ckpt::ErrorFeedback> feedback;  // every replica's, gathered at the step
};
struct WholeCheckpointing {
  config::CheckpointSpec spec;       // dir empty: none
  config::OptimizerSpec optimizer;
  std::vector<std::string> slot_names;
  int batch_size = 0;
  std::string model_card;            // the checkpoints' CARD (exporting::CardText); empty: none
  EventWriter* events = nullptr;     // `checkpoint` events; not owned
};
// Writes `state` into c.spec.dir (ckpt::Write: atomic, keeping the newest c.spec.keep) and emits
// the `checkpoint` event; `how` ends its log line ("the whole network gathered from 2 stages").
// A failed write is logged and returned. Takes `state` (its error feedback moves into the file's
// checkpoint rather than being copied: every worker's residual, the largest part).
Result<std::string> WriteWholeCheckpoint(const WholeCheckpointing& c, const model::Model& model, WholeState state, const std::string& how);

// The chief's saves of a whole network it holds itself (an allreduce worker: every one holds the
// same), on job.checkpoint's schedule (every_steps, every_secs): the state is copied at the step
// and written on a thread of its own while training goes on. A save that falls due while the last
// one is still being written waits for the next step (the schedule stays due); the final save
// waits for its write. Not thread-safe: the training thread uses it.
class WholeSaver {
 public:
  // `model` (its variables' names and shapes) must outlive the saver; `start_step`: the global step
  // training starts at (a restored checkpoint's), from which the schedule counts.
  WholeSaver(WholeCheckpointing c, const model::Model& model, std::uint64_t start_step);
  ~WholeSaver();  // waits for the write in flight

  // Whether a save is due after `global_step` (per the schedule; never while a write is in flight,
  // unless `wait`: then after waiting for it).
  bool Due(std::uint64_t global_step, bool wait = false);
  // Whether the schedule alone makes a save due after `global_step` (a write in flight or not).
  bool ScheduleDue(std::uint64_t global_step) const;
  // Starts writing `state`, with the early-stopping state last set. A final one (state.final) is
  // written even at a step already saved, and waited for: its error is returned. A failed
  // background write is logged, and training goes on.
  Status Save(WholeState state, std::string how);
  // The early-stopping rule's state after the last epoch the chief judged: in every save from now on.
  void SetEarlyStopping(const ckpt::EarlyStopping& state) { early_stopping_ = state; }

 private:
  // The write in flight, if done (or `wait`): its outcome; Ok while it still runs, or with none.
  Status Collect(bool wait);

  const WholeCheckpointing c_;
  const model::Model& model_;
  ckpt::Schedule schedule_;
  std::optional<ckpt::EarlyStopping> early_stopping_;
  std::future<Result<std::string>> writing_;
  std::uint64_t last_saved_ = UINT64_MAX;
};

}  // namespace tfd::train
