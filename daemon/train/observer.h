#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/ckpt/checkpoint.h"

namespace tfd::model {
class Model;
}  // namespace tfd::model

namespace tfd::train {

// What the epoch loop saw in one step of this worker.
struct StepStats {
  int epoch = 0;
  std::int64_t global_step = 0;  // the updater's answer to this step
  std::int64_t local_step = 0;   // this worker's steps so far, this one included
  int examples = 0;              // the batch
  double loss = 0, accuracy = 0;
  bool regression = false;       // a regression model: `mae` in place of `accuracy`
  double mae = 0;                // over the batch's examples and targets
  double learning_rate = 0;      // the schedule's rate at this step's global step
  double compute_seconds = 0;    // forward and backward (gradient hand-offs to the updater excluded)
  double update_seconds = 0;     // the updater: sending, waiting for the others, applying
  double wall_time = 0;          // seconds since the Unix epoch, when the step ended
};

// One epoch's line, as the epoch event carries it.
struct EpochStats {
  int epoch = 0;
  std::int64_t global_step = 0, local_step = 0;
  double loss = 0, accuracy = 0, samples_per_sec = 0;
  std::optional<double> val_loss, val_accuracy, test_accuracy;  // where this task evaluated
  // A regression model's metrics in place of the accuracies (which stay unset).
  std::optional<double> mae, rmse, val_mae, val_rmse, test_mae, test_rmse;
  double wall_time = 0;
  // The early-stopping rule's state after this epoch (the chief of a job that can stop early).
  std::optional<ckpt::EarlyStopping> early_stopping;
  // The parameters at the epoch's end (weight histograms); valid during OnEpoch only.
  const model::Model* model = nullptr;
};

// Watches a worker's training (summaries, metrics). Called on the training thread, after the step's
// update and after each epoch's line; an observer must be quick (it runs between steps) and may not
// fail the run (it logs its own trouble). Observers are owned by whoever starts the role.
class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void OnStep(const StepStats&) {}
  virtual void OnEpoch(const EpochStats&) {}
  // Training ended, well (`ok`) or not: flush what is buffered.
  virtual void OnEnd(bool /*ok*/) {}
};

}  // namespace tfd::train
