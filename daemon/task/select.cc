#include "daemon/task/select.h"

#include <fmt/format.h>

#include "common/config/slurm.h"

namespace tfd::task {
namespace {

Status Usage(std::string message) { return Status::InvalidArgument(std::move(message)); }

// A sweep's generic worker started by tfctl sweep: tfd --coordinator HOST:PORT --task_index N.
Result<TaskPlace> GenericWorkerOfFlags(const TaskFlags& f) {
  if (f.standalone || !f.job_path.empty() || !f.tf_config_path.empty() || !f.job_name.empty() || !f.sweep_path.empty() || !f.run_dir.empty() ||
      f.resume)
    return Usage("--coordinator takes no --job, --sweep, --run-dir, --resume, --standalone, --tf-config or --job_name: the coordinator hands out the jobs");
  Result<config::Endpoint> ep = config::ParseEndpoint(f.coordinator_address);
  if (!ep.ok()) return Usage(fmt::format("--coordinator: expected HOST:PORT, got \"{}\"", f.coordinator_address));
  if (f.task_index < 0) return Usage("--coordinator needs --task_index N (this worker's index)");
  TaskPlace place;
  place.role = Role::kGenericWorker;
  place.coordinator_host = ep->host;
  place.coordinator_port = ep->port;
  place.worker_index = f.task_index;
  place.name = fmt::format("worker:{}", f.task_index);
  return place;
}

// The cluster and this task in it: --slurm-ps, the seeds' flags, --tf-config or $TF_CONFIG.
Result<config::TfConfig> ClusterOf(const TaskFlags& f, const char* tf_config_env) {
  const bool flags_given = !f.job_name.empty() || f.task_index >= 0 || !f.ps_hosts.empty() || !f.worker_hosts.empty();
  if (f.slurm_ps) {
    if (flags_given || !f.tf_config_path.empty())
      return Usage("--slurm-ps takes the cluster from Slurm: no --standalone, cluster flags or --tf-config with it");
    return config::TfConfigFromSlurm(*f.slurm_ps, f.slurm_port_base.value_or(8888));
  }
  if (flags_given) {
    if (f.job_name.empty() || f.task_index < 0 || f.worker_hosts.empty())
      return Usage("--job_name, --task_index and --worker_hosts go together (and --ps_hosts for a ps cluster)");
    return config::TfConfigFromFlags(f.job_name, f.task_index, f.ps_hosts, f.worker_hosts);
  }
  if (!f.tf_config_path.empty()) return config::LoadTfConfig(f.tf_config_path);
  if (tf_config_env != nullptr && *tf_config_env != '\0') return config::ParseTfConfig(tf_config_env, "TF_CONFIG");
  return Usage("no task: set TF_CONFIG, or give --tf-config FILE, the --job_name/--task_index flags, or --standalone (see tfd --help)");
}

Role RoleOf(const config::TfConfig& tf) {
  switch (tf.task.type) {
    case config::TaskType::kPs: return Role::kPs;
    case config::TaskType::kEvaluator: return Role::kEvaluator;
    case config::TaskType::kCoordinator: return Role::kCoordinator;
    default: break;
  }
  // A worker of a cluster with a coordinator is a generic worker: the coordinator hands it its jobs.
  return tf.cluster.coordinator.empty() ? Role::kWorker : Role::kGenericWorker;
}

// The flags that only some roles take.
Status CheckFlagsFor(const TaskFlags& f, const TaskPlace& place) {
  const Role role = place.role;
  if (role == Role::kStandalone && f.shard_limit > 0) return Usage("--shard-limit: only for a worker in allreduce mode");
  if (f.idle_timeout && role != Role::kEvaluator) return Usage("--idle-timeout: only for an evaluator task");
  if (role == Role::kPs && f.device) return Usage("--device: a ps task trains nothing and never uses a GPU");
  if (role == Role::kPs && f.gpu_memory_fraction) return Usage("--gpu-memory-fraction: a ps task trains nothing and never uses a GPU");
  if (role != Role::kCoordinator) {
    const std::string who = role == Role::kStandalone ? "--standalone" : "this task (" + place.name + ")";
    if (!f.sweep_path.empty()) return Usage("--sweep: only for the coordinator task (TF_CONFIG task.type \"coordinator\"), not " + who);
    if (!f.run_dir.empty()) return Usage("--run-dir: only for the coordinator task (TF_CONFIG task.type \"coordinator\"), not " + who);
    if (f.resume) return Usage("--resume: only for the coordinator task (TF_CONFIG task.type \"coordinator\"), not " + who);
  } else {
    if (f.sweep_path.empty() && f.job_path.empty())
      return Usage("--sweep FILE is required for the coordinator task (or --job FILE of an ensemble job)");
    if (!f.sweep_path.empty() && !f.job_path.empty())
      return Usage("--sweep and --job: a coordinator task runs one sweep or one ensemble job, not both");
    if (f.run_dir.empty()) return Usage("--run-dir DIR is required for the coordinator task (its trials.jsonl, leaderboard.csv and best.json)");
    if (f.resume && f.sweep_path.empty()) return Usage("--resume: only a sweep (--sweep FILE) is resumed, not an ensemble job");
  }
  if (role == Role::kGenericWorker && !f.job_path.empty())
    return Usage(fmt::format("--job: {} is a worker of a cluster with a coordinator (cluster.coordinator): the coordinator hands out the jobs",
                             place.name));
  if ((role == Role::kStandalone || role == Role::kWorker || role == Role::kEvaluator) && f.job_path.empty())
    return Usage("--job FILE is required (see tfd --help)");
  return Status::Ok();
}

}  // namespace

Result<TaskPlace> SelectTask(const TaskFlags& f, const char* tf_config_env) {
  if (!f.coordinator_address.empty()) return GenericWorkerOfFlags(f);
  TaskPlace place;
  if (f.standalone) {
    if (f.slurm_ps) return Usage("--slurm-ps takes the cluster from Slurm: no --standalone, cluster flags or --tf-config with it");
    if (!f.job_name.empty() || f.task_index >= 0 || !f.ps_hosts.empty() || !f.worker_hosts.empty() || !f.tf_config_path.empty())
      return Usage("--standalone takes no cluster flags or --tf-config");
    place.role = Role::kStandalone;
    place.name = "standalone";
  } else {
    Result<config::TfConfig> tf = ClusterOf(f, tf_config_env);
    if (!tf.ok()) return Usage(tf.status().message());
    place.tf = std::move(tf).value();
    place.role = RoleOf(*place.tf);
    place.name = place.tf->task.ToString();
    if (place.role == Role::kGenericWorker) {
      const config::Endpoint& coordinator = place.tf->cluster.coordinator[0];
      place.coordinator_host = coordinator.host;
      place.coordinator_port = coordinator.port;
      place.worker_index = place.tf->task.index;
    }
  }
  TFD_RETURN_IF_ERROR(CheckFlagsFor(f, place));
  return place;
}

Result<std::shared_ptr<const transport::ClusterToken>> LoadToken(const TaskFlags& f, const TaskPlace& place) {
  std::shared_ptr<const transport::ClusterToken> token;
  // Standalone, a generic worker of tfctl sweep (on this host) and an evaluator talk to no peer of a cluster.
  if (!place.tf || place.role == Role::kEvaluator) return token;
  const std::string path = f.token_file.empty() ? place.tf->token_file : f.token_file;
  if (!path.empty()) {
    Result<transport::ClusterToken> read = transport::ClusterToken::ReadFile(path);
    if (!read.ok()) return Usage(read.status().message());
    return std::make_shared<const transport::ClusterToken>(std::move(read).value());
  }
  if (f.insecure) return token;
  for (config::TaskType t : config::kAllTypes)
    for (const config::Endpoint& ep : place.tf->cluster.Tasks(t))
      if (!ep.IsLoopback())
        return Usage(fmt::format("the cluster has tasks on other hosts ({} {}) and this task has no cluster token: give every task "
                                 "--token-file FILE (made once by tfctl gen-token FILE), or --insecure on a trusted network",
                                 config::TaskTypeName(t), ep.ToString()));
  return token;
}

}  // namespace tfd::task
