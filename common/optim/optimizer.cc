#include "common/optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/base/check.h"
#include "common/optim/schedule.h"

namespace tfd::optim {
namespace {

// The updates are plain element-wise loops over restrict pointers: the compiler vectorises them
// with IEEE-exact operations, so an element's new value never depends on where it sits in the
// span. That is what keeps a sync run bit-identical whatever the number of ps tasks (a vector
// library's fast approximate sqrt in the body and exact one in the tail would not).

std::string DecaySuffix(const config::OptimizerSpec& spec) {
  return spec.weight_decay > 0 ? fmt::format(" weight_decay={}", spec.weight_decay) : "";
}

class Sgd final : public Optimizer {
 public:
  explicit Sgd(const config::OptimizerSpec& spec) : Optimizer(spec) {}
  std::string Describe() const override { return fmt::format("sgd {}{}", DescribeLearningRate(spec_), DecaySuffix(spec_)); }
  std::vector<std::string> SlotNames() const override { return {}; }
  void Apply(std::span<float> p, std::span<const float> g, std::span<float> slots, std::int64_t t, double lr,
             std::size_t slot_stride, float gs) const override {
    (void)slots;
    (void)t;
    (void)slot_stride;
    TFD_CHECK(p.size() == g.size());
    const auto lr_f = static_cast<float>(lr);
    float* __restrict pp = p.data();
    const float* __restrict gp = g.data();
    for (std::size_t i = 0; i < p.size(); ++i) pp[i] -= lr_f * (gp[i] * gs);
  }
};

class Momentum final : public Optimizer {
 public:
  explicit Momentum(const config::OptimizerSpec& spec)
      : Optimizer(spec), momentum_(static_cast<float>(spec.momentum)), nesterov_(spec.use_nesterov) {}
  std::string Describe() const override {
    return fmt::format("momentum {} momentum={}{}{}", DescribeLearningRate(spec_), momentum_, nesterov_ ? " nesterov" : "",
                       DecaySuffix(spec_));
  }
  std::vector<std::string> SlotNames() const override { return {"momentum"}; }
  void Apply(std::span<float> p, std::span<const float> g, std::span<float> slots, std::int64_t t, double lr,
             std::size_t slot_stride, float gs) const override {
    (void)t;
    (void)slot_stride;  // one slot
    const auto lr_f = static_cast<float>(lr);
    TFD_CHECK(p.size() == g.size() && slots.size() >= p.size());
    float* __restrict pp = p.data();
    float* __restrict a = slots.data();
    const float* __restrict gp = g.data();
    if (nesterov_) {
      for (std::size_t i = 0; i < p.size(); ++i) {
        const float gi = gp[i] * gs;
        a[i] = momentum_ * a[i] + gi;
        pp[i] -= lr_f * (gi + momentum_ * a[i]);
      }
    } else {
      for (std::size_t i = 0; i < p.size(); ++i) {
        a[i] = momentum_ * a[i] + gp[i] * gs;
        pp[i] -= lr_f * a[i];
      }
    }
  }

 private:
  float momentum_;
  bool nesterov_;
};

class Adam final : public Optimizer {
 public:
  explicit Adam(const config::OptimizerSpec& spec) : Optimizer(spec), b1_(spec.beta1), b2_(spec.beta2), eps_(spec.epsilon) {}
  std::string Describe() const override {
    return fmt::format("adam {} beta1={} beta2={} epsilon={}{}", DescribeLearningRate(spec_), b1_, b2_, eps_, DecaySuffix(spec_));
  }
  std::vector<std::string> SlotNames() const override { return {"m", "v"}; }
  void Apply(std::span<float> p, std::span<const float> g, std::span<float> slots, std::int64_t t, double lr,
             std::size_t slot_stride, float gs) const override {
    TFD_CHECK(p.size() == g.size() && slot_stride >= p.size() && slots.size() >= slot_stride + p.size() && t >= 1);
    float* __restrict pp = p.data();
    float* __restrict m = slots.data();
    float* __restrict v = slots.data() + slot_stride;
    const float* __restrict gp = g.data();
    const auto lr_t = static_cast<float>(lr * std::sqrt(1 - std::pow(b2_, t)) / (1 - std::pow(b1_, t)));
    const auto b1 = static_cast<float>(b1_), b2 = static_cast<float>(b2_), eps = static_cast<float>(eps_);
    for (std::size_t i = 0; i < p.size(); ++i) {
      const float gi = gp[i] * gs;
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      pp[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
    }
  }

 private:
  double b1_, b2_, eps_;
};

}  // namespace

std::unique_ptr<Optimizer> MakeOptimizer(const config::OptimizerSpec& spec) {
  switch (spec.type) {
    case config::OptimizerSpec::Type::kSgd: return std::make_unique<Sgd>(spec);
    case config::OptimizerSpec::Type::kMomentum: return std::make_unique<Momentum>(spec);
    case config::OptimizerSpec::Type::kAdam: return std::make_unique<Adam>(spec);
  }
  TFD_CHECK(false);
}

double Optimizer::LearningRate(std::int64_t step) const { return optim::LearningRate(spec_, step); }

bool IsDecayed(std::string_view name) {
  name = name.substr(0, name.find('['));
  const std::size_t slash = name.rfind('/');
  return name.substr(slash == std::string_view::npos ? 0 : slash + 1) == "kernel";
}

std::vector<Range> DecayedRanges(std::span<const std::pair<std::string, std::size_t>> runs) {
  std::vector<Range> out;
  std::size_t offset = 0;
  for (const auto& [name, length] : runs) {
    if (IsDecayed(name)) out.push_back({offset, length});
    offset += length;
  }
  return out;
}

void OptimizerState::Apply(std::span<float> params, std::span<const float> grad, std::int64_t step) {
  const double lr = opt_.LearningRate(step);
  const auto decay = static_cast<float>(opt_.weight_decay());
  if (decay > 0 && !decayed_.empty()) {
    TFD_CHECK(params.size() == grad.size());
    decay_scratch_.assign(grad.begin(), grad.end());
    for (const Range& r : decayed_) {
      TFD_CHECK(r.offset + r.length <= params.size());
      float* __restrict g = decay_scratch_.data() + r.offset;
      const float* __restrict p = params.data() + r.offset;
      for (std::size_t i = 0; i < r.length; ++i) g[i] += decay * p[i];
    }
    grad = decay_scratch_;
  }
  opt_.Apply(params, grad, slots_, ++t_, lr, params.size(), 1.0f);
}

void OptimizerState::ApplyPart(std::span<float> params, std::span<const float> grad, Range part, std::int64_t step, float grad_scale) {
  const std::size_t n = params.size();
  TFD_CHECK(grad.size() == n && part.offset + part.length <= n && slots_.size() == n * num_slots_);
  if (part.length == 0) return;
  const double lr = opt_.LearningRate(step);
  std::span<const float> g = grad.subspan(part.offset, part.length);
  const auto decay = static_cast<float>(opt_.weight_decay());
  if (decay > 0 && !decayed_.empty()) {
    // Apply's decay, on the decayed ranges' overlap with the part (of the scaled gradient).
    decay_scratch_.resize(part.length);
    for (std::size_t i = 0; i < part.length; ++i) decay_scratch_[i] = g[i] * grad_scale;
    grad_scale = 1.0f;
    for (const Range& r : decayed_) {
      const std::size_t begin = std::max(r.offset, part.offset), end = std::min(r.offset + r.length, part.offset + part.length);
      if (begin >= end) continue;
      float* __restrict d = decay_scratch_.data() + (begin - part.offset);
      const float* __restrict p = params.data() + begin;
      for (std::size_t i = 0; i < end - begin; ++i) d[i] += decay * p[i];
    }
    g = decay_scratch_;
  }
  const std::span<float> slots = num_slots_ == 0 ? std::span<float>() : std::span<float>(slots_).subspan(part.offset);
  opt_.Apply(params.subspan(part.offset, part.length), g, slots, t_ + 1, lr, n, grad_scale);
}

Status OptimizerState::Restore(std::span<const float> slots, std::int64_t updates) {
  if (slots.size() != slots_.size())
    return Status::InvalidArgument(fmt::format("optimizer state: {} slot floats where {} are kept", slots.size(), slots_.size()));
  if (updates < 0) return Status::InvalidArgument(fmt::format("optimizer state: update count {}", updates));
  std::copy(slots.begin(), slots.end(), slots_.begin());
  t_ = updates;
  return Status::Ok();
}

}  // namespace tfd::optim
