#pragma once

// tfctl report: a run folder's events turned into curves and task outcomes (pure functions over
// the files' text, for tests and the dashboard), and report.html / curves.svg written from them.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/config/data_spec.h"
#include "launcher/run_summary.h"
#include "launcher/runner.h"

namespace tfd::launcher {

struct CurvePoint {
  double x = 0, y = 0;
};

// One worker's metric, in the order its events came (a restarted worker may step back in x).
struct Series {
  std::string task;  // "worker:0"
  std::vector<CurvePoint> points;
};

struct Chart {
  std::string metric;   // the event field: "loss", "accuracy", "test_accuracy", "val_accuracy" (a regression run: "mae", "test_mae", "val_mae"), "samples_per_sec"
  std::string title;    // "loss"
  std::string x_label;  // "global step" or "epoch"
  std::vector<Series> series;  // one per worker with points, by task name
};

struct RunCurves {
  // loss and accuracy against the global step: from the worker's `step` events where it has any,
  // else from its `epoch` events; test accuracy, validation accuracy (only when some worker has it)
  // and samples/s against the epoch, from `epoch` events.
  std::vector<Chart> charts;
  int events = 0;   // lines that are JSON events
  int skipped = 0;  // non-empty complete lines that are not
};

// Every non-ps task's curves from metrics.jsonl's text. A last line without its newline is still
// being written and is left out.
RunCurves ExtractCurves(std::string_view metrics_jsonl);

// Each task's state from metrics.jsonl's text: a start makes it running (a second one restarted,
// counted in restarts), done makes it done, error failed. Tasks by name.
std::vector<TaskState> TaskStatesFromEvents(std::string_view metrics_jsonl);
// summary.json's text (written when the run ended) over `tasks`: exit codes and restarts are final
// (0 done, 130/143 stopped, else failed). InvalidArgument naming `source` when it is not a summary.
Status ApplySummary(std::string_view summary_json, std::string_view source, std::vector<TaskState>* tasks);

// curves.svg's text: a chart per metric, one <path class="curve"> per worker with data-task,
// data-metric and data-points (the number of points).
std::string RenderCurvesSvg(const RunCurves& curves);

// The commands that use an exported model, run where it is: `tfd serve --model BASE` and
// `tfd predict --model BASE --data SOURCE` with the job's test data (else its training data),
// words quoted for a shell where they need it.
struct ModelCommands {
  std::string serve, predict;
};
ModelCommands CommandsFor(const ModelSummary& model, const config::DataSpec& data);

struct ReportInputs {
  std::string run_dir;
  std::string job_json;  // job.json's text (a JSON object)
  std::vector<TaskState> tasks;
  bool ended = false;  // summary.json exists
  RunCurves curves;
  std::optional<ModelSummary> model;  // summary.json's: the model the run exported
  ModelCommands commands;             // for `model`; predict empty when job.json is not a job tfd reads
  std::string model_json;             // the version folder's model.json, where it is on this machine and readable
};
// report.html's text: self-contained (inline CSS and SVG, generic fonts, no script). The exported
// model, when there is one, is a table id="model": where, version, step, the commands, and each of
// model.json's final metrics in a row with data-metric.
std::string RenderReportHtml(const ReportInputs& in);

// Reads run_dir's job.json, metrics.jsonl, (when there) summary.json and the model.json of the model
// it names (when on this machine), and writes report.html and
// curves.svg into it. InvalidArgument naming the file when the folder, job.json or metrics.jsonl is
// missing, or one of them is not what tfctl writes (exit 2); Internal when the files cannot be written.
// A run with no events yet gets a report that says so.
Status WriteReport(const std::filesystem::path& run_dir);

}  // namespace tfd::launcher
