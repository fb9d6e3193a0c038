#pragma once

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/base/status.h"
#include "common/config/sweep.h"
#include "daemon/coordinator/coordinator.h"

namespace tfd::coordinator {

// What drives a sweep's Coordinator to its end, whoever hosts it: tfctl sweep (its generic workers
// are processes it started on this machine) or a coordinator task of a TF_CONFIG cluster (tfd with
// task type coordinator; its workers are the cluster's worker tasks).
struct SweepRunOptions {
  std::string run_dir;        // exists; trials.jsonl, leaderboard.csv, best.json (and ensemble.json) go here
  bool ensemble = false;      // the trials are an ensemble's members: ensemble.json and predictions/ too
  std::FILE* table = stdout;  // the live leaderboard
  bool tty = false;           // `table` is a terminal: redrawn in place
  std::string prefix = "tfctl";  // before each leaderboard line and message
  // One line for people: `error` ones are failures.
  std::function<void(bool error, std::string_view event, const std::string& message)> say;
  // Polled every 100 ms: true once Ctrl-C (or SIGTERM) asked the sweep to stop.
  std::function<bool()> interrupted;
  double grace_secs = 10;  // after a stop, how long trials get to end before the workers are let go
  // Polled every 100 ms where the coordinator started its workers itself: whether any still runs
  // (a call may report the ones that ended). Null: the workers are other tasks, and "running" means
  // connected to the coordinator.
  std::function<bool()> workers_running;
  // Ends the workers still running (tfctl: SIGTERM to each), 10 s after the sweep finished or
  // grace_secs after a stop. Null: the loop returns then instead.
  std::function<void()> terminate_workers;
  // With no workers_running: no worker connected within `startup_timeout` of the start, or none
  // again within `reconnect_timeout` of the last one leaving, fails the trials still waiting.
  std::chrono::milliseconds startup_timeout{120000};
  std::chrono::milliseconds reconnect_timeout{60000};
  // With no workers_running: the cluster's worker tasks. Once the sweep is over, the loop waits for
  // each of them to have connected (and been told the sweep is over) and left, until
  // `startup_timeout` from the start at most, so a worker that starts late still ends cleanly;
  // workers still connected 10 s after the sweep ended are not waited for.
  int expected_workers = 0;
  // Where trial K's exported model is, as trial_models/K/model (the workers' --export-dir): the
  // best trial's is copied into run_dir/model at the end ("": the trials' models are not on this
  // machine, and nothing is copied). Not for an ensemble, whose members are several networks.
  std::string trial_models;
};

// A sweep (or an ensemble's members, `ensemble`) read from its file, with its trials and how many
// run at once: the file's "parallel", else one per worker.
struct PreparedSweep {
  config::SweepSpec spec;
  std::vector<config::Trial> trials;
  int parallel = 0;
};

// Reads the sweep file (LoadSweepSpec) or ensemble job (LoadEnsembleSpec) at `file`; `workers` > 0
// replaces the file's worker count (a cluster's worker tasks, tfctl sweep --workers). The loader's
// InvalidArgument naming the file and field otherwise.
Result<PreparedSweep> PrepareSweep(const std::string& file, bool ensemble, int workers);

// Makes the sweep's run folder `run_dir` (and its parents), copies `file` into it as sweep.json,
// or job.json for an ensemble, and records in resume.json the file's absolute path, the sweep's
// SHA-256 (SweepSha256), which --resume checks, and its worker count (tfctl sweep --resume starts as
// many again). Unavailable naming the folder and the system's reason.
Status MakeSweepFolder(const std::filesystem::path& run_dir, const std::string& file, const PreparedSweep& prepared, bool ensemble);

// SHA-256 of the sweep file's bytes and of every trial's job (so a changed job file that the sweep
// names is seen too), lower-case hex.
std::string SweepSha256(const std::string& file_text, const std::vector<config::Trial>& trials);

// The sweep file recorded in `run_dir`'s resume.json (tfctl sweep --resume RUN without a file).
// InvalidArgument naming resume.json when the folder holds no sweep to resume.
Result<std::string> RecordedSweepFile(const std::filesystem::path& run_dir);

// The worker count recorded in `run_dir`'s resume.json (tfctl sweep --resume RUN without --workers
// starts as many as the sweep was started with, so that trials meet ASHA's rungs in the same order),
// or 0 for a record written before it was recorded. InvalidArgument as RecordedSweepFile's.
Result<int> RecordedSweepWorkers(const std::filesystem::path& run_dir);

// The run folder of a sweep to resume (docs/sweeps.md, "Resuming a sweep"): checks that `run_dir`
// holds a sweep (resume.json and trials.jsonl) and that `file` is the sweep it was started with
// (SweepSha256 against resume.json), then returns trials.jsonl's lines, parsed with nlohmann as
// they were written (SweepLog::path names it). A torn last line (the coordinator killed while writing it) is dropped and
// the file rewritten without it. InvalidArgument, one line naming the file: no sweep there, another
// sweep, an ensemble (not resumed), a line that is not JSON.
Result<SweepLog> OpenForResume(const std::filesystem::path& run_dir, const std::string& file, const PreparedSweep& prepared,
                                                         bool ensemble);

// Runs the sweep to its end: appends the coordinator's lines to trials.jsonl, draws the
// leaderboard, stops every trial on an interrupt, fails the waiting trials when no worker is left,
// then writes leaderboard.csv and best.json (the best trial's job, runnable as is), copies the best
// trial's model into model/ (options.trial_models) and, for an ensemble, writes ensemble.json and
// predictions/. Destroys nothing: the caller resets `coord` after.
// Returns 0 when a best trial was found, 1 when no trial reported the objective, 130 after an
// interrupt (what was written is kept).
int RunSweep(Coordinator& coord, const config::SweepSpec& sweep, const SweepRunOptions& options);

}  // namespace tfd::coordinator
