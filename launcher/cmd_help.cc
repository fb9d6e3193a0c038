#include <cstdio>
#include <string>
#include <string_view>

#include "launcher/commands.h"
#include "launcher/runner.h"

namespace tfd::launcher {
namespace {

constexpr const char* kUsage = R"(tfctl: start a tfd cluster and watch it train.

Usage:
  tfctl up CLUSTER.json [--run-dir DIR] [--grace SECS] [--accept-new-hostkeys]
        start every task (a child for this machine, ssh for other hosts), stream their logs,
        show a table of the workers, write a run folder
  tfctl up CLUSTER.json --detach ...
        the same, returning once every worker is ready; the run goes on in the background
  tfctl up CLUSTER.json --dashboard [ADDR:]PORT ...
        also serve a live dashboard of the run (default address 127.0.0.1; port 0: a free one; the
        URL is printed on stderr); it ends 2 s after the run (not with --detach)
  tfctl up CLUSTER.json --log-format json ...
        nothing but JSON lines on stdout and stderr: the tasks' events, log lines and tfctl's messages
  tfctl validate CLUSTER.json [--accept-new-hostkeys]
        check the file and every host (ssh, tfd, data, ports); start nothing
  tfctl status [RUN]            each task's last event (RUN: a run folder; default the newest in ./runs)
  tfctl logs [RUN] [TASK] [-f]  the tasks' log lines (-f: follow while the run goes on)
  tfctl down [RUN]              stop a run: TERM every task, KILL after the grace period
  tfctl scale RUN --workers N   an elastic ps-mode run's workers: start new ones (back once they are
                                ready) or stop the highest-ranked, within min_workers..max_workers
  tfctl report RUN              write RUN/report.html (tasks, job, curves; opens offline) and
                                RUN/curves.svg, during or after a run (up writes them at its end)
  tfctl dashboard RUN [--port [ADDR:]PORT]
                                serve RUN's dashboard (a finished or detached run) until Ctrl-C
  tfctl slurm CLUSTER.json [--submit] [--port-base P] [--sbatch OPTION]...
        print an sbatch script that runs the file's ps and workers as one srun step of
        tfd --slurm-ps (--submit: write it into the run folder and run sbatch on it)
  tfctl gen-token FILE          write a new cluster token (mode 0600) for tfd --token-file
  tfctl chaos RUN|CLUSTER.json --kill ROLE[:INDEX] --at EVENT[:N] [--from TASK]
        [--signal kill|term | --stop SECS] [--then-kill ROLE[:INDEX] [--then-after SECS]] [--deadline SECS]
  tfctl chaos CLUSTER.json --grow N --at EVENT[:N] [--from TASK] [--deadline SECS]
        send a fault to one task (ps, chief, worker[:INDEX]) at the Nth EVENT of --from (default the
        task itself), of a live run (RUN, a run folder) or of a new run started as up starts one (a
        failed task does not stop the others); --then-kill kills a second task SECS later (default
        0.05), --grow scales an elastic run to N workers instead; then report each task's exit and
        whether the run kept tfd's promise (chaos.json in the run folder). Exit 0 kept, 1 not kept,
        2 bad input
  tfctl sweep SWEEP.json [--workers N] [--run-dir DIR] [--tfd PATH] [--grace SECS] [--no-metrics]
        a hyper-parameter sweep (docs/sweeps.md): tfctl coordinates N generic tfd workers on this
        machine (ASHA or none), shows a leaderboard, and writes trials.jsonl, leaderboard.csv and
        best.json (the winning job spec) into a run folder under DIR (default runs); each worker
        serves Prometheus metrics on a free port, listed in the folder's targets.json (--no-metrics: none)
  tfctl sweep [SWEEP.json] --resume RUN [--workers N] [--tfd PATH] [--grace SECS] [--no-metrics]
        go on with the sweep in the run folder RUN after its tfctl ended (killed, Ctrl-C): ended
        trials stay, the others resume from their last committed epoch (SWEEP.json, if given,
        must be the file RUN was started with; --workers defaults to the count it was started with)
  tfctl ensemble JOB.json [--workers N] [--run-dir DIR] [--tfd PATH] [--no-metrics]
        train the job's "ensemble" members, one per worker, and report the averaged softmax's
        ensemble_test_accuracy (a regression: the averaged outputs' ensemble_test_mae and _rmse)
        each epoch (ensemble.json, predictions/ in the run folder); each worker's metrics as sweep's

A cluster file has "cluster" (as TF_CONFIG's), "train" (the job spec) and "launch" (where tfd is,
the working folder, environment, run folder, ssh settings). See docs/operations.md. Remote hosts
are reached with ssh -o BatchMode=yes; host keys are always checked (--accept-new-hostkeys accepts
keys of hosts not yet in known_hosts). Every run gets a new cluster token: local tasks read it from
the run folder's token file (mode 0600), remote ones from their ssh's stdin, never a command line.

SECS is a plain number of seconds (2.5; not 5s), N a whole number. A flag's value follows it or an
'=' (--grace=5); a flag given twice, or one the command does not take, is refused; -- ends the flags.
A bad command line is one line naming the flag, exit 2, before anything starts.

Exit codes: 0 every task finished, 1 a task failed, 2 a bad file or usage, 130 after Ctrl-C.
)";

// The usage's entries for `command`: each line "  tfctl COMMAND ...", with the lines indented under it.
std::string CommandUsage(std::string_view command) {
  const std::string head = "  tfctl " + std::string(command);
  std::string out;
  bool in_entry = false;
  for (std::string_view text = kUsage; !text.empty();) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl == std::string_view::npos ? text.size() : nl + 1);
    text.remove_prefix(line.size());
    if (line.starts_with("  tfctl ")) in_entry = line.starts_with(head) && (line.size() == head.size() || line[head.size()] == ' ');
    else if (!line.starts_with("    ")) in_entry = false;
    if (in_entry) out += line;
  }
  return out;
}

}  // namespace

int CommandHelp(std::string_view command) {
  const std::string usage = CommandUsage(command);
  if (usage.empty()) return -1;
  std::printf("Usage:\n%s\ntfctl --help says more: every command, SECS and N, the exit codes.\n", usage.c_str());
  return 0;
}

int Help(bool asked) {
  std::fputs(kUsage, asked ? stdout : stderr);
  return asked ? 0 : 2;
}

int UsageError(const std::string& message, bool json) {
  Say(stderr, json, "usage_error", message + " (see tfctl --help)");
  return 2;
}

int ReportFailure(const Status& s, bool json) {
  Say(stderr, json, "error", s.message());
  return ExitCodeFor(s);
}

}  // namespace tfd::launcher
