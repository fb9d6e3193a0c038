// Run's one loop serves up and chaos (a fault, observe mode), and owns every child: it stays one
// file, over 700 lines (more than the 600 a file should hold), so that every fork, wait and signal
// of tfctl is read in one place.
#include "launcher/runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/base/check.h"
#include "common/base/logging.h"
#include "common/base/terminal.h"
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
  pid_t event_pid = -1;    // from its latest start event: a remote task's tfd is signalled by it
  double ended_at = 0;     // Unix seconds of its last exit
  bool past_deadline = false;
  bool scaled_down = false;  // tfctl scale stopped it: its exit is no failure
  Row row;
  // For summary.json: from the done event (an evaluator's from its last eval event).
  std::optional<double> final_test_accuracy;
  std::optional<std::int64_t> final_global_step;
  std::string params_sha256;
};

// Starts one local task in its own process group; it gets SIGTERM if tfctl dies.
Status Spawn(Task& t) {
  int out[2], err[2], in[2] = {-1, -1};
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || (!t.plan->local && pipe2(in, O_CLOEXEC) != 0))
    return Status::Internal(fmt::format("{}: pipe: {}", t.name, std::strerror(errno)));
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return Status::Internal(fmt::format("{}: fork: {}", t.name, std::strerror(errno)));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);  // tfctl died before the line above
    dup2(out[1], 1);
    dup2(err[1], 2);
    dup2(in[0] >= 0 ? in[0] : open("/dev/null", O_RDONLY), 0);
    if (!t.plan->workdir.empty() && chdir(t.plan->workdir.c_str()) != 0) {
      std::fprintf(stderr, "tfctl: cannot enter %s: %s\n", t.plan->workdir.c_str(), std::strerror(errno));
      _exit(2);
    }
    for (const std::string& e : t.plan->env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv;
    for (const std::string& a : t.plan->argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "tfctl: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  close(out[1]);
  close(err[1]);
  if (in[0] >= 0) close(in[0]);
  t.in_fd = in[1];
  if (t.in_fd >= 0 && !t.plan->stdin_data.empty()) {  // a few bytes: the pipe holds them
    const std::string& d = t.plan->stdin_data;
    if (write(t.in_fd, d.data(), d.size()) != static_cast<ssize_t>(d.size()))
      std::fprintf(stderr, "tfctl: %s: could not hand the token to ssh: %s\n", t.name.c_str(), std::strerror(errno));
  }
  t.pid = pid;
  t.out_fd = out[0];
  t.err_fd = err[0];
  t.running = true;
  t.row.state = "running";
  return Status::Ok();
}

class Display {
 public:
  Display(bool tty, bool json) : tty_(tty && !json), json_(json), block_(stdout, 1) {}
  // `s` is "[who] message"; as JSON, who becomes the line's task.
  void Line(const std::string& s) {
    if (json_) {
      const std::size_t close = s.find("] ");
      const bool tagged = !s.empty() && s[0] == '[' && close != std::string::npos;
      Say(stdout, /*json=*/true, "log", tagged ? s.substr(close + 2) : s, {}, tagged ? s.substr(1, close - 1) : "tfctl");
      return;
    }
    Clear();
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fputc('\n', stdout);
    Draw();
  }
  void SetRows(std::vector<std::pair<std::string, Row>> rows) {
    rows_ = std::move(rows);
    Clear();
    Draw();
  }
  std::vector<std::string> Table() const {
    std::vector<LiveRow> rows;
    for (const auto& [name, r] : rows_) {
      rows.push_back(r);
      rows.back().name = name;
    }
    return FormatLiveTable(ByReplica(rows));
  }

 private:
  void Clear() {
    if (tty_) block_.Clear();
  }
  void Draw() {
    if (json_) return;
    if (!tty_) {
      std::fflush(stdout);
      return;
    }
    block_.Draw(Table());
  }
  bool tty_, json_;
  LiveBlock block_;  // the table at the bottom of the terminal
  std::vector<std::pair<std::string, Row>> rows_;
};

void SignalGroups(std::deque<Task>& tasks, int sig) {
  for (Task& t : tasks)
    if (t.running) kill(-t.pid, sig);
}

double UnixNow() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

Clock::time_point After(double secs) { return Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(secs * 1000)); }

// The start of each JSON line of tfctl's own: {"ts": Unix seconds to the millisecond, "task", "event"}.
nlohmann::ordered_json EventLine(std::string_view task, std::string_view event) {
  return {{"ts", std::round(UnixNow() * 1000) / 1000}, {"task", task}, {"event", event}};
}

std::optional<std::int64_t> Step(double step) {
  if (!std::isfinite(step)) return std::nullopt;
  return std::llround(step);
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

std::string SignalName(int sig) {
  switch (sig) {
    case SIGKILL: return "KILL";
    case SIGTERM: return "TERM";
    case SIGSTOP: return "STOP";
    case SIGCONT: return "CONT";
    default: return std::to_string(sig);
  }
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

CommandOutput RunAndCapture(const std::vector<std::string>& argv, double timeout_secs) {
  CommandOutput r;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return r;
  pid_t pid = fork();
  if (pid < 0) return r;
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    dup2(open("/dev/null", O_RDONLY), 0);
    std::vector<char*> a;
    for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execvp(a[0], a.data());
    std::fprintf(stderr, "cannot run %s: %s\n", a[0], std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_secs * 1000));
  int fds[2] = {out[0], err[0]};
  std::string* bufs[2] = {&r.out, &r.err};
  while (fds[0] >= 0 || fds[1] >= 0) {
    pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    if (Clock::now() >= deadline) {
      kill(pid, SIGKILL);
      break;
    }
    poll(p, 2, 100);
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0 || p[i].revents == 0) continue;
      char chunk[4096];
      ssize_t n = read(fds[i], chunk, sizeof chunk);
      if (n <= 0) {
        close(fds[i]);
        fds[i] = -1;
      } else {
        bufs[i]->append(chunk, static_cast<std::size_t>(n));
      }
    }
  }
  for (int fd : fds)
    if (fd >= 0) close(fd);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

int Run(const std::vector<TaskPlan>& plan, const RunOptions& options) {
  std::deque<Task> tasks(plan.size());  // a deque: workers that join are appended, and pointers to tasks stay valid
  std::deque<TaskPlan> joined_plans;    // their plans
  std::ofstream metrics(options.run_dir + "/metrics.jsonl");
  Display display(isatty(1) == 1, options.json_output);
  auto rows = [&] {
    std::vector<std::pair<std::string, Row>> r;
    for (const Task& t : tasks)
      if (t.plan->task.type != config::TaskType::kPs) r.emplace_back(t.name, t.row);
    return r;
  };
  auto refresh = [&] {  // the table, and whoever watches the tasks' states
    display.SetRows(rows());
    if (!options.on_tasks) return;
    std::vector<TaskState> states;
    for (const Task& t : tasks)
      states.push_back({.task = t.name, .state = t.row.state, .restarts = t.restarts, .exit_code = t.running ? -1 : t.exit_code,
                        .test_accuracy = t.row.state == "done" ? t.row.test_accuracy : -1});
    options.on_tasks(states);
  };
  for (std::size_t i = 0; i < plan.size(); ++i) {
    tasks[i].plan = &plan[i];
    tasks[i].name = plan[i].task.ToString();
    tasks[i].log.open(options.run_dir + "/" + tasks[i].name + ".log");
  }
  refresh();
  int exit_code = 0;
  std::string failure;
  for (Task& t : tasks) {  // ps tasks come first in the plan
    if (Status s = Spawn(t); !s.ok()) {
      display.Line(fmt::format("[tfctl] {}", s.message()));
      failure = s.message();
      exit_code = 1;
      break;
    }
  }
  bool stopping = exit_code != 0;
  Clock::time_point kill_at = Clock::time_point::max();
  if (stopping) {
    SignalGroups(tasks, SIGTERM);
    kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int>(options.grace_secs * 1000));
  }
  // tfctl chaos: the fault, its trigger's count, and what follows once it is sent.
  Injection* const fault = options.injection;
  const std::string trigger_task = fault != nullptr ? fault->from.ToString() : "";
  int triggers_seen = 0;
  bool fault_due = false;
  Task* fault_task = nullptr;
  pid_t fault_pid = -1;
  Clock::time_point cont_at = Clock::time_point::max(), deadline_at = Clock::time_point::max();
  auto handle_line = [&](Task& t, bool is_stdout, const std::string& line) {
    if (is_stdout) {
      metrics << line << '\n';
      metrics.flush();  // status and up --detach read it while the run goes on
      Result<config::Event> e = config::ParseEvent(line);
      if (options.json_output && e.ok()) {  // the event as it came
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
      } else if (options.json_output) {  // not an event: a log line, as JSON
        display.Line(fmt::format("[{}] {}", t.name, line));
      }
      if (!e.ok()) return;
      if (e->event == "start") {
        t.event_pid = static_cast<pid_t>(e->Number("pid", -1));
        if (e->numbers.contains("stage") && e->numbers.contains("replica")) {  // a model-parallel stage: its replica's row
          t.row.stage = static_cast<int>(e->Number("stage"));
          t.row.stages = static_cast<int>(e->Number("stages", 0));
          t.row.replica = static_cast<int>(e->Number("replica"));
        }
      }
      if (fault != nullptr && fault->progress_extends && fault->sent_at != 0 && deadline_at != Clock::time_point::max() &&
          (e->event == "step" || e->event == "epoch")) {
        deadline_at = After(fault->deadline_secs);  // training goes on: recovered
        fault->deadline_unix = UnixNow() + fault->deadline_secs;
      }
      if (fault != nullptr && fault->sent_at == 0 && t.name == trigger_task && e->event == fault->event && ++triggers_seen == fault->nth)
        fault_due = true;
      Row& r = t.row;
      if (e->event == "epoch") {
        r.epoch = e->Number("epoch", r.epoch);
        r.global_step = e->Number("global_step", r.global_step);
        r.loss = e->Number("loss", r.loss);
        r.accuracy = e->Number("accuracy", r.accuracy);
        r.test_accuracy = e->Number("test_accuracy", r.test_accuracy);
        r.mae = e->Number("mae", r.mae), r.test_mae = e->Number("test_mae", r.test_mae);  // a regression run's
        r.samples_per_sec = e->Number("samples_per_sec", r.samples_per_sec);
        r.state = "training";
      } else if (e->event == "eval") {  // the evaluator's row: its last evaluated step and accuracy
        r.global_step = e->Number("global_step", r.global_step);
        r.test_accuracy = e->Number("test_accuracy", r.test_accuracy);
        r.state = "evaluating";
        t.final_global_step = Step(r.global_step);
        t.final_test_accuracy = r.test_accuracy;
      } else if (e->event == "stage") {
        r.stage = static_cast<int>(e->Number("stage", r.stage));
        r.stages = static_cast<int>(e->Number("stages", r.stages));
        r.replica = static_cast<int>(e->Number("replica", r.replica < 0 ? 0 : r.replica));
        r.busy = e->Number("busy", r.busy);
      } else if (e->event == "ready") {
        r.state = "training";
      } else if (e->event == "done") {
        r.test_accuracy = e->Number("test_accuracy", r.test_accuracy);
        r.test_mae = e->Number("test_mae", r.test_mae);
        r.global_step = e->Number("global_step", r.global_step);
        r.state = "done";
        t.final_test_accuracy.reset();
        t.final_global_step.reset();
        if (e->numbers.contains("test_accuracy")) t.final_test_accuracy = e->Number("test_accuracy");
        if (e->numbers.contains("global_step")) t.final_global_step = Step(e->Number("global_step"));
        t.params_sha256 = e->strings.contains("params_sha256") ? e->strings["params_sha256"] : "";
      }
      refresh();
      return;
    }
    t.log << line << '\n';
    t.log.flush();
    t.last_lines.push_back(line);
    if (t.last_lines.size() > 5) t.last_lines.pop_front();
    display.Line(fmt::format("[{}] {}", t.name, LogMessage(line)));
  };
  auto drain = [&](Task& t, int& fd, std::string& buf, bool is_stdout) {
    char chunk[65536];
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n <= 0) {
      if (!buf.empty()) handle_line(t, is_stdout, buf);
      buf.clear();
      close(fd);
      fd = -1;
      return;
    }
    buf.append(chunk, static_cast<std::size_t>(n));
    std::size_t start = 0;
    for (std::size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1)
      handle_line(t, is_stdout, buf.substr(start, nl - start));
    buf.erase(0, start);
  };

  auto finish_pipes = [&](Task& t) {  // an ended task's last lines, before it starts again
    for (int* fd : {&t.out_fd, &t.err_fd}) {
      std::string& buf = fd == &t.out_fd ? t.out_buf : t.err_buf;
      for (int i = 0; i < 1000 && *fd >= 0; ++i) {
        pollfd p{*fd, POLLIN, 0};
        if (poll(&p, 1, 1000) <= 0) break;
        drain(t, *fd, buf, fd == &t.out_fd);
      }
      if (*fd >= 0) close(*fd), *fd = -1;
    }
  };

  // tfctl scale: a request in the run folder, looked for four times a second.
  const bool scalable = options.check_scale && options.plan_worker;
  Clock::time_point next_scale_check = Clock::now();
  const bool has_chief = std::any_of(plan.begin(), plan.end(), [](const TaskPlan& p) { return p.task.type == config::TaskType::kChief; });
  auto rank_of = [&](const Task& t) {  // -1 for a ps or an evaluator
    if (t.plan->task.type == config::TaskType::kChief) return 0;
    return t.plan->task.type == config::TaskType::kWorker ? t.plan->task.index + (has_chief ? 1 : 0) : -1;
  };
  auto emit_scale = [&](const Task& t, std::string_view action, int workers) {
    nlohmann::ordered_json event = EventLine(t.name, "scale");
    event["action"] = action;
    event["workers"] = workers;
    const std::string line = config::JsonText(event);
    metrics << line << '\n';
    metrics.flush();
    if (options.json_output) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
  };
  auto scale = [&](const ScaleRequest& request) {
    ScaleReply reply{.id = request.id};
    if (stopping) {
      reply.message = "the run is stopping";
      return reply;
    }
    if (Status s = options.check_scale(request.workers); !s.ok()) {
      reply.message = s.message();
      return reply;
    }
    std::map<int, Task*> by_rank;
    int running = 0;
    for (Task& t : tasks) {
      if (rank_of(t) < 0) continue;
      by_rank[rank_of(t)] = &t;
      if (t.running && !t.scaled_down) ++running;
    }
    std::vector<std::string> done;
    for (int rank = 0; running < request.workers; ++rank) {
      auto it = by_rank.find(rank);
      Task* t = it == by_rank.end() ? nullptr : it->second;
      if (t != nullptr && (t->running || !t->scaled_down)) continue;  // it runs, or it ended on its own
      if (t == nullptr) {
        Result<TaskPlan> p = options.plan_worker(rank);
        if (!p.ok()) {
          reply.message = p.status().message();
          break;
        }
        joined_plans.push_back(std::move(*p));
        t = &tasks.emplace_back();
        t->plan = &joined_plans.back();
        t->name = t->plan->task.ToString();
        t->log.open(options.run_dir + "/" + t->name + ".log", std::ios::app);
      } else {
        finish_pipes(*t);
      }
      t->scaled_down = false;
      t->row = Row{};
      if (Status s = Spawn(*t); !s.ok()) {
        reply.message = s.message();
        break;
      }
      ++running;
      emit_scale(*t, "start", request.workers);
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
      emit_scale(t, "stop", request.workers);
      done.push_back("stopping " + t.name);
    }
    reply.ok = reply.message.empty();
    if (reply.ok) reply.message = fmt::format("{}{} workers run", done.empty() ? "" : fmt::format("{}; ", fmt::join(done, ", ")), running);
    return reply;
  };

  for (;;) {
    bool any_running = false;
    std::vector<pollfd> fds;
    std::vector<std::pair<Task*, bool>> owners;
    for (Task& t : tasks) {
      if (t.out_fd >= 0) fds.push_back({t.out_fd, POLLIN, 0}), owners.emplace_back(&t, true);
      if (t.err_fd >= 0) fds.push_back({t.err_fd, POLLIN, 0}), owners.emplace_back(&t, false);
      any_running = any_running || t.running;
    }
    if (!any_running && fds.empty()) break;
    poll(fds.data(), fds.size(), 100);
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Task& t = *owners[i].first;
      if (owners[i].second) drain(t, t.out_fd, t.out_buf, true);
      else drain(t, t.err_fd, t.err_buf, false);
    }
    for (Task& t : tasks) {
      if (!t.running) continue;
      int status = 0;
      if (waitpid(t.pid, &status, WNOHANG) != t.pid) continue;
      t.running = false;
      t.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      t.ended_at = UnixNow();
      if (t.in_fd >= 0) close(t.in_fd), t.in_fd = -1;
      if (t.row.state != "done") {
        t.row.state = t.scaled_down                            ? "scaled down"
                      : t.exit_code == 0                        ? "exited"
                      : stopping && (t.exit_code == 128 + SIGTERM || (!t.plan->local && t.exit_code == 255)) ? "stopped"
                                                                 : fmt::format("failed ({})", t.exit_code);
      }
      refresh();
      if (t.scaled_down) continue;  // tfctl scale stopped it: no failure, no restart
      // launch.restart: start it again (a bad configuration, exit 2, would only fail again).
      if (t.exit_code != 0 && t.exit_code != 2 && !stopping && t.restarts < t.plan->max_restarts) {
        finish_pipes(t);
        ++t.restarts;
        display.Line(fmt::format("[tfctl] {} failed with exit code {}; starting it again ({} of {})", t.name, t.exit_code, t.restarts,
                                 t.plan->max_restarts));
        if (Status s = Spawn(t); s.ok()) {
          t.row.state = "restarted";
          refresh();
          continue;
        }
      }
      // An evaluator only reads the chief's checkpoints: training goes on without it.
      const bool evaluator = t.plan->task.type == config::TaskType::kEvaluator;
      if (t.exit_code != 0 && !stopping && (options.observe || evaluator)) {
        display.Line(fmt::format("[tfctl] {} failed with exit code {}; the other tasks go on ({})", t.name, t.exit_code,
                                 evaluator ? "training does not need the evaluator" : "observing"));
        if (exit_code == 0) failure = fmt::format("{} failed with exit code {}", t.name, t.exit_code);
        exit_code = 1;
      } else if (t.exit_code != 0 && !stopping) {
        std::string last;
        for (const std::string& l : t.last_lines) last += "\n    " + l;
        failure = fmt::format("{} failed with exit code {}; its last lines:{}", t.name, t.exit_code, last);
        display.Line(fmt::format("[tfctl] {}; stopping the other tasks", failure.substr(0, failure.find(';'))));
        exit_code = 1;
        stopping = true;
        SignalGroups(tasks, SIGTERM);
        kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int>(options.grace_secs * 1000));
      }
    }
    if (fault_due && !stopping) {
      Task* target = nullptr;
      for (Task& t : tasks)
        if (t.plan->task == fault->target) target = &t;
      TFD_CHECK(target != nullptr);  // ResolveFault took it from this cluster
      // A remote task is signalled by the pid of its start event: wait for that event.
      const pid_t pid = target->plan->local ? target->pid : target->event_pid;
      if (!target->running) {
        fault_due = false;
        fault->not_sent = fmt::format("{} had already ended when the trigger came", target->name);
      } else if (pid > 0) {
        fault_due = false;
        if (Status s = SignalTask(*target->plan, pid, fault->signal); !s.ok()) {
          fault->not_sent = s.message();
        } else {
          fault->sent_at = UnixNow();
          fault_task = target;
          fault_pid = pid;
          deadline_at = After(fault->deadline_secs);
          fault->deadline_unix = fault->sent_at + fault->deadline_secs;
          if (fault->signal == SIGSTOP) cont_at = After(fault->stop_secs);
          display.Line(fmt::format("[tfctl] chaos: sent SIG{} to {} (pid {}); every task has {} s to end", SignalName(fault->signal),
                                   target->name, pid, fault->deadline_secs));
        }
      }
      if (!fault->not_sent.empty()) display.Line(fmt::format("[tfctl] chaos: the fault was not sent: {}", fault->not_sent));
    }
    if (Clock::now() >= cont_at) {
      cont_at = Clock::time_point::max();
      const Status s = SignalTask(*fault_task->plan, fault_pid, SIGCONT);
      display.Line(fmt::format("[tfctl] chaos: {}", s.ok() ? fmt::format("sent SIGCONT to {} (pid {})", fault_task->name, fault_pid) : s.message()));
    }
    if (Clock::now() >= deadline_at) {
      deadline_at = Clock::time_point::max();
      for (Task& t : tasks) {
        if (!t.running) continue;
        t.past_deadline = true;
        display.Line(fmt::format("[tfctl] chaos: {} still runs {} s after the fault: killing it", t.name, fault->deadline_secs));
      }
      stopping = true;  // nothing is restarted after the deadline
      SignalGroups(tasks, SIGKILL);
      kill_at = Clock::time_point::max();
    }
    if (!stopping && options.signal != nullptr && options.signal->load() != 0) {
      display.Line("[tfctl] interrupted: stopping every task");
      exit_code = 130;
      stopping = true;
      SignalGroups(tasks, SIGTERM);
      kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int>(options.grace_secs * 1000));
    }
    if (scalable && Clock::now() >= next_scale_check) {
      next_scale_check = After(0.25);
      Result<std::optional<ScaleRequest>> request = TakeScaleRequest(options.run_dir);
      if (!request.ok()) {
        display.Line(fmt::format("[tfctl] scale: {}", request.status().message()));
      } else if (*request) {
        const ScaleReply reply = scale(**request);
        display.Line(fmt::format("[tfctl] scale to {} workers: {}{}", (*request)->workers, reply.ok ? "" : "refused: ", reply.message));
        if (Status s = WriteScaleReply(options.run_dir, reply); !s.ok()) display.Line(fmt::format("[tfctl] scale: {}", s.message()));
        refresh();
      }
    }
    if (stopping && Clock::now() >= kill_at) {
      SignalGroups(tasks, SIGKILL);
      kill_at = Clock::time_point::max();
    }
  }

  if (fault != nullptr && fault->sent_at == 0 && fault->not_sent.empty())
    fault->not_sent = fmt::format("the run ended before event {} number {} from {}", fault->event, fault->nth, trigger_task);

  RunSummary summary{.run_dir = options.run_dir, .exit_code = exit_code};
  for (const Task& t : tasks)
    summary.tasks.push_back({.task = t.name, .exit_code = t.exit_code, .restarts = t.restarts, .ended_at = t.ended_at,
                             .past_deadline = t.past_deadline, .scaled_down = t.scaled_down, .test_accuracy = t.final_test_accuracy,
                             .global_step = t.final_global_step, .params_sha256 = t.params_sha256});
  std::ofstream(options.run_dir + "/summary.json") << SummaryJson(summary);
  if (isatty(1) != 1 && !options.json_output)  // a terminal already shows the table; a log gets it once, at the end
    for (const std::string& l : display.Table()) std::printf("%s\n", l.c_str());
  if (exit_code == 1) Say(stderr, options.json_output, "failure", failure);
  Say(stdout, options.json_output, "run_folder", "run folder " + options.run_dir, {{"run_dir", options.run_dir}, {"exit_code", std::int64_t{exit_code}}});
  return exit_code;
}

Status RunInBackground(const std::function<int()>& body, const std::function<bool()>& ready, const BackgroundOptions& options) {
  std::fflush(nullptr);  // else the child would write the parent's pending output too
  const pid_t pid = fork();
  if (pid < 0) return Status::Internal(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    setsid();
    const int log = open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    dup2(log, 1);
    dup2(log, 2);
    if (options.on_signal != nullptr) {
      std::signal(SIGINT, options.on_signal);
      std::signal(SIGTERM, options.on_signal);
    }
    std::signal(SIGPIPE, SIG_IGN);
    std::signal(SIGHUP, SIG_IGN);
    std::ofstream(options.pid_path) << getpid() << "\n";
    const int code = body();
    // The background process ends here: what follows the call in the caller (main's foreground
    // work, a test runner) belongs to the parent, and so do the atexit handlers and static objects
    // it registered, which _exit does not run twice. stdio is flushed first, as exit() would.
    std::fflush(nullptr);
    _exit(code);
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int>(options.ready_timeout_secs * 1000));
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return Status::Unavailable("the background process ended before it was ready");
    if (ready()) return Status::Ok();
    if (Clock::now() >= deadline)
      return Status::DeadlineExceeded(fmt::format("not ready within {:.0f} s; it goes on", options.ready_timeout_secs));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

bool ProcessAlive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

bool TerminateAndWait(pid_t pid, double timeout_secs) {
  kill(pid, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_secs * 1000));
  while (ProcessAlive(pid) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return !ProcessAlive(pid);
}

Result<pid_t> StartLogged(const std::vector<std::string>& argv, const std::string& log_path) {
  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return Status::Internal(fmt::format("{}: cannot open: {}", log_path, std::strerror(errno)));
  const pid_t parent = getpid();
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(log);
    return Status::Internal(fmt::format("{}: fork: {}", argv[0], std::strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    dup2(log, 1);
    dup2(log, 2);
    dup2(open("/dev/null", O_RDONLY), 0);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "tfctl: cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  close(log);
  return pid;
}

bool Reaped(pid_t pid, int* exit_code) {
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) != pid) return false;
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

}  // namespace tfd::launcher
