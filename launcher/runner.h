#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "launcher/plan.h"

namespace tfd::launcher {

struct RunOptions {
  std::string run_dir;  // this run's folder (exists)
  double grace_secs = 10;  // TERM, then KILL after this long
  const std::atomic<int>* signal = nullptr;  // set by tfctl's SIGINT/SIGTERM handler
};

struct CommandOutput {
  int exit_code = -1;  // 128 + signal when killed; -1 when it could not start
  std::string out, err;
};
// Runs `argv` (no shell) with stdin closed, capturing its output; kills it after `timeout_secs`.
CommandOutput RunAndCapture(const std::vector<std::string>& argv, double timeout_secs);

// Starts every task of `plan` (local children, or ssh for remote hosts, whose stdin tfctl holds
// open so a remote task stops when tfctl goes away), streams their log lines to stdout prefixed with
// the task, keeps a per-worker table (redrawn in place on a terminal), and writes into run_dir one
// log per task, metrics.jsonl (every event) and summary.json. When a task fails the others are
// stopped. Returns tfctl's exit code: 0 all done, 1 a task failed (named, with its last lines),
// 130 after Ctrl-C (every task stopped).
int Run(const std::vector<TaskPlan>& plan, const RunOptions& options);

}  // namespace tfd::launcher
