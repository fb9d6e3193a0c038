#include "daemon/task/flags.h"

#include <algorithm>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/config/cluster_file.h"
#include "common/config/job.h"
#include "common/http/server.h"
#include "common/tensor/cuda/runtime.h"
#include "common/tensor/gemm.h"

namespace tfd::task {
namespace {

namespace po = boost::program_options;

constexpr const char* kUsage = R"(tfd: the training daemon of a tfd cluster (a ps, worker, evaluator or coordinator task), or one process.

Usage:
  TF_CONFIG='{"cluster": {...}, "task": {...}}' tfd --job FILE   a task of a cluster
  tfd --tf-config FILE --job FILE                                the same, TF_CONFIG from a file
  tfd --job_name=worker --task_index=0 --ps_hosts=H:P,... --worker_hosts=H:P,... --job FILE
  tfd --standalone --job FILE                                    train in this one process
  srun tfd --slurm-ps N --job FILE                               a task of a Slurm job step
  TF_CONFIG=... tfd --sweep FILE --run-dir DIR [--resume]        the coordinator task of a sweep

TF_CONFIG follows TensorFlow: {"cluster": {"chief": [...], "worker": ["host:port", ...],
"ps": [...]}, "task": {"type": "worker", "index": 0}}. The chief is the "chief" task, else worker 0.
A ps needs no --job: the chief sends it what it holds and how to update it. In allreduce mode the
cluster has no ps: each worker listens on its own address and the workers form a ring. An
"evaluator" task evaluates each of the chief's checkpoints (the job's checkpoint.dir) and ends
after the final one. A "coordinator" task runs a sweep (--sweep FILE, as tfctl sweep takes) on
the cluster's worker tasks, which then need no --job: they train the trials it hands out.

With --slurm-ps N the cluster comes from Slurm's environment (SLURM_PROCID, SLURM_NTASKS,
SLURM_LOCALID, SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE): every task of the step listens on
its node at --slurm-port-base + its slot on that node, the first N ranks are ps tasks and the rest
workers (the first worker is the chief), as TensorFlow's SlurmClusterResolver does.

With --metrics ADDR:PORT a task serves Prometheus metrics on /metrics and its state on /healthz
(docs/observability.md lists every metric).

Exit codes: 0 done, 1 runtime failure, 2 bad usage or configuration, 128+N after signal N.

Options)";

// Seconds from a flag as milliseconds; InvalidArgument unless above 0 (and below a million).
Result<std::chrono::milliseconds> Seconds(std::string_view flag, double secs) {
  if (!(secs > 0 && secs < 1e6)) return Status::InvalidArgument(fmt::format("{}: expected a number of seconds above 0", flag));
  return std::chrono::milliseconds(static_cast<std::int64_t>(secs * 1000));
}

}  // namespace

transport::ConnectionOptions TaskFlags::Connection() const {
  transport::ConnectionOptions conn;
  conn.peer_timeout = peer_timeout;
  conn.heartbeat_interval = std::min(std::chrono::milliseconds(1000), conn.peer_timeout / 4);
  return conn;
}

Result<ParsedFlags> ParseTaskFlags(int argc, const char* const* argv, std::ostream& out) {
  ParsedFlags parsed;
  TaskFlags& f = parsed.flags;
  using Timeouts = config::TaskTimeouts;  // the defaults tfctl also knows
  double peer_timeout = Timeouts::kPeerDefault, startup_timeout = Timeouts::kStartupDefault, step_timeout = Timeouts::kStepDefault,
         reconnect_timeout = Timeouts::kReconnectDefault, idle_timeout = 0, gpu_memory_fraction = 0;
  std::string log_format = "text", metrics, device;
  int slurm_ps = -1, slurm_port_base = 8888;
  po::options_description opts(kUsage);
  opts.add_options()
      ("help,h", "print this help and exit")
      ("version", "print the version and the compute backends this build has, and exit")
      ("job", po::value<std::string>(&f.job_path)->value_name("FILE"), "the job spec (JSON): model, data, optimizer, update mode ...")
      ("tf-config", po::value<std::string>(&f.tf_config_path)->value_name("FILE"), "read TF_CONFIG from FILE instead of the environment")
      ("standalone", po::bool_switch(&f.standalone), "train in this process, without ps or other workers")
      ("job_name", po::value<std::string>(&f.job_name)->value_name("ps|worker"), "the seeds' flags: this task's job ...")
      ("task_index", po::value<int>(&f.task_index)->value_name("N"), "... its index ...")
      ("ps_hosts", po::value<std::string>(&f.ps_hosts)->value_name("H:P,..."), "... the ps tasks ...")
      ("worker_hosts", po::value<std::string>(&f.worker_hosts)->value_name("H:P,..."), "... and the worker tasks")
      ("token-file", po::value<std::string>(&f.token_file)->value_name("FILE"), "the cluster token (tfctl gen-token FILE; mode 0600): peers prove they hold it and every frame is MAC'd (default: TF_CONFIG's tfd.token_file)")
      ("insecure", po::bool_switch(&f.insecure), "without a token, still talk to peers on other hosts (a trusted network only: anyone who can connect can push gradients)")
      ("bind", po::value<std::string>(&f.bind)->value_name("ADDR"), "listen on this address only (default: every interface)")
      ("peer-timeout", po::value<double>(&peer_timeout)->value_name("SECS"), "a peer silent this long (no frame, no heartbeat) is lost (default 8)")
      ("startup-timeout", po::value<double>(&startup_timeout)->value_name("SECS"), "how long a worker waits for every ps to be up and initialised, and a ps for every worker to connect (default 120)")
      ("step-timeout", po::value<double>(&step_timeout)->value_name("SECS"), "how long one push/pull may take (default 300)")
      ("reconnect-timeout", po::value<double>(&reconnect_timeout)->value_name("SECS"), "how long a worker redials a lost ps (restarted, or unreachable), and a ps waits for a lost worker, before giving up (default 60)")
      ("idle-timeout", po::value<double>(&idle_timeout)->value_name("SECS"), "evaluator: how long it waits for the chief's next checkpoint once it has seen one (default: 3 x checkpoint.every_secs, at least 60; 600 without every_secs)")
      ("shard-limit", po::value<std::int64_t>(&f.shard_limit)->value_name("N"), "allreduce: use at most N examples of this worker's shard each epoch (uneven shards)")
      ("summaries-dir", po::value<std::string>(&f.summaries_dir)->value_name("DIR"), "write TensorBoard summaries into DIR/<task> (sets or overrides the job's summaries.dir)")
      ("export-dir", po::value<std::string>(&f.export_dir)->value_name("DIR"), "the chief writes the trained model into DIR/<version>/ (sets or overrides the job's export.dir); a generic worker (--coordinator) writes trial K's into DIR/K/model/<version>/")
      ("device", po::value<std::string>(&device)->value_name("DEV"), "train on DEV, cpu or cuda:N, whatever the job's \"device\" says (one task of a mixed cluster)")
      ("gpu-memory-fraction", po::value<double>(&gpu_memory_fraction)->value_name("F"), "the share in (0, 1] of the GPU's memory this task may take (overrides the job's gpu_memory_fraction)")
      ("params-out", po::value<std::string>(&f.params_out)->value_name("FILE"), "write the final parameters to FILE (raw little-endian float32, in variable order)")
      ("log-format", po::value<std::string>(&log_format)->value_name("FMT"), "text (default): log lines on stderr; json: also one JSON event per line on stdout")
      ("log-level", po::value<std::string>(&f.log_level)->value_name("LEVEL"), "debug, info (default), warn or error")
      ("metrics", po::value<std::string>(&metrics)->value_name("ADDR:PORT"), "serve Prometheus metrics on http://ADDR:PORT/metrics and the task's state on /healthz (PORT alone: 127.0.0.1; :PORT: every interface; port 0: a free one, logged)")
      ("run-name", po::value<std::string>(&f.run_name)->value_name("NAME"), "the run label of every metric (tfctl gives its run folder's name; default empty)")
      ("slurm-ps", po::value<int>(&slurm_ps)->value_name("N"), "take the cluster from Slurm's environment (under srun): the first N ranks are ps tasks, the rest workers")
      ("slurm-port-base", po::value<int>(&slurm_port_base)->value_name("PORT"), "with --slurm-ps: a task listens on PORT + its slot on its node (default 8888)")
      ("coordinator", po::value<std::string>(&f.coordinator_address)->value_name("HOST:PORT"), "a generic worker of a sweep (tfctl sweep): train the trials the coordinator at HOST:PORT hands out, with --task_index N (docs/sweeps.md)")
      ("sweep", po::value<std::string>(&f.sweep_path)->value_name("FILE"), "coordinator task: run this sweep (the format of tfctl sweep) on the cluster's worker tasks (an ensemble: --job FILE with \"ensemble\" instead)")
      ("run-dir", po::value<std::string>(&f.run_dir)->value_name("DIR"), "coordinator task: write the sweep's trials.jsonl, leaderboard.csv and best.json into DIR (made if missing)")
      ("resume", po::bool_switch(&f.resume), "coordinator task: go on with the sweep --run-dir holds (its coordinator ended), from what its trials.jsonl and trial checkpoints recorded; --sweep must be the same file");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(opts).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return Status::InvalidArgument(fmt::format("{} (see tfd --help)", e.what()));
  }
  if (vm.count("help")) {
    out << opts << "\n";
    parsed.exit_now = true;
    return parsed;
  }
  if (vm.count("version")) {
    out << fmt::format("tfd {} (gemm: {}; device: cpu{})\n", TFD_VERSION, fmt::join(tensor::GemmBackends(), ", "), cuda::Built() ? ", cuda" : "");
    parsed.exit_now = true;
    return parsed;
  }
  if (log_format != "text" && log_format != "json")
    return Status::InvalidArgument(fmt::format("--log-format: expected text or json, got \"{}\"", log_format));
  f.json_events = log_format == "json";
  if (f.shard_limit < 0) return Status::InvalidArgument(fmt::format("--shard-limit: expected a count of examples >= 0, got {}", f.shard_limit));
  if (vm.count("metrics")) {
    TFD_ASSIGN_OR_RETURN(f.metrics, http::ParseListenAddress(metrics, "--metrics"));
  }
  if (f.log_level != "debug" && f.log_level != "info" && f.log_level != "warn" && f.log_level != "error")
    return Status::InvalidArgument(fmt::format("--log-level: expected debug, info, warn or error, got \"{}\"", f.log_level));
  TFD_ASSIGN_OR_RETURN(f.peer_timeout, Seconds("--peer-timeout", peer_timeout));
  TFD_ASSIGN_OR_RETURN(f.startup_timeout, Seconds("--startup-timeout", startup_timeout));
  TFD_ASSIGN_OR_RETURN(f.step_timeout, Seconds("--step-timeout", step_timeout));
  TFD_ASSIGN_OR_RETURN(f.reconnect_timeout, Seconds("--reconnect-timeout", reconnect_timeout));
  if (vm.count("idle-timeout")) {
    TFD_ASSIGN_OR_RETURN(f.idle_timeout, Seconds("--idle-timeout", idle_timeout));
  }
  if (vm.count("slurm-ps")) f.slurm_ps = slurm_ps;
  if (vm.count("slurm-port-base")) {
    if (!f.slurm_ps) return Status::InvalidArgument("--slurm-port-base: only with --slurm-ps");
    f.slurm_port_base = slurm_port_base;
  }
  if (vm.count("device")) {
    Result<int> d = config::ParseDevice(device);
    if (!d.ok()) return Status::InvalidArgument("--device: " + d.status().message());
    f.device = device;
    f.cuda_device = *d;
  }
  if (vm.count("gpu-memory-fraction")) {
    if (!(gpu_memory_fraction > 0 && gpu_memory_fraction <= 1))
      return Status::InvalidArgument(fmt::format("--gpu-memory-fraction: expected a number in (0, 1], got {}", gpu_memory_fraction));
    f.gpu_memory_fraction = gpu_memory_fraction;
  }
  return parsed;
}

}  // namespace tfd::task
