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
#include "launcher/commands.h"
#include "launcher/runner.h"
#include "launcher/sweep_table.h"

namespace tfd::launcher {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

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

// ensemble.json (the ensemble's accuracy per epoch beside its best member's) and, for the last
// complete epoch, predictions/: labels.u8, member-K.f32 (each member's softmax, rows x classes
// little-endian floats) and ensemble.f32 (their mean, as the coordinator computed it).
void WriteEnsemble(const fs::path& run_dir, const std::vector<coordinator::SweepScheduler::EnsembleEpoch>& epochs,
                   const coordinator::SweepScheduler::Predictions& last) {
  std::string json = "{\"epochs\": [";
  for (std::size_t i = 0; i < epochs.size(); ++i)
    json += fmt::format("{}{{\"epoch\": {}, \"members\": {}, \"ensemble_test_accuracy\": {}, \"best_member_test_accuracy\": {}}}",
                        i ? ", " : "", epochs[i].epoch, epochs[i].members, epochs[i].accuracy, epochs[i].best_member);
  json += fmt::format("], \"classes\": {}, \"predictions_epoch\": {}}}\n", last.classes, last.epoch);
  std::ofstream(run_dir / "ensemble.json") << json;
  if (!epochs.empty()) {
    const auto& e = epochs.back();
    Say(stdout, false, "ensemble",
        fmt::format("epoch {}: ensemble_test_accuracy {:.4f} (best of {} members {:.4f}, {:+.4f})", e.epoch, e.accuracy, e.members,
                    e.best_member, e.accuracy - e.best_member));
  }
  if (last.members.empty()) return;
  std::error_code ec;
  fs::create_directories(run_dir / "predictions", ec);
  auto write = [&](const std::string& name, const void* data, std::size_t bytes) {
    std::ofstream(run_dir / "predictions" / name, std::ios::binary).write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  };
  write("labels.u8", last.labels.data(), last.labels.size());
  for (const auto& [trial, probs] : last.members) write(fmt::format("member-{}.f32", trial), probs.data(), probs.size() * sizeof(float));
  write("ensemble.f32", last.mean.data(), last.mean.size() * sizeof(float));
}

}  // namespace

int Sweep(const SweepArgs& args, const Interrupts& interrupts) {
  Result<config::SweepSpec> loaded = args.ensemble ? config::LoadEnsembleSpec(args.file) : config::LoadSweepSpec(args.file);
  if (!loaded.ok()) return ReportFailure(loaded.status());
  config::SweepSpec sweep = std::move(loaded).value();
  if (args.workers > 0) sweep.workers = args.workers;
  std::vector<config::Trial> trials = config::GenerateTrials(sweep);
  const int parallel = sweep.parallel > 0 ? sweep.parallel : sweep.workers;

  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  const std::string name = (args.ensemble ? "ensemble-" : "sweep-") + fs::path(args.file).stem().string();
  fs::path run_dir = fs::absolute(fs::path(args.run_root) / fmt::format("{}-{}", stamp, name));
  for (int n = 2; fs::exists(run_dir); ++n) run_dir = fs::absolute(fs::path(args.run_root) / fmt::format("{}-{}-{}", stamp, name, n));
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return ReportFailure(Status::Unavailable(fmt::format("cannot create the run folder {}: {}", run_dir.string(), ec.message())));
  fs::copy_file(args.file, run_dir / (args.ensemble ? "job.json" : "sweep.json"), fs::copy_options::overwrite_existing, ec);

  if (interrupts.handler != nullptr) {
    std::signal(SIGINT, interrupts.handler);
    std::signal(SIGTERM, interrupts.handler);
  }
  coordinator::CoordinatorOptions copts;
  copts.trials_dir = (run_dir / "trials").string();
  Result<std::unique_ptr<coordinator::Coordinator>> started = coordinator::Coordinator::Start(sweep, trials, parallel, copts);
  if (!started.ok()) return ReportFailure(started.status());
  std::unique_ptr<coordinator::Coordinator> coord = std::move(started).value();
  const std::string tfd = args.tfd.empty() ? DefaultTfd() : args.tfd;
  Say(stdout, false, "start",
      fmt::format("sweep {}: {} trials, {} at once on {} workers, {} of {}, scheduler {}; run folder {}", args.file, trials.size(), parallel,
                  sweep.workers, sweep.maximize ? "max" : "min", sweep.metric, sweep.asha ? "asha" : "none", run_dir.string()));

  std::vector<Worker> workers(static_cast<std::size_t>(sweep.workers));
  {
    std::ofstream pids(run_dir / "workers.txt");
    for (int i = 0; i < sweep.workers; ++i) {
      Worker& w = workers[static_cast<std::size_t>(i)];
      w.index = i;
      Result<pid_t> pid = StartLogged({tfd, "--coordinator", fmt::format("127.0.0.1:{}", coord->port()), "--task_index", std::to_string(i),
                                       "--log-format", "json"},
                                      (run_dir / fmt::format("worker-{}.log", i)).string());
      if (!pid.ok()) {
        Say(stderr, false, "error", pid.status().message());
        continue;
      }
      w.pid = *pid;
      w.running = true;
      pids << i << " " << w.pid << "\n";
    }
  }

  std::ofstream jsonl(run_dir / "trials.jsonl", std::ios::app);
  LeaderboardPrinter printer(isatty(1) != 0, sweep.metric, sweep.maximize);
  bool stopping = false;
  Clock::time_point stop_deadline{}, finished_at{};
  bool finished_seen = false, terminated = false;
  while (true) {
    for (const std::string& line : coord->TakeLines()) jsonl << line << "\n";
    jsonl.flush();
    if (!stopping && interrupts.flag != nullptr && interrupts.flag->load() != 0) {
      stopping = true;
      Say(stdout, false, "stopping", fmt::format("stopping every trial at its next epoch (workers still running in {} s are terminated)", args.grace_secs));
      coord->StopAll();
      stop_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(args.grace_secs));
    }
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
    if (!any_running && !coord->Finished() && coord->Connected() == 0) coord->FailWaiting("no worker left to run it");
    printer.Update(coord->Trials(), coord->Best());
    const bool finished = coord->Finished();
    if (finished && !finished_seen) {
      finished_seen = true;
      finished_at = Clock::now();
    }
    if (finished && !any_running) break;
    const bool past_stop = stopping && Clock::now() > stop_deadline;
    if (!terminated && (past_stop || (finished_seen && Clock::now() - finished_at > std::chrono::seconds(10)))) {
      terminated = true;
      for (Worker& w : workers)
        if (w.running) kill(-w.pid, SIGTERM);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (const std::string& line : coord->TakeLines()) jsonl << line << "\n";
  jsonl.close();

  const std::vector<coordinator::TrialState> final_trials = coord->Trials();
  const int best = coord->Best();
  if (args.ensemble) WriteEnsemble(run_dir, coord->EnsembleEpochs(), coord->LastPredictions());
  coord.reset();
  printer.Final(final_trials, best);
  std::ofstream(run_dir / "leaderboard.csv") << LeaderboardCsv(final_trials, sweep.metric, sweep.maximize);
  if (best >= 0) {
    std::ofstream(run_dir / "best.json") << final_trials[static_cast<std::size_t>(best)].trial.job_text << "\n";
    Say(stdout, false, "best",
        fmt::format("best: trial {} {} {} = {:.4f}; its job: {}", final_trials[static_cast<std::size_t>(best)].trial.id,
                    coordinator::ParamsJson(final_trials[static_cast<std::size_t>(best)].trial.params), sweep.metric,
                    *final_trials[static_cast<std::size_t>(best)].best, (run_dir / "best.json").string()));
  } else {
    Say(stderr, false, "error", "no trial reported " + sweep.metric);
  }
  if (stopping) return 130;
  return best >= 0 ? 0 : 1;
}

}  // namespace tfd::launcher
