#pragma once

// Run: tfctl's tasks from start to summary.json (up and chaos), and the lines tfctl itself prints.
// The processes themselves are started, reaped and named in launcher/child_process.h.

#include <sys/types.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/logging.h"
#include "common/base/status.h"
#include "launcher/child_process.h"
#include "launcher/plan.h"

namespace tfd::launcher {

// A fault Run sends to one task (tfctl chaos): `signal` to `target` when the `nth` event named
// `event` arrives from `from`; SIGSTOP is followed by SIGCONT `stop_secs` later. Once sent, every
// task has `deadline_secs` to end; Run kills those still running then (recorded as past_deadline in
// summary.json) and restarts nothing after it. Run fills in the fields after the blank line.
struct Injection {
  config::TaskId target, from;
  std::string event;
  int nth = 1;
  int signal = SIGKILL;
  double stop_secs = 0;
  int grow_to = 0;  // > 0: no signal; the run is scaled to this many workers (as tfctl scale does)
  std::optional<config::TaskId> then_kill;  // a second task sent SIGKILL then_after_secs after the fault
  double then_after_secs = 0;
  double deadline_secs = 60;
  // Where the run should survive the fault: each step or epoch event after it moves the deadline to
  // deadline_secs from then, so a run that recovered may train on for as long as it needs.
  bool progress_extends = false;

  std::string not_sent;  // why it was not sent (the target had ended, the run ended first); empty once sent
  double sent_at = 0;    // Unix seconds; 0 until sent
  double then_sent_at = 0;  // the second kill's; 0 until sent
  double deadline_unix = 0;  // the deadline as it stood when the run ended (progress moves it), Unix seconds
};

// One task as Run sees it (the dashboard's task table) or as tfctl report reads it from the run folder.
struct TaskState {
  std::string task;                // "worker:1"
  std::string state = "starting";  // running, training, restarted, done, exited, stopped, failed (N), ...
  int restarts = 0;
  int exit_code = -1;  // -1 while it runs
  double test_accuracy = -1;  // from its done event; -1 without one
};

struct RunOptions {
  std::string run_dir;  // this run's folder (exists)
  double grace_secs = 10;  // TERM, then KILL after this long
  const std::atomic<int>* signal = nullptr;  // set by tfctl's SIGINT/SIGTERM handler
  // Observe: a failed task does not make Run stop the others (launch.restart still applies); Run
  // still returns 1 when a task failed.
  bool observe = false;
  Injection* injection = nullptr;  // not owned; null: no fault
  // JSON lines only on stdout and stderr (tfctl up --log-format json): each task's events as they
  // come, and every log line and message as {"ts", "task", "event": "log", "message"}; no table.
  bool json_output = false;
  // Called on Run's thread with every task's state whenever one changes (the dashboard); may be empty.
  std::function<void(const std::vector<TaskState>&)> on_tasks;
  // tfctl scale (launcher/scale.h): with both set, Run takes the run folder's scale requests. It
  // refuses a number `check_scale` refuses; to grow it starts the lowest ranks that have no task or
  // whose task it stopped when scaling down (a rank that finished or failed stays ended), from
  // `plan_worker`'s plan; to shrink it sends TERM to the highest-ranked running workers (their exit
  // is then no failure, and they are not restarted). Each start and stop is an event line in
  // metrics.jsonl: {"task": "worker:2", "event": "scale", "action": "start"|"stop", "workers": N}.
  std::function<Status(int workers)> check_scale;
  std::function<Result<TaskPlan>(int rank)> plan_worker;
};

// Starts every task of `plan` (local children, or ssh for remote hosts, whose stdin tfctl holds
// open so a remote task stops when tfctl goes away), streams their log lines to stdout prefixed with
// the task, keeps a per-worker table (redrawn in place on a terminal), and writes into run_dir one
// log per task, metrics.jsonl (every event) and summary.json (each task's exit code, restarts,
// ended_at in Unix seconds, and the done event's fields: launcher/run_summary.h). When a task fails
// the others are stopped, unless options.observe. Returns tfctl's exit code: 0 all done, 1 a task
// failed (named, with its last lines; or one that could not start, as "worker:0: cannot run tfd:
// No such file or directory"), 130 after Ctrl-C (every task stopped).
int Run(const std::vector<TaskPlan>& plan, const RunOptions& options);

// Sends `sig` to process `pid` of `plan`'s task: kill(2) for a local task, `kill -SIG PID` over
// plan.ssh for a remote one (waits up to 30 s for ssh). Unavailable naming the task when it fails.
Status SignalTask(const TaskPlan& plan, pid_t pid, int sig);
// One line of tfctl's own on `stream`, flushed: "tfctl: <message>", or with `json`
// {"ts": Unix seconds, "task": task, "event": event, "message": message, extra...}, where `extra` is
// more members ({{"url", "http://..."}}), written after the others (config/json_writer.h).
void Say(std::FILE* stream, bool json, std::string_view event, std::string_view message, const std::vector<EventField>& extra = {},
         std::string_view task = "tfctl");

// A task's log line without tfd's time and task prefix: "2026-11-22 03:46:02.971 [worker:1] info x"
// -> "info x"; other lines as they are.
std::string_view LogMessage(std::string_view line);

}  // namespace tfd::launcher
