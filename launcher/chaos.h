#pragma once

// tfctl chaos, the parts that start nothing: its command line, the fault it resolves to, what the
// run promises after that fault, and the verdict on what each task did. cmd_chaos.cc sends the fault
// (through runner.h) and reads the outcomes from the run folder.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/config/cluster_file.h"

namespace tfd::launcher {

// SIGKILL; SIGTERM; SIGSTOP, then SIGCONT stop_secs later; or no signal: the run grown to more
// workers (an elastic job; as tfctl scale grows one).
enum class FaultAction { kKill, kTerm, kStop, kGrow };

// The command line of chaos, checked for syntax only (the cluster is not read yet).
struct ChaosArgs {
  std::string run_or_file;  // a run folder of a live run, or a cluster file
  std::string kill;         // --kill ROLE[:INDEX] as given
  int grow = 0;             // --grow N (then action is kGrow and kill is empty)
  std::string then_kill;    // --then-kill ROLE[:INDEX]: a second SIGKILL, then_after_secs after the fault
  double then_after_secs = 0.05;
  std::string event;        // --at EVENT[:N]: one of config::kEventNames
  int nth = 1;
  std::string from;  // --from TASK as given; empty: the target itself
  FaultAction action = FaultAction::kKill;
  double stop_secs = 0;
  double deadline_secs = 0;  // --deadline; 0: the default of ResolveFault
  std::string run_dir_override;
  double grace_secs = 10;
  bool accept_new_hostkeys = false;
};
// The words after "chaos". InvalidArgument with a one-line message (no "tfctl: " prefix) for a
// missing or unknown flag, an event name tfd never emits, N < 1, --stop with --signal, --kill with
// --grow (or neither), --then-kill without --kill, or a bad number.
Result<ChaosArgs> ParseChaosArgs(const std::vector<std::string>& args);

// "ps", "ps:1", "chief", "worker:2" (index default 0; chief: the "chief" entry, else worker 0) as a
// task of `cluster`. InvalidArgument naming `flag` and the cluster's tasks of that role.
Result<config::TaskId> ResolveTask(const config::ClusterSpec& cluster, std::string_view flag, std::string_view spec);

// A fault resolved against a cluster file.
struct Fault {
  config::TaskId target;  // kGrow: the chief, whose events trigger it by default
  config::TaskId from;    // whose events trigger it
  std::string event;
  int nth = 1;
  FaultAction action = FaultAction::kKill;
  double stop_secs = 0;
  int grow_to = 0;                          // kGrow: the workers the run is scaled to
  std::optional<config::TaskId> then_kill;  // a second task killed then_after_secs after the fault
  double then_after_secs = 0;
  double deadline_secs = 0;  // from the fault, for every task to end
  std::string deadline_why;  // "--deadline" or "peer timeout 8 s + reconnect timeout 60 s + margin 30 s"

  int Signal() const;               // SIGKILL, SIGTERM or SIGSTOP
  std::string Describe() const;     // "SIGKILL to worker:1 at worker:0's 3rd step event"
  std::string ActionName() const;   // kill, term, stop or grow
};
// InvalidArgument (exit 2) naming the flag when a task is not in the cluster.
Result<Fault> ResolveFault(const ChaosArgs& args, const config::ClusterFile& file);
inline constexpr double kChaosMarginSecs = 30;

// What the run must show after `fault` (docs/operations.md, "Fault injection: tfctl chaos").
struct ChaosPromise {
  std::string target;  // "worker:1"; "" for kGrow, which hits no task
  std::string second_target;  // Fault::then_kill's; "" without one
  double deadline_secs = 0;
  bool survival = false;              // every task exits 0, the one hit apart (see below)
  bool target_must_exit_zero = false; // the one hit too: it is restarted, or only stopped (kGrow: every task)
  std::string why;                    // why survival is, or is not, promised
};
// `target_max_restarts`: the target's TaskPlan::max_restarts (launch.restart).
ChaosPromise PromiseFor(const config::ClusterFile& file, const Fault& fault, int target_max_restarts);

// What one task did, read from the run folder.
struct TaskOutcome {
  std::string task;
  int exit_code = -1;          // -1: never started, or no exit code recorded
  int restarts = 0;
  double exit_after_secs = -1; // from the fault to its (last) exit; -1 when unknown
  std::string last_line;       // its last log line, without the time and task prefix
  bool past_deadline = false;  // still running at the deadline (then killed)
  double test_accuracy = -1;   // the done event's; -1 when none
};

struct ChaosVerdict {
  bool kept = false;
  std::vector<std::string> reasons;  // each broken rule, "(a) ...", "(b) ...", "(c) ..."
};
// `not_sent`: empty when the fault was sent, else why not (then the promise cannot have been kept).
ChaosVerdict JudgeChaos(const ChaosPromise& promise, const std::string& not_sent, const std::vector<TaskOutcome>& tasks);

// The report: one "chaos task=..." line per task, then the "chaos verdict=..." line.
std::vector<std::string> ChaosReportLines(const ChaosPromise& promise, const std::vector<TaskOutcome>& tasks, const ChaosVerdict& verdict);
// chaos.json's text: the fault, its trigger, whether and when it was sent (`sent_at`, Unix seconds;
// `then_sent_at` the second kill's, 0 when none was sent), the deadline, the promise, every task's
// outcome, and the verdict with its reasons.
std::string ChaosJson(const Fault& fault, const std::string& not_sent, double sent_at, double then_sent_at, const ChaosPromise& promise,
                      const std::vector<TaskOutcome>& tasks, const ChaosVerdict& verdict);

}  // namespace tfd::launcher
