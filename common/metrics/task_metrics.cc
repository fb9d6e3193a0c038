#include "common/metrics/task_metrics.h"

#include <chrono>

namespace tfd::metrics {
namespace {

// Step, push and pull times: 100 us to about 52 s, doubling.
std::vector<double> SecondsBuckets() { return ExponentialBuckets(0.0001, 2, 20); }

}  // namespace

TaskMetrics::TaskMetrics(Registry& registry) : registry_(registry) {
  global_step = registry_.AddGauge("tfd_global_step", "The global step: the updates applied to the parameters (a worker: as its last step saw it).");
  connected_peers = registry_.AddGauge("tfd_connected_peers",
                                       "Peers connected now: a worker's ps tasks, a ps's workers, an allreduce worker's ring links.");
}

void TaskMetrics::AddTrainingMetrics() {
  steps = registry_.AddCounter("tfd_steps_total", "Training steps this task took.");
  examples = registry_.AddCounter("tfd_examples_total", "Training examples this task computed gradients on.");
  step_seconds = registry_.AddHistogram("tfd_step_seconds", "Wall time of one training step: compute plus update.", SecondsBuckets());
  compute_seconds = registry_.AddCounter("tfd_step_compute_seconds_total", "Time spent in forward and backward passes.");
  update_seconds = registry_.AddCounter("tfd_step_update_seconds_total",
                                        "Time spent in updates: sending gradients, waiting for the others, applying.");
  loss = registry_.AddGauge("tfd_loss", "Training loss of the last step's batch.");
  accuracy = registry_.AddGauge("tfd_accuracy", "Training accuracy of the last step's batch (0 to 1).");
  learning_rate = registry_.AddGauge("tfd_learning_rate", "The learning rate of the last step.");
  epoch = registry_.AddGauge("tfd_epoch", "The epoch in progress (1-based); the last one once training ended.");
}

Gauge* TaskMetrics::EvalAccuracy(std::string_view split) {
  return registry_.AddGauge("tfd_eval_accuracy", "Accuracy on a held-out split at the last epoch end where this task evaluated (0 to 1).",
                            {{"split", std::string(split)}});
}

Gauge* TaskMetrics::Mae() { return registry_.AddGauge("tfd_mae", "Mean absolute error of the last step's batch (a regression model)."); }

Gauge* TaskMetrics::EvalMae(std::string_view split) {
  return registry_.AddGauge("tfd_eval_mae", "Mean absolute error on a held-out split at the last epoch end where this task evaluated (regression).",
                            {{"split", std::string(split)}});
}

Gauge* TaskMetrics::EvalRmse(std::string_view split) {
  return registry_.AddGauge("tfd_eval_rmse", "Root mean squared error on a held-out split at the last epoch end where this task evaluated (regression).",
                            {{"split", std::string(split)}});
}

void TaskMetrics::AddPsClientMetrics() {
  push_bytes = registry_.AddCounter("tfd_push_bytes_total", "Gradient bytes pushed to the ps tasks.");
  pull_bytes = registry_.AddCounter("tfd_pull_bytes_total", "Parameter bytes pulled from the ps tasks.");
  push_seconds = registry_.AddHistogram("tfd_push_seconds", "From a step's push until every ps acknowledged it.", SecondsBuckets());
  pull_seconds = registry_.AddHistogram("tfd_pull_seconds", "From a pull until every ps's parameters were in.", SecondsBuckets());
  reconnects = registry_.AddCounter("tfd_reconnects_total", "Lost ps tasks that were dialled and found again.");
}

void TaskMetrics::AddAllreduceMetrics() {
  allreduce_bytes = registry_.AddCounter("tfd_allreduce_bytes_total", "Gradient bytes all-reduced over the ring (this worker's buffer, per step).");
}

void TaskMetrics::AddPsMetrics() {
  constexpr std::string_view kHelp = "Gradients the ps received, by outcome: applied, stale (sync: for a step already done) or duplicate (a retry).";
  pushes_applied = registry_.AddCounter("tfd_ps_pushes_total", kHelp, {{"outcome", "applied"}});
  pushes_stale = registry_.AddCounter("tfd_ps_pushes_total", kHelp, {{"outcome", "stale"}});
  pushes_duplicate = registry_.AddCounter("tfd_ps_pushes_total", kHelp, {{"outcome", "duplicate"}});
  staleness = registry_.AddHistogram("tfd_ps_staleness_steps",
                                     "Async: global steps applied between the parameters a gradient was computed on and its own update.",
                                     {0, 1, 2, 4, 8, 16, 32, 64, 128});
}

void TaskMetrics::AddRefusals(std::function<std::uint64_t(std::size_t reason)> counts) {
  for (std::size_t i = 0; i < std::size(kRefusalReasons); ++i)
    registry_.AddCallback("tfd_refused_connections_total", "Connections this task's server refused, by reason.", Type::kCounter,
                          {{"reason", std::string(kRefusalReasons[i])}},
                          [counts, i]() -> std::optional<double> { return static_cast<double>(counts(i)); });
}

void TaskMetrics::AddCheckpointMetrics() {
  checkpoint_time_ = registry_.AddGauge("tfd_checkpoint_last_timestamp_seconds",
                                        "When the last checkpoint was written (Unix time); 0 before the first.");
  const Gauge* written = checkpoint_time_;
  registry_.AddCallback("tfd_checkpoint_age_seconds", "Seconds since the last checkpoint was written; absent before the first.",
                        Type::kGauge, {}, [written]() -> std::optional<double> {
                          const double at = written->value();
                          if (at <= 0) return std::nullopt;
                          const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
                          return now - at;
                        });
}

void TaskMetrics::CheckpointWritten(double unix_seconds) {
  if (checkpoint_time_ != nullptr) checkpoint_time_->Set(unix_seconds);
}

}  // namespace tfd::metrics
