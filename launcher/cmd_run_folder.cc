// status, logs and down: the commands that act on a run folder written by up.
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "launcher/child_process.h"
#include "launcher/cli.h"
#include "launcher/commands.h"
#include "launcher/runner.h"

namespace tfd::launcher {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A run folder and the tfctl that runs (or ran) it.
struct RunFolder {
  std::string path;
  pid_t collector = -1;  // from its tfctl.pid; -1 when there is none
  bool running = false;  // that tfctl is alive
};

bool IsRunFolder(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::is_directory(path, ec) && fs::exists(fs::path(path) / "cluster.json", ec);
}

// `given` when not empty, else the newest folder under ./runs; UsageError (2) when `given` is not a
// run folder or none is under ./runs.
int FindRun(const std::string& command, const std::string& given, RunFolder* out) {
  if (!given.empty()) {
    if (!IsRunFolder(given)) return UsageError(fmt::format("{}: {} is not a run folder (no cluster.json)", command, given));
    out->path = given;
  } else {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("runs", ec))
      if (e.is_directory() && e.path().string() > out->path) out->path = e.path().string();
  }
  if (out->path.empty()) return UsageError(fmt::format("{}: no run folder given and none under ./runs", command));
  const std::string pid_text = ReadFile(fs::path(out->path) / "tfctl.pid");
  out->collector = pid_text.empty() ? -1 : static_cast<pid_t>(std::atol(pid_text.c_str()));
  out->running = ProcessAlive(out->collector);
  return 0;
}

// status and down: [RUN] and nothing else.
int ParseAndFindRun(const std::string& command, const std::vector<std::string>& args, RunFolder* out) {
  std::string given;
  CommandLine line(command);
  line.Positional(&given, "run folder");
  if (Status s = line.Parse(args); !s.ok()) return UsageError(s.message());
  return FindRun(command, given, out);
}

}  // namespace

int ReadyWorkers(const fs::path& run_dir) {
  int ready = 0;
  std::istringstream in(ReadFile(run_dir / "metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    auto e = config::ParseEvent(line);
    if (e.ok() && e->event == "ready" && e->task.rfind("ps:", 0) != 0) ++ready;
  }
  return ready;
}

int Down(const std::vector<std::string>& args) {
  RunFolder run;
  if (int code = ParseAndFindRun("down", args, &run); code != 0) return code;
  if (!run.running) {
    std::printf("tfctl: %s is not running\n", run.path.c_str());
    return 0;
  }
  // The run's tfctl stops every task (TERM, then KILL after its grace) and writes the summary.
  if (!TerminateAndWait(run.collector, /*timeout_secs=*/60)) {
    std::fprintf(stderr, "tfctl: the run's tfctl (pid %d) did not stop within 60 s\n", run.collector);
    return 1;
  }
  std::printf("tfctl: stopped %s\n", run.path.c_str());
  return 0;
}

int ShowLogs(const std::vector<std::string>& args) {
  std::string first, second;  // [RUN] [TASK]
  bool follow = false;
  CommandLine line("logs");
  line.Positional(&first, "run folder or task");
  line.Positional(&second, "task");
  line.Switch("follow", &follow, 'f');
  if (Status s = line.Parse(args); !s.ok()) return UsageError(s.message());
  std::string given, task = first;
  if (IsRunFolder(first)) {
    given = first;
    task = second;
  } else if (!second.empty()) {
    return UsageError(fmt::format("logs: {} is not a run folder (no cluster.json)", first));
  }
  RunFolder run;
  if (int code = FindRun("logs", given, &run); code != 0) return code;
  const fs::path run_dir = run.path;
  std::vector<fs::path> files;
  if (!task.empty()) {
    files.push_back(run_dir / (task + ".log"));
    if (!fs::exists(files[0])) return UsageError(fmt::format("logs: no task {} in {}", task, run.path));
  } else {
    for (const auto& e : fs::directory_iterator(run_dir))
      if (e.path().extension() == ".log" && e.path().filename() != "tfctl.log") files.push_back(e.path());
    std::sort(files.begin(), files.end());
  }
  std::vector<std::uintmax_t> offsets(files.size(), 0);
  for (;;) {
    for (std::size_t i = 0; i < files.size(); ++i) {
      std::ifstream in(files[i]);
      in.seekg(static_cast<std::streamoff>(offsets[i]));
      const std::string name = files[i].stem().string();
      for (std::string line; std::getline(in, line);) {
        if (in.eof()) break;  // a partial last line: take it next time
        std::printf("[%s] %s\n", name.c_str(), line.c_str());
        offsets[i] += line.size() + 1;
      }
    }
    std::fflush(stdout);
    if (!follow || !ProcessAlive(run.collector)) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

int ShowStatus(const std::vector<std::string>& args) {
  RunFolder run;
  if (int code = ParseAndFindRun("status", args, &run); code != 0) return code;
  const fs::path run_dir = run.path;
  std::map<std::string, config::Event> last;
  std::istringstream in(ReadFile(run_dir / "metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    auto e = config::ParseEvent(line);
    if (e.ok() && e->event == "scale") {  // tfctl scale's: a worker it started or stopped
      e->event = e->strings["action"] == "stop" ? "stopped" : "starting";
      last[e->task] = *e;
    } else if (e.ok() && (e->event == "epoch" || e->event == "done" || e->event == "ready" || e->event == "start" || e->event == "error")) {
      last[e->task] = *e;
    }
  }
  int workers = 0;  // training workers that have not ended
  for (const auto& entry : last)
    if (entry.first.rfind("worker:", 0) == 0 || entry.first.rfind("chief:", 0) == 0)
      workers += entry.second.event != "done" && entry.second.event != "stopped" && entry.second.event != "error";
  std::printf("%s: %s\n", run.path.c_str(), run.running ? fmt::format("running, {} workers", workers).c_str() : "finished");
  std::printf("%-10s %-9s %5s %11s %8s %8s\n", "task", "last", "epoch", "global_step", "loss", "accuracy");
  for (const auto& entry : last) {  // not a structured binding: clang 14 (scripts/thread_safety) cannot capture one
    const std::string& task = entry.first;
    const config::Event& e = entry.second;
    auto num = [&](const char* key, const char* f) {
      const double v = e.Number(key);
      return v < 0 ? std::string("-") : fmt::format(fmt::runtime(f), v);
    };
    std::printf("%-10s %-9s %5s %11s %8s %8s\n", task.c_str(), e.event.c_str(), num("epoch", "{:.0f}").c_str(),
                num("global_step", "{:.0f}").c_str(), num("loss", "{:.4f}").c_str(), num("accuracy", "{:.4f}").c_str());
  }
  if (!run.running && fs::exists(run_dir / "summary.json")) std::printf("summary: %s/summary.json\n", run.path.c_str());
  return 0;
}

}  // namespace tfd::launcher
