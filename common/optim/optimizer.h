#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/base/status.h"
#include "common/config/job.h"

namespace tfd::optim {

// An update rule over flat float spans, with TensorFlow's semantics. Its state (slots: num_slots()
// floats per parameter, and the count of updates applied) belongs to whoever holds the parameters,
// so a ps shard, a worker and a checkpoint all keep it the same way.
//
// Threads: stateless and without a lock; any thread may call any method, several at once.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string Describe() const = 0;  // "adam learning_rate=0.001 beta1=0.9 ... weight_decay=..."
  // Slot names in order ("momentum"; "m", "v"); their count is the floats kept per parameter.
  virtual std::vector<std::string> SlotNames() const = 0;
  int num_slots() const { return static_cast<int>(SlotNames().size()); }

  // Applies update number `t` (1-based) of `grad` times `grad_scale` to `params` at learning rate
  // `lr` (element i's gradient is grad[i] * grad_scale rounded to float, then used as the rule
  // says; a scale of 1 leaves grad's bits as they are). `slots` holds num_slots() arrays of
  // params.size() floats, zero before the first update: slot k of element i is
  // slots[k * slot_stride + i] (slot_stride params.size(): back to back; larger: the slots of a
  // part of a larger buffer, OptimizerState::ApplyPart). Spans must not overlap.
  virtual void Apply(std::span<float> params, std::span<const float> grad, std::span<float> slots,
                     std::int64_t t, double lr, std::size_t slot_stride, float grad_scale) const = 0;

  // The rate of the update that follows global step `step` (optim::LearningRate of the spec).
  double LearningRate(std::int64_t step) const;
  double weight_decay() const { return spec_.weight_decay; }
  const config::OptimizerSpec& spec() const { return spec_; }

 protected:
  explicit Optimizer(const config::OptimizerSpec& spec) : spec_(spec) {}
  config::OptimizerSpec spec_;
};

// sgd:      p -= lr * g
// momentum: a = momentum * a + g;  p -= lr * a   (use_nesterov: p -= lr * (g + momentum * a))
// adam:     m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//           p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + epsilon)   (TF's "epsilon hat")
// lr follows spec.schedule (optim/schedule.h); with spec.weight_decay > 0, OptimizerState adds
// weight_decay * p to the gradient of the decayed ranges first.
std::unique_ptr<Optimizer> MakeOptimizer(const config::OptimizerSpec& spec);

// A run of floats [offset, offset + length) of a parameter buffer.
struct Range {
  std::size_t offset = 0, length = 0;
};
// Whether weight decay applies to the variable (or the slice of one, "dense/kernel[0:39200]")
// named `name`: kernels do, biases do not.
bool IsDecayed(std::string_view name);
// The decayed ranges of a buffer made of consecutive named runs of floats (variables, or a ps's
// chunks), in buffer order.
std::vector<Range> DecayedRanges(std::span<const std::pair<std::string, std::size_t>> runs);

// The parameters, slots and update count of one block of variables, with its optimizer applied
// locally: the single-process trainer's (and later each ps shard's) state.
//
// Threads: not thread-safe and holds no lock: one thread calls every method (the training thread,
// or the ps store's handlers, one at a time under the store's mutex).
class OptimizerState {
 public:
  // `decayed`: the ranges of the parameters that the optimizer's weight decay applies to.
  OptimizerState(const Optimizer& opt, std::size_t num_params, std::vector<Range> decayed = {})
      : opt_(opt),
        num_slots_(static_cast<std::size_t>(opt.num_slots())),
        slots_(num_params * num_slots_, 0.0f),
        decayed_(std::move(decayed)) {}
  // Applies `grad` (plus weight decay) at the rate of global step `step`: the number of updates
  // applied to these parameters before this one, counted the same way on every task.
  void Apply(std::span<float> params, std::span<const float> grad, std::int64_t step);
  // As above with step = updates(): the count this state has applied.
  void Apply(std::span<float> params, std::span<const float> grad) { Apply(params, grad, t_); }
  // One update applied in parts, as the parts of its gradient come (an all-reduce's buckets): each
  // call applies the update after updates() to the elements of `part` only (of the whole buffers
  // `params` and `grad`), the same bits Apply over the whole buffer gives them; CountUpdate() after
  // the last part. Parts must not overlap; elements of no part keep their values and slots.
  // `grad_scale`: the gradient is grad times it (an average from a sum), as if scaled first.
  void ApplyPart(std::span<float> params, std::span<const float> grad, Range part, std::int64_t step, float grad_scale = 1.0f);
  void CountUpdate() { ++t_; }
  std::int64_t updates() const { return t_; }
  std::span<float> slots() { return slots_; }
  std::span<const float> slots() const { return slots_; }
  // Takes saved state back (a checkpoint's, or a restarted ps's): `slots` as slots() lays them out,
  // and the count of updates they reflect. InvalidArgument when the size differs or updates < 0.
  Status Restore(std::span<const float> slots, std::int64_t updates);

 private:
  const Optimizer& opt_;
  const std::size_t num_slots_;  // opt_.num_slots()
  std::vector<float> slots_;
  std::vector<Range> decayed_;
  std::vector<float> decay_scratch_;  // grad + weight_decay * params, when there is decay
  std::int64_t t_ = 0;
};

}  // namespace tfd::optim
