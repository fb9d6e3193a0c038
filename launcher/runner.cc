// Run, the loop behind up and chaos: it starts the tasks (through launcher/child_process.h), reads
// their pipes, and between turns reaps them, sends a chaos fault and takes scale requests; a Runner
// holds what it keeps between turns, and each of those pieces is a member of its own. The file is
// over 600 lines because the class is one: every piece reads and writes the same task table
// between two turns of one loop, and a header exposing that table to split files would be longer
// than what it saved.
#include "launcher/runner.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/base/check.h"
#include "common/base/clock.h"
#include "common/base/logging.h"
#include "common/config/cluster_file.h"
#include "common/config/json_writer.h"
#include "launcher/live_table.h"
#include "launcher/run_summary.h"
#include "launcher/scale.h"

namespace tfd::launcher {
namespace {

using Clock = std::chrono::steady_clock;

using Row = LiveRow;  // the live table's view of one worker (launcher/live_table.h)

struct Task {
  const TaskPlan* plan = nullptr;
  std::string name;
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;  // pipes from the child's stdout (events) and stderr (log lines)
  int in_fd = -1;                // ssh's stdin, held open: a remote task stops when it closes
  std::string out_buf, err_buf;
  std::ofstream log;
  std::deque<std::string> last_lines;
  bool running = false;
  int exit_code = -1;
  int restarts = 0;
  double ended_at = 0;     // Unix seconds of its last exit
  bool past_deadline = false;
  bool scaled_down = false;  // tfctl scale stopped it: its exit is no failure
  Row row;
  TaskFacts facts;  // from its events
};

// Starts one task in its own process group; it gets SIGTERM if tfctl dies.
Status Spawn(Task& t) {
  Result<Child> c = StartChild({.argv = t.plan->argv,
                                .env = t.plan->env,
                                .workdir = t.plan->local ? t.plan->workdir : "",  // a remote task's is on its host
                                .in = t.plan->local ? ChildStream::kNull : ChildStream::kPipe,
                                .out = ChildStream::kPipe,
                                .err = ChildStream::kPipe,
                                .group = ChildGroup::kOwn,
                                .die_with_parent = true});
  if (!c.ok()) return c.status().WithContext(t.name);
  t.in_fd = c->in;
  if (t.in_fd >= 0 && !t.plan->stdin_data.empty()) {  // a few bytes: the pipe holds them
    const std::string& d = t.plan->stdin_data;
    if (write(t.in_fd, d.data(), d.size()) != static_cast<ssize_t>(d.size()))
      std::fprintf(stderr, "tfctl: %s: could not hand the token to ssh: %s\n", t.name.c_str(), std::strerror(errno));
  }
  t.pid = c->pid;
  t.out_fd = c->out;
  t.err_fd = c->err;
  t.running = true;
  t.row.state = "running";
  return Status::Ok();
}

void SignalGroups(std::deque<Task>& tasks, int sig) {
  for (Task& t : tasks)
    if (t.running) kill(-t.pid, sig);
}

Clock::time_point After(double secs) { return Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(secs * 1000)); }

// The start of each JSON line of tfctl's own: {"ts": Unix seconds to the millisecond, "task", "event"}.
nlohmann::ordered_json EventLine(std::string_view task, std::string_view event) {
  return {{"ts", std::round(UnixSeconds() * 1000) / 1000}, {"task", task}, {"event", event}};
}

// tfctl chaos's fault as the run goes: its trigger's count, and what follows once it is sent.
struct FaultState {
  Injection* fault = nullptr;  // options.injection; null: no fault
  std::string trigger_task;
  int triggers_seen = 0;
  bool due = false;
  const Task* task = nullptr;  // the target, once sent
  pid_t pid = -1;
  Clock::time_point cont_at = Clock::time_point::max(), deadline_at = Clock::time_point::max();
  Clock::time_point then_at = Clock::time_point::max();  // Injection::then_kill's time
};

// The model `t` exported last, where it is: a relative path is relative to the task's workdir
// (a remote task's run folder is), and a remote task's folder is on its host.
std::optional<ModelSummary> ExportedModel(const Task& t) {
  if (t.facts.exported_path.empty()) return std::nullopt;
  const std::filesystem::path path = t.facts.exported_path;
  const std::string& workdir = t.plan->workdir;
  return ModelSummary{.task = t.name,
                      .host = t.plan->local ? "" : t.plan->host,
                      .path = (path.is_relative() && !workdir.empty() ? std::filesystem::path(workdir) / path : path).lexically_normal().string(),
                      .version = t.facts.exported_version,
                      .global_step = t.facts.exported_step};
}

// One call of Run: the tasks and everything the loop keeps between its turns. Run's thread only.
class Runner {
 public:
  Runner(const std::vector<TaskPlan>& plan, const RunOptions& options);
  int Run();

 private:
  // The tasks' output.
  void PollOutput(int timeout_ms, bool* any_open);
  void Drain(Task& t, bool is_stdout);
  void FinishPipes(Task& t);
  void HandleLine(Task& t, bool is_stdout, const std::string& line);
  void HandleEvent(Task& t, const std::string& line);
  // Their ends.
  void ReapEnded();
  void OnEnded(Task& t);
  void BeginStop();
  // Chaos injection.
  void ChaosOnEvent(const Task& t, const config::Event& e);
  void ChaosTick();
  void FaultSent(double sent_at);
  void SendSecondKill();
  void SendFault();
  // Scaling.
  void ScaleTick();
  ScaleReply Scale(const ScaleRequest& request);
  Status StartRank(int rank, Task* t);
  int RankOf(const Task& t) const;
  void EmitScale(const Task& t, std::string_view action, int workers);
  // The table, and the end.
  void Refresh();
  void WriteSummary();

  const RunOptions& options_;
  std::deque<Task> tasks_;  // a deque: workers that join are appended, and pointers to tasks stay valid
  std::deque<TaskPlan> joined_plans_;  // their plans
  std::ofstream metrics_;
  LiveDisplay display_;
  int exit_code_ = 0;
  std::string failure_;
  bool stopping_ = false;
  Clock::time_point kill_at_ = Clock::time_point::max();
  FaultState chaos_;
  // tfctl scale: a request in the run folder, looked for four times a second.
  const bool scalable_;
  bool has_chief_ = false;
  Clock::time_point next_scale_check_ = Clock::now();
};

Runner::Runner(const std::vector<TaskPlan>& plan, const RunOptions& options)
    : options_(options),
      tasks_(plan.size()),
      metrics_(options.run_dir + "/metrics.jsonl"),
      display_(isatty(1) == 1, options.json_output),
      scalable_(options.check_scale && options.plan_worker) {
  for (std::size_t i = 0; i < plan.size(); ++i) {
    tasks_[i].plan = &plan[i];
    tasks_[i].name = plan[i].task.ToString();
    tasks_[i].log.open(options.run_dir + "/" + tasks_[i].name + ".log");
  }
  has_chief_ = std::any_of(plan.begin(), plan.end(), [](const TaskPlan& p) { return p.task.type == config::TaskType::kChief; });
  chaos_.fault = options.injection;
  if (chaos_.fault != nullptr) chaos_.trigger_task = chaos_.fault->from.ToString();
}

// The main wait loop: each turn reads what the tasks wrote (up to 100 ms), then reaps, injects,
// scales and escalates stops, until no task runs and every pipe is drained.
int Runner::Run() {
  Refresh();
  for (Task& t : tasks_) {  // ps tasks come first in the plan
    if (Status s = Spawn(t); !s.ok()) {
      display_.Line(fmt::format("[tfctl] {}", s.message()));
      failure_ = s.message();
      exit_code_ = 1;
      BeginStop();
      break;
    }
  }
  for (bool any_open = true; any_open;) {
    PollOutput(100, &any_open);
    ReapEnded();
    ChaosTick();
    if (!stopping_ && options_.signal != nullptr && options_.signal->load() != 0) {
      display_.Line("[tfctl] interrupted: stopping every task");
      exit_code_ = 130;
      BeginStop();
    }
    if (scalable_ && Clock::now() >= next_scale_check_) ScaleTick();
    if (stopping_ && Clock::now() >= kill_at_) {
      SignalGroups(tasks_, SIGKILL);
      kill_at_ = Clock::time_point::max();
    }
  }
  const Injection* fault = chaos_.fault;
  if (fault != nullptr && fault->sent_at == 0 && fault->not_sent.empty())
    chaos_.fault->not_sent = fmt::format("the run ended before event {} number {} from {}", fault->event, fault->nth, chaos_.trigger_task);
  WriteSummary();
  return exit_code_;
}

// Polls every open pipe for up to `timeout_ms` and reads what came. *any_open: whether a task runs
// or a pipe was open (else the run is over).
void Runner::PollOutput(int timeout_ms, bool* any_open) {
  bool any_running = false;
  std::vector<pollfd> fds;
  std::vector<std::pair<Task*, bool>> owners;  // the task, and whether the pipe is its stdout
  for (Task& t : tasks_) {
    if (t.out_fd >= 0) fds.push_back({t.out_fd, POLLIN, 0}), owners.emplace_back(&t, true);
    if (t.err_fd >= 0) fds.push_back({t.err_fd, POLLIN, 0}), owners.emplace_back(&t, false);
    any_running = any_running || t.running;
  }
  *any_open = any_running || !fds.empty();
  if (!*any_open) return;
  poll(fds.data(), fds.size(), timeout_ms);
  for (std::size_t i = 0; i < fds.size(); ++i)
    if (fds[i].revents != 0) Drain(*owners[i].first, owners[i].second);
}

// Reads what one pipe holds and hands on each whole line; at its end, the last partial line too.
void Runner::Drain(Task& t, bool is_stdout) {
  int& fd = is_stdout ? t.out_fd : t.err_fd;
  std::string& buf = is_stdout ? t.out_buf : t.err_buf;
  char chunk[65536];
  const ssize_t n = read(fd, chunk, sizeof chunk);
  if (n <= 0) {
    if (!buf.empty()) HandleLine(t, is_stdout, buf);
    buf.clear();
    close(fd);
    fd = -1;
    return;
  }
  buf.append(chunk, static_cast<std::size_t>(n));
  std::size_t start = 0;
  for (std::size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) HandleLine(t, is_stdout, buf.substr(start, nl - start));
  buf.erase(0, start);
}

// An ended task's last lines, before it starts again.
void Runner::FinishPipes(Task& t) {
  for (const bool is_stdout : {true, false}) {
    int& fd = is_stdout ? t.out_fd : t.err_fd;
    for (int i = 0; i < 1000 && fd >= 0; ++i) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 1000) <= 0) break;
      Drain(t, is_stdout);
    }
    if (fd >= 0) close(fd), fd = -1;
  }
}

// A line from a task: stdout carries its JSON events, stderr its log lines.
void Runner::HandleLine(Task& t, bool is_stdout, const std::string& line) {
  if (is_stdout) {
    HandleEvent(t, line);
    return;
  }
  t.log << line << '\n';
  t.log.flush();
  t.last_lines.push_back(line);
  if (t.last_lines.size() > 5) t.last_lines.pop_front();
  display_.Line(fmt::format("[{}] {}", t.name, LogMessage(line)));
}

void Runner::HandleEvent(Task& t, const std::string& line) {
  metrics_ << line << '\n';
  metrics_.flush();  // status and up --detach read it while the run goes on
  Result<config::Event> e = config::ParseEvent(line);
  if (options_.json_output && e.ok()) {  // the event as it came
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  } else if (options_.json_output) {  // not an event: a log line, as JSON
    display_.Line(fmt::format("[{}] {}", t.name, line));
  }
  if (!e.ok()) return;
  ChaosOnEvent(t, *e);
  ApplyEvent(*e, t.row, t.facts);
  Refresh();
}

void Runner::ReapEnded() {
  for (Task& t : tasks_) {
    if (!t.running || !Reaped(t.pid, &t.exit_code)) continue;
    t.running = false;
    t.ended_at = UnixSeconds();
    if (t.in_fd >= 0) close(t.in_fd), t.in_fd = -1;
    if (t.row.state != "done") {
      const bool stopped = stopping_ && (t.exit_code == 128 + SIGTERM || (!t.plan->local && t.exit_code == 255));
      t.row.state = t.scaled_down ? "scaled down" : t.exit_code == 0 ? "exited" : stopped ? "stopped" : fmt::format("failed ({})", t.exit_code);
    }
    Refresh();
    if (!t.scaled_down) OnEnded(t);  // tfctl scale stopped it: no failure, no restart
  }
}

// What follows a task's exit: a restart (launch.restart), going on without it, or stopping the rest.
void Runner::OnEnded(Task& t) {
  // launch.restart: start it again (a bad configuration, exit 2, would only fail again).
  if (t.exit_code != 0 && t.exit_code != 2 && !stopping_ && t.restarts < t.plan->max_restarts) {
    FinishPipes(t);
    ++t.restarts;
    display_.Line(fmt::format("[tfctl] {} failed with exit code {}; starting it again ({} of {})", t.name, t.exit_code, t.restarts,
                              t.plan->max_restarts));
    if (Status s = Spawn(t); s.ok()) {
      t.row.state = "restarted";
      Refresh();
      return;
    }
  }
  if (t.exit_code == 0 || stopping_) return;
  // An evaluator only reads the chief's checkpoints: training goes on without it.
  const bool evaluator = t.plan->task.type == config::TaskType::kEvaluator;
  if (options_.observe || evaluator) {
    display_.Line(fmt::format("[tfctl] {} failed with exit code {}; the other tasks go on ({})", t.name, t.exit_code,
                              evaluator ? "training does not need the evaluator" : "observing"));
    if (exit_code_ == 0) failure_ = fmt::format("{} failed with exit code {}", t.name, t.exit_code);
    exit_code_ = 1;
    return;
  }
  std::string last;
  for (const std::string& l : t.last_lines) last += "\n    " + l;
  failure_ = fmt::format("{} failed with exit code {}; its last lines:{}", t.name, t.exit_code, last);
  display_.Line(fmt::format("[tfctl] {}; stopping the other tasks", failure_.substr(0, failure_.find(';'))));
  exit_code_ = 1;
  BeginStop();
}

// TERM to every task's group now, KILL after the grace period.
void Runner::BeginStop() {
  stopping_ = true;
  SignalGroups(tasks_, SIGTERM);
  kill_at_ = After(options_.grace_secs);
}

// Chaos injection: counts the trigger's events, and moves the deadline on progress.
void Runner::ChaosOnEvent(const Task& t, const config::Event& e) {
  Injection* const fault = chaos_.fault;
  if (fault == nullptr) return;
  if (fault->progress_extends && fault->sent_at != 0 && chaos_.deadline_at != Clock::time_point::max() &&
      (e.event == "step" || e.event == "epoch")) {
    chaos_.deadline_at = After(fault->deadline_secs);  // training goes on: recovered
    fault->deadline_unix = UnixSeconds() + fault->deadline_secs;
  }
  if (fault->sent_at == 0 && t.name == chaos_.trigger_task && e.event == fault->event && ++chaos_.triggers_seen == fault->nth)
    chaos_.due = true;
}

// Once a turn: the fault when due, SIGCONT after a stop, and every task killed at the deadline.
void Runner::ChaosTick() {
  if (chaos_.due && !stopping_) SendFault();
  if (Clock::now() >= chaos_.cont_at) {
    chaos_.cont_at = Clock::time_point::max();
    const Status s = SignalTask(*chaos_.task->plan, chaos_.pid, SIGCONT);
    display_.Line(fmt::format("[tfctl] chaos: {}", s.ok() ? fmt::format("sent SIGCONT to {} (pid {})", chaos_.task->name, chaos_.pid) : s.message()));
  }
  if (Clock::now() >= chaos_.then_at) {
    chaos_.then_at = Clock::time_point::max();
    SendSecondKill();
  }
  if (Clock::now() >= chaos_.deadline_at) {
    chaos_.deadline_at = Clock::time_point::max();
    for (Task& t : tasks_) {
      if (!t.running) continue;
      t.past_deadline = true;
      display_.Line(fmt::format("[tfctl] chaos: {} still runs {} s after the fault: killing it", t.name, chaos_.fault->deadline_secs));
    }
    stopping_ = true;  // nothing is restarted after the deadline
    SignalGroups(tasks_, SIGKILL);
    kill_at_ = Clock::time_point::max();
  }
}

// Starts the chaos deadline (and the second kill's time) once the fault was sent at `sent_at`.
void Runner::FaultSent(double sent_at) {
  Injection* const fault = chaos_.fault;
  fault->sent_at = sent_at;
  chaos_.deadline_at = After(fault->deadline_secs);
  fault->deadline_unix = fault->sent_at + fault->deadline_secs;
  if (fault->then_kill) chaos_.then_at = After(fault->then_after_secs);
}

void Runner::SendSecondKill() {
  Injection* const fault = chaos_.fault;
  for (Task& t : tasks_) {
    if (t.plan->task != *fault->then_kill) continue;
    const pid_t pid = t.plan->local ? t.pid : t.facts.pid;
    if (!t.running || pid <= 0) {
      display_.Line(fmt::format("[tfctl] chaos: the second kill was not sent: {} had ended", t.name));
      return;
    }
    if (Status s = SignalTask(*t.plan, pid, SIGKILL); !s.ok()) {
      display_.Line(fmt::format("[tfctl] chaos: the second kill was not sent: {}", s.message()));
      return;
    }
    fault->then_sent_at = UnixSeconds();
    display_.Line(fmt::format("[tfctl] chaos: sent SIGKILL to {} (pid {})", t.name, pid));
  }
}

void Runner::SendFault() {
  Injection* const fault = chaos_.fault;
  if (fault->grow_to > 0) {
    chaos_.due = false;
    const ScaleReply reply = scalable_ ? Scale({.workers = fault->grow_to, .id = "chaos"})
                                       : ScaleReply{.message = "this run cannot be scaled"};
    if (!reply.ok) {
      fault->not_sent = reply.message;
      display_.Line(fmt::format("[tfctl] chaos: the run was not grown: {}", reply.message));
      return;
    }
    FaultSent(UnixSeconds());
    display_.Line(fmt::format("[tfctl] chaos: scaled to {} workers ({}); every task has {} s to end", fault->grow_to, reply.message,
                              fault->deadline_secs));
    return;
  }
  Task* target = nullptr;
  for (Task& t : tasks_)
    if (t.plan->task == fault->target) target = &t;
  TFD_CHECK(target != nullptr);  // ResolveFault took it from this cluster
  // A remote task is signalled by the pid of its start event: wait for that event.
  const pid_t pid = target->plan->local ? target->pid : target->facts.pid;
  if (!target->running) {
    chaos_.due = false;
    fault->not_sent = fmt::format("{} had already ended when the trigger came", target->name);
  } else if (pid > 0) {
    chaos_.due = false;
    if (Status s = SignalTask(*target->plan, pid, fault->signal); !s.ok()) {
      fault->not_sent = s.message();
    } else {
      chaos_.task = target;
      chaos_.pid = pid;
      FaultSent(UnixSeconds());
      if (fault->signal == SIGSTOP) chaos_.cont_at = After(fault->stop_secs);
      display_.Line(fmt::format("[tfctl] chaos: sent SIG{} to {} (pid {}); every task has {} s to end", SignalName(fault->signal), target->name,
                                pid, fault->deadline_secs));
    }
  }
  if (!fault->not_sent.empty()) display_.Line(fmt::format("[tfctl] chaos: the fault was not sent: {}", fault->not_sent));
}

// Scaling: takes a scale request from the run folder, if there is one, and answers it there.
void Runner::ScaleTick() {
  next_scale_check_ = After(0.25);
  Result<std::optional<ScaleRequest>> request = TakeScaleRequest(options_.run_dir);
  if (!request.ok()) {
    display_.Line(fmt::format("[tfctl] scale: {}", request.status().message()));
    return;
  }
  if (!*request) return;
  const ScaleReply reply = Scale(**request);
  display_.Line(fmt::format("[tfctl] scale to {} workers: {}{}", (*request)->workers, reply.ok ? "" : "refused: ", reply.message));
  if (Status s = WriteScaleReply(options_.run_dir, reply); !s.ok()) display_.Line(fmt::format("[tfctl] scale: {}", s.message()));
  Refresh();
}

// Starts the lowest ranks that have no task or were scaled down, or stops the highest-ranked
// running workers (never the chief), until request.workers run (RunOptions::check_scale).
ScaleReply Runner::Scale(const ScaleRequest& request) {
  ScaleReply reply{.id = request.id};
  if (stopping_) {
    reply.message = "the run is stopping";
    return reply;
  }
  if (Status s = options_.check_scale(request.workers); !s.ok()) {
    reply.message = s.message();
    return reply;
  }
  std::map<int, Task*> by_rank;
  int running = 0;
  for (Task& t : tasks_) {
    if (RankOf(t) < 0) continue;
    by_rank[RankOf(t)] = &t;
    if (t.running && !t.scaled_down) ++running;
  }
  std::vector<std::string> done;
  for (int rank = 0; running < request.workers; ++rank) {
    auto it = by_rank.find(rank);
    Task* t = it == by_rank.end() ? nullptr : it->second;
    if (t != nullptr && (t->running || !t->scaled_down)) continue;  // it runs, or it ended on its own
    if (t == nullptr) {
      Result<TaskPlan> p = options_.plan_worker(rank);
      if (!p.ok()) {
        reply.message = p.status().message();
        break;
      }
      joined_plans_.push_back(std::move(*p));
      t = &tasks_.emplace_back();
      t->plan = &joined_plans_.back();
      t->name = t->plan->task.ToString();
      t->log.open(options_.run_dir + "/" + t->name + ".log", std::ios::app);
    } else {
      FinishPipes(*t);
    }
    t->scaled_down = false;
    t->row = Row{};
    if (Status s = Spawn(*t); !s.ok()) {
      reply.message = s.message();
      break;
    }
    ++running;
    EmitScale(*t, "start", request.workers);
    reply.started.push_back(t->name);
    done.push_back("started " + t->name);
  }
  for (auto it = by_rank.rbegin(); it != by_rank.rend() && running > request.workers; ++it) {
    Task& t = *it->second;
    if (!t.running || t.scaled_down || it->first == 0) continue;  // the chief stays
    t.scaled_down = true;
    kill(-t.pid, SIGTERM);
    --running;
    t.row.state = "stopping";
    EmitScale(t, "stop", request.workers);
    done.push_back("stopping " + t.name);
  }
  reply.ok = reply.message.empty();
  if (reply.ok) reply.message = fmt::format("{}{} workers run", done.empty() ? "" : fmt::format("{}; ", fmt::join(done, ", ")), running);
  return reply;
}

// A training worker's rank (the chief's 0); -1 for a ps or an evaluator.
int Runner::RankOf(const Task& t) const {
  if (t.plan->task.type == config::TaskType::kChief) return 0;
  return t.plan->task.type == config::TaskType::kWorker ? t.plan->task.index + (has_chief_ ? 1 : 0) : -1;
}

void Runner::EmitScale(const Task& t, std::string_view action, int workers) {
  nlohmann::ordered_json event = EventLine(t.name, "scale");
  event["action"] = action;
  event["workers"] = workers;
  const std::string line = config::JsonText(event);
  metrics_ << line << '\n';
  metrics_.flush();
  if (options_.json_output) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
}

// The table, and whoever watches the tasks' states.
void Runner::Refresh() {
  std::vector<std::pair<std::string, Row>> rows;
  for (const Task& t : tasks_)
    if (t.plan->task.type != config::TaskType::kPs) rows.emplace_back(t.name, t.row);
  display_.SetRows(std::move(rows));
  if (!options_.on_tasks) return;
  std::vector<TaskState> states;
  for (const Task& t : tasks_)
    states.push_back({.task = t.name, .state = t.row.state, .restarts = t.restarts, .exit_code = t.running ? -1 : t.exit_code,
                      .test_accuracy = t.row.state == "done" ? t.row.test_accuracy : -1});
  options_.on_tasks(states);
}

// Summary writing: summary.json, the table once for a log, the failure and the run folder's line.
void Runner::WriteSummary() {
  RunSummary summary{.run_dir = options_.run_dir, .exit_code = exit_code_};
  for (const Task& t : tasks_)
    summary.tasks.push_back({.task = t.name, .exit_code = t.exit_code, .restarts = t.restarts, .ended_at = t.ended_at,
                             .past_deadline = t.past_deadline, .scaled_down = t.scaled_down, .test_accuracy = t.facts.final_test_accuracy,
                             .global_step = t.facts.final_global_step, .params_sha256 = t.facts.params_sha256});
  for (const Task& t : tasks_)  // plan order: the chief's before any other's
    if (!summary.model) summary.model = ExportedModel(t);
  std::ofstream(options_.run_dir + "/summary.json") << SummaryJson(summary);
  if (isatty(1) != 1 && !options_.json_output)  // a terminal already shows the table; a log gets it once, at the end
    for (const std::string& l : display_.Table()) std::printf("%s\n", l.c_str());
  if (exit_code_ == 1) Say(stderr, options_.json_output, "failure", failure_);
  Say(stdout, options_.json_output, "run_folder", "run folder " + options_.run_dir,
      {{"run_dir", options_.run_dir}, {"exit_code", std::int64_t{exit_code_}}});
}

}  // namespace

void Say(std::FILE* stream, bool json, std::string_view event, std::string_view message, const std::vector<EventField>& extra,
         std::string_view task) {
  if (!json) {
    std::fprintf(stream, "tfctl: %.*s\n", static_cast<int>(message.size()), message.data());
  } else {
    nlohmann::ordered_json line = EventLine(task, event);
    line["message"] = message;
    for (const EventField& f : extra) std::visit([&](const auto& v) { line[f.key] = v; }, f.value);
    std::fputs((config::JsonText(line) + "\n").c_str(), stream);
  }
  std::fflush(stream);
}

std::string_view LogMessage(std::string_view line) {
  auto tag = line.find("] ");
  return tag != std::string_view::npos && line.size() > 24 && line[4] == '-' ? line.substr(tag + 2) : line;
}

Status SignalTask(const TaskPlan& plan, pid_t pid, int sig) {
  if (pid <= 0) return Status::Unavailable(fmt::format("{}: no process id to signal", plan.task.ToString()));
  if (plan.ssh.empty()) {
    if (kill(pid, sig) != 0)
      return Status::Unavailable(fmt::format("{}: kill -{} {}: {}", plan.task.ToString(), SignalName(sig), pid, std::strerror(errno)));
    return Status::Ok();
  }
  std::vector<std::string> argv = plan.ssh;
  argv.push_back(fmt::format("kill -{} {}", SignalName(sig), pid));
  const CommandOutput r = RunAndCapture(argv, 30);
  if (r.exit_code == 0) return Status::Ok();
  std::string err = r.err;
  while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) err.pop_back();
  return Status::Unavailable(fmt::format("{}: kill -{} {} on {} (exit {}): {}", plan.task.ToString(), SignalName(sig), pid, plan.host,
                                         r.exit_code, err.empty() ? "no message" : err));
}

int Run(const std::vector<TaskPlan>& plan, const RunOptions& options) { return Runner(plan, options).Run(); }

}  // namespace tfd::launcher
