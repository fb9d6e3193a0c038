// chaos: a fault sent to one task of a run (one tfctl starts, or a live one in a run folder), then
// what each task did and whether the run kept tfd's promise (the rules are in launcher/chaos.cc).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "common/base/check.h"
#include "common/base/clock.h"
#include "common/config/json_reader.h"
#include "launcher/chaos.h"
#include "launcher/child_process.h"
#include "launcher/commands.h"
#include "launcher/run_summary.h"
#include "launcher/runner.h"

namespace tfd::launcher {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string ReadOrEmpty(const fs::path& path) {
  Result<std::string> text = config::ReadTextFile(path.string(), "a run file");
  return text.ok() ? *text : std::string();
}

// Each task of `plan`, and each worker the run grew by (tfctl chaos --grow: in the summary, not the
// plan), as the run folder's summary.json and logs tell it.
// `deadline_unix`: when the tasks had to have ended by (Unix seconds; progress may have moved it).
std::vector<TaskOutcome> ReadOutcomes(const fs::path& run_dir, const std::vector<TaskPlan>& plan, double sent_at, double deadline_unix) {
  // No summary, or one that does not read: as if the run's tfctl had not ended.
  const Result<RunSummary> summary = ParseSummary(ReadOrEmpty(run_dir / "summary.json"), (run_dir / "summary.json").string());
  std::vector<std::string> names;
  for (const TaskPlan& p : plan) names.push_back(p.task.ToString());
  if (summary.ok())
    for (const TaskSummary& t : summary->tasks)
      if (std::find(names.begin(), names.end(), t.task) == names.end()) names.push_back(t.task);
  std::vector<TaskOutcome> out;
  for (const std::string& name : names) {
    TaskOutcome o;
    o.task = name;
    const TaskSummary* s = nullptr;
    if (summary.ok())
      for (const TaskSummary& t : summary->tasks)
        if (t.task == o.task) s = &t;
    if (s != nullptr) {
      o.exit_code = s->exit_code;
      o.restarts = s->restarts;
      o.test_accuracy = s->test_accuracy.value_or(-1);
      if (sent_at > 0 && s->ended_at > 0) o.exit_after_secs = s->ended_at - sent_at;
    }
    o.past_deadline = (s != nullptr && s->past_deadline) || (sent_at > 0 && s != nullptr && s->ended_at > deadline_unix) ||
                      (sent_at > 0 && s == nullptr);  // no summary: the run's tfctl did not end by the deadline
    std::string last;
    std::ifstream log(run_dir / (o.task + ".log"));
    for (std::string line; std::getline(log, line);)
      if (!line.empty()) last = line;
    o.last_line = std::string(LogMessage(last));
    out.push_back(std::move(o));
  }
  return out;
}

// Prints the report, writes chaos.json; 0 when the promise was kept, else 1.
// `deadline_unix` 0: the fault's deadline from `sent_at`, unmoved.
int Report(const fs::path& run_dir, const std::vector<TaskPlan>& plan, const Fault& fault, const ChaosPromise& promise,
           const std::string& not_sent, double sent_at, double deadline_unix = 0, double then_sent_at = 0) {
  const std::vector<TaskOutcome> tasks =
      ReadOutcomes(run_dir, plan, sent_at, deadline_unix > 0 ? deadline_unix : sent_at + fault.deadline_secs);
  const ChaosVerdict verdict = JudgeChaos(promise, not_sent, tasks);
  std::ofstream(run_dir / "chaos.json") << ChaosJson(fault, not_sent, sent_at, then_sent_at, promise, tasks, verdict);
  for (const std::string& line : ChaosReportLines(promise, tasks, verdict)) std::printf("%s\n", line.c_str());
  std::printf("tfctl: chaos report %s/chaos.json\n", run_dir.c_str());
  std::fflush(stdout);
  return verdict.kept ? 0 : 1;
}

int TargetRestarts(const std::vector<TaskPlan>& plan, const config::TaskId& task) {
  for (const TaskPlan& p : plan)
    if (p.task == task) return p.max_restarts;
  return 0;
}

void Announce(const Fault& fault, const ChaosPromise& promise) {
  std::printf("tfctl: chaos: %s; every task then has %.0f s to end (%s); survival %s: %s\n", fault.Describe().c_str(), fault.deadline_secs,
              fault.deadline_why.c_str(), promise.survival ? "promised" : "not promised", promise.why.c_str());
  std::fflush(stdout);
}

// CLUSTER.json: a new run, started as up starts one, observed.
int ChaosOnCluster(const ChaosArgs& args, const Interrupts& interrupts) {
  ClusterArgs cargs;
  cargs.file = args.run_or_file;
  cargs.run_dir_override = args.run_dir_override;
  cargs.grace_secs = args.grace_secs;
  cargs.accept_new_hostkeys = args.accept_new_hostkeys;
  Result<RunSetup> run = SetUpRun(cargs, /*token_hex=*/"");
  if (!run.ok()) return ReportFailure(run.status());
  Result<Fault> fault = ResolveFault(args, run->file);
  if (!fault.ok()) return ReportFailure(fault.status());
  const ChaosPromise promise = PromiseFor(run->file, *fault, TargetRestarts(run->plan, fault->target));
  Announce(*fault, promise);
  Injection injection;
  injection.target = fault->target;
  injection.from = fault->from;
  injection.event = fault->event;
  injection.nth = fault->nth;
  injection.signal = fault->Signal();
  injection.stop_secs = fault->stop_secs;
  injection.grow_to = fault->grow_to;
  injection.then_kill = fault->then_kill;
  injection.then_after_secs = fault->then_after_secs;
  injection.deadline_secs = fault->deadline_secs;
  injection.progress_extends = promise.survival;
  fs::path run_dir;
  const int code = Up(cargs, interrupts, &injection, &run_dir);
  if (run_dir.empty() || code == 130) return code;  // nothing ran, or Ctrl-C
  return Report(run_dir, run->plan, *fault, promise, injection.not_sent, injection.sent_at, injection.deadline_unix, injection.then_sent_at);
}

// RUN: a live run of tfctl up --detach; its tfctl stays in charge, this one only sends the fault.
int ChaosOnRun(const ChaosArgs& args) {
  const fs::path run_dir = args.run_or_file;
  const std::string pid_text = ReadOrEmpty(run_dir / "tfctl.pid");
  const pid_t collector = pid_text.empty() ? -1 : static_cast<pid_t>(std::atol(pid_text.c_str()));
  if (!ProcessAlive(collector)) {
    std::fprintf(stderr, "tfctl: %s: the run has ended (its tfctl is not running); chaos needs a live run (tfctl up --detach)\n",
                 run_dir.c_str());
    return 2;
  }
  ClusterArgs cargs;
  cargs.file = (run_dir / "cluster.json").string();
  cargs.accept_new_hostkeys = args.accept_new_hostkeys;
  Result<RunSetup> run = SetUpRun(cargs, /*token_hex=*/"");  // its plan: which tasks are remote, and their ssh
  if (!run.ok()) return ReportFailure(run.status());
  if (args.action == FaultAction::kGrow || !args.then_kill.empty())
    return UsageError(fmt::format("chaos: {}: --grow and --then-kill take a cluster file (tfctl scale grows a live run)", run_dir.string()));
  Result<Fault> fault = ResolveFault(args, run->file);
  if (!fault.ok()) return ReportFailure(fault.status());
  const int restarts = TargetRestarts(run->plan, fault->target);
  const ChaosPromise promise = PromiseFor(run->file, *fault, restarts);
  // That run's tfctl stops every task once one fails for good: only a fault the run recovers from
  // can be judged there.
  if (!promise.survival || (restarts == 0 && fault->action != FaultAction::kStop)) {
    return UsageError(fmt::format("chaos: {}: on a live run, {} must be restarted by its launch.restart (or only stopped, "
                                  "--stop, where the run survives that): when it fails for good, that run's tfctl stops "
                                  "every task; to see what each task does by itself, give chaos the cluster file",
                                  run_dir.string(), fault->target.ToString()));
  }
  const TaskPlan* target = nullptr;
  for (const TaskPlan& p : run->plan)
    if (p.task == fault->target) target = &p;
  TFD_CHECK(target != nullptr);  // ResolveFault took it from this cluster
  Announce(*fault, promise);

  // Tail metrics.jsonl: the pid of each task's latest start event (from the beginning), the trigger
  // counted from now on.
  const std::string target_name = fault->target.ToString(), from_name = fault->from.ToString();
  std::map<std::string, pid_t> pids;
  std::ifstream metrics(run_dir / "metrics.jsonl");
  std::string pending;
  bool counting = false;
  int seen = 0;
  bool due = false, collector_ended = false;
  std::string not_sent;
  double sent_at = 0;
  pid_t sent_pid = -1;
  Clock::time_point cont_at = Clock::time_point::max(), deadline_at = Clock::time_point::max();
  for (;;) {
    metrics.clear();
    for (std::string chunk; std::getline(metrics, chunk);) {
      if (metrics.eof()) {  // a partial last line: the rest comes later
        pending += chunk;
        break;
      }
      const std::string line = pending + chunk;
      pending.clear();
      Result<config::Event> e = config::ParseEvent(line);
      if (!e.ok()) continue;
      if (e->event == "start" && e->numbers.contains("pid")) pids[e->task] = static_cast<pid_t>(e->Number("pid"));
      if (counting && sent_at == 0 && e->task == from_name && e->event == fault->event && ++seen == fault->nth) due = true;
    }
    counting = true;
    if (due && pids.contains(target_name)) {
      due = false;
      if (Status s = SignalTask(*target, pids[target_name], fault->Signal()); !s.ok()) {
        not_sent = s.message();
        std::printf("tfctl: chaos: the fault was not sent: %s\n", not_sent.c_str());
        break;
      }
      sent_at = UnixSeconds();
      sent_pid = pids[target_name];
      deadline_at = Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(fault->deadline_secs * 1000));
      if (fault->action == FaultAction::kStop)
        cont_at = Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(fault->stop_secs * 1000));
      std::printf("tfctl: chaos: sent SIG%s to %s (pid %d)\n", SignalName(fault->Signal()).c_str(), target_name.c_str(), sent_pid);
      std::fflush(stdout);
    }
    if (Clock::now() >= cont_at) {
      cont_at = Clock::time_point::max();
      const Status s = SignalTask(*target, sent_pid, SIGCONT);
      std::printf("tfctl: chaos: %s\n", s.ok() ? fmt::format("sent SIGCONT to {} (pid {})", target_name, sent_pid).c_str() : s.message().c_str());
      std::fflush(stdout);
    }
    if (!ProcessAlive(collector)) {
      collector_ended = true;
      break;
    }
    if (Clock::now() >= deadline_at) {  // the run's tfctl stops what still runs and writes the summary
      std::printf("tfctl: chaos: the run goes on %.0f s after the fault: stopping it\n", fault->deadline_secs);
      std::fflush(stdout);
      if (!TerminateAndWait(collector, args.grace_secs + 30))
        std::fprintf(stderr, "tfctl: the run's tfctl (pid %d) did not stop\n", collector);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (collector_ended && sent_at == 0 && not_sent.empty())
    not_sent = fmt::format("the run ended before event {} number {} from {}", fault->event, fault->nth, from_name);
  return Report(run_dir, run->plan, *fault, promise, not_sent, sent_at);
}

}  // namespace

int Chaos(const std::vector<std::string>& args, const Interrupts& interrupts) {
  Result<ChaosArgs> parsed = ParseChaosArgs(args);
  if (!parsed.ok()) return UsageError(parsed.status().message());
  if (fs::is_directory(parsed->run_or_file)) {
    if (!fs::exists(fs::path(parsed->run_or_file) / "cluster.json"))
      return UsageError(fmt::format("chaos: {} is not a run folder (no cluster.json)", parsed->run_or_file));
    return ChaosOnRun(*parsed);
  }
  return ChaosOnCluster(*parsed, interrupts);
}

}  // namespace tfd::launcher
