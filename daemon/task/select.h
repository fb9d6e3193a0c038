#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/base/status.h"
#include "common/config/cluster.h"
#include "common/transport/auth.h"
#include "daemon/task/flags.h"

namespace tfd::task {

// What a tfd process is. A training worker's kind (ps modes, allreduce, pipeline stage) is the
// job's to say, once it is read.
enum class Role { kStandalone, kPs, kWorker, kEvaluator, kCoordinator, kGenericWorker };

// This process's place: its role, its cluster (none standalone, nor for a sweep's generic worker
// started with --coordinator), its name in logs and events ("worker:1", "standalone").
struct TaskPlace {
  Role role = Role::kStandalone;
  std::optional<config::TfConfig> tf;  // the cluster and this task in it
  std::string name;
  // A generic worker: the coordinator to ask for trials, and this worker's index there.
  std::string coordinator_host;
  std::uint16_t coordinator_port = 0;
  int worker_index = -1;
};

// Chooses the task from the flags, else $TF_CONFIG (`tf_config_env`, null when unset): --coordinator,
// --slurm-ps, --standalone, the seeds' flags, --tf-config FILE or TF_CONFIG, in that order, and
// checks that every flag given is one this role takes. InvalidArgument, one line naming the flag or
// TF_CONFIG field, otherwise (exit 2).
Result<TaskPlace> SelectTask(const TaskFlags& flags, const char* tf_config_env);

// The cluster token of a role that talks to peers, from --token-file or TF_CONFIG's tfd.token_file;
// null without one. Without a token a cluster with tasks on other hosts is refused unless
// --insecure says the network is trusted (InvalidArgument naming the first such task).
Result<std::shared_ptr<const transport::ClusterToken>> LoadToken(const TaskFlags& flags, const TaskPlace& place);

}  // namespace tfd::task
