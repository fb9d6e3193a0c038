#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/optim/optimizer.h"
#include "common/wire/messages.h"

namespace tfd::ps {

// One ps's shard: named float chunks in one flat buffer, their optimizer slots, and the update
// rule (async: apply every gradient as it comes; sync: SyncReplicasOptimizer without its traps).
// Model-agnostic and socket-free. Thread-safe: every method takes the store's lock.
class ParameterStore {
 public:
  struct PushResult {
    wire::PushOutcome outcome = wire::PushOutcome::kApplied;
    std::uint64_t global_step = 0;
    bool step_advanced = false;  // this push completed a step: waiting pulls may go
  };

  // Takes the chunks, initial values and update rule from the chief's INIT, and with has_state its
  // optimizer slots, update count and per-worker resume steps (a restore). FailedPrecondition if
  // already initialised (with another layout: InvalidArgument); InvalidArgument on bad settings or
  // a state of the wrong size.
  Status Init(const wire::Init& init);
  bool initialized() const;
  std::uint64_t layout_hash() const;
  std::uint64_t global_step() const;
  std::int64_t size() const;
  bool sync() const;
  // sync: gradients that complete a step now (the quorum); configured_quorum(): as INIT set it.
  int to_aggregate() const;
  int configured_quorum() const;
  // sync: sets the quorum (clamped to [1, the configured one]); if the current step already holds
  // that many gradients it completes now, and true is returned (waiting pulls may go).
  bool SetQuorum(int quorum);
  wire::UpdateParams update() const;
  // sync: which worker ranks' gradients are held for the current step.
  std::vector<bool> received() const;

  // async: applies the gradient (global_step + 1; scaled by 1 / (1 + staleness) when the INIT asked
  // for it, staleness being global_step - based_on_step), unless this worker incarnation already pushed
  // this or a later local step (kDuplicate: a retry is applied at most once). sync: stores it for based_on_step; the
  // replicas_to_aggregate-th gradient of a step completes it: the stored gradients are summed in
  // worker order, averaged, applied once, and the step advances. A gradient for an older step is
  // dropped (kStale, counted per worker); a second gradient from one worker for one step is
  // dropped (kDuplicate): each (worker, step) is applied at most once, retries included.
  // InvalidArgument when the gradient's length or the worker is wrong.
  Result<PushResult> Push(const wire::Push& push);

  // The parameters and their global step, as an immutable snapshot (shared by every reader of the
  // same version; a push never changes a snapshot that is being sent).
  struct Snapshot {
    std::uint64_t global_step = 0;
    std::vector<float> values;
  };
  std::shared_ptr<const Snapshot> Read();  // no copy while no push has come since the last Read

  // A consistent copy of the whole state (for a checkpoint): values (the current snapshot, shared,
  // not copied), slots (copied), update count, global step and every rank's ResumeStep.
  // FailedPrecondition before INIT.
  struct State {
    std::shared_ptr<const Snapshot> params;
    std::shared_ptr<const std::vector<float>> slots;
    std::uint64_t updates = 0;
    std::vector<std::uint64_t> resume_steps;
  };
  Result<State> ReadState();

  std::vector<std::uint64_t> stale_counts() const;  // per worker rank
  // Where worker `rank` resumes after a restart: async, the last local step applied from it (any
  // incarnation); sync, the global step. 0 before INIT.
  std::uint64_t ResumeStep(int rank) const;
  std::vector<wire::Chunk> chunks() const;

 private:
  mutable std::mutex mu_;
  bool initialized_ = false;
  std::uint64_t layout_hash_ = 0;
  std::vector<wire::Chunk> chunks_;
  // The parameters live in the current snapshot's buffer. A push that finds the snapshot still
  // shared (a PARAMS frame is being sent from it) copies it into a fresh one first, so readers
  // never see a torn update and the common case copies nothing.
  std::shared_ptr<Snapshot> current_;
  std::span<float> Params() { return current_->values; }
  void PrepareWrite();
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::OptimizerState> state_;
  wire::UpdateParams update_;
  int to_aggregate_ = 1;
  int quorum_ = 1;  // sync: to_aggregate_, or fewer while workers are lost (on_worker_loss: shrink)
  void CompleteStepLocked();
  std::uint64_t global_step_ = 0;
  // sync: one gradient buffer per worker rank for the current step, and who has filled theirs.
  std::vector<std::vector<float>> pending_;
  std::vector<bool> received_;
  int received_count_ = 0;
  std::vector<float> sum_;
  std::vector<std::uint64_t> stale_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> last_push_;  // async: per worker (incarnation, local step)
  // sync: per worker, its local step minus the global step (nonzero after a restore that changed
  // the worker count: local steps then no longer equal global steps).
  std::vector<std::int64_t> sync_offset_;
  std::uint64_t ResumeStepLocked(int rank) const;
};

}  // namespace tfd::ps
