#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/collective/ring.h"
#include "common/config/job.h"
#include "common/export/model_card.h"
#include "common/model/model.h"

namespace tfd::pipeline {

// A checkpoint to resume a model-parallel run from: the whole network and its optimizer slots,
// under the variables' usual names, as any mode's chief writes them (a `layers` or `units` run of
// any split and any number of replicas, or a ps mode), so a run restores onto another split.
struct StageRestore {
  bool found = false;
  std::string path;                 // the chief's only
  std::uint64_t global_step = 0;    // as saved
  std::uint64_t resume_step = 0;    // the local step every replica resumes after
  std::int64_t updates = 0;         // the optimizer's update count
  std::vector<float> params;        // model.params() order
  std::vector<float> slots;         // slot k of every parameter, then slot k + 1 (OptimizerState's layout)
};

// The chief, before the rings form: the newest valid checkpoint in job.checkpoint.dir, matched to
// `model` by variable name and to job.optimizer. None there: found = false. InvalidArgument naming
// the file and what does not match (another optimizer, a variable missing or of another size).
// Resume step: with as many replicas as the checkpoint has workers, each resumes after the batches
// its cursor finished, and every replica takes the lowest of them (the replicas step together);
// with another count, every replica starts again the oldest epoch any worker was in.
Result<StageRestore> LoadStageRestore(const config::JobSpec& job, const model::Model& model, const exporting::ModelCard& card, int replicas,
                                      std::int64_t steps_per_epoch);

// Every task, once the rings are formed: the chief's StageRestore reaches every stage of every
// replica (over `replicas`, the ring of stage 0 in every replica, whose rank 0 is the chief, then
// over each replica's `stages` ring). `restore` is the chief's on entry (rank 0 of both rings),
// filled in elsewhere. `replicas` is null with one replica or on a stage other than 0.
Status ShareStageRestore(collective::Ring& stages, collective::Ring* replicas, std::size_t num_params, int num_slots,
                         StageRestore* restore);

}  // namespace tfd::pipeline
