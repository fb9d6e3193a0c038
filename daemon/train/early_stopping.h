#pragma once

#include <optional>
#include <string>

#include "common/ckpt/checkpoint.h"
#include "common/config/job.h"

namespace tfd::train {

// What one epoch measured that may stop the run; a metric below 0 was not measured (the chief
// measures the validation metrics; `loss` is the epoch's training loss). No test metric: the test
// set is reported, never used to decide when to stop.
struct EpochMetrics {
  double loss = -1, val_loss = -1, val_accuracy = -1;
  double val_mae = -1;  // regression
};

// The chief's end-of-epoch decision (job.early_stopping and job.stop_at_accuracy, which watches
// val_accuracy: the job spec requires a validation split for it), with Keras' EarlyStopping semantics: an epoch improves when the monitored value beats the best so far by
// more than min_delta (accuracy: higher; loss and MAE: lower); the run stops once `patience` epochs in a
// row have not improved (patience 0: at the first that does not). Not thread-safe.
class EarlyStopper {
 public:
  explicit EarlyStopper(const config::JobSpec& job);
  // The reason to stop after `epoch` ("val_accuracy did not improve by 0.001 for 3 epochs (best
  // 0.9812 at epoch 7)"), or nothing to go on.
  std::optional<std::string> Update(int epoch, const EpochMetrics& m);
  // What the rule remembers after the last Update, for checkpoints; Restore takes it back on resume,
  // so patience goes on counting where it was instead of from zero.
  ckpt::EarlyStopping State() const;
  void Restore(const ckpt::EarlyStopping& state);

 private:
  config::EarlyStoppingSpec spec_;
  double stop_at_ = 0;
  bool have_best_ = false;
  double best_ = 0;
  int best_epoch_ = 0, wait_ = 0;
  int epoch_ = 0;  // of the last Update
};

}  // namespace tfd::train
