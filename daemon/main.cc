// tfd: the training daemon. main() parses flags, wires objects and maps a Status to an exit code
// (0 done, 1 runtime failure, 2 bad usage or configuration, 128+N after signal N).
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "common/base/logging.h"
#include "common/base/memory.h"
#include "common/base/service.h"
#include "common/config/cluster.h"
#include "common/config/cluster_file.h"
#include "common/config/job.h"
#include "common/config/slurm.h"
#include "common/http/server.h"
#include "common/metrics/registry.h"
#include "common/metrics/task_metrics.h"
#include "common/tensor/cuda/runtime.h"
#include "common/tensor/gemm.h"
#include "daemon/allreduce/run_allreduce.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/coordinator/generic_worker.h"
#include "daemon/coordinator/sweep_run.h"
#include "daemon/evaluator/evaluator.h"
#include "daemon/evaluator/sinks.h"
#include "daemon/pipeline/run_pipeline.h"
#include "daemon/ps/run_ps.h"
#include "daemon/train/metrics_observer.h"
#include "daemon/train/standalone.h"
#include "daemon/train/summary_observer.h"
#include "daemon/train/task_options.h"
#include "daemon/worker/run_worker.h"

namespace po = boost::program_options;

namespace {

std::atomic<bool> g_stop{false};  // written by the signal handler only
std::atomic<int> g_signal{0};

extern "C" void OnSignal(int sig) {
  g_signal.store(sig);
  g_stop.store(true);
}

constexpr const char* kUsage = R"(tfd: the training daemon of a tfd cluster (a ps, worker, evaluator or coordinator task), or one process.

Usage:
  TF_CONFIG='{"cluster": {...}, "task": {...}}' tfd --job FILE   a task of a cluster
  tfd --tf-config FILE --job FILE                                the same, TF_CONFIG from a file
  tfd --job_name=worker --task_index=0 --ps_hosts=H:P,... --worker_hosts=H:P,... --job FILE
  tfd --standalone --job FILE                                    train in this one process
  srun tfd --slurm-ps N --job FILE                               a task of a Slurm job step
  TF_CONFIG=... tfd --sweep FILE --run-dir DIR                   the coordinator task of a sweep

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

int Fail(const tfd::Status& s, tfd::EventWriter& events) {
  if (g_signal.load() != 0) tfd::NotifyStopping();
  spdlog::error("{}", s.message());
  events.Emit("error", {{"message", s.message()}});
  if (g_signal.load() != 0) return 128 + g_signal.load();
  return tfd::ExitCodeFor(s);
}

// /metrics, /healthz and 404 for the rest. `phase` says what the task is doing, for /healthz.
tfd::http::Response ServeMetrics(const tfd::http::Request& req, const tfd::metrics::TaskMetrics& m, const std::string& task,
                                 const std::atomic<const char*>& phase) {
  tfd::http::Response r;
  const std::string path = req.target.substr(0, req.target.find('?'));
  if (path == "/metrics") {
    r.content_type = std::string(tfd::metrics::kContentType);
    r.body = m.registry().Render();
  } else if (path == "/healthz") {
    r.body = fmt::format("ok {} {} global_step={:.0f}\n", task, phase.load(), m.global_step->value());
  } else {
    r.status = 404;
    r.body = "not found: this task serves /metrics and /healthz\n";
  }
  return r;
}

// A generic worker of a sweep (docs/sweeps.md): tfd --coordinator HOST:PORT --task_index N, or a
// worker task of a TF_CONFIG cluster that has a coordinator (`conn` then carries the cluster token
// and `cluster_id` its cluster's id).
int GenericWorkerMain(const std::string& address, int index, const std::string& log_level, bool json, double startup_timeout,
                      tfd::transport::ConnectionOptions conn, std::uint64_t cluster_id = 0) {
  const std::size_t colon = address.rfind(':');
  int port = -1;
  if (colon != std::string::npos && colon > 0) {
    try {
      port = std::stoi(address.substr(colon + 1));
    } catch (...) {  // not a number: refused below
    }
  }
  if (port <= 0 || port > 65535) {
    std::fprintf(stderr, "tfd: --coordinator: expected HOST:PORT, got \"%s\"\n", address.c_str());
    return 2;
  }
  if (index < 0) {
    std::fprintf(stderr, "tfd: --coordinator needs --task_index N (this worker's index)\n");
    return 2;
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);  // [v6addr]
  const std::string task = fmt::format("worker:{}", index);
  tfd::SetupLogging(task, log_level);
  tfd::EventWriter events(stdout, task, json);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);
  tfd::coordinator::GenericWorkerOptions options{
      .host = host,
      .port = static_cast<std::uint16_t>(port),
      .index = index,
      .cluster_id = cluster_id,
      .stop = &g_stop,
      .startup_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(startup_timeout * 1000))};
  tfd::Status s = tfd::coordinator::RunGenericWorker(options, events, conn);
  if (!s.ok()) return Fail(s, events);
  return 0;
}

// The coordinator task of a TF_CONFIG cluster (docs/sweeps.md, "By hand"): runs the sweep of
// `sweep_path` (or the ensemble of `job_path`) on the cluster's worker tasks, listening on its own
// endpoint, and writes the run folder `run_dir` as tfctl sweep does.
int CoordinatorMain(const tfd::config::TfConfig& tf, const std::string& sweep_path, const std::string& job_path, const std::string& run_dir_flag,
                    const std::string& bind, const tfd::transport::ConnectionOptions& conn, const std::string& log_level, bool json,
                    double startup_timeout, double reconnect_timeout) {
  namespace fs = std::filesystem;
  const std::string task = tf.task.ToString();
  tfd::SetupLogging(task, log_level);
  tfd::EventWriter events(stdout, task, json);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);
  const std::string run_dir = fs::absolute(run_dir_flag).string();
  const bool ensemble = sweep_path.empty();
  const std::string file = ensemble ? job_path : sweep_path;
  tfd::Result<tfd::config::SweepSpec> loaded = ensemble ? tfd::config::LoadEnsembleSpec(file) : tfd::config::LoadSweepSpec(file);
  if (!loaded.ok()) return Fail(loaded.status(), events);
  tfd::config::SweepSpec sweep = std::move(loaded).value();
  sweep.workers = static_cast<int>(tf.cluster.worker.size());  // the cluster's worker tasks, whatever the file says
  std::vector<tfd::config::Trial> trials = tfd::config::GenerateTrials(sweep);
  const int parallel = sweep.parallel > 0 ? sweep.parallel : sweep.workers;

  std::error_code ec;
  if (fs::exists(fs::path(run_dir) / "trials.jsonl", ec))
    return Fail(tfd::Status::InvalidArgument(fmt::format("--run-dir: {} holds a sweep's trials.jsonl already: give a new or empty folder", run_dir)), events);
  fs::create_directories(run_dir, ec);
  if (ec) return Fail(tfd::Status::InvalidArgument(fmt::format("--run-dir: cannot create {}: {}", run_dir, ec.message())), events);
  fs::copy_file(file, fs::path(run_dir) / (ensemble ? "job.json" : "sweep.json"), fs::copy_options::overwrite_existing, ec);

  tfd::coordinator::CoordinatorOptions copts;
  copts.bind_address = bind;
  copts.port = tf.self().port;
  copts.connection = conn;
  copts.trials_dir = (fs::path(run_dir) / "trials").string();
  copts.cluster_id = tf.cluster.Id();
  tfd::Result<std::unique_ptr<tfd::coordinator::Coordinator>> started = tfd::coordinator::Coordinator::Start(sweep, trials, parallel, copts);
  if (!started.ok()) return Fail(started.status(), events);
  std::unique_ptr<tfd::coordinator::Coordinator> coord = std::move(started).value();
  spdlog::info("{} {}: {} trials, {} at once on {} worker tasks, {} of {}, scheduler {}; listening on port {}; run folder {}",
               ensemble ? "ensemble" : "sweep", file, trials.size(), parallel, sweep.workers, sweep.maximize ? "max" : "min", sweep.metric,
               sweep.asha ? "asha" : "none", coord->port(), run_dir);
  events.Emit("start", {{"role", std::string("coordinator")}, {"pid", std::int64_t{getpid()}}, {"trials", static_cast<std::int64_t>(trials.size())}});

  tfd::coordinator::SweepRunOptions ropts;
  ropts.run_dir = run_dir;
  ropts.ensemble = ensemble;
  ropts.table = stderr;
  ropts.prefix = task;
  ropts.say = [](bool error, std::string_view, const std::string& message) {
    if (error) spdlog::error("{}", message);
    else spdlog::info("{}", message);
  };
  ropts.interrupted = [] { return g_stop.load(); };
  ropts.startup_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(startup_timeout * 1000));
  ropts.reconnect_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(reconnect_timeout * 1000));
  ropts.expected_workers = sweep.workers;
  const int code = tfd::coordinator::RunSweep(*coord, sweep, ropts);
  coord.reset();
  if (code == 130) return 128 + (g_signal.load() != 0 ? g_signal.load() : SIGINT);
  if (code == 0) events.Emit("done", {{"run_dir", run_dir}});
  else events.Emit("error", {{"message", std::string("no trial reported ") + sweep.metric}});
  return code;
}

}  // namespace

using tfd::Status;

int main(int argc, char** argv) {
  po::options_description opts(kUsage);
  std::string job_path, params_out, summaries_dir, tf_config_path, token_file, log_format = "text", log_level = "info", job_name, ps_hosts,
      worker_hosts, bind, metrics_flag, run_name, coordinator_address, device_flag, sweep_path, run_dir;
  std::int64_t shard_limit = 0;
  int task_index = -1, slurm_ps = -1, slurm_port_base = 8888;
  using Timeouts = tfd::config::TaskTimeouts;  // the defaults tfctl also knows
  double peer_timeout = Timeouts::kPeerDefault, startup_timeout = Timeouts::kStartupDefault, step_timeout = Timeouts::kStepDefault,
         reconnect_timeout = Timeouts::kReconnectDefault, idle_timeout = 0, gpu_memory_fraction = 0;
  bool standalone = false, insecure = false;
  opts.add_options()
      ("help,h", "print this help and exit")
      ("version", "print the version and the compute backends this build has, and exit")
      ("job", po::value<std::string>(&job_path)->value_name("FILE"), "the job spec (JSON): model, data, optimizer, update mode ...")
      ("tf-config", po::value<std::string>(&tf_config_path)->value_name("FILE"), "read TF_CONFIG from FILE instead of the environment")
      ("standalone", po::bool_switch(&standalone), "train in this process, without ps or other workers")
      ("job_name", po::value<std::string>(&job_name)->value_name("ps|worker"), "the seeds' flags: this task's job ...")
      ("task_index", po::value<int>(&task_index)->value_name("N"), "... its index ...")
      ("ps_hosts", po::value<std::string>(&ps_hosts)->value_name("H:P,..."), "... the ps tasks ...")
      ("worker_hosts", po::value<std::string>(&worker_hosts)->value_name("H:P,..."), "... and the worker tasks")
      ("token-file", po::value<std::string>(&token_file)->value_name("FILE"), "the cluster token (tfctl gen-token FILE; mode 0600): peers prove they hold it and every frame is MAC'd (default: TF_CONFIG's tfd.token_file)")
      ("insecure", po::bool_switch(&insecure), "without a token, still talk to peers on other hosts (a trusted network only: anyone who can connect can push gradients)")
      ("bind", po::value<std::string>(&bind)->value_name("ADDR"), "listen on this address only (default: every interface)")
      ("peer-timeout", po::value<double>(&peer_timeout)->value_name("SECS"), "a peer silent this long (no frame, no heartbeat) is lost (default 8)")
      ("startup-timeout", po::value<double>(&startup_timeout)->value_name("SECS"), "how long a worker waits for every ps to be up and initialised, and a ps for every worker to connect (default 120)")
      ("step-timeout", po::value<double>(&step_timeout)->value_name("SECS"), "how long one push/pull may take (default 300)")
      ("reconnect-timeout", po::value<double>(&reconnect_timeout)->value_name("SECS"), "how long a worker redials a lost ps (restarted, or unreachable), and a ps waits for a lost worker, before giving up (default 60)")
      ("idle-timeout", po::value<double>(&idle_timeout)->value_name("SECS"), "evaluator: how long it waits for the chief's next checkpoint once it has seen one (default: 3 x checkpoint.every_secs, at least 60; 600 without every_secs)")
      ("shard-limit", po::value<std::int64_t>(&shard_limit)->value_name("N"), "allreduce: use at most N examples of this worker's shard each epoch (uneven shards)")
      ("summaries-dir", po::value<std::string>(&summaries_dir)->value_name("DIR"), "write TensorBoard summaries into DIR/<task> (sets or overrides the job's summaries.dir)")
      ("device", po::value<std::string>(&device_flag)->value_name("DEV"), "train on DEV, cpu or cuda:N, whatever the job's \"device\" says (one task of a mixed cluster)")
      ("gpu-memory-fraction", po::value<double>(&gpu_memory_fraction)->value_name("F"), "the share in (0, 1] of the GPU's memory this task may take (overrides the job's gpu_memory_fraction)")
      ("params-out", po::value<std::string>(&params_out)->value_name("FILE"), "write the final parameters to FILE (raw little-endian float32, in variable order)")
      ("log-format", po::value<std::string>(&log_format)->value_name("FMT"), "text (default): log lines on stderr; json: also one JSON event per line on stdout")
      ("log-level", po::value<std::string>(&log_level)->value_name("LEVEL"), "debug, info (default), warn or error")
      ("metrics", po::value<std::string>(&metrics_flag)->value_name("ADDR:PORT"), "serve Prometheus metrics on http://ADDR:PORT/metrics and the task's state on /healthz (PORT alone: 127.0.0.1; :PORT: every interface; port 0: a free one, logged)")
      ("run-name", po::value<std::string>(&run_name)->value_name("NAME"), "the run label of every metric (tfctl gives its run folder's name; default empty)")
      ("slurm-ps", po::value<int>(&slurm_ps)->value_name("N"), "take the cluster from Slurm's environment (under srun): the first N ranks are ps tasks, the rest workers")
      ("slurm-port-base", po::value<int>(&slurm_port_base)->value_name("PORT"), "with --slurm-ps: a task listens on PORT + its slot on its node (default 8888)")
      ("coordinator", po::value<std::string>(&coordinator_address)->value_name("HOST:PORT"), "a generic worker of a sweep (tfctl sweep): train the trials the coordinator at HOST:PORT hands out, with --task_index N (docs/sweeps.md)")
      ("sweep", po::value<std::string>(&sweep_path)->value_name("FILE"), "coordinator task: run this sweep (the format of tfctl sweep) on the cluster's worker tasks (an ensemble: --job FILE with \"ensemble\" instead)")
      ("run-dir", po::value<std::string>(&run_dir)->value_name("DIR"), "coordinator task: write the sweep's trials.jsonl, leaderboard.csv and best.json into DIR (made if missing)");
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
  if (vm.count("version")) {
    std::cout << fmt::format("tfd {} (gemm: {}; device: cpu{})\n", TFD_VERSION, fmt::join(tfd::tensor::GemmBackends(), ", "),
                             tfd::cuda::Built() ? ", cuda" : "");
    return 0;
  }
  auto usage_error = [](const std::string& m) {
    std::fprintf(stderr, "tfd: %s\n", m.c_str());
    return 2;
  };
  if (log_format != "text" && log_format != "json") return usage_error("--log-format: expected text or json, got \"" + log_format + "\"");
  if (shard_limit < 0) return usage_error(fmt::format("--shard-limit: expected a count of examples >= 0, got {}", shard_limit));
  std::optional<std::pair<std::string, std::uint16_t>> metrics_address;
  if (vm.count("metrics")) {
    auto parsed = tfd::http::ParseListenAddress(metrics_flag, "--metrics");
    if (!parsed.ok()) return usage_error(parsed.status().message());
    metrics_address = *parsed;
  }
  if (log_level != "debug" && log_level != "info" && log_level != "warn" && log_level != "error")
    return usage_error("--log-level: expected debug, info, warn or error, got \"" + log_level + "\"");
  for (auto [name, v] : {std::pair{"--peer-timeout", peer_timeout}, {"--startup-timeout", startup_timeout}, {"--step-timeout", step_timeout}, {"--reconnect-timeout", reconnect_timeout}})
    if (!(v > 0 && v < 1e6)) return usage_error(std::string(name) + ": expected a number of seconds above 0");
  if (vm.count("idle-timeout") && !(idle_timeout > 0 && idle_timeout < 1e6)) return usage_error("--idle-timeout: expected a number of seconds above 0");

  auto connection_options = [&] {
    tfd::transport::ConnectionOptions conn;
    conn.peer_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(peer_timeout * 1000));
    conn.heartbeat_interval = std::min(std::chrono::milliseconds(1000), conn.peer_timeout / 4);
    return conn;
  };
  if (vm.count("coordinator")) {
    if (standalone || !job_path.empty() || !tf_config_path.empty() || !job_name.empty() || vm.count("sweep") || vm.count("run-dir"))
      return usage_error("--coordinator takes no --job, --sweep, --run-dir, --standalone, --tf-config or --job_name: the coordinator hands out the jobs");
    return GenericWorkerMain(coordinator_address, task_index, log_level, log_format == "json", startup_timeout, connection_options());
  }
  // Which task is this? --standalone, the seeds' flags, --tf-config, or $TF_CONFIG.
  tfd::Result<tfd::config::TfConfig> tf_config = Status::InvalidArgument("unset");
  const bool flags_given = !job_name.empty() || task_index >= 0 || !ps_hosts.empty() || !worker_hosts.empty();
  if (vm.count("slurm-port-base") && !vm.count("slurm-ps")) return usage_error("--slurm-port-base: only with --slurm-ps");
  if (vm.count("slurm-ps")) {
    if (standalone || flags_given || !tf_config_path.empty())
      return usage_error("--slurm-ps takes the cluster from Slurm: no --standalone, cluster flags or --tf-config with it");
    tf_config = tfd::config::TfConfigFromSlurm(slurm_ps, slurm_port_base);
  } else if (standalone) {
    if (flags_given || !tf_config_path.empty()) return usage_error("--standalone takes no cluster flags or --tf-config");
    if (shard_limit > 0) return usage_error("--shard-limit: only for a worker in allreduce mode");
  } else if (flags_given) {
    if (job_name.empty() || task_index < 0 || worker_hosts.empty())
      return usage_error("--job_name, --task_index and --worker_hosts go together (and --ps_hosts for a ps cluster)");
    tf_config = tfd::config::TfConfigFromFlags(job_name, task_index, ps_hosts, worker_hosts);
  } else if (!tf_config_path.empty()) {
    tf_config = tfd::config::LoadTfConfig(tf_config_path);
  } else if (const char* env = std::getenv("TF_CONFIG"); env != nullptr && *env != '\0') {
    tf_config = tfd::config::ParseTfConfig(env, "TF_CONFIG");
  } else {
    return usage_error("no task: set TF_CONFIG, or give --tf-config FILE, the --job_name/--task_index flags, or --standalone (see tfd --help)");
  }
  if (!standalone && !tf_config.ok()) return usage_error(tf_config.status().message());

  const bool is_ps = !standalone && tf_config->task.type == tfd::config::TaskType::kPs;
  const bool is_evaluator = !standalone && tf_config->task.type == tfd::config::TaskType::kEvaluator;
  const bool is_coordinator = !standalone && tf_config->task.type == tfd::config::TaskType::kCoordinator;
  // A worker of a cluster with a coordinator is a generic worker: the coordinator hands it its jobs.
  const bool is_generic_worker = !standalone && !is_coordinator && !tf_config->cluster.coordinator.empty();
  if (vm.count("idle-timeout") && !is_evaluator) return usage_error("--idle-timeout: only for an evaluator task");
  // Per-task placement: the flags override the job's device and memory share for this task alone.
  std::optional<int> device_override;
  if (vm.count("device")) {
    if (is_ps) return usage_error("--device: a ps task trains nothing and never uses a GPU");
    tfd::Result<int> parsed = tfd::config::ParseDevice(device_flag);
    if (!parsed.ok()) return usage_error("--device: " + parsed.status().message());
    device_override = *parsed;
  }
  if (vm.count("gpu-memory-fraction")) {
    if (is_ps) return usage_error("--gpu-memory-fraction: a ps task trains nothing and never uses a GPU");
    if (!(gpu_memory_fraction > 0 && gpu_memory_fraction <= 1))
      return usage_error(fmt::format("--gpu-memory-fraction: expected a number in (0, 1], got {}", gpu_memory_fraction));
  }
  if (!is_coordinator) {
    const std::string who = standalone ? "--standalone" : "this task (" + tf_config->task.ToString() + ")";
    if (vm.count("sweep")) return usage_error("--sweep: only for the coordinator task (TF_CONFIG task.type \"coordinator\"), not " + who);
    if (vm.count("run-dir")) return usage_error("--run-dir: only for the coordinator task (TF_CONFIG task.type \"coordinator\"), not " + who);
  } else {
    if (sweep_path.empty() && job_path.empty())
      return usage_error("--sweep FILE is required for the coordinator task (or --job FILE of an ensemble job)");
    if (!sweep_path.empty() && !job_path.empty()) return usage_error("--sweep and --job: a coordinator task runs one sweep or one ensemble job, not both");
    if (run_dir.empty()) return usage_error("--run-dir DIR is required for the coordinator task (its trials.jsonl, leaderboard.csv and best.json)");
  }
  if (is_generic_worker && !job_path.empty())
    return usage_error(fmt::format("--job: {} is a worker of a cluster with a coordinator (cluster.coordinator): the coordinator hands out the jobs",
                                   tf_config->task.ToString()));
  if (!is_ps && !is_coordinator && !is_generic_worker && job_path.empty()) return usage_error("--job FILE is required (see tfd --help)");

  // The cluster token: from --token-file or TF_CONFIG's "tfd": {"token_file": ...}. Without one,
  // tfd talks to this machine only, unless --insecure says the network is trusted.
  std::shared_ptr<const tfd::transport::ClusterToken> token;
  if (!standalone && !is_evaluator) {  // an evaluator talks to no peer
    if (token_file.empty()) token_file = tf_config->token_file;
    if (!token_file.empty()) {
      tfd::Result<tfd::transport::ClusterToken> read = tfd::transport::ClusterToken::ReadFile(token_file);
      if (!read.ok()) return usage_error(read.status().message());
      token = std::make_shared<const tfd::transport::ClusterToken>(std::move(read).value());
    } else if (!insecure) {
      for (tfd::config::TaskType t : tfd::config::kAllTypes)
        for (const tfd::config::Endpoint& ep : tf_config->cluster.Tasks(t))
          if (!ep.IsLoopback())
            return usage_error(fmt::format("the cluster has tasks on other hosts ({} {}) and this task has no cluster token: give "
                                           "every task --token-file FILE (made once by tfctl gen-token FILE), or --insecure on a "
                                           "trusted network",
                                           tfd::config::TaskTypeName(t), ep.ToString()));
    }
  }

  if (is_coordinator || is_generic_worker) {
    tfd::transport::ConnectionOptions conn = connection_options();
    conn.token = token;
    conn.insecure = insecure;
    if (is_generic_worker)
      return GenericWorkerMain(tf_config->cluster.coordinator[0].ToString(), tf_config->task.index, log_level, log_format == "json", startup_timeout,
                               conn, tf_config->cluster.Id());
    return CoordinatorMain(*tf_config, sweep_path, job_path, run_dir, bind, conn, log_level, log_format == "json", startup_timeout, reconnect_timeout);
  }

  tfd::KeepLargeAllocationsInHeap();
  const std::string task = standalone ? "standalone" : tf_config->task.ToString();
  tfd::SetupLogging(task, log_level);
  tfd::EventWriter events(stdout, task, log_format == "json");
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);

  tfd::config::JobSpec job;
  if (!job_path.empty()) {
    tfd::Result<tfd::config::JobSpec> loaded = tfd::config::LoadJobSpec(job_path);
    if (!loaded.ok()) return Fail(loaded.status(), events);
    job = std::move(loaded).value();
    if (job.ensemble.members > 0)
      return Fail(Status::InvalidArgument(job_path + ": ensemble: an ensemble trains one member per worker: run it with tfctl ensemble " + job_path), events);
    if (!standalone)
      if (Status c = tfd::config::CheckEvaluation(tf_config->cluster, job, job_path + ": "); !c.ok()) return Fail(c, events);
  }
  if (!summaries_dir.empty()) job.summaries.dir = summaries_dir;
  if (device_override) {
    job.device = device_flag;
    job.cuda_device = *device_override;
  }
  if (vm.count("gpu-memory-fraction")) job.gpu_memory_fraction = gpu_memory_fraction;
  // TensorBoard summaries: one folder per task under the summaries dir (a ps opens its own, with --summaries-dir only).
  std::unique_ptr<tfd::train::SummaryObserver> summaries;
  std::vector<tfd::train::TrainObserver*> observers;
  if (!is_ps && !is_evaluator && !job.summaries.dir.empty()) {
    tfd::Result<std::unique_ptr<tfd::train::SummaryObserver>> opened = tfd::train::SummaryObserver::Open(job.summaries, task);
    if (!opened.ok()) return Fail(opened.status(), events);
    summaries = std::move(opened).value();
    observers.push_back(summaries.get());
  }
  // Metrics: every sample is labelled with this task's job, index and run. The server goes first
  // at exit (declared last): its handler reads the registry.
  std::unique_ptr<tfd::metrics::Registry> registry;
  std::unique_ptr<tfd::metrics::TaskMetrics> task_metrics;
  std::unique_ptr<tfd::train::MetricsObserver> metrics_observer;
  std::shared_ptr<tfd::transport::PeerGuard> guard;  // the server's refusals, counted for the metrics
  std::atomic<const char*> phase{"starting"};
  std::unique_ptr<tfd::http::Server> metrics_server;
  if (metrics_address) {
    const std::string job_label = standalone ? "standalone" : std::string(tfd::config::TaskTypeName(tf_config->task.type));
    const std::string index_label = standalone ? "0" : std::to_string(tf_config->task.index);
    registry = std::make_unique<tfd::metrics::Registry>(tfd::metrics::Labels{{"job", job_label}, {"task", index_label}, {"run", run_name}});
    task_metrics = std::make_unique<tfd::metrics::TaskMetrics>(*registry);
    if (!is_ps && !is_evaluator) {
      task_metrics->AddTrainingMetrics();
      metrics_observer = std::make_unique<tfd::train::MetricsObserver>(*task_metrics);
    }
    const bool serves_peers = is_ps || (!standalone && (job.update.mode == tfd::config::UpdateSpec::Mode::kAllreduce ||
                                                        job.model_parallel.enabled()));  // a ps, a ring member
    if (serves_peers) {
      guard = std::make_shared<tfd::transport::PeerGuard>();
      task_metrics->AddRefusals([g = guard](std::size_t reason) {
        const tfd::transport::RefusalCounts c = g->counts();
        const std::uint64_t by_reason[] = {c.malformed, c.authentication, c.handshake_timeout, c.busy, c.mismatch};
        return by_reason[reason];
      });
    }
    tfd::Result<std::unique_ptr<tfd::http::Server>> server = tfd::http::Server::Start(
        metrics_address->first, metrics_address->second,
        [m = task_metrics.get(), task, &phase](const tfd::http::Request& req) { return ServeMetrics(req, *m, task, phase); });
    if (!server.ok()) return Fail(Status::InvalidArgument("--metrics: " + server.status().message()), events);
    metrics_server = std::move(server).value();
    spdlog::info("metrics on http://{}/metrics", metrics_server->address());
  }

  Status s;
  phase = "running";
  try {
  if (standalone) {
    tfd::train::StandaloneOptions sopts{.stop = &g_stop, .params_out = params_out, .observers = observers};
    if (metrics_observer != nullptr) sopts.observers.push_back(metrics_observer.get());
    s = tfd::train::RunStandalone(job, events, sopts);
  } else {
    tfd::transport::ConnectionOptions conn;
    conn.peer_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(peer_timeout * 1000));
    conn.heartbeat_interval = std::min(std::chrono::milliseconds(1000), conn.peer_timeout / 4);
    conn.token = token;
    conn.insecure = insecure;
    conn.guard = guard;  // null without metrics: RunPs and the ring then make their own
    if (is_evaluator) {
      tfd::evaluator::EvaluatorOptions options;
      options.stop = &g_stop;
      options.startup_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(startup_timeout * 1000));
      options.idle_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(idle_timeout * 1000));
      // Its scalars go to LOGDIR/eval/, TensorFlow's folder for them; its accuracy to the metrics.
      std::unique_ptr<tfd::evaluator::SummarySink> eval_summaries;
      std::unique_ptr<tfd::evaluator::MetricsSink> eval_metrics;
      if (!job.summaries.dir.empty()) {
        tfd::Result<std::unique_ptr<tfd::evaluator::SummarySink>> opened = tfd::evaluator::SummarySink::Open(job.summaries.dir);
        if (!opened.ok()) return Fail(opened.status(), events);
        eval_summaries = std::move(opened).value();
        options.sinks.push_back(eval_summaries.get());
      }
      if (task_metrics != nullptr) {
        eval_metrics = std::make_unique<tfd::evaluator::MetricsSink>(*task_metrics);
        options.sinks.push_back(eval_metrics.get());
      }
      s = tfd::evaluator::RunEvaluator(*tf_config, job, events, options);
    } else if (is_ps) {
      s = tfd::ps::RunPs(*tf_config, events,
                         {.bind_address = bind,
                          .connection = conn,
                          .stop = &g_stop,
                          .worker_return_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(reconnect_timeout * 1000)),
                          .startup_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(startup_timeout * 1000)),
                          .summaries_dir = summaries_dir,
                          .metrics = task_metrics.get()});
    } else {
      tfd::train::WorkerTaskOptions options;
      options.startup_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(startup_timeout * 1000));
      options.step_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(step_timeout * 1000));
      options.reconnect_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(reconnect_timeout * 1000));
      options.stop = &g_stop;
      options.params_out = params_out;
      options.bind_address = bind;
      options.shard_limit = shard_limit;
      options.observers = observers;
      options.metrics = task_metrics.get();
      if (metrics_observer != nullptr) options.observers.push_back(metrics_observer.get());
      if (job.model_parallel.enabled())
        s = tfd::pipeline::RunPipelineWorker(*tf_config, job, events, options, conn);
      else if (job.update.mode == tfd::config::UpdateSpec::Mode::kAllreduce)
        s = tfd::allreduce::RunAllreduceWorker(*tf_config, job, events, options, conn);
      else
        s = tfd::worker::RunWorker(*tf_config, job, events, options, conn);
    }
  }
  } catch (const std::bad_alloc&) {
    // A model, batch or layer list too large for this machine's memory.
    s = Status::InvalidArgument(fmt::format("{}: out of memory: the model or batch_size is too large for this machine", job_path));
  }
  phase = s.ok() ? "finished" : "failed";
  if (!s.ok()) return Fail(s, events);
  return 0;
}
