#pragma once

// tfctl's subcommands. Tfctl() picks one by its first word; each parses the rest of the command line
// with its own CommandLine (launcher/cli.h), prints its own messages (stdout for results, stderr for
// errors, one line each) and returns tfctl's exit code: 0 success, 1 a task, host or write failed, 2
// a bad file or usage, 130 after Ctrl-C.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/config/cluster_file.h"
#include "launcher/plan.h"

namespace tfd::launcher {

// How up learns of Ctrl-C and TERM: `handler` (main's, async-signal-safe) sets `flag`; up installs it
// for SIGINT and SIGTERM in the process that runs the cluster (with --detach, the background one).
struct Interrupts {
  const std::atomic<int>* flag = nullptr;
  void (*handler)(int) = nullptr;
};

// tfctl with `args`, the words after "tfctl": help, or the subcommand args[0] names with the rest.
// A command line it cannot use is one line on stderr ("tfctl: --grace: expected a number of seconds
// in [0, 3600], got "5s" (see tfctl --help)"; a JSON line for up --log-format json) and exit 2,
// before anything is read or started.
int Tfctl(const std::vector<std::string>& args, const Interrupts& interrupts);

// help: the usage text, on stdout (exit 0) when asked for, on stderr (exit 2) when tfctl got no
// arguments at all.
int Help(bool asked);
// `tfctl COMMAND --help` (or -h, or tfctl help COMMAND): the usage's entries for COMMAND on stdout,
// exit 0. Returns -1, printing nothing, for a command the usage does not list.
int CommandHelp(std::string_view command);
// Prints "tfctl: <message> (see tfctl --help)" on stderr (with `json`, as a JSON line: runner.h's
// Say) and returns 2.
int UsageError(const std::string& message, bool json = false);
// Prints "tfctl: <s's message>" on stderr (with `json`, a JSON line) and returns ExitCodeFor(s): 2
// for a bad file or field, else 1.
int ReportFailure(const Status& s, bool json = false);

// gen-token FILE: a new cluster token in a new file of mode 0600; 1 when it cannot be written.
int GenToken(const std::vector<std::string>& args);

// --grace SECS (up, validate, chaos, sweep, ensemble) is a plain number of seconds from 0 to this.
inline constexpr double kMaxGraceSecs = 3600;

// The command line of up and validate.
struct ClusterArgs {
  std::string file;              // the cluster file
  std::string run_dir_override;  // --run-dir; empty: the file's launch.run_dir
  double grace_secs = 10;        // --grace SECS: TERM, then KILL after this long
  bool accept_new_hostkeys = false;
  bool detach = false;  // up --detach
  std::string dashboard;  // up --dashboard [ADDR:]PORT; empty: none
  bool json_output = false;  // up --log-format json: JSON lines only on stdout and stderr
};
// The words after "up" or "validate" (`command`); InvalidArgument with a one-line message
// (launcher/cli.h) for a flag the command does not take, a bad value, or no cluster file.
Result<ClusterArgs> ParseClusterArgs(std::string_view command, const std::vector<std::string>& args);

// validate: the file, then every host (validate's checks below); starts nothing.
int Validate(const ClusterArgs& args);
struct Injection;  // runner.h

// up: validate's checks, a new run folder, every task started and watched until all are done (see
// Run in runner.h), then report.html and curves.svg written into the run folder (launcher/report.h;
// a failure to write them is a warning). With args.dashboard the run is served at that address
// (launcher/dashboard.h) from before the first task starts until 2 s after the last ends. With args.detach the run goes on in a background tfctl (its output in the run
// folder's tfctl.log) and this returns once every worker is ready. With `fault` (tfctl chaos; not
// with detach) Run sends it and observes (a failed task does not stop the others); `run_dir`, when
// given, gets the run folder once it exists (else it stays empty).
int Up(const ClusterArgs& args, const Interrupts& interrupts, Injection* fault = nullptr, std::filesystem::path* run_dir_out = nullptr);

// chaos RUN|CLUSTER.json --kill ROLE[:INDEX] --at EVENT[:N] ...: a fault sent to one task of a live
// run (a run folder) or of a run it starts as up does, then a report of what each task did and
// whether the run kept tfd's promise (launcher/chaos.h). 0 kept, 1 not kept, 2 bad input, 130 Ctrl-C.
int Chaos(const std::vector<std::string>& args, const Interrupts& interrupts);

// report RUN: RUN/report.html and RUN/curves.svg from the run folder's files, during or after the
// run (0); 2 naming the file when one is missing or bad; 1 when they cannot be written.
int Report(const std::vector<std::string>& args);
// dashboard RUN [--port [ADDR:]PORT]: serves a run folder's dashboard (what its files say) until
// SIGINT or SIGTERM, then 0; 2 for a bad folder or address, 1 when it cannot be bound.
int ServeDashboard(const std::vector<std::string>& args, const Interrupts& interrupts);

// The command line of slurm.
struct SlurmArgs {
  int port_base = 8888;                     // --port-base: tfd's --slurm-port-base
  std::vector<std::string> sbatch_options;  // --sbatch OPTION, each an extra #SBATCH line
  std::string file;                         // the cluster file
  bool submit = false;                      // --submit
};
// The words after "slurm"; InvalidArgument with a one-line message (launcher/cli.h).
Result<SlurmArgs> ParseSlurmArgs(const std::vector<std::string>& args);
// slurm CLUSTER.json [--submit] [--port-base P] [--sbatch OPTION]...: prints the sbatch script of
// SlurmScript; with --submit writes it to the run root as NAME.sbatch and runs sbatch on it (1 when
// sbatch fails, with its last words). 2 for a bad file or usage.
int Slurm(const std::vector<std::string>& args);
// The sbatch script of cluster file `f`: its ps and worker counts as --ntasks, one srun step of
// tfd --slurm-ps, a new token and the job file written into the run folder. The cluster's host
// names and ports are not used (Slurm picks the nodes). InvalidArgument naming the file for a
// cluster with an evaluator.
Result<std::string> SlurmScript(const config::ClusterFile& f, const SlurmArgs& args);

// scale RUN --workers N: N training workers in the live run RUN (a run folder of up, detached or
// not) of an elastic ps-mode job: its tfctl starts workers (new ranks, which join as docs/
// operations.md's "Elastic runs" describes) or stops the highest-ranked ones (launcher/scale.h);
// with new workers, this returns once they are ready. 2, starting nothing, for a folder that does
// not exist, a job that is not elastic, N outside min_workers..max_workers, or a run that is over;
// 1 when the run's tfctl does not answer or a new worker is not ready within launch.start_timeout.
int Scale(const std::vector<std::string>& args);

// status, logs and down act on a run folder: RUN when given (a folder holding cluster.json; status
// and down refuse any other word, exit 2), else the newest folder under ./runs. For logs a first word
// that is not a run folder is the TASK.
int ShowStatus(const std::vector<std::string>& args);  // each task's last event; running or finished
int ShowLogs(const std::vector<std::string>& args);    // [TASK] [-f]: every task's log lines, or one task's
int Down(const std::vector<std::string>& args);        // TERM to the run's tfctl, which stops its tasks

// The command line of sweep.
struct SweepArgs {
  std::string file;             // the sweep file (docs/sweeps.md)
  std::string run_root = "runs";  // --run-dir: the run folder is made under it
  std::string tfd;              // --tfd: the tfd binary; empty: beside tfctl, else from PATH
  int workers = 0;              // --workers N (1 to 4096): overrides the file's "workers"
  double grace_secs = 10;       // --grace SECS: after Ctrl-C, how long trials get to stop before TERM
  bool ensemble = false;        // tfctl ensemble: `file` is a job with "ensemble"; trials are its members
  std::string resume;           // --resume RUN: go on with the sweep in the run folder RUN (`file` may be empty)
  bool no_metrics = false;      // --no-metrics: the workers get no --metrics (default: a free port on 127.0.0.1 each)
};
// The words after "sweep" (or "ensemble", `ensemble` true); InvalidArgument with a one-line message
// (launcher/cli.h).
Result<SweepArgs> ParseSweepArgs(bool ensemble, const std::vector<std::string>& args);
// sweep SWEEP.json: tfctl is the coordinator (daemon/coordinator) of a hyper-parameter sweep run by
// generic tfd workers on this machine; a live leaderboard, then the run folder's trials.jsonl,
// leaderboard.csv and best.json. 0 when a best trial was found, 1 when none reported the objective,
// 2 for a bad sweep file, 130 after Ctrl-C (what was written is kept, leaderboard and best too).
// ensemble JOB.json is the same with the job's members as trials: each epoch the coordinator
// averages their test softmax (ensemble_test_accuracy; a regression's outputs: ensemble_test_mae),
// and ensemble.json and predictions/ are written too.
int Sweep(const SweepArgs& args, const Interrupts& interrupts);

// Pieces of the commands, declared for tests.

// A run as up and validate plan it; nothing is created yet.
struct RunSetup {
  config::ClusterFile file;
  std::filesystem::path run_dir;  // absolute: <run root>/<local time>-<name>
  PlanOptions options;
  std::vector<TaskPlan> plan;
};
// Loads args.file and plans each task. `token_hex` empty: no token (validate). InvalidArgument (or
// NotFound), so exit code 2, naming the file or field when it cannot be loaded.
Result<RunSetup> SetUpRun(const ClusterArgs& args, const std::string& token_hex);

// The checks up makes before starting anything: on this machine the workdir, tfd and data folder of
// each local task and that each local ps port is free; over ssh (a check command on each remote
// host) the same for remote hosts. InvalidArgument naming the field and host, or Unavailable with
// ssh's last line when a host cannot be reached.
Status CheckCluster(const RunSetup& run);

// "c.json: 1 ps + 2 workers; mlp on data, 3 epochs, batch 20 per worker, sync updates".
std::string Describe(const config::ClusterFile& f);

// One line when the evaluator runs on another host than the chief (their checkpoint folder must
// then be shared), else "".
std::string SharedFolderNote(const RunSetup& run);

// Whether host:port can be bound on this machine now (binds it for a moment); true for a host that
// is not an IP address.
bool PortFree(const std::string& host, std::uint16_t port);

// `n` ports of 127.0.0.1 that were free a moment ago, all different (each stays bound until every
// one is chosen); 0 for one that could not be had.
std::vector<int> FreeLoopbackPorts(int n);

// The number of workers (not ps tasks) whose `ready` event is in run_dir/metrics.jsonl.
int ReadyWorkers(const std::filesystem::path& run_dir);

}  // namespace tfd::launcher
