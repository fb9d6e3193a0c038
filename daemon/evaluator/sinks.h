#pragma once

#include <memory>
#include <string>

#include "common/base/status.h"
#include "common/metrics/task_metrics.h"
#include "common/summary/writer.h"
#include "daemon/evaluator/evaluator.h"

namespace tfd::evaluator {

// Writes each evaluation as TensorBoard scalars (test_loss, test_accuracy, val_loss, val_accuracy;
// a regression's test_mae, test_rmse, val_mae, val_rmse in place of the accuracies: Scores) at the
// checkpoint's global step into LOGDIR/eval/, the folder TensorFlow's evaluator uses; flushed
// after every evaluation, since they come seconds apart. A failed write is one warning and ends the
// sink's writing, never the evaluator.
class SummarySink final : public EvalSink {
 public:
  // The error names the folder when it cannot be created or the file opened.
  static Result<std::unique_ptr<SummarySink>> Open(const std::string& logdir);
  void OnEval(const EvalResult& result) override;
  void OnEnd(bool ok) override;

 private:
  explicit SummarySink(std::unique_ptr<summary::Writer> writer) : writer_(std::move(writer)) {}
  void Check(const Status& s);
  std::unique_ptr<summary::Writer> writer_;  // null once a write failed
};

// Sets tfd_eval_accuracy{split} (a regression: tfd_eval_mae{split} and tfd_eval_rmse{split}) and
// tfd_global_step from each evaluation.
class MetricsSink final : public EvalSink {
 public:
  explicit MetricsSink(metrics::TaskMetrics& metrics);
  void OnEval(const EvalResult& result) override;
  void OnEnd(bool) override {}

 private:
  metrics::TaskMetrics& metrics_;
  metrics::Gauge* test_ = nullptr;
  metrics::Gauge* val_ = nullptr;
};

}  // namespace tfd::evaluator
