// slurm: the sbatch script that runs a cluster file's job under Slurm (tfd --slurm-ps in every task
// of one srun step), printed or submitted.
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "launcher/child_process.h"
#include "launcher/cli.h"
#include "launcher/commands.h"
#include "launcher/runner.h"

namespace tfd::launcher {
namespace {

namespace fs = std::filesystem;

constexpr const char* kJobEnd = "TFD_JOB_JSON_END";

}  // namespace

Result<std::string> SlurmScript(const config::ClusterFile& f, const SlurmArgs& args) {
  if (!f.cluster.evaluator.empty())
    return Status::InvalidArgument(fmt::format("{}: cluster.evaluator: tfctl slurm runs ps and worker tasks only (run the evaluator as its own job)",
                                               f.source));
  if (f.train_json.find(kJobEnd) != std::string::npos)
    return Status::InvalidArgument(fmt::format("{}: train: holds the text {}, which ends the script's copy of it", f.source, kJobEnd));
  const int num_ps = static_cast<int>(f.cluster.ps.size());
  const int ntasks = num_ps + f.cluster.num_workers();
  const config::HostLaunch& h = f.launch.defaults;
  auto folder = [](const fs::path& p) {  // absolute, normal, no trailing '/'
    std::string s = fs::absolute(p).lexically_normal().string();
    if (s.size() > 1 && s.back() == '/') s.pop_back();
    return s;
  };
  const std::string workdir = folder(h.workdir);
  const std::string run_root = folder(fs::path(workdir) / f.launch.run_dir);
  std::string s = fmt::format(
      "#!/bin/bash\n"
      "# The tfd job \"{name}\" under Slurm, written by tfctl slurm from {what}.\n"
      "# Every task of one srun step runs tfd --slurm-ps {ps}: the first {ps} ranks are ps tasks, the\n"
      "# rest workers (the first worker is the chief); each listens on its node at port {port} + its\n"
      "# slot there. {run_root} must be on a file system every node sees (the job file and\n"
      "# token are written there) and must exist before sbatch (tfctl slurm --submit makes it).\n"
      "#SBATCH --job-name={name}\n"
      "#SBATCH --ntasks={ntasks}\n"
      "#SBATCH --chdir={workdir}\n"
      "#SBATCH --output={run_root}/{name}-%j.log\n",
      fmt::arg("name", f.name), fmt::arg("what", Describe(f)), fmt::arg("ps", num_ps),
      fmt::arg("port", args.port_base), fmt::arg("run_root", run_root), fmt::arg("ntasks", ntasks), fmt::arg("workdir", workdir));
  for (const std::string& extra : args.sbatch_options) s += "#SBATCH " + extra + "\n";
  s += "set -euo pipefail\n";
  for (const auto& [k, v] : f.launch.env) s += fmt::format("export {}={}\n", k, ShellQuote(v));
  s += fmt::format("run={}/{}-\"$SLURM_JOB_ID\"\nmkdir -p \"$run\"\n", ShellQuote(run_root), f.name);
  s += "# A new cluster token for this job (64 hex digits, mode 0600): tasks on other nodes need one.\n";
  s += "(umask 077 && head -c 32 /dev/urandom | od -An -v -tx1 | tr -d ' \\n' > \"$run/token\")\n";
  s += fmt::format("cat > \"$run/job.json\" <<'{}'\n{}\n{}\n", kJobEnd, f.train_json, kJobEnd);
  std::string tfd = fmt::format("{} --slurm-ps {} --slurm-port-base {} --job \"$run/job.json\" --token-file \"$run/token\"",
                                ShellQuote(h.tfd), num_ps, args.port_base);
  tfd += fmt::format(" --summaries-dir \"$run\" --run-name {}-\"$SLURM_JOB_ID\"", f.name);
  if (f.train.export_model.dir.empty()) tfd += " --export-dir \"$run/model\"";  // the chief writes the model there; other ranks ignore it
  const config::TaskTimeouts& t = f.launch.timeouts;
  for (auto [flag, secs] : {std::pair{"--peer-timeout", t.peer_secs}, {"--reconnect-timeout", t.reconnect_secs},
                            {"--startup-timeout", t.startup_secs}, {"--step-timeout", t.step_secs}})
    if (secs > 0) tfd += fmt::format(" {} {}", flag, secs);
  // --label prefixes each line with its rank; block distribution is the layout tfd derives.
  s += fmt::format("srun --distribution=block --kill-on-bad-exit=1 --label {}\n", tfd);
  return s;
}

Result<SlurmArgs> ParseSlurmArgs(const std::vector<std::string>& args) {
  SlurmArgs a;
  CommandLine line("slurm");
  line.Positional(&a.file, "cluster file");
  line.Switch("submit", &a.submit);
  line.Integer("port-base", &a.port_base, 1, 65535, "a port");
  line.Texts("sbatch", &a.sbatch_options);  // --sbatch --partition=cpu: the value may begin with "--"
  TFD_RETURN_IF_ERROR(line.Parse(args));
  if (a.file.empty()) return Status::InvalidArgument("slurm needs a cluster file");
  return a;
}

int Slurm(const std::vector<std::string>& words) {
  Result<SlurmArgs> parsed = ParseSlurmArgs(words);
  if (!parsed.ok()) return UsageError(parsed.status().message());
  const SlurmArgs& args = *parsed;
  Result<config::ClusterFile> loaded = config::LoadClusterFile(args.file);
  if (!loaded.ok()) return ReportFailure(loaded.status());
  Result<std::string> script = SlurmScript(*loaded, args);
  if (!script.ok()) return ReportFailure(script.status());
  if (!args.submit) {
    std::fputs(script->c_str(), stdout);
    return 0;
  }
  const fs::path run_root = (fs::absolute(loaded->launch.defaults.workdir) / loaded->launch.run_dir).lexically_normal();
  std::error_code ec;
  fs::create_directories(run_root, ec);
  const fs::path script_path = run_root / (loaded->name + ".sbatch");
  std::FILE* out = ec ? nullptr : std::fopen(script_path.c_str(), "w");
  if (out == nullptr || std::fputs(script->c_str(), out) < 0 || std::fclose(out) != 0) {
    std::fprintf(stderr, "tfctl: cannot write %s\n", script_path.c_str());
    return 1;
  }
  const CommandOutput r = RunAndCapture({"sbatch", script_path.string()}, 60);
  if (r.exit_code == -1 || (r.exit_code == 127 && r.err.find("cannot run sbatch") != std::string::npos)) {
    std::fprintf(stderr, "tfctl: cannot run sbatch (is Slurm's client on PATH?); the script is in %s\n", script_path.c_str());
    return 1;
  }
  if (r.exit_code != 0) {
    std::string err = r.err.empty() ? r.out : r.err;
    while (!err.empty() && err.back() == '\n') err.pop_back();
    std::fprintf(stderr, "tfctl: sbatch %s failed (exit %d): %s\n", script_path.c_str(), r.exit_code, err.c_str());
    return 1;
  }
  std::printf("tfctl: wrote %s; %s", script_path.c_str(), r.out.c_str());
  if (r.out.empty() || r.out.back() != '\n') std::printf("\n");
  return 0;
}

}  // namespace tfd::launcher
