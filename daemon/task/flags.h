#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

#include "common/base/status.h"
#include "common/transport/connection.h"

namespace tfd::task {

// Every flag of tfd, parsed once (Boost.Program_options) and checked on its own: durations are
// milliseconds here and nowhere else become so. What a flag means for which role is checked when
// the task is chosen (select.h).
struct TaskFlags {
  // Which task: --standalone, the seeds' --job_name/--task_index/--ps_hosts/--worker_hosts,
  // --tf-config FILE, $TF_CONFIG, --slurm-ps N, or --coordinator HOST:PORT (a sweep's worker).
  bool standalone = false;
  std::string tf_config_path;
  std::string job_name, ps_hosts, worker_hosts;
  int task_index = -1;
  std::optional<int> slurm_ps;
  std::optional<int> slurm_port_base;  // with --slurm-ps only; 8888 when not given
  std::string coordinator_address;     // --coordinator: empty unless given

  std::string job_path;      // --job
  std::string sweep_path;    // --sweep (coordinator task)
  std::string run_dir;       // --run-dir (coordinator task)
  bool resume = false;       // --resume (coordinator task): go on with the sweep in --run-dir
  std::string params_out;    // --params-out
  std::string summaries_dir; // --summaries-dir: overrides the job's summaries.dir
  std::string export_dir;    // --export-dir: overrides the job's export.dir; a generic worker: the root of its trials' models
  std::optional<std::string> device;            // --device, as given ("cpu", "cuda:N"), checked
  std::optional<int> cuda_device;               // --device parsed: -1 cpu, N for cuda:N
  std::optional<double> gpu_memory_fraction;    // --gpu-memory-fraction, in (0, 1]
  std::int64_t shard_limit = 0;                 // --shard-limit, >= 0

  std::string token_file;  // --token-file (else TF_CONFIG's tfd.token_file)
  bool insecure = false;
  std::string bind;        // --bind ADDR: "" every interface

  std::chrono::milliseconds peer_timeout, startup_timeout, step_timeout, reconnect_timeout;
  std::optional<std::chrono::milliseconds> idle_timeout;  // evaluator only

  bool json_events = false;        // --log-format json
  std::string log_level = "info";  // debug, info, warn or error
  std::optional<std::pair<std::string, std::uint16_t>> metrics;  // --metrics ADDR:PORT
  std::string run_name;            // --run-name: the run label of every metric

  // The connection settings every role that talks to peers starts from: the peer timeout, and a
  // heartbeat at a quarter of it (at most every second). No token yet (select.h adds it).
  transport::ConnectionOptions Connection() const;
};

// What ParseTaskFlags leaves main to do.
struct ParsedFlags {
  TaskFlags flags;
  bool exit_now = false;  // --help or --version was printed to `out`: exit 0
};

// Parses tfd's command line. InvalidArgument naming the flag and what it expects ("--log-level:
// expected debug, info, warn or error, got \"loud\"") for an unknown flag, a value that is not a
// number, a duration that is not above 0, and every other flag that is wrong whatever the task.
Result<ParsedFlags> ParseTaskFlags(int argc, const char* const* argv, std::ostream& out);

}  // namespace tfd::task
