#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/base/terminal.h"
#include "daemon/coordinator/sweep_scheduler.h"

namespace tfd::coordinator {

// leaderboard.csv: trial,status,epoch,METRIC,best,[SHOWN...,]worker,attempts,params,reason, sorted
// best first (trials without a value last, by id). Each of `shown` (config::SweepSpec::shown) is a
// column of what the trial reported at its best epoch: it never affects the order.
std::string LeaderboardCsv(const std::vector<TrialState>& trials, const std::string& metric, bool maximize,
                           const std::vector<std::string>& shown = {});

// The leaderboard as text rows (header first), best first; `best` (an index into trials, or -1) is
// marked with '*'; `shown` as for the CSV.
std::vector<std::string> LeaderboardRows(const std::vector<TrialState>& trials, const std::string& metric, bool maximize, int best,
                                         const std::vector<std::string>& shown = {});

// The value of `name` in what the trial reported at its best epoch, if it reported one.
std::optional<double> ReportedAtBest(const TrialState& t, const std::string& name);

// Draws the live leaderboard on `out`: redrawn in place on a terminal (`tty`); elsewhere one line
// per trial whose status or epoch changed, each starting "PREFIX: " (tfctl's stdout: "tfctl"; a
// coordinator task's stderr: its task name). One thread only.
class LeaderboardPrinter {
 public:
  LeaderboardPrinter(bool tty, std::string metric, bool maximize, std::FILE* out = stdout, std::string prefix = "tfctl",
                     std::vector<std::string> shown = {})
      : tty_(tty), maximize_(maximize), metric_(std::move(metric)), out_(out), prefix_(std::move(prefix)), shown_(std::move(shown)),
        block_(out, fileno(out)) {}
  void Update(const std::vector<TrialState>& trials, int best);
  // The whole table once more (without a terminal too).
  void Final(const std::vector<TrialState>& trials, int best);

 private:
  bool tty_, maximize_;
  std::string metric_;
  std::FILE* out_;
  std::string prefix_;
  std::vector<std::string> shown_;
  LiveBlock block_;  // with a terminal: the table, redrawn in place
  std::vector<std::string> last_;  // per trial: status and epoch as last printed
};

}  // namespace tfd::coordinator
