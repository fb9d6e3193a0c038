#include "launcher/plan.h"

#include <fmt/format.h>

namespace tfd::launcher {
namespace {

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

}  // namespace

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
  std::string jobs;
  for (config::TaskType t : {config::TaskType::kChief, config::TaskType::kWorker, config::TaskType::kPs, config::TaskType::kEvaluator}) {
    const auto& eps = cluster.Tasks(t);
    if (eps.empty()) continue;
    std::vector<std::string> items;
    for (const config::Endpoint& e : eps) items.push_back(JsonString(e.ToString()));
    jobs += fmt::format("{}{}:[{}]", jobs.empty() ? "" : ",", JsonString(config::TaskTypeName(t)), fmt::join(items, ","));
  }
  return fmt::format(R"({{"cluster":{{{}}},"task":{{"type":{},"index":{}}}}})", jobs, JsonString(config::TaskTypeName(task.type)),
                     task.index);
}

std::vector<TaskPlan> MakePlan(const config::ClusterFile& file, const PlanOptions& options) {
  std::vector<config::TaskId> order;
  for (int i = 0; i < static_cast<int>(file.cluster.ps.size()); ++i) order.push_back({config::TaskType::kPs, i});
  for (int r = 0; r < file.cluster.num_workers(); ++r) order.push_back(file.cluster.WorkerTask(r));
  std::vector<TaskPlan> plan;
  for (const config::TaskId& task : order) {
    TaskPlan p;
    p.task = task;
    p.host = file.cluster.EndpointOf(task).host;
    p.local = options.local_hosts.contains(p.host);
    p.tf_config = TfConfigFor(file.cluster, task);
    const config::HostLaunch& h = file.launch.For(p.host);
    std::vector<std::string> tfd = {h.tfd, "--log-format", "json"};
    if (task.type != config::TaskType::kPs) {
      tfd.push_back("--job");
      tfd.push_back(options.job_path);
    }
    if (p.local) {
      p.argv = tfd;
      p.workdir = h.workdir;
      p.env.push_back(fmt::format("TF_CONFIG={}", p.tf_config));
      for (const auto& [k, v] : file.launch.env) p.env.push_back(fmt::format("{}={}", k, v));
    } else {
      p.argv = {"ssh", "-o", "BatchMode=yes", "-o", fmt::format("ConnectTimeout={}", options.connect_timeout_secs),
                "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"};
      if (options.accept_new_hostkeys) p.argv.insert(p.argv.end(), {"-o", "StrictHostKeyChecking=accept-new"});
      if (h.ssh_port != 0) p.argv.insert(p.argv.end(), {"-p", std::to_string(h.ssh_port)});
      if (!h.ssh_identity.empty()) p.argv.insert(p.argv.end(), {"-i", h.ssh_identity});
      if (!h.ssh_user.empty()) p.argv.insert(p.argv.end(), {"-l", h.ssh_user});
      for (const std::string& o : h.ssh_options) p.argv.insert(p.argv.end(), {"-o", o});
      p.argv.push_back("--");
      p.argv.push_back(p.host);
      // One shell line on the remote side, every word quoted.
      std::string remote = fmt::format("cd {} && exec env TF_CONFIG={}", ShellQuote(h.workdir), ShellQuote(p.tf_config));
      for (const auto& [k, v] : file.launch.env) remote += fmt::format(" {}={}", k, ShellQuote(v));
      for (const std::string& w : tfd) remote += fmt::format(" {}", ShellQuote(w));
      p.argv.push_back(remote);
    }
    plan.push_back(std::move(p));
  }
  return plan;
}

}  // namespace tfd::launcher
