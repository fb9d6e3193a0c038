#pragma once

// summary.json, the run folder's record of how each task ended: Run writes it when the run ends;
// tfctl report, the dashboard and tfctl chaos read it back, through these two functions only.
//
//   {
//     "run_dir": "runs/20261122-041536-local",
//     "exit_code": 0,
//     "model": {"task": "worker:0", "path": "runs/20261122-041536-local/model/1", "version": "1", "global_step": 1200},
//     "tasks": [
//       {"task": "ps:0", "exit_code": 0, "restarts": 0, "ended_at": 1795322136.971},
//       {"task": "worker:0", "exit_code": 0, "restarts": 0, "ended_at": 1795322136.52, "test_accuracy": 0.9712,
//        "global_step": 1200, "params_sha256": "..."}
//     ]
//   }
//
// One task a line. ended_at is Unix seconds to the millisecond; past_deadline and scaled_down are
// written only when true; test_accuracy, global_step and params_sha256 only when the task's done
// (or, for an evaluator, last eval) event carried them. A non-finite test_accuracy is written as
// null (config/json_writer.h) and read as absent. "model" is written only when a task exported the
// trained model (its `exported` event): the version folder, with "host" when that folder is on
// another machine (a remote chief; its path is then that host's).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace tfd::launcher {

struct TaskSummary {
  std::string task;  // "worker:1"
  int exit_code = -1;
  int restarts = 0;
  double ended_at = 0;        // Unix seconds; 0 when not known
  bool past_deadline = false;  // tfctl chaos killed it at the fault's deadline
  bool scaled_down = false;    // tfctl scale stopped it
  std::optional<double> test_accuracy;
  std::optional<std::int64_t> global_step;
  std::string params_sha256;  // empty: none
};

// The model a run exported: the version folder its chief (or standalone task) wrote last.
struct ModelSummary {
  std::string task;     // "worker:0"
  std::string host;     // empty: on this machine
  std::string path;     // the version folder ("RUN/model/1"), on `host`
  std::string version;  // "1"
  std::optional<std::int64_t> global_step;
  // The base folder `tfd serve --model` takes: the version folder's parent.
  std::string base() const;
  // "path", or "host:path" for a folder on another machine.
  std::string where() const;
};

struct RunSummary {
  std::string run_dir;
  int exit_code = 0;  // tfctl's
  std::optional<ModelSummary> model;
  std::vector<TaskSummary> tasks;
};

// summary.json's text, with its final newline.
std::string SummaryJson(const RunSummary& summary);

// summary.json's text read back. InvalidArgument naming `source` when it is not JSON ("SOURCE: not
// valid JSON"), has no "tasks" array, a task has no string "task" or integer "exit_code"
// ("SOURCE: tasks[I]: expected ..."), "model" is not an object with string "path" and "version",
// or another known field has the wrong type. Only "tasks" and each task's "task" and "exit_code"
// are required; unknown fields are ignored.
Result<RunSummary> ParseSummary(std::string_view text, std::string_view source);

}  // namespace tfd::launcher
