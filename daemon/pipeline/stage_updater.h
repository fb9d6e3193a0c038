#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/config/job.h"
#include "common/collective/ring.h"
#include "common/model/model.h"
#include "common/optim/optimizer.h"
#include "daemon/pipeline/layer_stage.h"
#include "daemon/train/updater.h"
#include "daemon/train/whole_checkpoint.h"

namespace tfd::pipeline {

// A run of the flat parameter buffer that one stage owns: [begin, end), within one variable.
struct OwnedRange {
  std::size_t begin = 0, end = 0;
  bool decayed = false;  // a kernel's: the optimizer's weight decay applies
};

// The ranges of model.params() that layers [first, last) hold (a `layers` stage).
std::vector<OwnedRange> LayerRanges(const model::Model& model, std::size_t first, std::size_t last);
// The ranges a `units` stage holds: columns UnitSlice(units, stage, stages) of every dense
// kernel (one range per kernel row) and of its bias.
std::vector<OwnedRange> UnitRanges(const model::Model& model, int stage, int stages);

// Checkpoints of a model-parallel replica (job.checkpoint with every_steps; every_secs is not used,
// as every stage must gather at the same step): every stage takes part in gathering the whole
// network and its optimizer slots, and the chief alone (`writer`) writes them, under the variables'
// usual names (train::WriteWholeCheckpoint), so the file is the same as a ps mode's and restores
// onto any split or data parallel.
struct StageCheckpointing {
  train::WholeCheckpointing whole;   // whole.spec.dir empty: none
  std::int64_t steps_per_epoch = 0;  // for the data cursors
  int replicas = 1;                  // one data cursor per replica
  bool writer = false;               // this task writes the files (the chief)
};

// A model-parallel stage's updates: the step's gradient (already in model.grads() over the owned
// ranges) is applied to the owned parameters and optimizer slots only, element for element as one
// process applies them. Finish gathers the whole network on every stage of the ring: each stage
// contributes its own values and -0.0 everywhere else, and x + (-0.0) is x for every float, so the
// all-reduce leaves each owner's bits unchanged. `note`, when set, gives the epoch line's text.
// Training thread only.
class StageUpdater final : public train::Updater {
 public:
  StageUpdater(collective::Ring& ring, const optim::Optimizer& optimizer, std::vector<OwnedRange> owned,
               std::function<std::string()> note = nullptr, StageCheckpointing checkpointing = {});

  // Several replicas: before each update, the step's gradient of the owned ranges is summed over
  // `replicas` (the ring of this stage in every replica, in replica order) and scaled by 1/R, so
  // every replica applies the same bits; its time is added to stats->replicas_s. Not owned; call
  // before training.
  void CombineReplicasOver(collective::Ring* replicas, StageStats* stats) {
    replicas_ = replicas;
    stats_ = stats;
    if (replicas_ != nullptr && stats_ != nullptr) stats_->replicas_s = 0;
  }

  // A restore: the optimizer's state of the owned ranges from `slots` (the whole buffer's, slot k
  // of every parameter then slot k + 1), the count of updates they reflect, and the local step
  // the run resumes after.
  Status Restore(std::span<const float> slots, std::int64_t updates, std::int64_t local_step);

  Result<std::int64_t> Step(model::Model& model, std::int64_t local_step) override;
  Result<std::int64_t> Finish(model::Model& model) override;
  std::string EpochNote() override { return note_ ? note_() : ""; }
  // The chief: the early-stopping rule's state after the epoch it judged, for the checkpoints.
  void EpochJudged(const ckpt::EarlyStopping& state) override { early_stopping_ = state; }

 private:
  // Gathers parameters and slots on every stage; the writer writes them. Errors of the gather end
  // the run (the stages must stay in step); a write error is logged and training goes on.
  // `local_step` places the data cursors; the checkpoint's global step is the updates applied.
  Status SaveCheckpoint(const model::Model& model, std::int64_t local_step, bool final);

  Status CombineReplicas(model::Model& model, std::int64_t local_step);

  collective::Ring& ring_;
  collective::Ring* replicas_ = nullptr;
  StageStats* stats_ = nullptr;
  std::vector<float> combined_;  // the owned gradients, packed, for the replicas' all-reduce
  std::vector<OwnedRange> owned_;
  std::vector<std::unique_ptr<optim::OptimizerState>> states_;  // one per owned range
  std::function<std::string()> note_;
  StageCheckpointing checkpointing_;
  std::vector<std::string> slot_names_;
  std::optional<ckpt::EarlyStopping> early_stopping_;
  std::int64_t updates_ = 0;          // the global step
  std::int64_t last_local_step_ = 0;
};

// Gathers the whole parameter buffer on every member of `ring` when each holds `owned` of it
// (disjoint, covering it together): bit-exact, as StageUpdater::Finish.
Status GatherParams(collective::Ring& ring, std::span<float> params, const std::vector<OwnedRange>& owned);

}  // namespace tfd::pipeline
