#pragma once

// tfctl up's live table: one row per worker, or, for a model-parallel job, one row per replica
// that gathers its stages (each stage's busy share). ApplyEvent, ByReplica and FormatLiveTable are
// pure functions over rows (any thread); LiveDisplay prints them, on one thread.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/base/terminal.h"
#include "common/config/cluster_file.h"

namespace tfd::launcher {

// One task's row as its events leave it (-1: not known yet).
struct LiveRow {
  std::string name;  // "worker:1"
  double epoch = 0, global_step = 0, loss = -1, accuracy = -1, test_accuracy = -1, samples_per_sec = 0;
  double mae = -1, test_mae = -1;  // a regression run's, in place of the accuracies
  std::string state = "starting";
  // A model-parallel stage (its `start` and `stage` events): which stage of which replica, and the
  // share of its last epoch's schedule it computed. stage < 0: not a stage.
  int stage = -1, stages = 0, replica = -1;
  double busy = -1;
};

// What a task's events tell tfctl besides its row: the pid of its latest start event (a remote
// task's tfd is signalled by it) and, for summary.json, its done event's test_accuracy, global_step
// and params_sha256 (an evaluator's accuracy and step from its last eval event), and its latest
// exported event's path, version and global_step (the model it wrote; path as the task named it).
struct TaskFacts {
  pid_t pid = -1;
  std::optional<double> final_test_accuracy;
  std::optional<std::int64_t> final_global_step;
  std::string params_sha256;
  std::string exported_path, exported_version;  // empty: it exported nothing
  std::optional<std::int64_t> exported_step;
};

// One event of a task into its row and facts: start (pid; a stage's place), epoch, eval, stage,
// ready, done and exported; other events change nothing. A field an event lacks keeps its value, except
// that done replaces every fact of the done event (absent ones become unknown).
void ApplyEvent(const config::Event& e, LiveRow& row, TaskFacts& facts);

// The rows to show: tasks that are not stages as they are; the stages of each replica merged into
// one row "replica R" (in replica order, where its first stage's row was) whose epoch and step are
// the lowest of its stages, loss and accuracy those of its last stage that reported them, state
// the stages' shared one (else each stage's: "stage 0 training, stage 1 failed (1)"), followed by
// every stage's busy share in its last epoch ("training, stages 0:29% 1:45%").
std::vector<LiveRow> ByReplica(const std::vector<LiveRow>& rows);

// The table's lines: a header, then one line per row. A regression run (a row with an MAE) shows
// mae and test_mae in the accuracy columns.
std::vector<std::string> FormatLiveTable(const std::vector<LiveRow>& rows);

// The table on stdout while a run goes on, with every log line above it: on a terminal it is redrawn
// in place at the bottom; else it is not drawn (Table() gives it for the end); with `json`, log
// lines are JSON lines (Say) and no table is drawn. Not thread-safe: Run's thread only.
class LiveDisplay {
 public:
  LiveDisplay(bool tty, bool json) : tty_(tty && !json), json_(json), block_(stdout, 1) {}
  // `s` is "[who] message"; as JSON, who becomes the line's task.
  void Line(const std::string& s);
  // Each row's name (a task's) goes with it.
  void SetRows(std::vector<std::pair<std::string, LiveRow>> rows);
  std::vector<std::string> Table() const;

 private:
  void Clear();
  void Draw();
  bool tty_, json_;
  LiveBlock block_;  // the table at the bottom of the terminal
  std::vector<std::pair<std::string, LiveRow>> rows_;
};

}  // namespace tfd::launcher
