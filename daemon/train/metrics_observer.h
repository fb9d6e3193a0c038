#pragma once

#include "common/metrics/task_metrics.h"
#include "daemon/train/observer.h"

namespace tfd::train {

// Feeds a training task's metrics (steps, examples, step time, loss, accuracy or a regression
// model's MAE, learning rate, epoch, global step; the evaluation accuracies or MAE/RMSE at epoch ends) from the epoch loop. Runs on the
// training thread; each step costs a few relaxed atomic operations. `metrics` must have had
// AddTrainingMetrics() and must outlive the observer.
class MetricsObserver final : public TrainObserver {
 public:
  explicit MetricsObserver(metrics::TaskMetrics& metrics) : m_(metrics) {}
  void OnStep(const StepStats& s) override;
  void OnEpoch(const EpochStats& e) override;

 private:
  metrics::TaskMetrics& m_;
  metrics::Gauge* mae_ = nullptr;  // tfd_mae, made at a regression model's first step
};

}  // namespace tfd::train
