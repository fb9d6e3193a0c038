// Optimizer updates against values worked out by hand (several steps, so the slots matter).
#include <catch2/catch.hpp>

#include <cmath>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/optim/optimizer.h"

namespace tfd::optim {
namespace {

config::OptimizerSpec Spec(config::OptimizerSpec::Type type, double lr) {
  config::OptimizerSpec s;
  s.type = type;
  s.learning_rate = lr;
  return s;
}

TEST_CASE("sgd subtracts learning_rate times the gradient", "[unit][optim]") {
  auto opt = MakeOptimizer(Spec(config::OptimizerSpec::Type::kSgd, 0.1));
  CHECK(opt->num_slots() == 0);
  std::vector<float> p = {1.0f, -1.0f}, g = {0.5f, 2.0f};
  OptimizerState state(*opt, p.size());
  for (int t = 0; t < 3; ++t) state.Apply(p, g);
  CHECK(p[0] == Approx(1.0 - 3 * 0.05));
  CHECK(p[1] == Approx(-1.0 - 3 * 0.2));
  CHECK(state.updates() == 3);
}

TEST_CASE("momentum accumulates as TensorFlow's MomentumOptimizer", "[unit][optim]") {
  auto spec = Spec(config::OptimizerSpec::Type::kMomentum, 0.1);
  spec.momentum = 0.9;
  auto opt = MakeOptimizer(spec);
  REQUIRE(opt->SlotNames() == std::vector<std::string>{"momentum"});
  std::vector<float> p = {1.0f}, g = {1.0f};
  OptimizerState state(*opt, 1);
  // a1 = 1, p = 0.9; a2 = 1.9, p = 0.71; a3 = 2.71, p = 0.439
  state.Apply(p, g);
  CHECK(p[0] == Approx(0.9));
  state.Apply(p, g);
  CHECK(p[0] == Approx(0.71));
  CHECK(state.slots()[0] == Approx(1.9));
  state.Apply(p, g);
  CHECK(p[0] == Approx(0.439));
  CHECK(state.slots()[0] == Approx(2.71));
}

TEST_CASE("nesterov momentum steps by lr * (g + momentum * a)", "[unit][optim]") {
  auto spec = Spec(config::OptimizerSpec::Type::kMomentum, 0.1);
  spec.momentum = 0.5;
  spec.use_nesterov = true;
  auto opt = MakeOptimizer(spec);
  std::vector<float> p = {0.0f}, g = {2.0f};
  OptimizerState state(*opt, 1);
  state.Apply(p, g);  // a = 2; p = -0.1 * (2 + 1) = -0.3
  CHECK(p[0] == Approx(-0.3));
  state.Apply(p, g);  // a = 3; p = -0.3 - 0.1 * (2 + 1.5) = -0.65
  CHECK(p[0] == Approx(-0.65));
}

TEST_CASE("adam matches TensorFlow's update with bias-corrected step size", "[unit][optim]") {
  auto opt = MakeOptimizer(Spec(config::OptimizerSpec::Type::kAdam, 0.1));  // beta1 .9, beta2 .999, epsilon 1e-7
  REQUIRE(opt->SlotNames() == std::vector<std::string>{"m", "v"});
  std::vector<float> p = {0.5f, 0.5f};
  OptimizerState state(*opt, p.size());
  // Step t uses gradient t * {1, -2}. By hand:
  //   t=1: m = {.1, -.2}, v = {.001, .004}, lr_t = .1 * sqrt(.001) / .1  -> p = {0.4000003, 0.5999998}
  //   t=2: m = {.29, -.58}, v = {.004999, .019996}                     -> p = {0.3034823, 0.6965180}
  //   t=3: m = {.561, -1.122}, v = {.013994001, .055976004}            -> p = {0.2076822, 0.7923181}
  const double expected[3][2] = {{0.400000316, 0.599999842}, {0.303482250, 0.696517976}, {0.207682209, 0.792318058}};
  for (int t = 1; t <= 3; ++t) {
    std::vector<float> g = {1.0f * t, -2.0f * t};
    state.Apply(p, g);
    CHECK(p[0] == Approx(expected[t - 1][0]).epsilon(1e-5));  // float arithmetic
    CHECK(p[1] == Approx(expected[t - 1][1]).epsilon(1e-5));  // float arithmetic
  }
  CHECK(state.slots()[0] == Approx(0.561));   // m[0]
  CHECK(state.slots()[3] == Approx(0.055976004).epsilon(1e-4));  // v[1]; 1 - 0.999f is 1.3e-5 off in float
}

TEST_CASE("an update applied in parts gives every element the bits of the whole update", "[unit][optim]") {
  using Type = config::OptimizerSpec::Type;
  struct Case {
    const char* name;
    Type type;
    bool nesterov;
    double decay;
  };
  const Case cases[] = {{"sgd", Type::kSgd, false, 0},           {"momentum", Type::kMomentum, false, 0},
                        {"nesterov", Type::kMomentum, true, 0},  {"adam", Type::kAdam, false, 0},
                        {"adam, decay", Type::kAdam, false, 0.01}, {"momentum, decay", Type::kMomentum, false, 0.05}};
  // Two decayed runs (kernels) with an undecayed one (a bias) between them; the parts cut across
  // both runs, as an all-reduce's buckets cut a layer's floats anywhere.
  const std::vector<std::pair<std::string, std::size_t>> runs = {{"a/kernel", 13}, {"a/bias", 4}, {"b/kernel", 20}};
  const std::vector<Range> parts = {{30, 7}, {9, 21}, {0, 9}};  // out of order, covering 37 floats
  for (const Case& c : cases) {
    INFO(c.name);
    auto spec = Spec(c.type, 0.05);
    spec.momentum = 0.9;
    spec.use_nesterov = c.nesterov;
    spec.weight_decay = c.decay;
    spec.schedule.kind = config::LrSchedule::Kind::kExponentialDecay;  // a rate per step: ApplyPart's step must matter
    spec.schedule.decay_steps = 1;
    spec.schedule.decay_rate = 0.5;
    auto opt = MakeOptimizer(spec);
    std::vector<float> whole(37), parted(37);
    for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = parted[i] = 0.1f * static_cast<float>(i) - 1.5f;
    OptimizerState a(*opt, whole.size(), DecayedRanges(runs)), b(*opt, parted.size(), DecayedRanges(runs));
    for (std::int64_t step = 0; step < 4; ++step) {
      std::vector<float> g(whole.size());
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::sin(static_cast<float>(i * 7 + step * 3)) * 0.3f;
      // The parts take the sum of 3 replicas' gradients and its scale (1/3) where Apply takes the
      // average, rounded first: the same floats.
      std::vector<float> sum(g.size()), average(g.size());
      for (std::size_t i = 0; i < g.size(); ++i) {
        sum[i] = g[i] * 3.0f;
        average[i] = sum[i] * (1.0f / 3.0f);
      }
      a.Apply(whole, average, step);
      for (const Range& part : parts) {
        const std::vector<float> before = parted;
        const std::vector<float> slots_before(std::as_const(b).slots().begin(), std::as_const(b).slots().end());
        b.ApplyPart(parted, sum, part, step, 1.0f / 3.0f);
        for (std::size_t i = 0; i < parted.size(); ++i) {
          if (i >= part.offset && i < part.offset + part.length) continue;
          REQUIRE(parted[i] == before[i]);  // outside the part: untouched, and so are its slots
          for (std::size_t k = 0; k < slots_before.size() / parted.size(); ++k)
            REQUIRE(std::as_const(b).slots()[k * parted.size() + i] == slots_before[k * parted.size() + i]);
        }
      }
      b.CountUpdate();
      REQUIRE(a.updates() == b.updates());
      for (std::size_t i = 0; i < whole.size(); ++i) REQUIRE(parted[i] == whole[i]);
      const std::span<const float> sa = std::as_const(a).slots(), sb = std::as_const(b).slots();
      for (std::size_t i = 0; i < sa.size(); ++i) REQUIRE(sb[i] == sa[i]);
    }
    CHECK(whole[0] != 0.1f * 0.0f - 1.5f);  // the updates moved the parameters
  }
}

}  // namespace
}  // namespace tfd::optim
