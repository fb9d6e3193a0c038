#include "daemon/train/metrics_observer.h"

namespace tfd::train {

void MetricsObserver::OnStep(const StepStats& s) {
  m_.steps->Increment();
  m_.examples->Increment(s.examples);
  m_.step_seconds->Observe(s.compute_seconds + s.update_seconds);
  m_.compute_seconds->Increment(s.compute_seconds);
  m_.update_seconds->Increment(s.update_seconds);
  m_.loss->Set(s.loss);
  if (s.regression) {
    if (mae_ == nullptr) mae_ = m_.Mae();
    mae_->Set(s.mae);
  } else {
    m_.accuracy->Set(s.accuracy);
  }
  m_.learning_rate->Set(s.learning_rate);
  m_.epoch->Set(s.epoch);
  m_.global_step->Set(static_cast<double>(s.global_step));
}

void MetricsObserver::OnEpoch(const EpochStats& e) {
  m_.epoch->Set(e.epoch);
  m_.global_step->Set(static_cast<double>(e.global_step));
  if (e.test_accuracy) m_.EvalAccuracy("test")->Set(*e.test_accuracy);
  if (e.val_accuracy) m_.EvalAccuracy("val")->Set(*e.val_accuracy);
  if (e.test_mae) m_.EvalMae("test")->Set(*e.test_mae), m_.EvalRmse("test")->Set(e.test_rmse.value_or(0));
  if (e.val_mae) m_.EvalMae("val")->Set(*e.val_mae), m_.EvalRmse("val")->Set(e.val_rmse.value_or(0));
}

}  // namespace tfd::train
