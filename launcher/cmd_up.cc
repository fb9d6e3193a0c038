// up, in the foreground or (--detach) in a background tfctl.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <fstream>

#include "common/transport/auth.h"
#include "launcher/commands.h"
#include "launcher/runner.h"

namespace tfd::launcher {

int Up(const ClusterArgs& args, const Interrupts& interrupts, Injection* fault, std::filesystem::path* run_dir_out) {
  const transport::ClusterToken token = transport::ClusterToken::Generate();
  Result<RunSetup> run = SetUpRun(args, token.Hex());
  if (!run.ok()) return ReportFailure(run.status());
  if (Status s = CheckCluster(*run); !s.ok()) return ReportFailure(s);
  const std::filesystem::path& run_dir = run->run_dir;
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) {
    std::fprintf(stderr, "tfctl: cannot create the run folder %s: %s\n", run_dir.c_str(), ec.message().c_str());
    return 1;
  }
  if (Status s = token.WriteFile(run->options.token_path); !s.ok()) {
    std::fprintf(stderr, "tfctl: %s\n", s.message().c_str());
    return 1;
  }
  std::filesystem::copy_file(args.file, run_dir / "cluster.json", std::filesystem::copy_options::overwrite_existing, ec);
  std::ofstream(run_dir / "job.json") << run->file.train_json << "\n";
  // Prometheus file-SD targets: a scrape config's file_sd_configs may point at this file.
  std::ofstream(run_dir / "targets.json") << TargetsJson(run->plan, run->options.run_name);
  if (run_dir_out != nullptr) *run_dir_out = run_dir;
  std::printf("tfctl: %s\n", Describe(run->file).c_str());
  std::fflush(stdout);

  RunOptions ropts;
  ropts.run_dir = run_dir.string();
  ropts.grace_secs = args.grace_secs;
  ropts.signal = interrupts.flag;
  ropts.injection = fault;
  ropts.observe = fault != nullptr;
  if (!args.detach) {
    std::signal(SIGINT, interrupts.handler);
    std::signal(SIGTERM, interrupts.handler);
    std::signal(SIGPIPE, SIG_IGN);
    std::ofstream(run_dir / "tfctl.pid") << getpid() << "\n";
    return Run(run->plan, ropts);
  }

  BackgroundOptions bopts;
  bopts.log_path = (run_dir / "tfctl.log").string();
  bopts.pid_path = (run_dir / "tfctl.pid").string();
  bopts.on_signal = interrupts.handler;
  bopts.ready_timeout_secs = run->file.launch.start_timeout_secs;
  const int num_workers = run->file.cluster.num_workers();
  const Status started = RunInBackground([&] { return Run(run->plan, ropts); },  // the background tfctl's whole life
                                         [&] { return ReadyWorkers(run_dir) >= num_workers; }, bopts);
  if (started.code() == Code::kUnavailable) {
    std::fprintf(stderr, "tfctl: the run ended before every worker was ready; see %s/tfctl.log\n", run_dir.c_str());
    return 1;
  }
  if (started.code() == Code::kDeadlineExceeded) {
    std::fprintf(stderr, "tfctl: not every worker was ready within %.0f s (launch.start_timeout); the run goes on: %s\n",
                 bopts.ready_timeout_secs, run_dir.c_str());
    return 1;
  }
  if (!started.ok()) {
    std::fprintf(stderr, "tfctl: %s\n", started.message().c_str());
    return 1;
  }
  std::printf("tfctl: every task is up; the run goes on in the background\n  tfctl status %s\n  tfctl logs %s -f\n  tfctl down %s\n",
              run_dir.c_str(), run_dir.c_str(), run_dir.c_str());
  return 0;
}

}  // namespace tfd::launcher
