#include "daemon/train/summary_observer.h"

#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/model/model.h"

namespace tfd::train {

Result<std::unique_ptr<SummaryObserver>> SummaryObserver::Open(const config::SummarySpec& spec, const std::string& task) {
  TFD_ASSIGN_OR_RETURN(std::unique_ptr<summary::Writer> writer, summary::Writer::Open(spec.dir, task));
  spdlog::info("summaries: {} (scalars every {} steps{})", writer->path(), spec.every_steps,
               spec.histograms_every_epochs > 0 ? fmt::format(", weight histograms every {} epochs", spec.histograms_every_epochs) : "");
  return std::unique_ptr<SummaryObserver>(new SummaryObserver(spec, std::move(writer)));
}

void SummaryObserver::Check(const Status& s) {
  if (s.ok() || writer_ == nullptr) return;
  spdlog::warn("summaries: {}; no more summaries from this task", s.message());
  writer_.reset();
}

void SummaryObserver::OnStep(const StepStats& s) {
  if (writer_ == nullptr) return;
  if (steps_ == 0 && since_ == 0) since_ = s.wall_time - s.compute_seconds - s.update_seconds;
  ++steps_;
  examples_ += s.examples;
  loss_ += s.loss;
  accuracy_ += s.regression ? s.mae : s.accuracy;
  compute_ += s.compute_seconds;
  update_ += s.update_seconds;
  if (s.local_step % spec_.every_steps != 0) return;
  const double n = steps_;
  const double secs = s.wall_time - since_;
  const std::pair<std::string, double> values[] = {
      {"loss", loss_ / n},
      {s.regression ? "mae" : "accuracy", accuracy_ / n},
      {"samples_per_sec", secs > 0 ? static_cast<double>(examples_) / secs : 0},
      {"learning_rate", s.learning_rate},
      {"time/compute_seconds", compute_ / n},
      {"time/update_seconds", update_ / n},
  };
  Check(writer_->Scalars(s.global_step, values, s.wall_time));
  steps_ = 0;
  examples_ = 0;
  loss_ = accuracy_ = compute_ = update_ = 0;
  since_ = s.wall_time;
  if (writer_ != nullptr && s.wall_time - flushed_at_ >= kFlushSecs) {
    Check(writer_->Flush());
    flushed_at_ = s.wall_time;
  }
}

void SummaryObserver::OnEpoch(const EpochStats& e) {
  if (writer_ == nullptr) return;
  std::vector<std::pair<std::string, double>> values = {
      {"epoch/loss", e.loss}, {"epoch/samples_per_sec", e.samples_per_sec}};
  if (e.mae) values.insert(values.begin() + 1, {{"epoch/mae", *e.mae}, {"epoch/rmse", e.rmse.value_or(0)}});
  else values.insert(values.begin() + 1, {"epoch/accuracy", e.accuracy});
  if (e.test_accuracy) values.emplace_back("test_accuracy", *e.test_accuracy);
  if (e.val_accuracy) values.emplace_back("val_accuracy", *e.val_accuracy);
  if (e.val_loss) values.emplace_back("val_loss", *e.val_loss);
  for (const auto& [name, v] : {std::pair{"test_mae", e.test_mae}, std::pair{"test_rmse", e.test_rmse}, std::pair{"val_mae", e.val_mae},
                                std::pair{"val_rmse", e.val_rmse}})
    if (v) values.emplace_back(name, *v);
  Check(writer_->Scalars(e.global_step, values, e.wall_time));
  if (writer_ != nullptr && e.model != nullptr && spec_.histograms_every_epochs > 0 && e.epoch % spec_.histograms_every_epochs == 0) {
    for (const model::Variable& v : e.model->variables()) {
      if (writer_ == nullptr) break;
      Check(writer_->Histogram("weights/" + v.name, e.global_step,
                               e.model->params().subspan(static_cast<std::size_t>(v.offset), static_cast<std::size_t>(v.size)), e.wall_time));
    }
  }
  if (writer_ != nullptr) Check(writer_->Flush());
  flushed_at_ = e.wall_time;
}

void SummaryObserver::OnEnd(bool) {
  if (writer_ != nullptr) Check(writer_->Flush());
}

}  // namespace tfd::train
