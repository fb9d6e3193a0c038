#include "daemon/evaluator/sinks.h"

#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

namespace tfd::evaluator {

Result<std::unique_ptr<SummarySink>> SummarySink::Open(const std::string& logdir) {
  TFD_ASSIGN_OR_RETURN(std::unique_ptr<summary::Writer> writer, summary::Writer::Open(logdir, "eval"));
  return std::unique_ptr<SummarySink>(new SummarySink(std::move(writer)));
}

void SummarySink::Check(const Status& s) {
  if (s.ok()) return;
  spdlog::warn("summaries: {}; the evaluator writes no more of them", s.message());
  writer_.reset();
}

void SummarySink::OnEval(const EvalResult& r) {
  if (writer_ == nullptr) return;
  Check(writer_->Scalars(r.global_step, Scores(r), r.wall_time));
  if (writer_ != nullptr) Check(writer_->Flush());
}

void SummarySink::OnEnd(bool) {
  if (writer_ != nullptr) Check(writer_->Flush());
}

MetricsSink::MetricsSink(metrics::TaskMetrics& metrics) : metrics_(metrics) {}

void MetricsSink::OnEval(const EvalResult& r) {
  // Absent until the first evaluation, as on the chief (whose regression also sets MAE and RMSE only).
  if (r.regression) {
    metrics_.EvalMae("test")->Set(r.test_mae);
    metrics_.EvalRmse("test")->Set(r.test_rmse);
    if (r.val_mae) metrics_.EvalMae("val")->Set(*r.val_mae), metrics_.EvalRmse("val")->Set(r.val_rmse.value_or(0));
  } else {
    if (test_ == nullptr) test_ = metrics_.EvalAccuracy("test");
    test_->Set(r.test_accuracy);
  }
  if (r.val_accuracy) {
    if (val_ == nullptr) val_ = metrics_.EvalAccuracy("val");
    val_->Set(*r.val_accuracy);
  }
  if (metrics_.global_step != nullptr) metrics_.global_step->Set(static_cast<double>(r.global_step));
}

}  // namespace tfd::evaluator
