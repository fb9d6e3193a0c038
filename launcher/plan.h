#pragma once

#include <set>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/config/cluster_file.h"

namespace tfd::launcher {

// How to start one task: pure data, built from the cluster file without touching any host.
struct TaskPlan {
  config::TaskId task;
  std::string host;
  bool local = true;              // a child of tfctl (else reached through ssh)
  std::vector<std::string> argv;  // executed as is: no shell on this side
  std::vector<std::string> env;   // NAME=value added to a local child's environment
  std::string workdir;            // its working folder on its host (a local child starts in it; a remote task's line cds into it)
  std::string tf_config;          // this task's TF_CONFIG
  std::string stdin_data;         // written to a remote task's ssh first: the run's token, never on a command line
  int max_restarts = 0;           // times tfctl starts it again after a failure (launch.restart)
  std::vector<std::string> ssh;   // a remote task: SshArgv's words before the remote command; empty for a local one
  std::string metrics_target;     // where Prometheus scrapes it ("127.0.0.1:9400", "pc-02:9401"); empty: no --metrics
};

struct PlanOptions {
  std::string job_path;          // where the job spec is written for local tasks
  // A local task's run folder: its --summaries-dir, and RUN/model its --export-dir where it trains
  // and the job sets no export.dir (none of these when empty).
  std::string run_dir;
  std::string remote_run_dir;    // a remote task's run folder, relative to its workdir (its --summaries-dir, and RUN/model as above)
  std::string job_json;          // the job spec, written into remote_run_dir by each remote task
  // The run's cluster token: local tasks read token_path (mode 0600); a remote task reads token_hex
  // from its ssh's stdin into a 0600 file in its run folder. Empty: no token (tfctl validate).
  std::string token_path;
  std::string token_hex;
  std::set<std::string> local_hosts = {"127.0.0.1", "localhost", "::1"};
  bool accept_new_hostkeys = false;
  int connect_timeout_secs = 10;
  // Every task's --run-name (the run folder's name); empty: none.
  std::string run_name;
  // Without launch.metrics.port_base: the metrics port of each task, in plan order (free ports that
  // SetUpRun found; remote tasks' entries are not used). Empty: no task gets --metrics.
  std::vector<int> metrics_ports;
};

// ps tasks first, then the chief and the workers in rank order, then the evaluator, then the workers
// that joined an elastic run (ranks from cluster.base_num_workers(); their TF_CONFIG carries
// tfd.base_workers), so a task's place, and its metrics port, do not move when workers join.
std::vector<TaskPlan> MakePlan(const config::ClusterFile& file, const PlanOptions& options);

// The run's Prometheus file-SD targets: [{"targets": ["HOST:PORT"], "labels": {"job": "worker",
// "task": "0", "run": RUN}}, ...] for every task with a metrics_target, one target a line
// (config::JsonText).
std::string TargetsJson(const std::vector<TaskPlan>& plan, const std::string& run_name);

// The TF_CONFIG of one task of `cluster` (with "tfd": {"base_workers"} when cluster.base_workers is
// set), as compact JSON (config::CompactJson); config::ParseTfConfig reads it back.
std::string TfConfigFor(const config::ClusterSpec& cluster, const config::TaskId& task);

// `file` with cluster.worker grown to `num_workers` training workers for an elastic run (tfctl
// scale): the run's workers first (cluster.base_workers counts them), then one endpoint per new rank
// on the last worker's host, its port plus one each (a ps-mode worker listens on none, so the
// endpoint names the task; nothing binds it). `file` itself when it already has that many.
config::ClusterFile WithWorkers(const config::ClusterFile& file, int num_workers);

// The ssh argv that runs `remote_command` on `host` with `h`'s settings (BatchMode, a connect
// timeout, keep-alives; host keys checked unless `accept_new_hostkeys`).
std::vector<std::string> SshArgv(const config::HostLaunch& h, const std::string& host, const PlanOptions& options,
                                 const std::string& remote_command);

// Quotes `s` for a POSIX shell: 'it'\''s' (ssh joins the remote words into one shell line).
std::string ShellQuote(std::string_view s);

}  // namespace tfd::launcher
