// up, in the foreground or (--detach) in a background tfctl; the command line of up and validate.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "common/base/logging.h"
#include "common/http/server.h"
#include "common/transport/auth.h"
#include "launcher/cli.h"
#include "launcher/commands.h"
#include "launcher/dashboard.h"
#include "launcher/report.h"
#include "launcher/run_summary.h"
#include "launcher/runner.h"
#include "launcher/scale.h"

namespace tfd::launcher {

namespace {

// report.html and curves.svg at the end of a run; a failure is a warning, not the run's.
void WriteRunReport(const std::filesystem::path& run_dir, bool json) {
  if (Status s = WriteReport(run_dir); !s.ok()) Say(stderr, json, "warning", "no report: " + s.message());
  else Say(stdout, json, "report", fmt::format("report {}", (run_dir / "report.html").string()));
}

// The lines that end up's output: the model the run exported (summary.json's, from the chief's
// exported event), and the commands that serve it and predict with it; as JSON one "model" event.
// Nothing when the run exported none.
void SayModel(const std::filesystem::path& run_dir, const config::DataSpec& data, bool json) {
  std::ifstream in(run_dir / "summary.json");
  const std::string text(std::istreambuf_iterator<char>(in), {});
  Result<RunSummary> summary = ParseSummary(text, (run_dir / "summary.json").string());
  if (!summary.ok() || !summary->model) return;
  const ModelSummary& m = *summary->model;
  const ModelCommands commands = CommandsFor(m, data);
  const std::string step = m.global_step ? fmt::format(", global_step {}", *m.global_step) : "";
  std::vector<EventField> fields = {{"path", m.path}, {"version", m.version}, {"serve", commands.serve}, {"predict", commands.predict}};
  if (!m.host.empty()) fields.push_back({"host", m.host});
  Say(stdout, json, "model", fmt::format("model {} (version {}{})", m.where(), m.version, step), fields);
  if (json) return;
  const std::string on = m.host.empty() ? "" : " on " + m.host;
  Say(stdout, false, "serve", fmt::format("serve it{}: {}", on, commands.serve));
  if (!commands.predict.empty()) Say(stdout, false, "predict", fmt::format("predict with it{}: {}", on, commands.predict));
}

// What follows the run: report.html, then the model lines.
void EndOfRun(const std::filesystem::path& run_dir, const config::DataSpec& data, bool json) {
  WriteRunReport(run_dir, json);
  SayModel(run_dir, data, json);
}

}  // namespace

Result<ClusterArgs> ParseClusterArgs(std::string_view command, const std::vector<std::string>& args) {
  ClusterArgs a;
  std::string log_format = "text";
  // up's complaints have never named the command ("unknown option --bogus"), and scripts that read
  // its JSON lines see them: kept so.
  CommandLine line(command == "up" ? "" : std::string(command));
  line.Positional(&a.file, "cluster file");
  line.Text("run-dir", &a.run_dir_override);
  line.Seconds("grace", &a.grace_secs, 0, kMaxGraceSecs);
  line.Switch("accept-new-hostkeys", &a.accept_new_hostkeys);
  if (command == "up") {
    line.Switch("detach", &a.detach);
    line.Text("dashboard", &a.dashboard);  // checked by Up, as ADDR:PORT
    line.Choice("log-format", &log_format, {"text", "json"});
  }
  TFD_RETURN_IF_ERROR(line.Parse(args));
  a.json_output = log_format == "json";
  if (a.file.empty()) return Status::InvalidArgument(fmt::format("{} needs a cluster file", command));
  return a;
}

int Up(const ClusterArgs& args, const Interrupts& interrupts, Injection* fault, std::filesystem::path* run_dir_out) {
  const bool json = args.json_output;
  std::pair<std::string, std::uint16_t> dashboard_at;
  if (!args.dashboard.empty()) {
    if (args.detach) return UsageError("--dashboard does not go with --detach: serve the run with tfctl dashboard RUN", json);
    auto address = http::ParseListenAddress(args.dashboard, "--dashboard");
    if (!address.ok()) return ReportFailure(address.status(), json);
    dashboard_at = *address;
  }
  const transport::ClusterToken token = transport::ClusterToken::Generate();
  Result<RunSetup> run = SetUpRun(args, token.Hex());
  if (!run.ok()) return ReportFailure(run.status(), json);
  if (Status s = CheckCluster(*run); !s.ok()) return ReportFailure(s, json);
  const std::filesystem::path& run_dir = run->run_dir;
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) {
    Say(stderr, json, "error", fmt::format("cannot create the run folder {}: {}", run_dir.string(), ec.message()));
    return 1;
  }
  if (Status s = token.WriteFile(run->options.token_path); !s.ok()) {
    Say(stderr, json, "error", s.message());
    return 1;
  }
  std::filesystem::copy_file(args.file, run_dir / "cluster.json", std::filesystem::copy_options::overwrite_existing, ec);
  std::ofstream(run_dir / "job.json") << run->file.train_json << "\n";
  // Prometheus file-SD targets: a scrape config's file_sd_configs may point at this file.
  std::ofstream(run_dir / "targets.json") << TargetsJson(run->plan, run->options.run_name);
  if (run_dir_out != nullptr) *run_dir_out = run_dir;
  const std::vector<EventField> where = {{"run_dir", run_dir.string()}};
  Say(stdout, json, "describe", Describe(run->file), where);
  if (const std::string note = SharedFolderNote(*run); !note.empty()) Say(stdout, json, "note", note);

  RunOptions ropts;
  ropts.run_dir = run_dir.string();
  ropts.grace_secs = args.grace_secs;
  ropts.signal = interrupts.flag;
  ropts.injection = fault;
  ropts.observe = fault != nullptr;
  ropts.json_output = json;
  // tfctl scale: the run's job decides; a new rank gets the plan of a worker joining the cluster.
  ropts.check_scale = [&run, where = (run_dir / "cluster.json").string()](int workers) { return CheckScale(run->file.train, workers, where); };
  ropts.plan_worker = [&run](int rank) -> Result<TaskPlan> {
    const config::ClusterFile& f = run->file;
    const int base = f.cluster.num_workers();
    if (rank < base) {
      for (const TaskPlan& p : run->plan)
        if (p.task == f.cluster.WorkerTask(rank)) return p;
    }
    if (rank >= f.train.elastic.max_workers)
      return Status::InvalidArgument(fmt::format("rank {} is past the job's elastic max_workers {} (the ranks below it that finished "
                                                 "their epochs are not started again)",
                                                 rank, f.train.elastic.max_workers));
    config::ClusterFile grown = WithWorkers(f, rank + 1);
    PlanOptions options = run->options;
    // An allreduce joiner listens for its ring neighbour: on this machine, a port known to be free
    // (the run's last port + 1 may be another task's).
    const config::TaskId task = grown.cluster.WorkerTask(rank);
    if (f.train.update.mode == config::UpdateSpec::Mode::kAllreduce) {
      for (TaskPlan& p : MakePlan(grown, options))
        if (p.task == task && p.local) grown.cluster.worker[static_cast<std::size_t>(task.index)].port = static_cast<std::uint16_t>(FreeLoopbackPorts(1)[0]);
    }
    // Its place in the grown plan: after the ps tasks, the run's workers and the evaluator.
    const std::size_t place = f.cluster.ps.size() + static_cast<std::size_t>(rank) + f.cluster.evaluator.size();
    options.metrics_ports.assign(place + 1, 0);
    if (f.launch.metrics.enabled && f.launch.metrics.port_base == 0) options.metrics_ports[place] = FreeLoopbackPorts(1)[0];
    for (TaskPlan& p : MakePlan(grown, options))
      if (p.task == task) return std::move(p);
    return Status::Internal(fmt::format("no plan for worker rank {}", rank));
  };
  if (!args.detach) {
    std::unique_ptr<Dashboard> dashboard;
    if (!args.dashboard.empty()) {
      auto started = Dashboard::Start(dashboard_at.first, dashboard_at.second, run_dir);
      if (!started.ok()) return ReportFailure(started.status(), json);
      dashboard = std::move(*started);
      Say(stderr, json, "dashboard", "dashboard at " + dashboard->url(), {{"url", dashboard->url()}});
      ropts.on_tasks = [site = &dashboard->site()](const std::vector<TaskState>& tasks) { site->SetTasks(tasks); };
    }
    std::signal(SIGINT, interrupts.handler);
    std::signal(SIGTERM, interrupts.handler);
    std::signal(SIGPIPE, SIG_IGN);
    std::ofstream(run_dir / "tfctl.pid") << getpid() << "\n";
    const int code = Run(run->plan, ropts);
    EndOfRun(run_dir, run->file.train.data, json);
    if (dashboard != nullptr) {  // an open page polls once a second: let it fetch the final state
      dashboard->site().SetEnded();
      std::this_thread::sleep_for(std::chrono::seconds(2));
    }
    return code;
  }

  BackgroundOptions bopts;
  bopts.log_path = (run_dir / "tfctl.log").string();
  bopts.pid_path = (run_dir / "tfctl.pid").string();
  bopts.on_signal = interrupts.handler;
  bopts.ready_timeout_secs = run->file.launch.start_timeout_secs;
  const int num_workers = run->file.cluster.num_workers();
  const Status started = RunInBackground([&] {  // the background tfctl's whole life
    const int code = Run(run->plan, ropts);
    EndOfRun(run_dir, run->file.train.data, json);
    return code;
  },
                                         [&] { return ReadyWorkers(run_dir) >= num_workers; }, bopts);
  if (started.code() == Code::kUnavailable) {
    Say(stderr, json, "error", fmt::format("the run ended before every worker was ready; see {}/tfctl.log", run_dir.string()));
    return 1;
  }
  if (started.code() == Code::kDeadlineExceeded) {
    Say(stderr, json, "error", fmt::format("not every worker was ready within {:.0f} s (launch.start_timeout); the run goes on: {}",
                                           bopts.ready_timeout_secs, run_dir.string()));
    return 1;
  }
  if (!started.ok()) {
    Say(stderr, json, "error", started.message());
    return 1;
  }
  if (json) {
    Say(stdout, json, "detached", "every task is up; the run goes on in the background", where);
  } else {
    std::printf("tfctl: every task is up; the run goes on in the background\n  tfctl status %s\n  tfctl logs %s -f\n  tfctl down %s\n",
                run_dir.c_str(), run_dir.c_str(), run_dir.c_str());
  }
  return 0;
}

}  // namespace tfd::launcher
