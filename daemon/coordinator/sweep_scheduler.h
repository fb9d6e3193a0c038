#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/base/class_id.h"
#include "common/base/status.h"
#include "common/config/sweep.h"
#include "daemon/coordinator/asha.h"

namespace tfd::coordinator {

using Metrics = std::vector<std::pair<std::string, double>>;

// A trial's state in the leaderboard. kPaused: waiting for a worker (not started yet, or its worker
// was lost and it waits to be placed again).
enum class TrialStatus { kPaused, kRunning, kStopped, kDone, kFailed };
std::string_view TrialStatusName(TrialStatus s);  // "PAUSED", "RUNNING", "STOPPED", "DONE", "FAILED"

struct TrialState {
  config::Trial trial;
  TrialStatus status = TrialStatus::kPaused;
  int worker = -1;   // the worker running it, or that ran it last
  int attempt = 0;   // placements so far
  int epoch = 0;     // the last epoch reported, over every attempt
  // Per-trial checkpoints: the epoch of the checkpoint a re-placed trial resumes from (0: none, it
  // starts at epoch 1), and the epoch of one received but not yet committed by its epoch report.
  int checkpoint_epoch = 0;
  int pending_checkpoint = 0;
  std::optional<double> metric, best;  // the objective at the last epoch, and its best so far
  // Everything the trial reported at the epoch of `best` (its test metrics among them, shown
  // beside the objective and never used to choose), and that epoch (0: from its end report).
  Metrics best_metrics;
  int best_epoch = 0;
  std::string reason;  // FAILED: why; STOPPED: which rung stopped it
};

// Which trial runs where, and when a trial stops: the sweep's decisions without any socket, so they
// are tested alone. A worker asks for work (NextFor), reports epochs (OnEpoch, whose answer says
// whether to go on) and the end of its trial (OnEnd); a lost worker's trial goes back to the front
// of the queue (OnWorkerLost) and the next idle worker resumes it after its last checkpointed
// epoch. A worker sends the trial's checkpoint after each epoch (OnCheckpoint) before that epoch's
// report, and the report commits it: a trial resumes after the last epoch it reported, so no epoch
// is reported twice (an epoch reported again, by an attempt that resumed from an older checkpoint,
// is ignored). Every change is appended to a JSON line list the owner drains (trials.jsonl), each
// line built with nlohmann and written by config::JsonText (a NaN or infinite metric is null). Not
// thread-safe: the owner locks.
class SweepScheduler {
 public:
  SweepScheduler(const config::SweepSpec& sweep, std::vector<config::Trial> trials, int parallel);

  struct Assignment {
    int trial = -1;
    int attempt = 0;
    std::string job;
    bool predictions = false;  // an ensemble member: send the test predictions after each epoch
    int resume_epoch = 0;      // > 0: resume from the trial's checkpoint of this epoch
  };
  enum class Next { kAssigned, kWait, kFinished };
  // kAssigned with *out filled; kWait while every trial left is running elsewhere (or `parallel`
  // trials run); kFinished once no trial is left to run.
  Next NextFor(int worker, double now, Assignment* out);
  // True: stop the trial (pruned by ASHA, or the sweep is stopping). A report from a worker that no
  // longer runs the trial (it was re-placed) answers stop and changes nothing.
  // An epoch at or below the trial's last reported one (a repeat) changes nothing and answers go on
  // (or stop when the sweep is stopping). A report of the epoch whose checkpoint is pending commits
  // that checkpoint: trials()[trial].checkpoint_epoch becomes `epoch`.
  bool OnEpoch(int worker, int trial, int epoch, const Metrics& metrics, double now);
  // The trial's checkpoint after `epoch` arrived from `worker`. True when the owner should keep it
  // as pending (the worker runs the trial and the epoch is past the last reported one); it replaces
  // any pending one. The owner keeps the bytes: the scheduler keeps only the epochs.
  bool OnCheckpoint(int worker, int trial, int epoch);
  void OnEnd(int worker, int trial, bool ok, bool stopped, const std::string& reason, const Metrics& metrics, double now);
  void OnWorkerLost(int worker, const std::string& why, double now);
  // An ensemble member's test-set outputs after `epoch` (rows x classes): its softmax, or for a
  // regression member (`targets` non-empty, rows x classes like `outputs`) its predicted values. Once
  // every member still in the ensemble (not FAILED or STOPPED) has reported an epoch, the members'
  // outputs are averaged, the ensemble's test accuracy (or MAE and RMSE) and each member's recorded,
  // and that epoch's predictions kept as last_*. A member's first report of an epoch counts (a
  // re-placed member's repeats do not); a report whose shape, labels or targets differ from the
  // others' is ignored and returned false.
  bool OnPredictions(int worker, int trial, int epoch, int classes, const std::vector<ClassId>& labels,
                     const std::vector<float>& outputs, const std::vector<float>& targets, double now);
  // A sweep resumed after its coordinator ended (docs/sweeps.md, "Resuming"): `lines` are its
  // trials.jsonl, parsed, in file order. Replays them before any worker is served: placements
  // (attempts), epochs (metrics, best, and ASHA's rung records in the order they were made), ends.
  // A trial that ended on its own (DONE, FAILED, or STOPPED by ASHA, also when ASHA's stop was
  // recorded and its end was not) stays ended; every other one waits again, in trial order, to
  // resume after the epoch `checkpoint_epoch(trial, last_reported_epoch)` returns (the newest
  // checkpoint at or before its last reported epoch; 0: from its first epoch; the epochs it
  // reports again up to its last reported one change nothing). InvalidArgument naming the line
  // (1-based) for a line that is not a trial event of this sweep.
  struct Restored {
    int done = 0;     // ended trials
    int resumed = 0;  // placed before, waiting again (from_checkpoint of them after an epoch > 0)
    int pending = 0;  // never placed
    int from_checkpoint = 0;
  };
  Result<Restored> Restore(const std::vector<nlohmann::ordered_json>& lines, const std::function<int(int trial, int epoch)>& checkpoint_epoch,
                           double now);
  // Ctrl-C: no trial starts any more and every running one is told to stop at its next epoch.
  void StopAll(double now);
  // No worker is left to run them: every waiting trial is FAILED with `why`.
  void FailQueued(const std::string& why, double now);

  bool finished() const;
  bool stopping() const { return stopping_; }
  const std::vector<TrialState>& trials() const { return trials_; }
  // The index of the best trial by its best objective value; -1 while no trial has one.
  int best() const;
  // The JSON lines recorded since the last call, in order.
  std::vector<std::string> TakeLines();

  // Outputs scored against the test set: the argmax's accuracy (classification), or the MAE and
  // RMSE over every row and target (regression).
  struct Score {
    double accuracy = 0, mae = 0, rmse = 0;
  };
  struct EnsembleEpoch {
    int epoch = 0, members = 0;
    bool regression = false;
    Score ensemble;                  // of the averaged outputs
    std::map<int, Score> by_member;  // each member's own, by trial id
    // The best member's figure: the highest accuracy, or the lowest MAE.
    double best_member = 0;
    // The mean of the members' MAEs: the ensemble's MAE is at most this (|mean - y| <= mean |p_k - y|).
    double mean_member_mae = 0;
  };
  const std::vector<EnsembleEpoch>& ensemble_epochs() const { return ensemble_epochs_; }
  // The last complete epoch's predictions: each member's (by trial id) and their mean.
  struct Predictions {
    int epoch = 0, classes = 0;
    std::vector<ClassId> labels;
    std::vector<float> targets;  // a regression's (rows x classes); empty for classification
    std::map<int, std::vector<float>> members;
    std::vector<float> mean;
    bool regression() const { return !targets.empty(); }
  };
  const Predictions& last_predictions() const { return last_; }

 private:
  void Record(double now, const TrialState& t, std::string_view event);  // a line with the trial's fields only
  // An `end` line of a trial the sweep ended, not the trial itself (Ctrl-C, no worker left):
  // "resumable": true, so a resumed sweep runs it on.
  void RecordResumableEnd(double now, const TrialState& t);
  bool Better(double a, double b) const { return maximize_ ? a > b : a < b; }
  int running() const;
  // An epoch's report applied to `t` (its metric, best, ASHA's rung record and reason): true when
  // ASHA stops it there.
  bool ApplyEpoch(TrialState& t, int epoch, const Metrics& metrics);
  // The end report's objective, where no epoch gave the trial one.
  void ApplyEndMetrics(TrialState& t, const Metrics& metrics);
  // One trials.jsonl line replayed (Restore); `pruned`: ASHA stopped the trial at that line.
  Status Replay(const nlohmann::ordered_json& line, std::vector<bool>* pruned);

  std::string metric_;
  bool maximize_;
  int parallel_;
  std::optional<Asha> asha_;
  std::vector<TrialState> trials_;
  std::vector<int> queue_;  // trial indexes waiting, front first
  bool stopping_ = false;
  std::vector<std::string> lines_;
  void MaybeCompleteEnsemble(double now);
  bool InEnsemble(int trial) const;
  bool ensemble_ = false;
  std::map<int, Predictions> pending_epochs_;  // epoch -> the members' predictions so far
  std::vector<EnsembleEpoch> ensemble_epochs_;
  Predictions last_;
};

// "{"a": 1, "b": 2}" from (name, JSON text) pairs, and the same for metrics (config::JsonText: a
// non-finite metric is null).
std::string ParamsJson(const std::vector<std::pair<std::string, std::string>>& params);
std::string MetricsJson(const Metrics& metrics);

// An ensemble epoch's figures as JSON fields (the `ensemble` line of trials.jsonl, ensemble.json):
// members, ensemble_test_accuracy and best_member_test_accuracy, or for a regression
// ensemble_test_mae, ensemble_test_rmse, best_member_test_mae and mean_member_test_mae; then each
// member's own (member_test_accuracy, or member_test_mae and member_test_rmse: objects keyed by
// member id).
nlohmann::ordered_json EnsembleFields(const SweepScheduler::EnsembleEpoch& e);

}  // namespace tfd::coordinator
