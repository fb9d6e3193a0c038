#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/config/job.h"

namespace tfd::optim {

// An update rule over flat float spans, with TensorFlow's semantics. The optimizer itself is
// stateless and thread-safe; its state (slots: num_slots() floats per parameter, and the count of
// updates applied) belongs to whoever holds the parameters, so a ps shard, a worker and a
// checkpoint all keep it the same way.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string Describe() const = 0;  // "adam lr=0.001 beta1=0.9 ..."
  // Slot names in order ("momentum"; "m", "v"); their count is the floats kept per parameter.
  virtual std::vector<std::string> SlotNames() const = 0;
  int num_slots() const { return static_cast<int>(SlotNames().size()); }

  // Applies update number `t` (1-based) of `grad` to `params`. `slots` holds num_slots() arrays of
  // params.size() floats, back to back, zero before the first update. Spans must not overlap.
  virtual void Apply(std::span<float> params, std::span<const float> grad, std::span<float> slots,
                     std::int64_t t) const = 0;
};

// sgd:      p -= lr * g
// momentum: a = momentum * a + g;  p -= lr * a   (use_nesterov: p -= lr * (g + momentum * a))
// adam:     m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//           p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + epsilon)   (TF's "epsilon hat")
std::unique_ptr<Optimizer> MakeOptimizer(const config::OptimizerSpec& spec);

// The parameters, slots and update count of one block of variables, with its optimizer applied
// locally: the single-process trainer's (and later each ps shard's) state.
class OptimizerState {
 public:
  OptimizerState(const Optimizer& opt, std::size_t num_params)
      : opt_(opt), slots_(num_params * static_cast<std::size_t>(opt.num_slots()), 0.0f) {}
  void Apply(std::span<float> params, std::span<const float> grad) { opt_.Apply(params, grad, slots_, ++t_); }
  std::int64_t updates() const { return t_; }
  std::span<float> slots() { return slots_; }
  std::span<const float> slots() const { return slots_; }
  // Takes saved state back (a checkpoint's, or a restarted ps's): `slots` as slots() lays them out,
  // and the count of updates they reflect. InvalidArgument when the size differs or updates < 0.
  Status Restore(std::span<const float> slots, std::int64_t updates);

 private:
  const Optimizer& opt_;
  std::vector<float> slots_;
  std::int64_t t_ = 0;
};

}  // namespace tfd::optim
