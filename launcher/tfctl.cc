// Tfctl(): the first word picks the subcommand; the subcommand parses the rest (launcher/cli.h).
#include <fmt/format.h>

#include "launcher/commands.h"

namespace tfd::launcher {
namespace {

// up --log-format json asks for JSON lines, complaints about the rest of the command line included:
// this is looked for before the command line is parsed, which may fail.
bool AsksForJson(const std::vector<std::string>& args) {
  for (std::size_t i = 0; i < args.size() && args[i] != "--"; ++i)
    if (args[i] == "--log-format=json" || (args[i] == "--log-format" && i + 1 < args.size() && args[i + 1] == "json")) return true;
  return false;
}

// -h or --help among a subcommand's words, before any "--".
bool AsksForHelp(const std::vector<std::string>& args) {
  for (std::size_t i = 0; i < args.size() && args[i] != "--"; ++i)
    if (args[i] == "-h" || args[i] == "--help") return true;
  return false;
}

}  // namespace

int Tfctl(const std::vector<std::string>& args, const Interrupts& interrupts) {
  if (args.size() == 2 && args[0] == "help") {  // tfctl help COMMAND
    if (const int code = CommandHelp(args[1]); code >= 0) return code;
  }
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") return Help(/*asked=*/!args.empty());
  const std::string& command = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (AsksForHelp(rest)) {
    if (const int code = CommandHelp(command); code >= 0) return code;
  }
  if (command == "up" || command == "validate") {
    const bool json = command == "up" && AsksForJson(rest);
    Result<ClusterArgs> cluster = ParseClusterArgs(command, rest);
    if (!cluster.ok()) return UsageError(cluster.status().message(), json);
    return command == "validate" ? Validate(*cluster) : Up(*cluster, interrupts);
  }
  if (command == "sweep" || command == "ensemble") {
    Result<SweepArgs> sweep = ParseSweepArgs(command == "ensemble", rest);
    if (!sweep.ok()) return UsageError(sweep.status().message());
    return Sweep(*sweep, interrupts);
  }
  if (command == "status") return ShowStatus(rest);
  if (command == "logs") return ShowLogs(rest);
  if (command == "down") return Down(rest);
  if (command == "scale") return Scale(rest);
  if (command == "chaos") return Chaos(rest, interrupts);
  if (command == "report") return Report(rest);
  if (command == "dashboard") return ServeDashboard(rest, interrupts);
  if (command == "slurm") return Slurm(rest);
  if (command == "gen-token") return GenToken(rest);
  return UsageError(fmt::format(
      "unknown command \"{}\" (expected up, validate, sweep, ensemble, status, logs, down, scale, report, dashboard, chaos, slurm or gen-token)",
      command));
}

}  // namespace tfd::launcher
