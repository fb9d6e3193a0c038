#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace tfd::config {

struct Endpoint {
  std::string host;  // name or address; IPv6 without brackets
  std::uint16_t port = 0;
  std::string ToString() const;  // "host:port" ("[::1]:port" for IPv6)
  // "localhost", 127.0.0.0/8 or ::1: this machine only, by name alone (nothing is resolved).
  bool IsLoopback() const;
  bool operator==(const Endpoint&) const = default;
};

// "host:port" or "[v6addr]:port", port in [1, 65535]. InvalidArgument describing what is wrong.
Result<Endpoint> ParseEndpoint(std::string_view text);

// kCoordinator: the coordinator of a sweep or ensemble (docs/sweeps.md); a cluster that has one
// has worker tasks beside it and nothing else.
enum class TaskType { kChief, kWorker, kPs, kEvaluator, kCoordinator };
inline constexpr TaskType kAllTypes[] = {TaskType::kChief, TaskType::kWorker, TaskType::kPs, TaskType::kEvaluator, TaskType::kCoordinator};
std::string_view TaskTypeName(TaskType t);

struct TaskId {
  TaskType type = TaskType::kWorker;
  int index = 0;
  std::string ToString() const;  // "worker:1"
  bool operator==(const TaskId&) const = default;
};

// TensorFlow's ClusterSpec, restricted to the job names TensorFlow knows, plus "coordinator".
struct ClusterSpec {
  std::vector<Endpoint> chief, worker, ps, evaluator;
  // At most one: the sweep's coordinator; the workers are then its generic workers.
  std::vector<Endpoint> coordinator;
  // An elastic job's joining worker lists the workers the run started with first, then those that
  // joined since: only the first `base_workers` entries of `worker` make the cluster id, so its
  // handshakes match the tasks started before it. -1: every entry (TF_CONFIG's "tfd.base_workers").
  int base_workers = -1;

  const std::vector<Endpoint>& Tasks(TaskType t) const;
  // Training workers in rank order: the chief (if any) first, then the workers.
  int num_workers() const { return static_cast<int>(chief.size() + worker.size()); }
  // The training workers the run started with (base_workers), or num_workers().
  int base_num_workers() const { return base_workers < 0 ? num_workers() : static_cast<int>(chief.size()) + base_workers; }
  // The rank of a chief or worker task among the training workers.
  int WorkerRank(const TaskId& task) const;
  TaskId WorkerTask(int rank) const;
  const Endpoint& EndpointOf(const TaskId& task) const;
  // A 64-bit fingerprint of the spec (SHA-256 of its canonical form): tasks of one cluster agree on it.
  std::uint64_t Id() const;
};

// TF_CONFIG: {"cluster": {...}, "task": {"type": ..., "index": ...}}, plus our extensions under
// "tfd". `rpc_layer` and `environment` are accepted and ignored.
struct TfConfig {
  ClusterSpec cluster;
  TaskId task;
  std::string token_file;  // "tfd": {"token_file": ...}, our extension; "" when absent
  bool is_chief() const { return task.type == TaskType::kChief || (task.type == TaskType::kWorker && task.index == 0 && cluster.chief.empty()); }
  const Endpoint& self() const { return cluster.EndpointOf(task); }
};

// Parses and validates TF_CONFIG text. `source` names it in errors ("TF_CONFIG" or a path); every
// error is InvalidArgument: `TF_CONFIG: cluster.worker[2]: "pc-03" has no port`.
Result<TfConfig> ParseTfConfig(std::string_view text, std::string_view source);
// ParseTfConfig of the file at `path` (tfd --tf-config); NotFound naming it when it cannot be read.
Result<TfConfig> LoadTfConfig(const std::string& path);
// The seeds' flags: --job_name, --task_index, --ps_hosts, --worker_hosts (comma-separated).
Result<TfConfig> TfConfigFromFlags(std::string_view job_name, int task_index, std::string_view ps_hosts,
                                   std::string_view worker_hosts);

// Whether `text` names task `task` ("worker:1"): "lost worker:1 (...)" does, "worker:10" does not.
bool MentionsTask(std::string_view text, std::string_view task);

}  // namespace tfd::config
