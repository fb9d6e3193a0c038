// scale RUN --workers N: more or fewer workers for a live elastic run (launcher/scale.h).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "launcher/child_process.h"
#include "launcher/cli.h"
#include "launcher/commands.h"
#include "launcher/runner.h"
#include "launcher/scale.h"

namespace tfd::launcher {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The tasks of `names` whose ready event is in `metrics` past byte `from`.
std::set<std::string> ReadySince(const fs::path& metrics, std::uintmax_t from, const std::vector<std::string>& names) {
  std::set<std::string> ready;
  std::ifstream in(metrics);
  in.seekg(static_cast<std::streamoff>(from));
  for (std::string line; std::getline(in, line);) {
    auto e = config::ParseEvent(line);
    if (e.ok() && e->event == "ready" && std::find(names.begin(), names.end(), e->task) != names.end()) ready.insert(e->task);
  }
  return ready;
}

}  // namespace

int Scale(const std::vector<std::string>& args) {
  std::string run;
  int workers = -1;
  CommandLine line("scale");
  line.Positional(&run, "run folder");
  line.Integer("workers", &workers, 1, 65536, "a number of workers");
  if (Status s = line.Parse(args); !s.ok()) return UsageError(s.message());
  if (run.empty() || workers < 0) return UsageError("scale needs a run folder and --workers N");
  const fs::path run_dir = run;
  if (!fs::is_directory(run_dir)) return ReportFailure(Status::InvalidArgument(fmt::format("scale: {}: no such run folder", run)));
  const fs::path cluster_path = run_dir / "cluster.json";
  if (!fs::exists(cluster_path))
    return ReportFailure(Status::InvalidArgument(fmt::format("scale: {}: not a run folder of tfctl up (no cluster.json)", run)));
  Result<config::ClusterFile> file = config::LoadClusterFile(cluster_path.string());
  if (!file.ok()) return ReportFailure(Status::InvalidArgument(file.status().message()));
  if (Status s = CheckScale(file->train, workers, cluster_path.string()); !s.ok()) return ReportFailure(s);
  std::ifstream pid_file(run_dir / "tfctl.pid");
  long pid = -1;
  pid_file >> pid;
  if (fs::exists(run_dir / "summary.json") || !ProcessAlive(static_cast<pid_t>(pid)))
    return ReportFailure(Status::InvalidArgument(fmt::format("scale: {}: the run is over: no live tasks (its summary.json is written or its tfctl has ended)", run)));

  std::error_code ec;
  const std::uintmax_t from = fs::file_size(run_dir / "metrics.jsonl", ec);
  const ScaleRequest request{.workers = workers, .id = fmt::format("{}-{}", getpid(), Clock::now().time_since_epoch().count())};
  if (Status s = WriteScaleRequest(run_dir, request); !s.ok()) return ReportFailure(s);
  std::optional<ScaleReply> reply;
  for (const auto until = Clock::now() + std::chrono::seconds(15); !reply && Clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Result<std::optional<ScaleReply>> read = ReadScaleReply(run_dir, request.id);
    if (!read.ok()) return ReportFailure(read.status().WithContext("scale"));
    reply = std::move(*read);
    if (!reply && !ProcessAlive(static_cast<pid_t>(pid))) break;
  }
  if (!reply) {
    fs::remove(run_dir / "scale.request", ec);
    std::fprintf(stderr, "tfctl: scale: the run's tfctl (pid %ld) did not answer within 15 s%s\n", pid,
                 ProcessAlive(static_cast<pid_t>(pid)) ? "" : " (it has ended)");
    return 1;
  }
  if (!reply->ok) {
    std::fprintf(stderr, "tfctl: scale: %s\n", reply->message.c_str());
    return reply->started.empty() ? 2 : 1;
  }
  std::printf("tfctl: %s\n", reply->message.c_str());
  std::fflush(stdout);
  if (reply->started.empty()) return 0;
  // Like up --detach: back once the new workers are ready (they pulled the parameters).
  const double timeout = file->launch.start_timeout_secs;
  std::set<std::string> ready;
  for (const auto until = Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000));
       ready.size() < reply->started.size() && Clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ready = ReadySince(run_dir / "metrics.jsonl", ec ? 0 : from, reply->started);
  }
  if (ready.size() < reply->started.size()) {
    std::fprintf(stderr, "tfctl: scale: not every new worker was ready within %.0f s (launch.start_timeout); see tfctl logs %s\n", timeout,
                 run.c_str());
    return 1;
  }
  std::printf("tfctl: %s ready\n", fmt::format("{}", fmt::join(reply->started, ", ")).c_str());
  return 0;
}

}  // namespace tfd::launcher
