// report and dashboard: what tfctl shows of a run folder, during or after the run.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "common/http/server.h"
#include "launcher/cli.h"
#include "launcher/commands.h"
#include "launcher/dashboard.h"
#include "launcher/report.h"

namespace tfd::launcher {

int Report(const std::vector<std::string>& args) {
  std::string run;
  CommandLine line("report");
  line.Positional(&run, "run folder");
  if (Status s = line.Parse(args); !s.ok()) return UsageError(s.message());
  if (run.empty()) return UsageError("report needs one run folder");
  if (Status s = WriteReport(run); !s.ok()) return ReportFailure(s);
  std::printf("tfctl: wrote %s/report.html and %s/curves.svg\n", run.c_str(), run.c_str());
  return 0;
}

int ServeDashboard(const std::vector<std::string>& args, const Interrupts& interrupts) {
  std::string run, listen = "0";
  CommandLine line("dashboard");
  line.Positional(&run, "run folder");
  line.Text("port", &listen);  // checked below, as ADDR:PORT
  if (Status s = line.Parse(args); !s.ok()) return UsageError(s.message());
  if (run.empty()) return UsageError("dashboard needs a run folder");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(std::filesystem::path(run) / "job.json", ec))
    return ReportFailure(Status::InvalidArgument(fmt::format("{}: not a run folder (no job.json)", run)));
  auto address = http::ParseListenAddress(listen, "--port");
  if (!address.ok()) return ReportFailure(address.status());
  auto dashboard = Dashboard::Start(address->first, address->second, run);
  if (!dashboard.ok()) return ReportFailure(dashboard.status());
  std::signal(SIGINT, interrupts.handler);
  std::signal(SIGTERM, interrupts.handler);
  std::fprintf(stderr, "tfctl: dashboard at %s (Ctrl-C to stop)\n", (*dashboard)->url().c_str());
  while (interrupts.flag->load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return 0;
}

}  // namespace tfd::launcher
