#include "daemon/allreduce/allreduce_updater.h"

#include <fmt/format.h>

namespace tfd::allreduce {

AllreduceUpdater::AllreduceUpdater(collective::Ring& ring, const optim::Optimizer& optimizer, const model::Model& model, int bucket_kb,
                                   metrics::Counter* allreduce_bytes)
    : ring_(ring),
      state_(optimizer, model.params().size(), optim::DecayedRanges(model::VariableRuns(model))),
      buffer_(model.params().size() + 2),
      allreduce_bytes_(allreduce_bytes) {
  const std::size_t min_floats = static_cast<std::size_t>(bucket_kb) * 1024 / 4;
  const std::vector<std::size_t>& starts = model.layer_starts();
  std::size_t end = buffer_.size();  // the last bucket also carries the two floats
  for (std::size_t i = starts.size() - 1; i-- > 0;) {
    const std::size_t begin = starts[i];
    if (begin == 0 || (bucket_kb > 0 && end - begin >= min_floats)) {
      buckets_.push_back({begin, end});
      end = begin;
    }
  }
  if (buckets_.empty() || buckets_.back().begin != 0) buckets_.push_back({0, end});  // a model without parameters
}

Status AllreduceUpdater::StartBucket(model::Model& model, bool contributes) {
  const Bucket& b = buckets_[next_bucket_++];
  const std::span<float> grads = model.grads();
  const std::size_t n = grads.size(), grad_end = std::min(b.end, n);
  if (contributes) std::copy(grads.begin() + static_cast<std::ptrdiff_t>(b.begin), grads.begin() + static_cast<std::ptrdiff_t>(grad_end),
                             buffer_.begin() + static_cast<std::ptrdiff_t>(b.begin));
  else std::fill(buffer_.begin() + static_cast<std::ptrdiff_t>(b.begin), buffer_.begin() + static_cast<std::ptrdiff_t>(grad_end), 0.0f);
  if (b.end == buffer_.size()) {
    buffer_[n] = contributes ? 1.0f : 0.0f;
    buffer_[n + 1] = has_next_ ? 1.0f : 0.0f;
  }
  TFD_ASSIGN_OR_RETURN(last_id_, ring_.StartAllReduce(std::span<float>(buffer_).subspan(b.begin, b.end - b.begin)));
  return Status::Ok();
}

Status AllreduceUpdater::GradientsReady(model::Model& model, std::size_t from) {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= from) TFD_RETURN_IF_ERROR(StartBucket(model, true));
  return next_bucket_ > 0 ? ring_.Progress() : Status::Ok();  // nothing in flight before the first bucket
}

Result<std::int64_t> AllreduceUpdater::Step(model::Model& model, std::int64_t) { return Exchange(model, true); }

Result<std::int64_t> AllreduceUpdater::JoinStep(model::Model& model) {
  ++joined_;
  return Exchange(model, false);
}

Result<std::int64_t> AllreduceUpdater::Finish(model::Model&) {
  TFD_RETURN_IF_ERROR(ring_.Finish().WithContext("leaving the ring"));
  return global_step_;
}

Result<bool> AllreduceUpdater::EndOfEpoch(bool stop) {
  std::vector<float> flag(static_cast<std::size_t>(ring_.size()), 0.0f);
  flag[0] = stop ? 1.0f : 0.0f;
  TFD_RETURN_IF_ERROR(ring_.AllReduce(flag).WithContext(fmt::format("the early-stopping decision after global step {}", global_step_)));
  return flag[0] != 0.0f;
}

std::string AllreduceUpdater::EpochNote() {
  std::string note = joined_ > 0 ? fmt::format("joined_without_data={}", joined_) : "";
  joined_ = 0;
  return note;
}

Result<std::int64_t> AllreduceUpdater::Exchange(model::Model& model, bool contributes) {
  std::span<float> grads = model.grads();
  const std::size_t n = grads.size();
  // The buckets backprop has not started (all of them for a join step, or without the hook).
  Status sent;
  while (sent.ok() && next_bucket_ < buckets_.size()) sent = StartBucket(model, contributes);
  next_bucket_ = 0;
  has_next_ = false;  // a join step never brings data of this worker's
  if (sent.ok()) sent = ring_.Wait(last_id_);
  TFD_RETURN_IF_ERROR(sent.WithContext(fmt::format("all-reduce of global step {}", global_step_ + 1)));
  if (allreduce_bytes_ != nullptr) allreduce_bytes_->Increment(static_cast<double>(buffer_.size() * sizeof(float)));
  // Small integers: the sums are exact, and the same bits on every worker.
  const float contributors = buffer_[n];
  others_have_data_ = buffer_[n + 1] > 0.0f;
  ++global_step_;
  if (contributors > 0.0f) {
    const float scale = 1.0f / contributors;
    for (std::size_t i = 0; i < n; ++i) grads[i] = buffer_[i] * scale;
    state_.Apply(model.params(), grads, global_step_ - 1);  // the rate of the steps before this one, as on every worker
  }
  return global_step_;
}

}  // namespace tfd::allreduce
