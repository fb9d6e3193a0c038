#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/config/job.h"

namespace tfd::ckpt {

// A training checkpoint: everything needed to resume a run on any number of ps and workers.
// This header holds what the module's parts share: the checkpoint in memory, and the check a
// restore makes against the job. The rest of the module, by concern:
//   format.h   the file's bytes (docs/checkpoints.md): Serialize, Parse, records, CRCs, bounds
//   file.h     durable files in a folder: Write (atomic, keep-last-K), Load, LoadNewestValid, Schedule
//   reshard.h  whole tensors and data cursors mapped onto another number of ps or workers
// ckpt depends on base, config, optim and wire; it knows no model or placement.

// The update rule the slots belong to. A checkpoint restores only under the same rule.
struct OptimizerInfo {
  config::OptimizerSpec spec;
  std::int64_t updates = 0;             // updates applied (Adam's t: its beta powers are beta^t)
  std::vector<std::string> slot_names;  // as optim::Optimizer::SlotNames(): "momentum"; "m", "v"
};

// Where a worker is in the training data. Worker `rank` of `num_workers` reads, in `epoch`, the
// positions base + rank + j * num_workers of that epoch's permutation, j = 0, 1, ...; it has
// finished the first `next` of them.
struct DataCursor {
  std::uint32_t rank = 0;
  std::uint32_t epoch = 0;
  std::uint64_t base = 0;
  std::uint64_t next = 0;
};

struct Slot {
  std::string name;
  std::vector<float> values;  // as many as the tensor's values
};

// A whole variable of the model, with its optimizer slots in OptimizerInfo::slot_names order.
struct NamedTensor {
  std::string name;                 // "dense/kernel"
  std::vector<std::int64_t> shape;  // product == values.size(); {} for a scalar
  std::vector<float> values;
  std::vector<Slot> slots;
};

// What job.early_stopping has seen (daemon/train/early_stopping.h): after `epoch`, the best value of
// its monitor (if any yet), the epoch of that best, and how many epochs since have not improved.
struct EarlyStopping {
  std::uint32_t epoch = 0;
  bool have_best = false;
  double best = 0;
  std::uint32_t best_epoch = 0;
  std::uint32_t wait = 0;
  bool operator==(const EarlyStopping&) const = default;
};

// update.compression's error feedback (topk, powersgd), which each worker carries from step to
// step: what it has not yet sent of its gradients. Every worker's is in the checkpoint, so a run
// resumed on as many workers takes up each one's where it was (docs/checkpoints.md, FEEDBACK).
struct ErrorFeedback {
  config::CompressionSpec::Method method = config::CompressionSpec::Method::kTopK;  // topk or powersgd
  std::vector<std::vector<float>> residuals;  // one per worker rank, in rank order, each as many floats as the model's parameters
  std::vector<float> shared;                  // powersgd: every matrix's Q (the same on every worker); empty for topk
  std::uint32_t rank = 0;                     // powersgd's rank, which lays Q out; 0 for topk
  bool operator==(const ErrorFeedback&) const = default;
};

struct Checkpoint {
  std::uint64_t global_step = 0;
  std::uint32_t num_workers = 0;  // the worker count the cursors were taken under
  // The chief's last checkpoint of a run that ended (training done, or stopped early): an
  // evaluator task that has evaluated it is done. Files from before the mark read as false.
  bool final = false;
  OptimizerInfo optimizer;
  std::vector<DataCursor> cursors;  // one per worker rank, in rank order
  std::vector<NamedTensor> tensors;  // in the model's flat order
  // The model card (common/export/model_card.h) as JSON text: the model, how its data was read and
  // preprocessed, the classes, the data's fingerprint. Empty in files written before it existed
  // (and by a ps, which knows no model): such a checkpoint resumes unchecked and cannot be exported.
  std::string model_card;
  // The early-stopping rule's memory after the last finished epoch, so a resumed run stops where an
  // undisturbed one would. Absent in files written before it existed, and without a rule.
  std::optional<EarlyStopping> early_stopping;
  // The workers' error feedback under update.compression topk or powersgd (allreduce mode). Absent
  // in files written before it existed, and under other compression.
  std::optional<ErrorFeedback> feedback;
};

// FailedPrecondition when `ckpt` was saved under another optimizer or other hyper-parameters, or
// its slots are not the ones `wanted` keeps: the message names `source` and both optimizers.
Status CheckOptimizer(const Checkpoint& ckpt, const config::OptimizerSpec& wanted, std::string_view source);

}  // namespace tfd::ckpt
