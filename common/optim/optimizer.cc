#include "common/optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/base/check.h"

namespace tfd::optim {
namespace {

// The updates are plain element-wise loops over restrict pointers: the compiler vectorises them
// with IEEE-exact operations, so an element's new value never depends on where it sits in the
// span. That is what keeps a sync run bit-identical whatever the number of ps tasks (a vector
// library's fast approximate sqrt in the body and exact one in the tail would not).

class Sgd final : public Optimizer {
 public:
  explicit Sgd(float lr) : lr_(lr) {}
  std::string Describe() const override { return fmt::format("sgd learning_rate={}", lr_); }
  std::vector<std::string> SlotNames() const override { return {}; }
  void Apply(std::span<float> p, std::span<const float> g, std::span<float> slots, std::int64_t t) const override {
    (void)slots;
    (void)t;
    TFD_CHECK(p.size() == g.size());
    float* __restrict pp = p.data();
    const float* __restrict gp = g.data();
    for (std::size_t i = 0; i < p.size(); ++i) pp[i] -= lr_ * gp[i];
  }

 private:
  float lr_;
};

class Momentum final : public Optimizer {
 public:
  Momentum(float lr, float momentum, bool nesterov) : lr_(lr), momentum_(momentum), nesterov_(nesterov) {}
  std::string Describe() const override {
    return fmt::format("momentum learning_rate={} momentum={}{}", lr_, momentum_, nesterov_ ? " nesterov" : "");
  }
  std::vector<std::string> SlotNames() const override { return {"momentum"}; }
  void Apply(std::span<float> p, std::span<const float> g, std::span<float> slots, std::int64_t t) const override {
    (void)t;
    TFD_CHECK(p.size() == g.size() && slots.size() == p.size());
    float* __restrict pp = p.data();
    float* __restrict a = slots.data();
    const float* __restrict gp = g.data();
    if (nesterov_) {
      for (std::size_t i = 0; i < p.size(); ++i) {
        a[i] = momentum_ * a[i] + gp[i];
        pp[i] -= lr_ * (gp[i] + momentum_ * a[i]);
      }
    } else {
      for (std::size_t i = 0; i < p.size(); ++i) {
        a[i] = momentum_ * a[i] + gp[i];
        pp[i] -= lr_ * a[i];
      }
    }
  }

 private:
  float lr_, momentum_;
  bool nesterov_;
};

class Adam final : public Optimizer {
 public:
  Adam(double lr, double b1, double b2, double eps) : lr_(lr), b1_(b1), b2_(b2), eps_(eps) {}
  std::string Describe() const override {
    return fmt::format("adam learning_rate={} beta1={} beta2={} epsilon={}", lr_, b1_, b2_, eps_);
  }
  std::vector<std::string> SlotNames() const override { return {"m", "v"}; }
  void Apply(std::span<float> p, std::span<const float> g, std::span<float> slots, std::int64_t t) const override {
    TFD_CHECK(p.size() == g.size() && slots.size() == 2 * p.size() && t >= 1);
    float* __restrict pp = p.data();
    float* __restrict m = slots.data();
    float* __restrict v = slots.data() + p.size();
    const float* __restrict gp = g.data();
    const auto lr_t = static_cast<float>(lr_ * std::sqrt(1 - std::pow(b2_, t)) / (1 - std::pow(b1_, t)));
    const auto b1 = static_cast<float>(b1_), b2 = static_cast<float>(b2_), eps = static_cast<float>(eps_);
    for (std::size_t i = 0; i < p.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * gp[i];
      v[i] = b2 * v[i] + (1 - b2) * gp[i] * gp[i];
      pp[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
    }
  }

 private:
  double lr_, b1_, b2_, eps_;
};

}  // namespace

std::unique_ptr<Optimizer> MakeOptimizer(const config::OptimizerSpec& spec) {
  const auto lr = static_cast<float>(spec.learning_rate);
  switch (spec.type) {
    case config::OptimizerSpec::Type::kSgd: return std::make_unique<Sgd>(lr);
    case config::OptimizerSpec::Type::kMomentum:
      return std::make_unique<Momentum>(lr, static_cast<float>(spec.momentum), spec.use_nesterov);
    case config::OptimizerSpec::Type::kAdam:
      return std::make_unique<Adam>(spec.learning_rate, spec.beta1, spec.beta2, spec.epsilon);
  }
  TFD_CHECK(false);
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
