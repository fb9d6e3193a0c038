#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/ckpt/checkpoint.h"
#include "common/config/cluster.h"
#include "common/config/job.h"
#include "common/model/model.h"

namespace tfd::evaluator {

// The evaluator task (docs/observability.md, "The evaluator task"): it never trains and never
// joins the ps tasks or the ring. It polls the chief's checkpoint folder (a directory listing),
// evaluates each new valid checkpoint on the test set and on the validation split when the job
// has one (accuracy, or a regression's MAE and RMSE, and the loss), and ends once it has evaluated the chief's final checkpoint.

// One checkpoint's evaluation.
struct EvalResult {
  std::int64_t global_step = 0;
  std::string checkpoint;  // the file's path
  bool final = false;      // the chief's last checkpoint of the run
  double test_loss = 0, test_accuracy = 0;
  std::optional<double> val_loss, val_accuracy;  // only when the job has a validation split
  // A regression job's scores in place of the accuracies (test_accuracy 0, val_accuracy unset): the
  // MAE and RMSE over every example and target, as the chief reports them.
  bool regression = false;
  double test_mae = 0, test_rmse = 0;
  std::optional<double> val_mae, val_rmse;
  double wall_time = 0;                          // seconds since the Unix epoch, when it was evaluated
};

// The result's scores as (name, value), as the eval event names them: test_loss, then test_accuracy
// or a regression's test_mae and test_rmse, then the validation split's (val_loss, val_accuracy or
// val_mae and val_rmse) when the job has one.
std::vector<std::pair<std::string, double>> Scores(const EvalResult& result);

// Where results go besides the log and the event lines (summaries, metrics). Called on
// RunEvaluator's thread; a sink must not block for long, and reports its own errors (it cannot
// fail the evaluator).
class EvalSink {
 public:
  virtual ~EvalSink() = default;
  virtual void OnEval(const EvalResult& result) = 0;  // after each checkpoint's evaluation, in step order
  virtual void OnEnd(bool ok) = 0;                    // once, as RunEvaluator returns
};

struct EvaluatorOptions {
  const std::atomic<bool>* stop = nullptr;           // set by a signal handler: return between two polls
  std::chrono::milliseconds poll_interval{500};      // how often the folder is listed
  std::chrono::milliseconds startup_timeout{120000};  // for the chief's first checkpoint (tfd --startup-timeout)
  std::chrono::milliseconds idle_timeout{0};          // for each next checkpoint; 0: IdleTimeoutFor(the job's checkpoint)
  std::vector<EvalSink*> sinks;                       // not owned; each outlives RunEvaluator
};

// How long the evaluator waits for a new checkpoint once it has seen one: 3 × every_secs, at
// least 60 s, when the job saves by time; else 600 s (a step-based schedule says nothing about time).
std::chrono::milliseconds IdleTimeoutFor(const config::CheckpointSpec& spec);

// Copies the checkpoint's tensors into `model`'s parameters, matched by name. InvalidArgument
// naming `source` and the variable when one is missing or of another shape; `model` may then be
// partly overwritten.
Status LoadParams(const ckpt::Checkpoint& checkpoint, model::Model& model, std::string_view source);

// Runs the evaluator task until the final checkpoint is evaluated (Ok). InvalidArgument (exit 2)
// when the job has no checkpoint.dir or a checkpoint holds another model; DeadlineExceeded naming
// the folder, what it waited for and the last global step evaluated when the first checkpoint does
// not come within startup_timeout or the next within the idle timeout; FailedPrecondition after a
// stop. A checkpoint file that does not load is a warning naming it, and the evaluator goes on.
Status RunEvaluator(const config::TfConfig& config, const config::JobSpec& job, EventWriter& events, const EvaluatorOptions& options);

}  // namespace tfd::evaluator
