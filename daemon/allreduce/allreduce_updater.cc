#include "daemon/allreduce/allreduce_updater.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "common/ckpt/format.h"

namespace tfd::allreduce {

AllreduceUpdater::AllreduceUpdater(std::shared_ptr<collective::Collective> ring, const optim::Optimizer& optimizer, const model::Model& model,
                                   int bucket_kb, metrics::Counter* allreduce_bytes, const config::CompressionSpec& compression,
                                   std::uint64_t seed, std::int64_t steps_per_epoch)
    : ring_(std::move(ring)),
      state_(optimizer, model.params().size(), optim::DecayedRanges(model::VariableRuns(model))),
      buffer_(model.params().size() + 3),
      allreduce_bytes_(allreduce_bytes),
      exchange_(CompressedExchange::Make(compression, model, seed, steps_per_epoch)),
      sync_layers_(model.has_sync_layers()) {
  using Method = config::CompressionSpec::Method;
  const std::size_t n = model.params().size();
  step_bytes_ = buffer_.size() * sizeof(float);
  if (compression.method == Method::kFp16 || compression.method == Method::kBf16) {
    half_ = compression.method == Method::kFp16 ? compress::Half::kFp16 : compress::Half::kBf16;
    control_.resize(std::max<std::size_t>(3, static_cast<std::size_t>(ring_->size())));
    step_bytes_ = n * 2 + control_.size() * sizeof(float);
  }
  if (exchange_) step_bytes_ = exchange_->floats_per_step() * sizeof(float);
  ring_bytes_seen_ = ring_->value_bytes_sent();  // the initial parameters' broadcast is no step's
  if (compression.enabled())
    spdlog::info("update.compression {}: {} bytes per step into the ring's collectives from each worker, of {} uncompressed{}",
                 config::CompressionName(compression.method), step_bytes_, buffer_.size() * sizeof(float),
                 exchange_ ? " (" + exchange_->Describe() + ")" : "");
  const std::size_t min_floats = static_cast<std::size_t>(bucket_kb) * 1024 / 4;
  const std::vector<std::size_t>& starts = model.layer_starts();
  std::size_t end = buffer_.size();  // the last bucket also carries the three floats
  for (std::size_t i = starts.size() - 1; i-- > 0;) {
    const std::size_t begin = starts[i];
    if (begin == end) continue;  // layers without parameters (a flatten first) make no bucket of their own
    if (begin == 0 || (bucket_kb > 0 && end - begin >= min_floats)) {
      buckets_.push_back({begin, end});
      end = begin;
    }
  }
  if (buckets_.empty() || buckets_.back().begin != 0) buckets_.push_back({0, end});  // a model without parameters
  bucket_ids_.resize(buckets_.size());
}

AllreduceUpdater::~AllreduceUpdater() = default;

void AllreduceUpdater::FillControl(bool contributes) {
  const std::size_t n = buffer_.size() - 3;
  buffer_[n] = contributes ? 1.0f : 0.0f;
  buffer_[n + 1] = has_next_ ? 1.0f : 0.0f;
  // Rank 0 (only it has joiners) asks at a commit step; the ring grows after it.
  const bool join = commit_every_ > 0 && (global_step_ + 1) % commit_every_ == 0 && hooks_.joiners_waiting && hooks_.joiners_waiting();
  // ... and, saving error feedback, whether the schedule makes a save due after this step.
  const bool gather = save_feedback_ && ring_->rank() == 0 && saver_->ScheduleDue(static_cast<std::uint64_t>(global_step_ + 1));
  buffer_[n + 2] = (join ? 1.0f : 0.0f) + (gather ? 2.0f : 0.0f);
}

Status AllreduceUpdater::StartBucket(model::Model& model, bool contributes) {
  const Bucket& b = buckets_[next_bucket_++];
  const std::span<float> grads = model.grads();
  const std::size_t n = grads.size(), grad_end = std::min(b.end, n);
  if (contributes) std::copy(grads.begin() + static_cast<std::ptrdiff_t>(b.begin), grads.begin() + static_cast<std::ptrdiff_t>(grad_end),
                             buffer_.begin() + static_cast<std::ptrdiff_t>(b.begin));
  else std::fill(buffer_.begin() + static_cast<std::ptrdiff_t>(b.begin), buffer_.begin() + static_cast<std::ptrdiff_t>(grad_end), 0.0f);
  const bool last = b.end == buffer_.size();
  if (last) FillControl(contributes);
  // 16-bit buckets hold the gradient only: the control floats' sums must stay exact counts.
  const std::size_t end = half_ ? grad_end : b.end;
  if (end > b.begin) {
    const std::span<float> values = std::span<float>(buffer_).subspan(b.begin, end - b.begin);
    TFD_ASSIGN_OR_RETURN(bucket_ids_[next_bucket_ - 1], half_ ? ring_->StartAllReduceHalf(values, *half_) : ring_->StartAllReduce(values));
  }
  if (half_ && last) {
    std::copy_n(buffer_.begin() + static_cast<std::ptrdiff_t>(n), 3, control_.begin());
    // The bucket's floats are in once its control floats are.
    TFD_ASSIGN_OR_RETURN(bucket_ids_[next_bucket_ - 1], ring_->StartAllReduce(control_));
  }
  return Status::Ok();
}

Status AllreduceUpdater::GradientsReady(model::Model& model, std::size_t from) {
  if (sync_layers_ || exchange_) return Status::Ok();  // the buckets wait for Step: backprop's sums come first, on every worker
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= from) TFD_RETURN_IF_ERROR(StartBucket(model, true));
  return next_bucket_ > 0 ? ring_->Progress() : Status::Ok();  // nothing in flight before the first bucket
}

Status AllreduceUpdater::WaitAndApply(model::Model& model) {
  const std::size_t n = model.params().size();
  float scale = 0.0f;
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    TFD_RETURN_IF_ERROR(ring_->Wait(bucket_ids_[k]));
    if (k == 0 && half_) std::copy(control_.begin(), control_.begin() + 3, buffer_.begin() + static_cast<std::ptrdiff_t>(n));
    if (k == 0 && buffer_[n] > 0.0f) scale = 1.0f / buffer_[n];  // the weight sum rides in the first bucket
    if (scale == 0.0f) continue;  // nobody contributed: no update, but every bucket is waited for
    const std::size_t begin = buckets_[k].begin, end = std::min(buckets_[k].end, n);
    state_.ApplyPart(model.params(), std::span<const float>(buffer_).first(n), {begin, end - begin}, global_step_, scale);
  }
  if (scale != 0.0f) state_.CountUpdate();
  return Status::Ok();
}

Result<std::int64_t> AllreduceUpdater::Step(model::Model& model, std::int64_t) { return Exchange(model, true); }

void AllreduceUpdater::Sum(std::span<float> values) {
  if (!sum_error_.ok()) return;
  // The ring cuts a collective into one segment per member: a short one (a few channels on a
  // larger ring) is padded with zeros to give each member a float at least, as EndOfEpoch's is.
  sum_scratch_.assign(std::max(values.size(), static_cast<std::size_t>(ring_->size())), 0.0f);
  std::copy(values.begin(), values.end(), sum_scratch_.begin());
  sum_error_ = ring_->AllReduce(sum_scratch_).WithContext(fmt::format("batch_norm statistics of global step {}", global_step_ + 1));
  std::copy(sum_scratch_.begin(), sum_scratch_.begin() + static_cast<std::ptrdiff_t>(values.size()), values.begin());
}

Result<std::int64_t> AllreduceUpdater::JoinStep(model::Model& model) {
  ++joined_;
  if (sync_layers_) model.JoinCrossReplicaSums();
  return Exchange(model, false);
}

Result<std::int64_t> AllreduceUpdater::Finish(model::Model& model) {
  if (save_feedback_) TFD_RETURN_IF_ERROR(GatherFeedback().WithContext("the final checkpoint's error feedback"));
  if (saver_ != nullptr && ring_->rank() == 0) TFD_RETURN_IF_ERROR(SaveState(model, /*final=*/true).WithContext("the final checkpoint"));
  TFD_RETURN_IF_ERROR(ring_->Finish().WithContext("leaving the ring"));
  return global_step_;
}

void AllreduceUpdater::EnableCheckpoints(train::WholeCheckpointing c, const model::Model& model, bool defer_epoch_end) {
  saver_ = std::make_unique<train::WholeSaver>(std::move(c), model, static_cast<std::uint64_t>(global_step_));
  saved_model_ = &model;
  defer_epoch_end_ = defer_epoch_end;
  if (!exchange_) return;
  const std::uint64_t floats = model.params().size() * static_cast<std::uint64_t>(ring_->size()) + exchange_->shared().size();
  save_feedback_ = floats <= ckpt::kMaxFeedbackFloats;
  if (!save_feedback_ && ring_->rank() == 0)
    spdlog::warn("checkpoint: the error feedback of {} workers x {} values is over a checkpoint record's 4 GiB: checkpoints leave it out, "
                 "and a resumed run starts it at 0", ring_->size(), model.params().size());
}

Status AllreduceUpdater::Restore(model::Model& model, const train::WholeRestore& restore, std::int64_t steps_per_epoch) {
  if (restore.params.size() != model.params().size())
    return Status::InvalidArgument(fmt::format("restore: {} parameters for a model of {}", restore.params.size(), model.params().size()));
  TFD_RETURN_IF_ERROR(state_.Restore(restore.slots, restore.updates));
  std::copy(restore.params.begin(), restore.params.end(), model.params().begin());
  global_step_ = static_cast<std::int64_t>(restore.global_step);
  ring_bytes_seen_ = ring_->value_bytes_sent();  // the restore's broadcasts are no step's
  if (restore.feedback && exchange_ && restore.feedback->method == exchange_->method()) {
    TFD_RETURN_IF_ERROR(exchange_->RestoreFeedback(train::FeedbackFor(restore, ring_->rank()), restore.feedback->shared)
                            .WithContext("restore"));
  }
  const auto local = static_cast<std::int64_t>(restore.resume_step), steps = std::max<std::int64_t>(steps_per_epoch, 1);
  position_ = {.epoch = static_cast<int>(local / steps + 1), .epoch_steps = local % steps, .local_step = local, .global_step = global_step_};
  restored_ = true;
  return Status::Ok();
}

void AllreduceUpdater::EpochJudged(const ckpt::EarlyStopping& state) {
  if (saver_ == nullptr || ring_->rank() != 0) return;
  saver_->SetEarlyStopping(state);
  // At an epoch's end a save due waits for the write before it: the epoch's judgement is its reason.
  if (SaveDue(/*at_epoch_end=*/true)) (void)SaveState(*saved_model_, false);
}

bool AllreduceUpdater::SaveDue(bool at_epoch_end) {
  const auto step = static_cast<std::uint64_t>(global_step_);
  if (save_feedback_) return gathered_step_ == global_step_ && saver_->Due(step, /*wait=*/true);
  return saver_->Due(step, at_epoch_end);
}

Status AllreduceUpdater::GatherFeedback() {
  const std::span<const float> mine = exchange_->residual();
  const std::size_t n = mine.size(), members = static_cast<std::size_t>(ring_->size()), rank = static_cast<std::size_t>(ring_->rank());
  std::vector<float> all(n * members, 0.0f);  // freed on return: saves are rare, and the buffer large
  std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(rank * n));
  TFD_RETURN_IF_ERROR(ring_->AllGather(all).WithContext(fmt::format("error feedback after global step {}", global_step_)));
  ring_bytes_seen_ = ring_->value_bytes_sent();  // a save's, not a step's (ring_bytes_per_step)
  if (rank != 0) return Status::Ok();
  ckpt::ErrorFeedback& f = gathered_.emplace();
  f.method = exchange_->method();
  f.rank = exchange_->rank();
  for (std::size_t r = 0; r < members; ++r)
    f.residuals.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(r * n), all.begin() + static_cast<std::ptrdiff_t>((r + 1) * n));
  const std::span<const float> shared = exchange_->shared();
  f.shared.assign(shared.begin(), shared.end());
  gathered_step_ = global_step_;
  return Status::Ok();
}

Status AllreduceUpdater::SaveState(const model::Model& model, bool final) {
  const std::span<const float> params = model.params(), slots = std::as_const(state_).slots();
  train::WholeState state{.global_step = static_cast<std::uint64_t>(global_step_),
                          .updates = state_.updates(),
                          .replicas = ring_->size(),
                          .epoch = position_.epoch,
                          .epoch_steps = position_.epoch_steps,
                          .final = final,
                          .params = std::vector<float>(params.begin(), params.end()),
                          .slots = std::vector<float>(slots.begin(), slots.end()),
                          .early_stopping = std::nullopt,
                          .feedback = std::nullopt};
  if (save_feedback_ && gathered_step_ == global_step_ && gathered_) state.feedback = *std::exchange(gathered_, std::nullopt);
  return saver_->Save(std::move(state), fmt::format("held by each of the {} workers", ring_->size()));
}

Result<bool> AllreduceUpdater::EndOfEpoch(bool stop) {
  std::vector<float> flag(static_cast<std::size_t>(ring_->size()), 0.0f);
  flag[0] = stop ? 1.0f : 0.0f;
  TFD_RETURN_IF_ERROR(ring_->AllReduce(flag).WithContext(fmt::format("the early-stopping decision after global step {}", global_step_)));
  return flag[0] != 0.0f;
}

std::string AllreduceUpdater::EpochNote() {
  std::string note = joined_ > 0 ? fmt::format("joined_without_data={}", joined_) : "";
  joined_ = 0;
  // The chunk values this worker sent on the ring per step, measured (docs/benchmarks.md checks it against the arithmetic).
  if (epoch_steps_ > 0)
    note += fmt::format("{}ring_bytes_per_step={}", note.empty() ? "" : " ", epoch_ring_bytes_ / static_cast<std::uint64_t>(epoch_steps_));
  epoch_ring_bytes_ = 0;
  epoch_steps_ = 0;
  return note;
}

Result<std::int64_t> AllreduceUpdater::Exchange(model::Model& model, bool contributes) {
  if (!sum_error_.ok()) {
    next_bucket_ = 0;
    return std::exchange(sum_error_, Status::Ok());
  }
  std::span<float> grads = model.grads();
  const std::size_t n = grads.size();
  Status sent;
  if (exchange_) {
    FillControl(contributes);
    sent = exchange_->Run(*ring_, grads, contributes, buffer_, global_step_);
  } else {
    // The buckets backprop has not started (all of them for a join step, or without the hook).
    while (sent.ok() && next_bucket_ < buckets_.size()) sent = StartBucket(model, contributes);
    if (sent.ok()) sent = WaitAndApply(model);  // applies the update bucket by bucket
  }
  next_bucket_ = 0;
  has_next_ = false;  // a join step never brings data of this worker's
  TFD_RETURN_IF_ERROR(sent.WithContext(fmt::format("all-reduce of global step {}", global_step_ + 1)));
  ++epoch_steps_;
  const std::uint64_t ring_bytes = ring_->value_bytes_sent();
  epoch_ring_bytes_ += ring_bytes - ring_bytes_seen_;
  ring_bytes_seen_ = ring_bytes;
  if (allreduce_bytes_ != nullptr) allreduce_bytes_->Increment(static_cast<double>(step_bytes_));
  // Small integers: the sums are exact, and the same bits on every worker.
  const float contributors = buffer_[n];
  others_have_data_ = buffer_[n + 1] > 0.0f;
  ++global_step_;
  if (contributors > 0.0f && exchange_) {
    // topk, powersgd: the sums' average, read from the buffer (model.grads() keeps this worker's own gradient), at
    // the rate of the steps before this one, as on every worker.
    state_.ApplyPart(model.params(), std::span<const float>(buffer_).first(n), {0, n}, global_step_ - 1, 1.0f / contributors);
    state_.CountUpdate();
  }
  const int requests = static_cast<int>(buffer_[n + 2]);  // rank 0's alone: an exact small integer
  if ((requests & 2) != 0) TFD_RETURN_IF_ERROR(GatherFeedback());
  // A save due at an epoch's last step (no member has another batch) waits for the chief's judgement.
  if (saver_ != nullptr && ring_->rank() == 0 && !(defer_epoch_end_ && !others_have_data_) && SaveDue(/*at_epoch_end=*/false)) {
    if (Status s = SaveState(model, false); !s.ok()) spdlog::warn("checkpoint: {}", s.message());
  }
  if (commit_every_ > 0) {
    // This step's all-reduce is done here, so every member finished the step before it.
    if (pending_.valid && pending_.global_step < global_step_) {
      current_ = std::move(pending_);
      pending_ = Commit{};
    }
    if (global_step_ % commit_every_ == 0) {
      TakeCommit(model, &pending_);
      // After an epoch's last step the loop goes on with the next epoch.
      if (!others_have_data_) pending_.position = {.epoch = position_.epoch + 1, .epoch_steps = 0, .local_step = position_.local_step,
                                                   .global_step = global_step_};
    }
    // Every member saw the same sums: the ring grows now, at the commit just taken. At an epoch's
    // last step it waits for the next commit, so every epoch ends (and is judged) in one ring.
    if ((requests & 1) != 0 && others_have_data_ && pending_.valid && pending_.global_step == global_step_ && hooks_.grow) {
      TFD_RETURN_IF_ERROR(Settle(model, hooks_.grow(global_step_)));
      regrouped_ = current_.position;
    }
  }
  return global_step_;
}

void AllreduceUpdater::TakeCommit(const model::Model& model, Commit* into) {
  into->valid = true;
  into->global_step = global_step_;
  into->position = position_;
  into->position.global_step = global_step_;
  const std::span<const float> params = model.params();
  into->params.assign(params.begin(), params.end());
  const std::span<const float> slots = std::as_const(state_).slots();
  into->slots.assign(slots.begin(), slots.end());
  into->updates = state_.updates();
}

void AllreduceUpdater::EnableElastic(const model::Model& model, int commit_every_steps, ElasticHooks hooks) {
  commit_every_ = commit_every_steps;
  hooks_ = std::move(hooks);
  if (!restored_) position_ = {.epoch = 1, .epoch_steps = 0, .local_step = 0, .global_step = 0};  // an allreduce run starts at epoch 1
  TakeCommit(model, &current_);  // every member holds the initial parameters once the broadcast is done
}

Result<train::Updater::Position> AllreduceUpdater::Join(model::Model& model, Reformed formed) {
  newcomer_ = true;
  current_ = Commit{};
  TFD_RETURN_IF_ERROR(Settle(model, std::move(formed)));
  return current_.position;
}

std::optional<train::Updater::Share> AllreduceUpdater::EpochShare() {
  if (commit_every_ == 0) return std::nullopt;
  return Share{ring_->rank(), ring_->size()};
}

Result<train::Updater::Position> AllreduceUpdater::Recover(model::Model& model, const Status& failure) {
  if (commit_every_ == 0) return failure;
  TFD_RETURN_IF_ERROR(Settle(model, hooks_.reform(failure, current_.global_step)));
  return current_.position;
}

Status AllreduceUpdater::Settle(model::Model& model, Result<Reformed> r) {
  for (;;) {
    if (!r.ok()) return r.status();
    Commit* back = current_.valid && current_.global_step == r->commit_step ? &current_
                   : pending_.valid && pending_.global_step == r->commit_step ? &pending_
                                                                              : nullptr;
    if (back == nullptr && !newcomer_) {
      return Status::Internal(fmt::format("elastic: the members agreed on the commit at global step {}, which this worker does not hold "
                                          "(its current commit is at global step {})", r->commit_step, current_.global_step));
    }
    if (back != nullptr && back != &current_) current_ = std::move(*back);
    pending_ = Commit{};
    ring_ = std::move(r->ring);
    Status sent = BroadcastCommit(model);
    if (sent.ok()) break;
    // A loss while the ring re-forms: it re-forms again without the lost member.
    r = hooks_.reform(sent.WithContext("broadcast of the committed state"), newcomer_ ? 0 : current_.global_step);
  }
  newcomer_ = false;
  ring_bytes_seen_ = ring_->value_bytes_sent();  // a new ring counts from its own 0
  std::copy(current_.params.begin(), current_.params.end(), model.params().begin());
  TFD_RETURN_IF_ERROR(state_.Restore(current_.slots, current_.updates));
  sum_error_ = Status::Ok();
  global_step_ = current_.global_step;
  next_bucket_ = 0;
  has_next_ = false;
  others_have_data_ = true;  // an epoch taken up at its end joins one step, which ends it on every member
  return Status::Ok();
}

namespace {

// A counter as two floats, each exact (< 2^24): the high bits and the low 20.
void PutCounter(std::int64_t v, float* at) {
  at[0] = static_cast<float>(v >> 20);
  at[1] = static_cast<float>(v & 0xfffff);
}
std::int64_t GetCounter(const float* at) { return (static_cast<std::int64_t>(at[0]) << 20) + static_cast<std::int64_t>(at[1]); }

}  // namespace

Status AllreduceUpdater::BroadcastCommit(model::Model& model) {
  const std::size_t np = model.params().size(), ns = std::as_const(state_).slots().size();
  constexpr std::size_t kCounters = 4;  // global step, epoch, steps of the epoch, optimizer updates
  std::vector<float> buf(np + ns + 2 * kCounters, 0.0f);
  if (ring_->rank() == 0) {
    if (!current_.valid || current_.params.size() != np || current_.slots.size() != ns)
      return Status::Internal("elastic: rank 0 of the re-formed ring holds no commit to broadcast");
    std::copy(current_.params.begin(), current_.params.end(), buf.begin());
    std::copy(current_.slots.begin(), current_.slots.end(), buf.begin() + static_cast<std::ptrdiff_t>(np));
    float* c = buf.data() + np + ns;
    PutCounter(current_.global_step, c);
    PutCounter(current_.position.epoch, c + 2);
    PutCounter(current_.position.epoch_steps, c + 4);
    PutCounter(current_.updates, c + 6);
  }
  TFD_RETURN_IF_ERROR(ring_->Broadcast(buf));
  const std::int64_t local_step = current_.valid ? current_.position.local_step : 0;  // each worker's own
  const float* c = buf.data() + np + ns;
  current_.valid = true;
  current_.params.assign(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(np));
  current_.slots.assign(buf.begin() + static_cast<std::ptrdiff_t>(np), buf.begin() + static_cast<std::ptrdiff_t>(np + ns));
  current_.global_step = GetCounter(c);
  current_.position = {.epoch = static_cast<int>(GetCounter(c + 2)), .epoch_steps = GetCounter(c + 4), .local_step = local_step,
                       .global_step = current_.global_step};
  current_.updates = GetCounter(c + 6);
  return Status::Ok();
}

}  // namespace tfd::allreduce
