#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/base/status.h"
#include "common/config/job.h"
#include "common/summary/writer.h"
#include "daemon/train/observer.h"

namespace tfd::train {

// Writes a task's TensorBoard summaries (the tags of docs/observability.md) into
// spec.dir/<task>/, on the step axis of the global step: every spec.every_steps local steps the
// means over those steps (loss, accuracy, step times) and the rate since the last point; every
// epoch its line's numbers; every spec.histograms_every_epochs epochs one histogram per variable.
// Events stay buffered between epochs (and at least every kFlushSecs), so a step costs a few
// additions. Runs on the training thread; a failed write is logged once and ends the summaries,
// never the run.
class SummaryObserver final : public TrainObserver {
 public:
  // InvalidArgument naming the folder and the system's reason when it cannot be made.
  static Result<std::unique_ptr<SummaryObserver>> Open(const config::SummarySpec& spec, const std::string& task);

  void OnStep(const StepStats& s) override;
  void OnEpoch(const EpochStats& e) override;
  void OnEnd(bool ok) override;

  const std::string& path() const { return writer_->path(); }

  static constexpr double kFlushSecs = 10;

 private:
  SummaryObserver(const config::SummarySpec& spec, std::unique_ptr<summary::Writer> writer) : spec_(spec), writer_(std::move(writer)) {}
  void Check(const Status& s);

  config::SummarySpec spec_;
  std::unique_ptr<summary::Writer> writer_;  // null once a write failed
  // Sums over the steps since the last point.
  int steps_ = 0;
  std::int64_t examples_ = 0;
  double loss_ = 0, accuracy_ = 0, compute_ = 0, update_ = 0;
  double since_ = 0;       // wall time the window started (the previous point, or the first step's start)
  double flushed_at_ = 0;  // wall time of the last flush
};

}  // namespace tfd::train
