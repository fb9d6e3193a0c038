#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/base/status.h"
#include "common/collective/collective.h"
#include "common/compress/powersgd.h"
#include "common/compress/topk.h"
#include "common/config/job.h"
#include "common/model/model.h"

namespace tfd::allreduce {

// One step's exchange of the gradient under update.compression topk or powersgd (fp16 and bf16
// are the ring's own: AllreduceUpdater's buckets travel as 16 bits). Every worker calls Run with
// the same ring in the same order; afterwards each holds the same bits:
// - topk: an all-gather of every worker's (index, value) pairs and its control floats, then a sum
//   in rank order (dense[index] += value, rank 0 first), so the order of every addition is fixed.
// - powersgd: an all-reduce of every matrix's P, the whole tensors' gradients and the control
//   floats, then one of every matrix's Q (compress::PowerSgd), in float32 on the ring.
// Not thread-safe: the training thread's, as the updater that owns it.
class CompressedExchange {
 public:
  static constexpr std::size_t kControl = 3;  // AllreduceUpdater's floats after the gradient
  // Null for none, fp16 and bf16. `seed` is the job's (PowerSGD's Q starts from it); `steps_per_epoch`
  // turns topk's warmup_epochs into steps.
  static std::unique_ptr<CompressedExchange> Make(const config::CompressionSpec& spec, const model::Model& model, std::uint64_t seed,
                                                  std::int64_t steps_per_epoch = 0);

  // `buffer` holds grads.size() floats, then kControl this worker's control floats; afterwards it
  // holds the sum over workers of what the method reconstructs of each gradient, and the control
  // floats' sums. contributes false: this worker adds nothing but its control floats (its error
  // feedback waits for its next contributing step). Corruption when a peer's index is out of range.
  // `step`: the global step being taken, from 0 (topk's warm-up: every worker keeps as many).
  Status Run(collective::Collective& ring, std::span<const float> grads, bool contributes, std::span<float> buffer, std::int64_t step);

  // Floats this worker puts into the step's collectives (its wire share, before the ring's
  // 2(n-1)/n factor of an all-reduce or n-1 of an all-gather): for the log line.
  std::size_t floats_per_step() const;
  std::string Describe() const;  // "topk ratio 0.01: 2352 of 235146 values"

  // The error feedback a checkpoint carries (between steps): this worker's residual (topk's, or
  // powersgd's error; as many floats as the gradient) and what every worker holds alike
  // (powersgd's Q; empty for topk).
  config::CompressionSpec::Method method() const { return spec_.method; }
  std::uint32_t rank() const { return powersgd_ ? static_cast<std::uint32_t>(spec_.rank) : 0; }  // powersgd's, which lays Q out
  std::span<const float> residual() const;
  std::span<const float> shared() const;
  // Takes a checkpoint's back. `shared` of another size (powersgd at another rank) is left out:
  // Q keeps its warm start. InvalidArgument when `residual` is not the gradient's size.
  Status RestoreFeedback(std::span<const float> residual, std::span<const float> shared);

 private:
  CompressedExchange() = default;
  Status RunTopK(collective::Collective& ring, std::span<const float> grads, bool contributes, std::span<float> buffer, std::int64_t step);
  Status RunPowerSgd(collective::Collective& ring, std::span<const float> grads, bool contributes, std::span<float> buffer);

  config::CompressionSpec spec_;
  std::size_t n_ = 0;  // gradient floats
  std::unique_ptr<compress::TopK> topk_;
  std::unique_ptr<compress::PowerSgd> powersgd_;
  std::vector<std::uint32_t> indices_;  // topk: this worker's kept indices
  std::vector<float> values_;           // ... and values
  std::vector<float> gathered_;         // topk: every worker's part; powersgd: [P | whole | control] padded
  std::vector<float> q_;                // powersgd: every matrix's Q, padded to the ring's size
};

}  // namespace tfd::allreduce
