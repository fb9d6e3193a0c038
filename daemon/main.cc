// tfd: the training daemon. main() parses flags, wires objects and maps a Status to an exit code
// (0 done, 1 runtime failure, 2 bad usage or configuration).
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>

#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include "common/base/logging.h"
#include "common/config/job.h"
#include "daemon/standalone.h"

namespace po = boost::program_options;

namespace {

std::atomic<bool> g_stop{false};  // written by the signal handler only
std::atomic<int> g_signal{0};

extern "C" void OnSignal(int sig) {
  g_signal.store(sig);
  g_stop.store(true);
}

constexpr const char* kUsage = R"(tfd: a distributed training daemon (parameter server and worker).

Usage:
  tfd --standalone --job FILE [--log-format text|json]   train in this one process

Exit codes: 0 done, 1 runtime failure, 2 bad usage or configuration,
128+N after signal N (Ctrl-C: 130).

Options)";

}  // namespace

int main(int argc, char** argv) {
  po::options_description opts(kUsage);
  std::string job_path, log_format = "text", log_level = "info";
  bool standalone = false;
  opts.add_options()
      ("help,h", "print this help and exit")
      ("standalone", po::bool_switch(&standalone), "train in this process, without ps or other workers")
      ("job", po::value<std::string>(&job_path)->value_name("FILE"), "the job spec (JSON): model, data, optimizer, ...")
      ("log-format", po::value<std::string>(&log_format)->value_name("FMT"),
       "text (default): log lines on stderr; json: also one JSON event per line on stdout")
      ("log-level", po::value<std::string>(&log_level)->value_name("LEVEL"), "debug, info (default), warn or error");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(opts).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "tfd: %s (see tfd --help)\n", e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  if (log_format != "text" && log_format != "json") {
    std::fprintf(stderr, "tfd: --log-format: expected text or json, got \"%s\"\n", log_format.c_str());
    return 2;
  }
  if (log_level != "debug" && log_level != "info" && log_level != "warn" && log_level != "error") {
    std::fprintf(stderr, "tfd: --log-level: expected debug, info, warn or error, got \"%s\"\n", log_level.c_str());
    return 2;
  }
  if (!standalone) {
    std::fprintf(stderr, "tfd: only --standalone training is available in this build (see tfd --help)\n");
    return 2;
  }
  if (job_path.empty()) {
    std::fprintf(stderr, "tfd: --job FILE is required (see tfd --help)\n");
    return 2;
  }

  const std::string task = "standalone";
  tfd::SetupLogging(task, log_level);
  tfd::EventWriter events(stdout, task, log_format == "json");
  tfd::Result<tfd::config::JobSpec> job = tfd::config::LoadJobSpec(job_path);
  if (!job.ok()) {
    spdlog::error("{}", job.status().message());
    events.Emit("error", {{"message", job.status().message()}});
    return 2;
  }

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  tfd::daemon::StandaloneOptions options{.stop = &g_stop};
  tfd::Status s = tfd::daemon::RunStandalone(*job, events, options);
  if (!s.ok()) {
    spdlog::error("{}", s.message());
    events.Emit("error", {{"message", s.message()}});
    if (g_signal.load() != 0) return 128 + g_signal.load();
    // Bad data or a model that does not fit it is a configuration error too.
    return s.code() == tfd::Code::kCorruption ? 2 : tfd::ExitCodeFor(s);
  }
  return 0;
}
