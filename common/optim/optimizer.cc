#include "common/optim/optimizer.h"

#include <cmath>

#include <Eigen/Core>
#include <fmt/format.h>

#include "common/base/check.h"

namespace tfd::optim {
namespace {

using Arr = Eigen::Map<Eigen::ArrayXf>;
using ConstArr = Eigen::Map<const Eigen::ArrayXf>;

Arr A(std::span<float> s) { return Arr(s.data(), static_cast<Eigen::Index>(s.size())); }
ConstArr A(std::span<const float> s) { return ConstArr(s.data(), static_cast<Eigen::Index>(s.size())); }

class Sgd final : public Optimizer {
 public:
  explicit Sgd(float lr) : lr_(lr) {}
  std::string Describe() const override { return fmt::format("sgd learning_rate={}", lr_); }
  std::vector<std::string> SlotNames() const override { return {}; }
  void Apply(std::span<float> p, std::span<const float> g, std::span<float> slots, std::int64_t t) const override {
    (void)slots;
    (void)t;
    TFD_CHECK(p.size() == g.size());
    A(p) -= lr_ * A(g);
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
    auto a = A(slots);
    a = momentum_ * a + A(g);
    if (nesterov_) {
      A(p) -= lr_ * (A(g) + momentum_ * a);
    } else {
      A(p) -= lr_ * a;
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
    auto m = A(slots.first(p.size()));
    auto v = A(slots.subspan(p.size()));
    const auto lr_t = static_cast<float>(lr_ * std::sqrt(1 - std::pow(b2_, t)) / (1 - std::pow(b1_, t)));
    const auto b1 = static_cast<float>(b1_), b2 = static_cast<float>(b2_), eps = static_cast<float>(eps_);
    m = b1 * m + (1 - b1) * A(g);
    v = b2 * v + (1 - b2) * A(g).square();
    A(p) -= lr_t * m / (v.sqrt() + eps);
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

}  // namespace tfd::optim
