#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/collective/ring.h"
#include "common/metrics/registry.h"
#include "common/model/model.h"
#include "common/optim/optimizer.h"
#include "common/tensor/layers.h"
#include "daemon/allreduce/compressed_exchange.h"
#include "daemon/train/updater.h"
#include "daemon/train/whole_checkpoint.h"

namespace tfd::allreduce {

// All-reduces each step's gradient over the ring and applies the average locally, so every
// worker holds the same parameters after every step.
//
// Each contribution is the gradient followed by two floats: this worker's weight (1, or 0 for a
// worker that has run out of data and only joins the step) and whether it has a batch for the next
// step. After the all-reduce every worker holds the same sums, divides by the same count of
// contributing workers and knows whether another step follows.
//
// The buffer is cut into buckets of whole layers, filled from the last layer until each holds at
// least `bucket_kb` (the two floats ride in the last layers' bucket). A bucket's all-reduce starts
// as soon as backprop has computed its layers, and runs while backprop computes the earlier ones;
// Step waits for each in turn and applies its update as soon as its sums are in, while the later
// ones are still on the ring. Every worker cuts the same buckets, so the sums are
// the same bits.
//
// Elastic (EnableElastic): a third float is rank 0's request, at a commit step, to let waiting
// workers join: every member sees it in the same sums and the ring grows right after that step
// (ElasticHooks::grow), the epoch going on from there with the new shares (Regrouped). Every `commit_every_steps` global steps each worker copies its training
// state (parameters, optimizer slots, global step, the loop's Position) into memory as a pending
// commit. It becomes the current commit when the next step's all-reduce completes here: every
// member started that one, so every member had finished the step the commit was taken at and holds
// the same commit, current or still pending. After a ring error, Recover asks the Reformer for a
// new ring without the lost worker and the commit step every survivor agreed on (the newest current
// one among them), restores that commit and sends the epoch loop back to its position.
//
// Synchronised batch norm (the model's has_sync_layers()): this updater is the model's
// CrossReplicaSum, each sum a blocking all-reduce on the same ring. Those sums come in Forward and
// in the middle of backprop, so the gradient buckets then start only at Step (no overlap): every
// worker, a joining one too (JoinCrossReplicaSums), starts the same collectives in the same order.
class AllreduceUpdater final : public train::Updater, public tensor::CrossReplicaSum {
 public:
  // The ring re-formed without a lost member: the new ring and the global step of the commit
  // every member rolls back to.
  struct Reformed {
    std::shared_ptr<collective::Collective> ring;
    std::int64_t commit_step = 0;
  };
  // Given the error of the current ring and this worker's current commit step: the new ring, or
  // why there is none (fewer than min_workers, a rendezvous that failed).
  using Reformer = std::function<Result<Reformed>(const Status& error, std::int64_t commit_step)>;
  // Elastic: how the ring changes. `reform` after a loss; `joiners_waiting` (asked on the ring's
  // rank 0 before each commit step's all-reduce) whether a worker waits to join; `grow`, on every
  // member after a commit step whose sums say rank 0 asked for it, the ring with the joiners
  // (given the step of the commit just taken, which every member holds once it is formed).
  struct ElasticHooks {
    Reformer reform;
    std::function<bool()> joiners_waiting;
    std::function<Result<Reformed>(std::int64_t commit_step)> grow;
  };

  // `allreduce_bytes`, when given, counts the bytes each step's collectives take from this worker
  // (its buffer; compressed, under `compression`). `seed`: the job's (PowerSGD's first Q);
  // `steps_per_epoch`, topk's warm-up in steps.
  //
  // Compression (update.compression): fp16 and bf16 buckets travel as 16 bits on the ring (sums in
  // float32), their control floats in one more small float32 all-reduce after the top layers'
  // bucket (the first to start), each bucket applied as its sums come in as float32 ones are;
  // topk and powersgd exchange the whole gradient at Step through CompressedExchange (no overlap
  // with backprop: a worker's selection needs its whole gradient).
  AllreduceUpdater(std::shared_ptr<collective::Collective> ring, const optim::Optimizer& optimizer, const model::Model& model, int bucket_kb,
                   metrics::Counter* allreduce_bytes = nullptr, const config::CompressionSpec& compression = {}, std::uint64_t seed = 0,
                   std::int64_t steps_per_epoch = 0);
  ~AllreduceUpdater() override;

  Status GradientsReady(model::Model& model, std::size_t from) override;
  Result<std::int64_t> Step(model::Model& model, std::int64_t local_step) override;
  Result<std::int64_t> Finish(model::Model&) override;
  bool FinishChangesParams() const override { return false; }
  bool JoinsUnevenShards() const override { return true; }
  void SetHasNextBatch(bool has) override { has_next_ = has; }
  bool OthersHaveData() const override { return others_have_data_; }
  Result<std::int64_t> JoinStep(model::Model& model) override;
  std::string EpochNote() override;
  // Elastic: commits every `commit_every_steps` steps, recovers and grows through `hooks`. Call
  // before the first step, with the initial parameters in `model` (the first commit, at step 0).
  void EnableElastic(const model::Model& model, int commit_every_steps, ElasticHooks hooks);
  // A worker joining a running ring, after EnableElastic: takes the ring it was let into, receives
  // the committed state from rank 0 (parameters, optimizer slots, global step, place in the data)
  // and returns where its epoch loop starts (its local step 0).
  Result<Position> Join(model::Model& model, Reformed formed);
  void AtStep(const Position& position) override { position_ = position; }
  Result<Position> Recover(model::Model& model, const Status& failure) override;
  std::optional<Position> Regrouped() override { return std::exchange(regrouped_, std::nullopt); }
  std::optional<Share> EpochShare() override;
  // One more all-reduce of ring-size floats, the chief's decision in the first: every worker
  // stops when its sum is not 0.
  Result<bool> EndOfEpoch(bool stop) override;
  // A synchronised batch norm's sum over the ring; the first error is kept and returned by the
  // step's Exchange (or Recover's caller), and later sums of the step are skipped.
  void Sum(std::span<float> values) override;

  // Checkpoints (job.checkpoint): every worker holds the same state after a step, so the ring's
  // rank 0 alone saves it, per the schedule, after the step's update (train::WholeSaver), and at
  // Finish (final). `defer_epoch_end`: the chief judges each epoch (early stopping), so a save due
  // at an epoch's last step waits for EpochJudged and holds the rule's state after it. Call on
  // every member before the first step (after Restore).
  //
  // Under topk and powersgd each worker's error feedback differs, and the save holds every one:
  // rank 0 sees before a step's exchange that the schedule makes a save due after it and says so in
  // its control float (bit 2; bit 1 is the join request), and after that step every member
  // all-gathers its residual. A save is taken only at a step so gathered (one falling due otherwise,
  // as every_secs may between the two looks, waits for the next step), waiting for a write still
  // in flight; at Finish every member gathers for the final save.
  void EnableCheckpoints(train::WholeCheckpointing c, const model::Model& model, bool defer_epoch_end);
  // A checkpoint's state, shared by the chief to every member: parameters, optimizer slots and
  // update count, the global step, and where the epoch loop resumes (after `restore.resume_step`
  // local steps of `steps_per_epoch`). Call before EnableElastic and the first step.
  Status Restore(model::Model& model, const train::WholeRestore& restore, std::int64_t steps_per_epoch);
  void EpochJudged(const ckpt::EarlyStopping& state) override;

 private:
  Result<std::int64_t> Exchange(model::Model& model, bool contributes);
  // Rank 0 with checkpoints: saves the state after the step just done (`final`: the end's, waited for).
  Status SaveState(const model::Model& model, bool final);
  // Rank 0 with checkpoints: whether a save is due after the step just done (with error feedback:
  // only at a step whose feedback was gathered).
  bool SaveDue(bool at_epoch_end);
  // Every member: each one's error feedback to every member; rank 0 keeps them (gathered_).
  Status GatherFeedback();
  Status StartBucket(model::Model& model, bool contributes);  // the next bucket of this step
  // Waits for each bucket's sums in start order and applies the optimizer to its floats at once,
  // while the later buckets are still on the ring (the optimizer's pass over a bucket runs beside
  // their traffic instead of after it, and the next step's first layers, the last to be summed,
  // wait for their own pass only). The same bits as one update at the end
  // (OptimizerState::ApplyPart).
  Status WaitAndApply(model::Model& model);
  void FillControl(bool contributes);                        // buffer_'s floats after the gradient

  struct Commit {
    bool valid = false;
    std::int64_t global_step = 0;
    Position position;
    std::vector<float> params, slots;
    std::int64_t updates = 0;
  };
  void TakeCommit(const model::Model& model, Commit* into);
  // The ring re-formed (`r`, or why not): every member takes the commit they agreed on and rank 0
  // broadcasts it (so a newcomer has it too); a loss meanwhile re-forms again, without the lost one.
  Status Settle(model::Model& model, Result<Reformed> r);
  Status BroadcastCommit(model::Model& model);  // rank 0's current_ to every member, into current_ and the model

  struct Bucket {
    std::size_t begin, end;  // floats of buffer_
  };
  std::shared_ptr<collective::Collective> ring_;
  optim::OptimizerState state_;
  std::vector<float> buffer_;     // gradient sum, then weight sum, next-step count and rank 0's join request
  std::vector<Bucket> buckets_;   // in the order they start: the last layers' first
  std::size_t next_bucket_ = 0;   // buckets of this step started
  std::vector<std::uint64_t> bucket_ids_;  // the ring's id of each started (16-bit: the first's, its control floats')
  bool has_next_ = false, others_have_data_ = false;
  std::int64_t global_step_ = 0, joined_ = 0;
  metrics::Counter* allreduce_bytes_;  // null: not counted
  std::optional<compress::Half> half_;  // fp16 / bf16: the buckets travel as 16 bits
  std::vector<float> control_;          // ... and their control floats in a float32 all-reduce of their own
  std::unique_ptr<CompressedExchange> exchange_;  // topk, powersgd; null otherwise
  std::size_t step_bytes_ = 0;          // what one step's collectives take from this worker (allreduce_bytes_)
  std::uint64_t ring_bytes_seen_ = 0;   // ring_'s value_bytes_sent() after the last step
  std::uint64_t epoch_ring_bytes_ = 0;  // the value bytes this epoch's steps sent (EpochNote)
  std::int64_t epoch_steps_ = 0;        // ... and their count
  const bool sync_layers_;             // the model has synchronised batch norms
  Status sum_error_;                   // the first failed Sum of this step
  std::vector<float> sum_scratch_;     // a Sum's values, padded to the ring's size
  std::unique_ptr<train::WholeSaver> saver_;  // job.checkpoint; null without
  const model::Model* saved_model_ = nullptr; // what the saves copy (EpochJudged has no model)
  bool defer_epoch_end_ = false;               // saves due at an epoch's last step wait for EpochJudged
  bool restored_ = false;                      // Restore placed position_
  bool save_feedback_ = false;                   // checkpoints hold the error feedback (topk, powersgd; under a record's limit)
  std::optional<ckpt::ErrorFeedback> gathered_;  // rank 0: every member's error feedback after global step gathered_step_
  std::int64_t gathered_step_ = -1;
  // Elastic: 0 when not.
  int commit_every_ = 0;
  ElasticHooks hooks_;
  bool newcomer_ = false;       // joined a running ring and holds no commit yet
  std::optional<Position> regrouped_;  // the ring grew after the last step: the loop goes on from here
  Position position_;           // where the loop will be after the step in progress
  Commit current_, pending_;    // pending_ becomes current_ once the next step's all-reduce is done here
};

}  // namespace tfd::allreduce
