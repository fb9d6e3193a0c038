#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/config/cluster.h"
#include "common/config/job.h"

namespace tfd::config {

// How tfctl reaches one host: where tfd is, where it runs, and the ssh settings for remote hosts.
struct HostLaunch {
  enum class Via { kAuto, kLocal, kSsh };
  Via via = Via::kAuto;                  // auto: a child for loopback names, ssh otherwise
  std::string tfd = "build/daemon/tfd";  // path of the tfd binary on that host
  std::string workdir = ".";             // folder the task runs in (relative paths in the job resolve there)
  std::string ssh_user;                  // empty: ssh's default
  int ssh_port = 0;                      // 0: ssh's default
  std::string ssh_identity;              // -i FILE; empty: ssh's default
  std::vector<std::string> ssh_options;  // extra -o OPTION=VALUE entries
};

// "launch.timeouts": seconds handed to every task as tfd's --peer-timeout, --reconnect-timeout,
// --startup-timeout and --step-timeout; 0 leaves tfd's own default (the k*Default* below).
struct TaskTimeouts {
  // tfd's defaults for --peer-timeout, --reconnect-timeout, --startup-timeout and --step-timeout.
  static constexpr double kPeerDefault = 8, kReconnectDefault = 60, kStartupDefault = 120, kStepDefault = 300;
  double peer_secs = 0, reconnect_secs = 0, startup_secs = 0, step_secs = 0;  // 0: tfd's default
  double PeerOrDefault() const { return peer_secs > 0 ? peer_secs : kPeerDefault; }
  double ReconnectOrDefault() const { return reconnect_secs > 0 ? reconnect_secs : kReconnectDefault; }
  double StartupOrDefault() const { return startup_secs > 0 ? startup_secs : kStartupDefault; }
};

// "launch.metrics": whether tfctl gives each task --metrics, and on which port. false turns it off;
// true (the default) gives each local task a free port on 127.0.0.1 and remote tasks none;
// {"port_base": P} gives the k-th task of the plan (ps tasks, then workers by rank) port P + k on
// every host (remote tasks listen on every interface, local ones on 127.0.0.1).
struct MetricsLaunch {
  bool enabled = true;
  int port_base = 0;  // 0: free ports for local tasks only
};

// "launch.tasks": {"worker:1": {"device": "cuda:0", "gpu_memory_fraction": 0.5}}: one training task's
// placement, handed to it as tfd's --device and --gpu-memory-fraction (empty / 0: the job's).
struct TaskLaunch {
  std::string device;
  double gpu_memory_fraction = 0;
};

struct LaunchSpec {
  HostLaunch defaults;
  std::map<std::string, HostLaunch> hosts;  // per-host overrides, complete after parsing
  std::map<std::string, std::string> env;   // extra environment for every task
  std::string run_dir = "runs";             // where tfctl writes run folders
  double start_timeout_secs = 30;           // how long tasks may take to come up
  // "restart": {"ps": "on-failure", ...}: tfctl starts a task of these roles again when it fails
  // (not on exit 2, a bad configuration), at most max_restarts times each.
  std::set<TaskType> restart_on_failure;
  int max_restarts = 3;
  TaskTimeouts timeouts;
  MetricsLaunch metrics;
  std::map<std::string, TaskLaunch> tasks;  // by task name ("worker:1"), training tasks only

  const HostLaunch& For(const std::string& host) const;
};

// tfctl's cluster file: the cluster (as TF_CONFIG has it), what to train, and how to launch it.
struct ClusterFile {
  std::string name;  // names the run folder; defaults to the file's base name
  ClusterSpec cluster;
  JobSpec train;
  std::string train_json;  // the "train" object as JSON text: the job file tfctl hands each worker
  LaunchSpec launch;
  std::string source;  // the file it came from
};

// Parses and validates a cluster file; every error is InvalidArgument naming `source` and the JSON
// path (`cluster.json: launch.hosts.pc-02.ssh.port: expected an integer in [1, 65535], got 0`).
Result<ClusterFile> ParseClusterFile(std::string_view text, std::string_view source);
Result<ClusterFile> LoadClusterFile(const std::string& path);

// The GPU memory the training tasks ask for, per host and GPU: tasks sharing one GPU ("cuda:N" on
// one host, after launch.tasks' overrides) must ask for fractions summing to at most 1.
// InvalidArgument "WHERE...: the tasks on HOST cuda:N (worker:0 0.6, worker:1 0.6) ask for 1.2 ...".
Status CheckGpuShares(const ClusterSpec& cluster, const JobSpec& job, const std::map<std::string, TaskLaunch>& tasks,
                      std::string_view where);

// Every event name tfd writes (tfd --log-format json); docs/config.md describes each.
inline constexpr std::string_view kEventNames[] = {
    "start",     "ready",      "step",  "epoch",         "checkpoint", "checkpoint_start", "restored", "resumed", "done", "worker_done",
    "peer_lost", "peer_rejoined", "quorum", "gave_up", "run_ended", "early_stopping", "eval", "error",
    "membership", "share", "stage", "peer_done"};
bool IsEventName(std::string_view name);

// One JSON event line of a task (tfd --log-format json): its name, and its number and string fields.
struct Event {
  std::string task, event;
  std::map<std::string, double> numbers;
  std::map<std::string, std::string> strings;
  double Number(const std::string& key, double fallback = -1) const {
    auto it = numbers.find(key);
    return it == numbers.end() ? fallback : it->second;
  }
};
// InvalidArgument when the line is not a JSON object with "event".
Result<Event> ParseEvent(std::string_view line);

}  // namespace tfd::config
