// tfctl sweep: tfctl's own process is the sweep's coordinator (daemon/coordinator): it starts the
// generic workers on this machine, hands them trials, draws the leaderboard and writes the run folder.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "common/base/logging.h"
#include "common/config/sweep.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/coordinator/sweep_run.h"
#include "launcher/child_process.h"
#include "launcher/cli.h"
#include "launcher/commands.h"
#include "launcher/plan.h"
#include "launcher/runner.h"

namespace tfd::launcher {
namespace {

namespace fs = std::filesystem;

// tfd beside tfctl (an install), or in the build tree's daemon/, else tfd from PATH.
std::string DefaultTfd() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& p : {self.parent_path() / "tfd", self.parent_path().parent_path() / "daemon" / "tfd"})
      if (fs::exists(p, ec)) return p.string();
  }
  return "tfd";
}

struct Worker {
  int index = 0;
  pid_t pid = -1;
  int exit_code = -1;
  bool running = false;
};

// A new run folder runs/<time>-sweep-<name> (a suffix -2, -3 ... if taken), with the sweep file and
// its resume record.
Result<fs::path> NewSweepFolder(const SweepArgs& args, const coordinator::PreparedSweep& prepared) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  const std::string name = (args.ensemble ? "ensemble-" : "sweep-") + fs::path(args.file).stem().string();
  fs::path run_dir = fs::absolute(fs::path(args.run_root) / fmt::format("{}-{}", stamp, name));
  for (int n = 2; fs::exists(run_dir); ++n) run_dir = fs::absolute(fs::path(args.run_root) / fmt::format("{}-{}-{}", stamp, name, n));
  TFD_RETURN_IF_ERROR(coordinator::MakeSweepFolder(run_dir, args.file, prepared, args.ensemble));
  return run_dir;
}

}  // namespace

Result<SweepArgs> ParseSweepArgs(bool ensemble, const std::vector<std::string>& args) {
  SweepArgs a;
  a.ensemble = ensemble;
  CommandLine line(ensemble ? "ensemble" : "sweep");
  line.Positional(&a.file, ensemble ? "job file" : "sweep file");
  line.Text("run-dir", &a.run_root);
  line.Text("tfd", &a.tfd);
  line.Integer("workers", &a.workers, 1, config::kMaxSweepWorkers, "a number of workers");
  line.Seconds("grace", &a.grace_secs, 0, kMaxGraceSecs);
  line.Switch("no-metrics", &a.no_metrics);
  if (!ensemble) line.Text("resume", &a.resume);
  TFD_RETURN_IF_ERROR(line.Parse(args));
  if (!a.resume.empty() && a.file.empty()) {
    // The sweep file the run was started with, as its run folder recorded it.
    TFD_ASSIGN_OR_RETURN(a.file, coordinator::RecordedSweepFile(a.resume));
  }
  if (!a.resume.empty() && a.workers == 0) {
    // As many workers as the sweep was started with (0: a record that does not say; the file's).
    TFD_ASSIGN_OR_RETURN(a.workers, coordinator::RecordedSweepWorkers(a.resume));
  }
  if (a.file.empty())
    return Status::InvalidArgument(ensemble ? "ensemble needs a job file with \"ensemble\" (docs/sweeps.md)" : "sweep needs a sweep file (docs/sweeps.md)");
  return a;
}

int Sweep(const SweepArgs& args, const Interrupts& interrupts) {
  Result<coordinator::PreparedSweep> prepared = coordinator::PrepareSweep(args.file, args.ensemble, args.workers);
  if (!prepared.ok()) return ReportFailure(prepared.status());
  const config::SweepSpec& sweep = prepared->spec;
  const std::vector<config::Trial>& trials = prepared->trials;
  const int parallel = prepared->parallel;

  coordinator::CoordinatorOptions copts;
  fs::path run_dir;
  if (!args.resume.empty()) {
    run_dir = fs::absolute(args.resume).lexically_normal();
    if (!run_dir.has_filename()) run_dir = run_dir.parent_path();  // RUN/: its name is the run label
    Result<coordinator::SweepLog> log = coordinator::OpenForResume(run_dir, args.file, *prepared, args.ensemble);
    if (!log.ok()) return ReportFailure(log.status());
    copts.resume = std::move(log).value();
  } else {
    Result<fs::path> made = NewSweepFolder(args, *prepared);
    if (!made.ok()) return ReportFailure(made.status());
    run_dir = *made;
  }

  if (interrupts.handler != nullptr) {
    std::signal(SIGINT, interrupts.handler);
    std::signal(SIGTERM, interrupts.handler);
  }
  copts.trials_dir = (run_dir / "trials").string();
  Result<std::unique_ptr<coordinator::Coordinator>> started = coordinator::Coordinator::Start(sweep, trials, parallel, copts);
  if (!started.ok()) return ReportFailure(started.status());
  std::unique_ptr<coordinator::Coordinator> coord = std::move(started).value();
  if (copts.resume) {
    const coordinator::SweepScheduler::Restored r = coord->restored();
    Say(stdout, false, "resumed",
        fmt::format("resumed the sweep in {}: {} trials ended, {} resumed ({} from a checkpoint), {} not started yet", run_dir.string(), r.done,
                    r.resumed, r.from_checkpoint, r.pending));
  }
  const std::string tfd = args.tfd.empty() ? DefaultTfd() : args.tfd;
  Say(stdout, false, "start",
      fmt::format("sweep {}: {} trials, {} at once on {} workers, {} of {}, scheduler {}; run folder {}", args.file, trials.size(), parallel,
                  sweep.workers, sweep.maximize ? "max" : "min", sweep.metric, sweep.asha ? "asha" : "none", run_dir.string()));

  // Trial K exports its model into RUN/trials/K/model (an ensemble's member K into
  // RUN/members/K/model); RunSweep copies the best trial's into RUN/model.
  const std::string trial_models = (run_dir / (args.ensemble ? "members" : "trials")).string();
  std::vector<Worker> workers(static_cast<std::size_t>(sweep.workers));
  // Each worker's Prometheus endpoint on a free port of 127.0.0.1, listed in targets.json as
  // tfctl up lists a run's tasks (docs/observability.md); the run label is the folder's name.
  const std::string run_name = run_dir.filename().string();
  std::vector<TaskPlan> targets(static_cast<std::size_t>(sweep.workers));
  const std::vector<int> ports = args.no_metrics ? std::vector<int>() : FreeLoopbackPorts(sweep.workers);
  for (std::size_t i = 0; i < ports.size(); ++i) {
    targets[i].task = {config::TaskType::kWorker, static_cast<int>(i)};
    if (ports[i] > 0) targets[i].metrics_target = fmt::format("127.0.0.1:{}", ports[i]);  // 0: none to be had
  }
  std::ofstream(run_dir / "targets.json") << TargetsJson(targets, run_name);
  {
    std::ofstream pids(run_dir / "workers.txt");
    for (int i = 0; i < sweep.workers; ++i) {
      Worker& w = workers[static_cast<std::size_t>(i)];
      w.index = i;
      std::vector<std::string> argv = {tfd, "--coordinator", fmt::format("127.0.0.1:{}", coord->port()), "--task_index", std::to_string(i),
                                       "--log-format", "json", "--export-dir", trial_models, "--run-name", run_name};
      if (const std::string& at = targets[static_cast<std::size_t>(i)].metrics_target; !at.empty()) argv.insert(argv.end(), {"--metrics", at});
      Result<pid_t> pid = StartLogged(argv, (run_dir / fmt::format("worker-{}.log", i)).string());
      if (!pid.ok()) {
        Say(stderr, false, "error", pid.status().message());
        continue;
      }
      w.pid = *pid;
      w.running = true;
      pids << i << " " << w.pid << "\n";
    }
  }

  coordinator::SweepRunOptions ropts;
  ropts.run_dir = run_dir.string();
  ropts.ensemble = args.ensemble;
  ropts.trial_models = trial_models;
  ropts.table = stdout;
  ropts.tty = isatty(1) != 0;
  ropts.say = [](bool error, std::string_view event, const std::string& message) { Say(error ? stderr : stdout, false, event, message); };
  if (interrupts.flag != nullptr) ropts.interrupted = [flag = interrupts.flag] { return flag->load() != 0; };
  ropts.grace_secs = args.grace_secs;
  ropts.workers_running = [&workers, &coord, &run_dir] {
    bool any_running = false;
    for (Worker& w : workers) {
      if (w.running && Reaped(w.pid, &w.exit_code)) {
        w.running = false;
        if (w.exit_code != 0 && !coord->Finished())
          Say(stderr, false, "worker_exit", fmt::format("worker:{} exited with code {}; its trial goes to another worker (log: {})", w.index,
                                                        w.exit_code, (run_dir / fmt::format("worker-{}.log", w.index)).string()));
      }
      any_running |= w.running;
    }
    return any_running;
  };
  ropts.terminate_workers = [&workers] {
    for (Worker& w : workers)
      if (w.running) kill(-w.pid, SIGTERM);
  };
  return coordinator::RunSweep(*coord, sweep, ropts);
}

}  // namespace tfd::launcher
