#pragma once

#include <utility>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/config/sweep.h"
#include "common/transport/connection.h"
#include "daemon/coordinator/sweep_scheduler.h"

namespace tfd::coordinator {

// A sweep's trials.jsonl: where it is (named in errors) and its lines, parsed, in file order.
struct SweepLog {
  std::string path;
  std::vector<nlohmann::ordered_json> lines;
};

struct CoordinatorOptions {
  std::string bind_address = "127.0.0.1";  // "" = every interface
  std::uint16_t port = 0;                  // 0: a free one (port() says which)
  transport::ConnectionOptions connection;
  // Where each trial's committed checkpoint is written, as <trials_dir>/<trial>/ckpt/ckpt-<step>.tfdckpt
  // (the newest only); "": kept in memory alone. Either way the checkpoint a re-placed trial
  // resumes from is sent from memory, and dropped once the trial has ended.
  std::string trials_dir;
  // The cluster id its workers' HELLOs must carry: the TF_CONFIG cluster's (ClusterSpec::Id) for a
  // coordinator task, 0 for tfctl's own workers.
  std::uint64_t cluster_id = 0;
  // A resumed sweep: its trials.jsonl (OpenForResume in sweep_run.h reads it). Start replays it
  // (SweepScheduler::Restore) before it listens, and each trial that waits again after an epoch
  // resumes from its newest checkpoint in trials_dir at or before its last reported epoch.
  std::optional<SweepLog> resume;
};

// The coordinator of a sweep (docs/sweeps.md): listens for generic workers (tfd --coordinator),
// hands each idle one the next trial, answers each epoch report with continue or stop (ASHA), and
// places a lost worker's trial on the next idle worker with the trial's last checkpoint
// (TRIAL_CHECKPOINT, committed by the epoch report that follows it), to resume after that epoch.
// Workers identify with HELLO (kind worker, their index); the coordinator answers WELCOME as
// coordinator:0. Destroying it closes every connection.
//
// Threads: it owns an I/O thread, where its frame handler (Service) runs, on each connection's
// strand. The SweepScheduler and the connection tables sit behind the Service's mutex, so any thread may
// call the public methods below (tfctl's loop polls them) while the handler runs; Start and the
// destructor are called by the owner's thread.
class Coordinator {
 public:
  // InvalidArgument/Unavailable naming the address when it cannot listen; InvalidArgument naming
  // the line when options.resume holds one that is not a trial event of this sweep.
  static Result<std::unique_ptr<Coordinator>> Start(const config::SweepSpec& sweep, std::vector<config::Trial> trials, int parallel,
                                                    CoordinatorOptions options);
  ~Coordinator();
  std::uint16_t port() const;
  // What Start rebuilt from options.resume (all zero without it).
  SweepScheduler::Restored restored() const;

  std::vector<TrialState> Trials() const;
  int Best() const;
  bool Finished() const;
  // Lines for trials.jsonl since the last call.
  std::vector<std::string> TakeLines();
  // Ctrl-C: running trials stop at their next epoch, nothing new starts; idle workers are told
  // the sweep is over.
  void StopAll();
  // Every worker is gone for good (their processes ended): trials still waiting fail with `why`.
  void FailWaiting(const std::string& why);
  // Workers connected now; distinct worker indexes that have connected since the start.
  int Connected() const;
  int EverConnected() const;
  // An ensemble's accuracy per complete epoch, and the last complete epoch's predictions.
  std::vector<SweepScheduler::EnsembleEpoch> EnsembleEpochs() const;
  SweepScheduler::Predictions LastPredictions() const;

  class Service;

 private:
  Coordinator() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfd::coordinator
