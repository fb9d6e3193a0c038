#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/config/job.h"

namespace tfd::config {

// The most generic workers a sweep may have (its file's "workers", tfctl sweep --workers).
inline constexpr int kMaxSweepWorkers = 4096;

// One dimension of a sweep's search space: a dotted path into the job spec ("optimizer.momentum")
// and the values it may take. Values are JSON text ("0.01", "\"dnn\"") so any job field can vary.
struct SweepParam {
  enum class Kind { kChoice, kUniform, kLogUniform };
  std::string path;
  Kind kind = Kind::kChoice;
  std::vector<std::string> choices;  // kChoice: JSON texts
  double low = 0, high = 0;          // kUniform, kLogUniform (low > 0 for log)
  bool integer = false;              // kUniform/kLogUniform with "integer": true: rounded
};

struct AshaSpec {
  int grace_epochs = 1;
  int reduction_factor = 3;  // η
  int max_epochs = 0;        // every trial's epochs; 0 at parse time is replaced by the job's epochs
};

// The sweep file of docs/sweeps.md, validated whole at load.
struct SweepSpec {
  std::string job_text;  // the base job spec as JSON text (from "job": {...} or the file it names)
  JobSpec job;           // the base job, parsed
  enum class Search { kGrid, kRandom };
  Search search = Search::kGrid;
  std::uint64_t seed = 1;
  std::vector<SweepParam> space;
  // An epoch event's metric, never a test_* one (a sweep needs validation_split); a regression
  // job's default: val_mae. An ensemble's is test_accuracy: it reports, it chooses nothing.
  std::string metric = "val_accuracy";
  bool maximize = true;  // by default false for a loss, an MAE or an RMSE
  // Metrics shown beside the objective (the leaderboard, best_trial.json), at each trial's best
  // epoch, never used to choose: test_accuracy, or a regression sweep's test_mae and test_rmse.
  std::vector<std::string> shown;
  int max_trials = 0;  // grid: 0 = the whole grid; random: required
  int parallel = 0;    // trials at once; 0 = one per worker
  int workers = 2;     // generic worker tasks tfctl starts on this machine
  bool asha = false;
  AshaSpec scheduler;
  // An ensemble (tfctl ensemble JOB.json): the trials are its members, job_text is the job without
  // "ensemble", and the coordinator averages the members' test predictions each epoch.
  EnsembleSpec ensemble;
};

// Epoch metrics an objective may name, and whether smaller is better by default (a loss, an MAE,
// an RMSE).
bool IsSweepMetric(std::string_view metric);
bool LowerIsBetter(std::string_view metric);

// Parses and validates a sweep file. `source` names it in errors ("SOURCE: JSON.PATH: expected");
// `base_dir` resolves a "job" given as a path. Every trial's job is checked here too, so a value
// that makes an invalid job spec (not just one that fails while training) is refused at load; so
// are a test_* objective and a base job without validation_split (the test set never chooses).
// Every error is InvalidArgument (NotFound for a job file that cannot be read).
Result<SweepSpec> ParseSweepSpec(std::string_view text, std::string_view source, const std::string& base_dir = ".");
Result<SweepSpec> LoadSweepSpec(const std::string& path);

// A job file with "ensemble" as a sweep whose trials are the members (objective test_accuracy, or
// test_mae minimised for regression data; no scheduler, workers = min(members, 2) unless told). InvalidArgument naming the path for a job
// without "ensemble" or a member whose job is invalid.
Result<SweepSpec> LoadEnsembleSpec(const std::string& path);
Result<SweepSpec> ParseEnsembleSpec(std::string_view text, std::string_view source);

// One trial: its values, in space order, and its whole job spec as JSON text (runnable as is).
struct Trial {
  int id = 0;
  std::vector<std::pair<std::string, std::string>> params;  // (path, JSON text)
  std::string job_text;
};

// The sweep's trials, in order: the grid (last dimension fastest) cut to max_trials, or max_trials
// random draws, or an ensemble's members (seed + k and the k-th "vary" values). The same spec always gives the same trials. With ASHA every trial's epochs is
// scheduler.max_epochs.
std::vector<Trial> GenerateTrials(const SweepSpec& sweep);

// The job text with each (dotted path, JSON text) set; InvalidArgument naming the path when a
// parent along it is not an object.
Result<std::string> ApplyParams(std::string_view job_text, const std::vector<std::pair<std::string, std::string>>& params);

}  // namespace tfd::config
