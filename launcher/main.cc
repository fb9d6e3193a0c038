// tfctl: starts a whole tfd cluster from one cluster file, shows every worker's progress and keeps a
// run folder. main() parses the command line and calls the subcommand (launcher/commands.h); exit
// codes: 0 every task done, 1 a task failed, 2 a bad file or usage, 130 after Ctrl-C.
#include <atomic>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "launcher/commands.h"

namespace {

// The one piece of process-wide state: a signal handler can reach nothing else.
std::atomic<int> g_signal{0};
extern "C" void OnSignal(int sig) { g_signal.store(sig); }

}  // namespace

int main(int argc, char** argv) {
  namespace launcher = tfd::launcher;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") return launcher::Help(/*asked=*/!args.empty());
  const std::string command = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "gen-token") {
    if (rest.size() != 1 || rest[0].empty() || rest[0][0] == '-') return launcher::UsageError("gen-token needs one FILE to write");
    return launcher::GenToken(rest[0]);
  }
  if (command == "status") return launcher::ShowStatus(rest);
  if (command == "logs") return launcher::ShowLogs(rest);
  if (command == "down") return launcher::Down(rest);
  if (command == "scale") return launcher::Scale(rest);
  if (command == "chaos") return launcher::Chaos(rest, {.flag = &g_signal, .handler = OnSignal});
  if (command == "report") return launcher::Report(rest);
  if (command == "slurm") return launcher::Slurm(rest);
  if (command == "dashboard") return launcher::ServeDashboard(rest, {.flag = &g_signal, .handler = OnSignal});
  if (command == "sweep" || command == "ensemble") {
    launcher::SweepArgs sweep;
    sweep.ensemble = command == "ensemble";
    for (std::size_t i = 0; i < rest.size(); ++i) {
      const bool has_value = i + 1 < rest.size();
      if (rest[i] == "--run-dir" && has_value) {
        sweep.run_root = rest[++i];
      } else if (rest[i] == "--tfd" && has_value) {
        sweep.tfd = rest[++i];
      } else if ((rest[i] == "--workers" || rest[i] == "--grace") && has_value) {
        const std::string flag = rest[i];
        double v = -1;
        try {
          v = std::stod(rest[++i]);
        } catch (...) {  // not a number: refused below
        }
        if (flag == "--workers" && !(v >= 1 && v <= 4096 && v == static_cast<int>(v)))
          return launcher::UsageError("--workers: expected a number of workers from 1 to 4096");
        if (flag == "--grace" && !(v >= 0 && v < 3600)) return launcher::UsageError("--grace: expected a number of seconds");
        if (flag == "--workers") sweep.workers = static_cast<int>(v);
        else sweep.grace_secs = v;
      } else if (!rest[i].empty() && rest[i][0] == '-') {
        return launcher::UsageError(fmt::format("unknown option {}", rest[i]));
      } else if (sweep.file.empty()) {
        sweep.file = rest[i];
      } else {
        return launcher::UsageError(fmt::format("one sweep file, not \"{}\" too", rest[i]));
      }
    }
    if (sweep.file.empty()) return launcher::UsageError(command + (sweep.ensemble ? " needs a job file with \"ensemble\"" : " needs a sweep file") + " (docs/sweeps.md)");
    return launcher::Sweep(sweep, {.flag = &g_signal, .handler = OnSignal});
  }
  if (command != "up" && command != "validate")
    return launcher::UsageError(fmt::format(
        "unknown command \"{}\" (expected up, validate, sweep, ensemble, status, logs, down, scale, report, dashboard, chaos, slurm or gen-token)", command));

  launcher::ClusterArgs cluster;
  // Asked for JSON, even the complaints about the rest of the command line are JSON lines.
  for (std::size_t i = 0; command == "up" && i + 1 < rest.size(); ++i)
    if (rest[i] == "--log-format" && rest[i + 1] == "json") cluster.json_output = true;
  const bool json = cluster.json_output;
  for (std::size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == "--run-dir" && i + 1 < rest.size()) {
      cluster.run_dir_override = rest[++i];
    } else if (rest[i] == "--grace" && i + 1 < rest.size()) {
      double grace = -1;
      try {
        grace = std::stod(rest[++i]);
      } catch (...) {  // not a number: refused below
      }
      if (!(grace >= 0 && grace < 3600)) return launcher::UsageError("--grace: expected a number of seconds", json);
      cluster.grace_secs = grace;
    } else if (rest[i] == "--accept-new-hostkeys") {
      cluster.accept_new_hostkeys = true;
    } else if (rest[i] == "--detach" && command == "up") {
      cluster.detach = true;
    } else if (rest[i] == "--dashboard" && command == "up" && i + 1 < rest.size()) {
      cluster.dashboard = rest[++i];
    } else if (rest[i] == "--log-format" && command == "up" && i + 1 < rest.size()) {
      const std::string& format = rest[++i];
      if (format != "text" && format != "json")
        return launcher::UsageError(fmt::format("--log-format: expected text or json, got \"{}\"", format), json);
    } else if (!rest[i].empty() && rest[i][0] == '-') {
      return launcher::UsageError(fmt::format("unknown option {}", rest[i]), json);
    } else if (cluster.file.empty()) {
      cluster.file = rest[i];
    } else {
      return launcher::UsageError(fmt::format("one cluster file, not \"{}\" too", rest[i]), json);
    }
  }
  if (cluster.file.empty()) return launcher::UsageError(command + " needs a cluster file", json);
  if (command == "validate") return launcher::Validate(cluster);
  return launcher::Up(cluster, {.flag = &g_signal, .handler = OnSignal});
}
