#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/ckpt/checkpoint.h"
#include "common/ckpt/file.h"
#include "common/ckpt/reshard.h"
#include "common/config/job.h"
#include "common/export/model_card.h"
#include "common/metrics/task_metrics.h"
#include "common/model/model.h"
#include "daemon/worker/placement.h"
#include "daemon/worker/ps_client.h"

namespace tfd::worker {

// The chief's checkpoints (docs/config.md, "checkpoint"): restores the ps tasks from the newest
// valid checkpoint at start, and saves one per the job's schedule and at the end of training.
// A save asks every ps for its state (STATE_PULL: values and slots of one moment): only that pauses
// training. A background thread then assembles whole named tensors and writes them with
// ckpt::Write; a save that falls due while the previous one is still being written waits for the
// next step (the schedule stays due). The final save waits for its write. The data
// cursors come from the ps: worker r's is the smallest ResumeStep(r) among the ps tasks (the last
// local step every ps applied, async; the global step, sync), so a resumed worker never skips a
// batch. Not thread-safe: the chief's training thread uses it.
class Checkpointer {
 public:
  Checkpointer(const config::JobSpec& job, const model::Model& model, const Placement& placement, PsClient& client,
               EventWriter& events, int num_workers, std::int64_t steps_per_epoch);

  bool enabled() const { return !spec_.dir.empty(); }
  // The model's card (the model, the data's fingerprint): written into every checkpoint, and
  // PrepareRestore refuses a checkpoint trained on other data. Call before PrepareRestore.
  void SetModelCard(exporting::ModelCard card) {
    card_text_ = exporting::CardText(card);
    card_ = std::move(card);
  }
  // Before PsClient::Initialize: when checkpoint.dir holds a valid checkpoint, gives the client its
  // state re-sharded for this placement (the ps tasks that are not initialised yet start from it).
  // InvalidArgument naming the file and field when the model, optimizer or placement cannot take it.
  Status PrepareRestore();
  // After Initialize: logs the restore when it happened, and starts the schedule at `global_step`.
  void Started(std::uint64_t global_step);
  // After each step: saves when the schedule says so. A failed fetch or write is logged, and
  // training goes on (the save is tried again at the next step).
  Status MaybeSave(std::uint64_t global_step);
  // Saves now, marked final (ckpt::Checkpoint::final), and waits until it is written (the end of
  // training); its errors are returned.
  Status Save();
  // The early-stopping rule's state after the last epoch the chief judged: written into every save
  // from now on, and at once into checkpoint.dir's early-stopping record (ckpt::WriteEarlyStopping;
  // a failed write is logged), so a chief restarted before the next save resumes its count.
  void SetEarlyStopping(const ckpt::EarlyStopping& state);
  // The rule's states PrepareRestore found: the newest valid checkpoint's and the record of the last
  // judgement (whether or not the ps tasks took the checkpoint's parameters: a restarted chief whose
  // ps tasks kept theirs still resumes its patience). The trainer resumes the newest one before the
  // first epoch it trains.
  const std::vector<ckpt::EarlyStopping>& restored_early_stopping() const { return restored_early_stopping_; }
  // Registers the checkpoint metrics and sets the time of each checkpoint written (from the writer
  // thread: the metrics are thread-safe). `metrics` must outlive this.
  void set_metrics(metrics::TaskMetrics* metrics);

  // update.compression topk (docs/checkpoints.md, "Error feedback"): saves carry every worker's
  // residual. `own` gives the chief's. A save then happens only after a step whose push announced
  // it: before each exchange the trainer asks Announce(the global step after it), which returns the
  // save's id (0: none due) for PsClient::AnnounceSave; the ps tasks ask the other workers for
  // their residuals, which come with their next pushes, and the save waits for them.
  // EnableFeedback before PrepareRestore (false, with a warning, when workers x parameters floats
  // would pass a checkpoint record's limit); SetOwnFeedback once the trainer has the residual.
  bool EnableFeedback();
  void SetOwnFeedback(std::function<std::vector<float>()> own) { own_feedback_ = std::move(own); }
  std::uint64_t Announce(std::uint64_t next_global_step);
  // The saved feedback a restore resumes with, summed over the saved workers (empty: none); once.
  std::vector<float> TakeRestoredFeedback() { return std::exchange(restored_feedback_, {}); }

 private:
  // Fetches the state and starts writing it; `wait`: and waits for the write. `final`: marks it
  // final, and writes it even when the last save holds the same step.
  Status Take(bool wait, bool final = false);
  // The state for save `request` (0: no feedback) with every expected worker's deposit, asking
  // again while some are on their way, up to kFeedbackWait; and the FEEDBACK record made of them.
  Result<std::vector<PsClient::PsState>> FetchWithFeedback(std::uint64_t request, std::optional<ckpt::ErrorFeedback>* feedback);
  static constexpr std::chrono::seconds kFeedbackWait{30};
  // The write in flight: if done (or `wait`), its outcome; Ok while it still runs.
  Status Collect(bool wait);
  ckpt::DataCursor CursorFor(std::uint32_t rank, std::uint64_t local_step) const;
  // PrepareRestore: the checkpoint's error feedback summed into restored_feedback_, or why not (logged).
  void RestoreFeedback(const ckpt::ErrorFeedback& saved, const std::string& path);

  config::CheckpointSpec spec_;
  exporting::ModelCard card_;
  std::string card_text_;  // empty until SetModelCard
  std::optional<ckpt::EarlyStopping> early_stopping_;
  std::vector<ckpt::EarlyStopping> restored_early_stopping_;
  config::JobSpec job_;
  const Placement& placement_;
  const model::Model& model_;  // its parameters re-initialise a ps that restarted while a save fetched the state
  PsClient& client_;
  EventWriter& events_;
  int num_workers_;
  std::int64_t steps_per_epoch_;
  std::vector<ckpt::Variable> variables_;
  std::vector<std::vector<std::int64_t>> shapes_;
  std::vector<std::vector<ckpt::FlatRange>> ranges_;
  std::vector<std::string> slot_names_;
  std::optional<ckpt::Schedule> schedule_;
  std::string restored_path_;
  std::uint64_t restored_step_ = 0;
  std::uint64_t last_saved_ = UINT64_MAX;
  std::future<Status> writing_;
  metrics::TaskMetrics* metrics_ = nullptr;
  bool feedback_ = false;                             // EnableFeedback
  bool feedback_too_large_ = false;                   // ... refused it for its size
  std::function<std::vector<float>()> own_feedback_;  // SetOwnFeedback's
  std::uint64_t announced_ = 0;                       // the save the last exchange announced
  std::vector<float> restored_feedback_;
};

}  // namespace tfd::worker
