#pragma once

// Every metric a tfd task exports, in this one place (docs/observability.md describes each): the
// names, types, help and buckets are made here, and the roles update the fields below. A role that
// is given no TaskMetrics (nullptr) measures nothing and pays nothing.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/metrics/registry.h"

namespace tfd::metrics {

// Why a server refused a peer, as the label value of tfd_refused_connections_total (the transport's
// RefusalCounts fields, in that order).
inline constexpr std::string_view kRefusalReasons[] = {"malformed", "authentication", "handshake_timeout", "busy", "mismatch"};

// The metrics of one task over one registry. Thread-safety is the registry's: any thread updates
// the fields (the training thread, a ps connection's strand, the checkpoint writer); /metrics
// renders on the http thread. Every pointer is owned by the registry, which must outlive this.
class TaskMetrics {
 public:
  // Registers the metrics every role has (tfd_global_step, tfd_connected_peers); a role adds its
  // own with the Add* calls below before it starts (their fields are null until then).
  explicit TaskMetrics(Registry& registry);

  Registry& registry() const { return registry_; }

  Gauge* global_step = nullptr;      // tfd_global_step (a ps: its store's)
  Gauge* connected_peers = nullptr;  // tfd_connected_peers: ps tasks (worker), workers (ps), ring links (allreduce)

  // Training (workers, the chief, standalone), fed by train::MetricsObserver each step and epoch.
  void AddTrainingMetrics();
  Counter* steps = nullptr;                 // tfd_steps_total
  Counter* examples = nullptr;               // tfd_examples_total
  Histogram* step_seconds = nullptr;         // tfd_step_seconds: compute + update of one step
  Counter* compute_seconds = nullptr;        // tfd_step_compute_seconds_total
  Counter* update_seconds = nullptr;         // tfd_step_update_seconds_total
  Gauge* loss = nullptr;                     // tfd_loss: the last step's
  Gauge* accuracy = nullptr;                 // tfd_accuracy: the last step's
  Gauge* learning_rate = nullptr;            // tfd_learning_rate
  Gauge* epoch = nullptr;                    // tfd_epoch: the epoch in progress (1-based), the last one once done
  // At an epoch's end where this task evaluated: tfd_eval_accuracy{split="test"|"val"}, made on first use.
  Gauge* EvalAccuracy(std::string_view split);
  // A regression model's in place of the accuracies, made on first use: tfd_mae (the last step's
  // batch) and tfd_eval_mae / tfd_eval_rmse{split="test"|"val"} at an epoch's end.
  Gauge* Mae();
  Gauge* EvalMae(std::string_view split);
  Gauge* EvalRmse(std::string_view split);

  // The ps modes' worker (PsClient).
  void AddPsClientMetrics();
  Counter* push_bytes = nullptr;      // tfd_push_bytes_total: gradient bytes sent to the ps tasks
  Counter* pull_bytes = nullptr;      // tfd_pull_bytes_total: parameter bytes received from them
  Histogram* push_seconds = nullptr;  // tfd_push_seconds: a step's push until every ps acknowledged it
  Histogram* pull_seconds = nullptr;  // tfd_pull_seconds: a pull until every ps's parameters are in
  Counter* reconnects = nullptr;      // tfd_reconnects_total: a lost ps dialled and found again

  // The allreduce worker.
  void AddAllreduceMetrics();
  Counter* allreduce_bytes = nullptr;  // tfd_allreduce_bytes_total: gradient bytes all-reduced over the ring

  // The ps (PsService).
  void AddPsMetrics();
  Counter* pushes_applied = nullptr;    // tfd_ps_pushes_total{outcome="applied"} (sync: taken into its step)
  Counter* pushes_stale = nullptr;      // ... {outcome="stale"}: sync, a gradient for a step already done
  Counter* pushes_duplicate = nullptr;  // ... {outcome="duplicate"}: a retry already applied
  Histogram* staleness = nullptr;       // tfd_ps_staleness_steps: async, global steps since the pushed gradient's parameters

  // A server's refusals by reason: tfd_refused_connections_total{reason=...}, read from `counts`
  // (the i-th of kRefusalReasons) at each scrape; what `counts` reads must live as long as the registry.
  void AddRefusals(std::function<std::uint64_t(std::size_t reason)> counts);

  // The chief with checkpoints: tfd_checkpoint_last_timestamp_seconds (set when one is written) and
  // tfd_checkpoint_age_seconds (now minus that, at each scrape; absent until the first).
  void AddCheckpointMetrics();
  void CheckpointWritten(double unix_seconds);

 private:
  Registry& registry_;
  Gauge* checkpoint_time_ = nullptr;
};

}  // namespace tfd::metrics
