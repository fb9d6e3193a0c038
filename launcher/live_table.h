#pragma once

// tfctl up's live table: one row per worker, or, for a model-parallel job, one row per replica
// that gathers its stages (each stage's busy share). Pure functions over rows; any thread.

#include <string>
#include <vector>

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

// The rows to show: tasks that are not stages as they are; the stages of each replica merged into
// one row "replica R" (in replica order, where its first stage's row was) whose epoch and step are
// the lowest of its stages, loss and accuracy those of its last stage that reported them, state
// the stages' shared one (else each stage's: "stage 0 training, stage 1 failed (1)"), followed by
// every stage's busy share in its last epoch ("training, stages 0:29% 1:45%").
std::vector<LiveRow> ByReplica(const std::vector<LiveRow>& rows);

// The table's lines: a header, then one line per row. A regression run (a row with an MAE) shows
// mae and test_mae in the accuracy columns.
std::vector<std::string> FormatLiveTable(const std::vector<LiveRow>& rows);

}  // namespace tfd::launcher
