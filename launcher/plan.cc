#include "launcher/plan.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/config/json_writer.h"

namespace tfd::launcher {

std::string ShellQuote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

std::string TfConfigFor(const config::ClusterSpec& cluster, const config::TaskId& task) {
  nlohmann::ordered_json jobs = nlohmann::ordered_json::object();
  for (config::TaskType t : {config::TaskType::kChief, config::TaskType::kWorker, config::TaskType::kPs, config::TaskType::kEvaluator}) {
    const auto& eps = cluster.Tasks(t);
    if (eps.empty()) continue;
    nlohmann::ordered_json& list = jobs[std::string(config::TaskTypeName(t))] = nlohmann::ordered_json::array();
    for (const config::Endpoint& e : eps) list.push_back(e.ToString());
  }
  nlohmann::ordered_json tf = {{"cluster", std::move(jobs)}, {"task", {{"type", config::TaskTypeName(task.type)}, {"index", task.index}}}};
  if (cluster.base_workers >= 0) tf["tfd"] = {{"base_workers", cluster.base_workers}};
  return config::CompactJson(tf);
}

config::ClusterFile WithWorkers(const config::ClusterFile& file, int num_workers) {
  config::ClusterFile grown = file;
  config::ClusterSpec& c = grown.cluster;
  if (num_workers <= c.num_workers()) return grown;
  if (c.base_workers < 0) c.base_workers = static_cast<int>(c.worker.size());
  config::Endpoint next = c.worker.empty() ? c.chief.back() : c.worker.back();
  while (c.num_workers() < num_workers) {
    next.port = static_cast<std::uint16_t>(next.port < 65535 ? next.port + 1 : 1024);
    c.worker.push_back(next);
  }
  return grown;
}

std::string TargetsJson(const std::vector<TaskPlan>& plan, const std::string& run_name) {
  nlohmann::ordered_json targets = nlohmann::ordered_json::array();
  for (const TaskPlan& p : plan) {
    if (p.metrics_target.empty()) continue;
    targets.push_back({{"targets", {p.metrics_target}},
                       {"labels", {{"job", config::TaskTypeName(p.task.type)}, {"task", std::to_string(p.task.index)}, {"run", run_name}}}});
  }
  return config::JsonText(targets, /*open_levels=*/1) + "\n";
}

std::vector<std::string> SshArgv(const config::HostLaunch& h, const std::string& host, const PlanOptions& options,
                                 const std::string& remote_command) {
  std::vector<std::string> argv = {"ssh", "-o", "BatchMode=yes", "-o", fmt::format("ConnectTimeout={}", options.connect_timeout_secs),
                                   "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"};
  if (options.accept_new_hostkeys) argv.insert(argv.end(), {"-o", "StrictHostKeyChecking=accept-new"});
  if (h.ssh_port != 0) argv.insert(argv.end(), {"-p", std::to_string(h.ssh_port)});
  if (!h.ssh_identity.empty()) argv.insert(argv.end(), {"-i", h.ssh_identity});
  if (!h.ssh_user.empty()) argv.insert(argv.end(), {"-l", h.ssh_user});
  for (const std::string& o : h.ssh_options) argv.insert(argv.end(), {"-o", o});
  argv.push_back("--");
  argv.push_back(host);
  argv.push_back(remote_command);
  return argv;
}

std::vector<TaskPlan> MakePlan(const config::ClusterFile& file, const PlanOptions& options) {
  std::vector<config::TaskId> order;
  for (int i = 0; i < static_cast<int>(file.cluster.ps.size()); ++i) order.push_back({config::TaskType::kPs, i});
  const int base = file.cluster.base_num_workers();
  for (int r = 0; r < base; ++r) order.push_back(file.cluster.WorkerTask(r));
  for (int i = 0; i < static_cast<int>(file.cluster.evaluator.size()); ++i) order.push_back({config::TaskType::kEvaluator, i});
  for (int r = base; r < file.cluster.num_workers(); ++r) order.push_back(file.cluster.WorkerTask(r));
  std::vector<TaskPlan> plan;
  const config::MetricsLaunch& metrics = file.launch.metrics;
  for (const config::TaskId& task : order) {
    const std::size_t place = plan.size();
    TaskPlan p;
    p.task = task;
    p.host = file.cluster.EndpointOf(task).host;
    const config::HostLaunch& h = file.launch.For(p.host);
    p.local = h.via == config::HostLaunch::Via::kLocal ||
              (h.via == config::HostLaunch::Via::kAuto && options.local_hosts.contains(p.host));
    p.tf_config = TfConfigFor(file.cluster, task);
    if (file.launch.restart_on_failure.contains(task.type)) p.max_restarts = file.launch.max_restarts;
    std::vector<std::string> tfd = {h.tfd, "--log-format", "json"};
    const config::TaskTimeouts& to = file.launch.timeouts;
    for (auto [flag, secs] : {std::pair{"--peer-timeout", to.peer_secs}, {"--reconnect-timeout", to.reconnect_secs},
                              {"--startup-timeout", to.startup_secs}, {"--step-timeout", to.step_secs}})
      if (secs > 0) tfd.insert(tfd.end(), {flag, fmt::format("{}", secs)});
    if (!options.run_name.empty()) tfd.insert(tfd.end(), {"--run-name", options.run_name});
    if (auto placed = file.launch.tasks.find(task.ToString()); placed != file.launch.tasks.end()) {
      if (!placed->second.device.empty()) tfd.insert(tfd.end(), {"--device", placed->second.device});
      if (placed->second.gpu_memory_fraction > 0)
        tfd.insert(tfd.end(), {"--gpu-memory-fraction", fmt::format("{}", placed->second.gpu_memory_fraction)});
    }
    // Metrics: a fixed port on every host from port_base, else the free port found for a local task.
    int metrics_port = 0;
    if (metrics.enabled && metrics.port_base > 0) metrics_port = metrics.port_base + static_cast<int>(place);
    else if (metrics.enabled && p.local && place < options.metrics_ports.size()) metrics_port = options.metrics_ports[place];
    if (metrics_port > 0) {
      tfd.insert(tfd.end(), {"--metrics", fmt::format("{}:{}", p.local ? "127.0.0.1" : "", metrics_port)});
      p.metrics_target = fmt::format("{}:{}", p.local ? "127.0.0.1" : p.host, metrics_port);
    }
    // The trained model goes into the run folder unless the job names its own export.dir; only
    // the chief writes it (the daemon decides), so every training task gets the flag.
    const bool trains = task.type == config::TaskType::kChief || task.type == config::TaskType::kWorker;
    const bool export_here = trains && file.train.export_model.dir.empty();
    if (p.local) {
      if (task.type != config::TaskType::kPs) tfd.insert(tfd.end(), {"--job", options.job_path});
      if (!options.token_path.empty()) tfd.insert(tfd.end(), {"--token-file", options.token_path});
      if (!options.run_dir.empty()) tfd.insert(tfd.end(), {"--summaries-dir", options.run_dir});
      if (export_here && !options.run_dir.empty()) tfd.insert(tfd.end(), {"--export-dir", options.run_dir + "/model"});
      p.argv = tfd;
      p.workdir = h.workdir;
      p.env.push_back(fmt::format("TF_CONFIG={}", p.tf_config));
      for (const auto& [k, v] : file.launch.env) p.env.push_back(fmt::format("{}={}", k, v));
      plan.push_back(std::move(p));
      continue;
    }
    // One shell line on the remote host, every word quoted: write the job into the task's run
    // folder, start tfd in its own session (pid file beside it), and stop that session when this
    // ssh's stdin closes (tfctl gone, even by kill -9); the line's status is tfd's. (A background
    // job's stdin is /dev/null in a shell without job control, hence ssh's stdin kept on fd 3.)
    const std::string dir = ShellQuote(options.remote_run_dir);
    const std::string name = task.ToString();
    if (task.type != config::TaskType::kPs) tfd.insert(tfd.end(), {"--job", options.remote_run_dir + "/job.json"});
    if (!options.remote_run_dir.empty()) tfd.insert(tfd.end(), {"--summaries-dir", options.remote_run_dir});
    if (export_here && !options.remote_run_dir.empty()) tfd.insert(tfd.end(), {"--export-dir", options.remote_run_dir + "/model"});
    // The token comes first on ssh's stdin, one line, into a file only its owner can read.
    std::string take_token;
    if (!options.token_hex.empty()) {
      tfd.insert(tfd.end(), {"--token-file", options.remote_run_dir + "/token"});
      take_token = fmt::format("( umask 077 && IFS= read -r t && printf '%s\\n' \"$t\" > {}/token ) && ", dir);
      p.stdin_data = options.token_hex + "\n";
    }
    std::string start = fmt::format("env TF_CONFIG={}", ShellQuote(p.tf_config));
    for (const auto& [k, v] : file.launch.env) start += fmt::format(" {}={}", k, ShellQuote(v));
    start += " setsid";
    for (const std::string& w : tfd) start += fmt::format(" {}", ShellQuote(w));
    const std::string remote = fmt::format(
        "cd {workdir} && mkdir -p {dir} && printf '%s\\n' {job} > {dir}/job.json && {take_token}exec 3<&0 && "
        "{{ {start} </dev/null 3<&- & pid=$!; echo $pid > {dir}/{pidfile}; "
        "( cat <&3 >/dev/null; kill -TERM -$pid 2>/dev/null; sleep 5; kill -KILL -$pid 2>/dev/null ) >/dev/null 2>&1 & "
        "wait $pid; }}",
        fmt::arg("workdir", ShellQuote(h.workdir)), fmt::arg("dir", dir), fmt::arg("job", ShellQuote(options.job_json)),
        fmt::arg("start", start), fmt::arg("pidfile", ShellQuote(name + ".pid")), fmt::arg("take_token", take_token));
    p.argv = SshArgv(h, p.host, options, remote);
    p.workdir = h.workdir;
    p.ssh.assign(p.argv.begin(), p.argv.end() - 1);
    plan.push_back(std::move(p));
  }
  return plan;
}

}  // namespace tfd::launcher
