// Learning-rate schedules against values worked out by hand, the job spec's schedule and
// weight_decay fields with their errors, and weight decay in the optimizer state.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "common/config/job.h"
#include "common/optim/optimizer.h"
#include "common/optim/schedule.h"

namespace tfd::optim {
namespace {

using Kind = config::LrSchedule::Kind;

config::OptimizerSpec Exponential(double initial, std::int64_t decay_steps, double rate, bool staircase) {
  config::OptimizerSpec s;
  s.learning_rate = initial;
  s.schedule.kind = Kind::kExponentialDecay;
  s.schedule.decay_steps = decay_steps;
  s.schedule.decay_rate = rate;
  s.schedule.staircase = staircase;
  return s;
}

TEST_CASE("a constant rate is the same at every step", "[unit][schedule]") {
  config::OptimizerSpec s;
  s.learning_rate = 0.25;
  CHECK(LearningRate(s, 0) == 0.25);
  CHECK(LearningRate(s, 123456) == 0.25);
}

TEST_CASE("exponential_decay is initial * rate^(step / decay_steps), floored with staircase", "[unit][schedule]") {
  const auto smooth = Exponential(0.1, 1000, 0.96, false);
  CHECK(LearningRate(smooth, 0) == Approx(0.1));
  CHECK(LearningRate(smooth, 500) == Approx(0.1 * 0.9797958971));  // sqrt(0.96)
  CHECK(LearningRate(smooth, 1000) == Approx(0.096));
  CHECK(LearningRate(smooth, 2500) == Approx(0.1 * 0.96 * 0.96 * 0.9797958971));
  const auto stairs = Exponential(0.1, 1000, 0.96, true);
  CHECK(LearningRate(stairs, 500) == Approx(0.1));
  CHECK(LearningRate(stairs, 999) == Approx(0.1));
  CHECK(LearningRate(stairs, 1000) == Approx(0.096));
  CHECK(LearningRate(stairs, 2500) == Approx(0.09216));
}

TEST_CASE("piecewise_constant takes values[i] for boundaries[i-1] < step <= boundaries[i]", "[unit][schedule]") {
  config::OptimizerSpec s;
  s.learning_rate = 0.1;
  s.schedule.kind = Kind::kPiecewiseConstant;
  s.schedule.boundaries = {1000, 2000};
  s.schedule.values = {0.1, 0.01, 0.001};
  CHECK(LearningRate(s, 0) == 0.1);
  CHECK(LearningRate(s, 1000) == 0.1);  // TF: step <= boundaries[0]
  CHECK(LearningRate(s, 1001) == 0.01);
  CHECK(LearningRate(s, 2000) == 0.01);
  CHECK(LearningRate(s, 2001) == 0.001);
  CHECK(LearningRate(s, 1 << 30) == 0.001);
}

TEST_CASE("cosine_decay follows TF's CosineDecay and stays at alpha * initial after decay_steps", "[unit][schedule]") {
  config::OptimizerSpec s;
  s.learning_rate = 0.1;
  s.schedule.kind = Kind::kCosineDecay;
  s.schedule.decay_steps = 5000;
  CHECK(LearningRate(s, 0) == Approx(0.1));
  CHECK(LearningRate(s, 2500) == Approx(0.05));
  CHECK(LearningRate(s, 1250) == Approx(0.1 * 0.5 * (1 + std::sqrt(0.5))));
  CHECK(LearningRate(s, 5000) == Approx(0.0).margin(1e-12));
  CHECK(LearningRate(s, 9000) == Approx(0.0).margin(1e-12));
  s.schedule.alpha = 0.1;
  CHECK(LearningRate(s, 2500) == Approx(0.055));  // 0.1 * (0.9 * 0.5 + 0.1)
  CHECK(LearningRate(s, 5000) == Approx(0.01));
  CHECK(LearningRate(s, 7000) == Approx(0.01));
}

TEST_CASE("warm-up rises linearly to the schedule's initial rate, then the schedule starts", "[unit][schedule]") {
  auto s = Exponential(0.1, 1000, 0.5, false);
  s.schedule.warmup_steps = 4;
  CHECK(LearningRate(s, 0) == Approx(0.025));
  CHECK(LearningRate(s, 1) == Approx(0.05));
  CHECK(LearningRate(s, 3) == Approx(0.1));    // the last warm-up step reaches the initial rate
  CHECK(LearningRate(s, 4) == Approx(0.1));    // the schedule's step 0
  CHECK(LearningRate(s, 1004) == Approx(0.05));  // the schedule's step 1000
}

TEST_CASE("the rate is a pure function of the step: the same bits every time", "[unit][schedule]") {
  auto s = Exponential(0.1, 7, 0.9, false);
  s.schedule.warmup_steps = 3;
  for (std::int64_t step : {0, 2, 3, 10, 1000}) CHECK(LearningRate(s, step) == LearningRate(s, step));
  CHECK(LearningRate(s, -5) == LearningRate(s, 0));
}

TEST_CASE("OptimizerState applies the rate of the global step it is given", "[unit][schedule]") {
  config::OptimizerSpec s;
  s.learning_rate = 1.0;
  s.schedule.kind = Kind::kPiecewiseConstant;
  s.schedule.boundaries = {1};
  s.schedule.values = {1.0, 0.5};
  auto opt = MakeOptimizer(s);
  std::vector<float> p = {0.0f}, g = {1.0f};
  OptimizerState state(*opt, 1);
  state.Apply(p, g);  // step 0: lr 1
  state.Apply(p, g);  // step 1: lr 1 (step <= 1)
  state.Apply(p, g);  // step 2: lr 0.5
  CHECK(p[0] == -2.5f);
  state.Apply(p, g, 0);  // an explicit global step wins over the count
  CHECK(p[0] == -3.5f);
  CHECK(opt->Describe() == "sgd learning_rate=piecewise_constant(boundaries=[1] values=[1,0.5])");
}

TEST_CASE("weight decay adds decay * value to the kernels' gradient only", "[unit][schedule]") {
  config::OptimizerSpec s;
  s.learning_rate = 0.5;
  s.weight_decay = 0.1;
  auto opt = MakeOptimizer(s);
  CHECK(opt->Describe() == "sgd learning_rate=0.5 weight_decay=0.1");
  const std::vector<std::pair<std::string, std::size_t>> runs = {
      {"dense/kernel", 2}, {"dense/bias", 1}, {"conv2d/kernel[0:1]", 1}, {"kernel_like/bias", 1}};
  const std::vector<Range> decayed = DecayedRanges(runs);
  REQUIRE(decayed.size() == 2);
  CHECK((decayed[0].offset == 0 && decayed[0].length == 2));
  CHECK((decayed[1].offset == 3 && decayed[1].length == 1));
  std::vector<float> p = {2.0f, -4.0f, 2.0f, 2.0f, 2.0f}, g = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  OptimizerState state(*opt, p.size(), decayed);
  state.Apply(p, g);
  // kernels: p - 0.5 * (1 + 0.1 p); biases: p - 0.5
  CHECK(p[0] == Approx(2.0 - 0.5 * 1.2));
  CHECK(p[1] == Approx(-4.0 - 0.5 * 0.6));
  CHECK(p[2] == Approx(1.5));
  CHECK(p[3] == Approx(2.0 - 0.5 * 1.2));
  CHECK(p[4] == Approx(1.5));
  CHECK(g[0] == 1.0f);  // the caller's gradient is left alone
}

}  // namespace
}  // namespace tfd::optim

namespace tfd::config {
namespace {

std::string Job(const std::string& optimizer) {
  return R"({"model": "mlp", "data": "d", "epochs": 1, "batch_size": 1, "optimizer": )" + optimizer + "}";
}

std::string ScheduleErrorOf(const std::string& text) {
  auto r = ParseJobSpec(text, "job.json");
  return r.ok() ? "ok" : r.status().message();
}

TEST_CASE("the job spec takes a schedule object for learning_rate", "[unit][config][schedule]") {
  auto exp = ParseJobSpec(Job(R"({"type": "sgd", "learning_rate": {"schedule": "exponential_decay", "initial": 0.1,
      "decay_steps": 1000, "decay_rate": 0.96, "staircase": true, "warmup_steps": 50}, "weight_decay": 0.0005})"), "job.json");
  REQUIRE(exp.ok());
  CHECK(exp->optimizer.learning_rate == 0.1);
  CHECK(exp->optimizer.schedule.kind == LrSchedule::Kind::kExponentialDecay);
  CHECK(exp->optimizer.schedule.decay_steps == 1000);
  CHECK(exp->optimizer.schedule.decay_rate == 0.96);
  CHECK(exp->optimizer.schedule.staircase);
  CHECK(exp->optimizer.schedule.warmup_steps == 50);
  CHECK(exp->optimizer.weight_decay == 0.0005);
  auto pw = ParseJobSpec(Job(R"({"type": "momentum", "momentum": 0.9, "learning_rate": {"schedule": "piecewise_constant",
      "boundaries": [1000, 2000], "values": [0.1, 0.01, 0.001]}})"), "job.json");
  REQUIRE(pw.ok());
  CHECK(pw->optimizer.learning_rate == 0.1);
  CHECK(pw->optimizer.schedule.boundaries == std::vector<std::int64_t>{1000, 2000});
  CHECK(pw->optimizer.schedule.values == std::vector<double>{0.1, 0.01, 0.001});
  auto cos = ParseJobSpec(Job(R"({"type": "adam", "learning_rate": {"schedule": "cosine_decay", "initial": 0.002, "decay_steps": 5000, "alpha": 0.1}})"),
                          "job.json");
  REQUIRE(cos.ok());
  CHECK(cos->optimizer.learning_rate == 0.002);
  CHECK(cos->optimizer.schedule.alpha == 0.1);
  auto plain = ParseJobSpec(Job(R"({"type": "sgd", "learning_rate": 0.5})"), "job.json");
  REQUIRE(plain.ok());
  CHECK(plain->optimizer.schedule.kind == LrSchedule::Kind::kConstant);
  CHECK(plain->optimizer.weight_decay == 0);
}

TEST_CASE("every bad schedule field is an error naming its JSON path", "[unit][config][schedule]") {
  CHECK(ScheduleErrorOf(Job(R"({"type": "sgd", "learning_rate": {"schedule": "exponential_decay", "initial": 0.1, "decay_steps": 0, "decay_rate": 0.9}})")) ==
        "job.json: optimizer.learning_rate.decay_steps: expected an integer in [1, 1099511627776], got 0");
  CHECK(ScheduleErrorOf(Job(R"({"type": "sgd", "learning_rate": {"schedule": "exponential_decay", "initial": 0.1, "decay_rate": 0.9}})")) ==
        "job.json: optimizer.learning_rate.decay_steps: missing (expected an integer)");
  CHECK(ScheduleErrorOf(Job(R"({"type": "sgd", "learning_rate": {"schedule": "linear", "initial": 0.1}})")) ==
        "job.json: optimizer.learning_rate.schedule: unknown schedule \"linear\" (expected constant, exponential_decay, "
        "piecewise_constant or cosine_decay)");
  CHECK(ScheduleErrorOf(Job(R"({"type": "sgd", "learning_rate": {"schedule": "cosine_decay", "initial": 0.1, "decay_steps": 10, "decay": 1}})")) ==
        "job.json: optimizer.learning_rate.decay: unknown field (expected one of: alpha, decay_steps, initial, schedule, warmup_steps)");
  CHECK(ScheduleErrorOf(Job(R"({"type": "sgd", "learning_rate": {"schedule": "cosine_decay", "initial": 0.1, "decay_steps": 10, "alpha": 2}})")) ==
        "job.json: optimizer.learning_rate.alpha: expected a number in [0, 1], got 2");
  CHECK(ScheduleErrorOf(Job(R"({"type": "sgd", "learning_rate": {"schedule": "piecewise_constant", "boundaries": [5, 5], "values": [1, 2, 3]}})")) ==
        "job.json: optimizer.learning_rate.boundaries[1]: expected an integer step in [6, 1099511627776] (boundaries increase), got 5");
  CHECK(ScheduleErrorOf(Job(R"({"type": "sgd", "learning_rate": {"schedule": "piecewise_constant", "boundaries": [5], "values": [1]}})")) ==
        "job.json: optimizer.learning_rate.values: expected an array of 2 learning rates (one more than the boundaries), got 1 of them");
  CHECK(ScheduleErrorOf(Job(R"({"type": "sgd", "learning_rate": {"schedule": "piecewise_constant", "boundaries": [5], "values": [1, 0]}})")) ==
        "job.json: optimizer.learning_rate.values[1]: expected a number in (0, 1000000], got 0");
  CHECK(ScheduleErrorOf(Job(R"({"type": "sgd", "learning_rate": {"schedule": "exponential_decay", "initial": 0.1, "decay_steps": 5, "decay_rate": 0.9, "warmup_steps": -1}})")) ==
        "job.json: optimizer.learning_rate.warmup_steps: expected an integer in [0, 1099511627776], got -1");
  CHECK(ScheduleErrorOf(Job(R"({"type": "sgd", "learning_rate": "fast"})")) ==
        "job.json: optimizer.learning_rate: expected a number in (0, 1000000], got \"fast\"");
  CHECK(ScheduleErrorOf(Job(R"({"type": "sgd", "learning_rate": 0.1, "weight_decay": -1})")) ==
        "job.json: optimizer.weight_decay: expected a number in [0, 1000], got -1");
}

}  // namespace
}  // namespace tfd::config

namespace tfd::config {
namespace {

TEST_CASE("a dropout layer takes a rate in [0, 1)", "[unit][config][dropout]") {
  const std::string head = R"({"data": "d", "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 1}, "model": {"layers": [)";
  auto ok = ParseJobSpec(head + R"({"type": "dense", "units": 8}, {"type": "dropout", "rate": 0.25}, {"type": "dense", "units": 10}]}})", "job.json");
  REQUIRE(ok.ok());
  CHECK(ok->model.layers[1].kind == LayerSpec::Kind::kDropout);
  CHECK(ok->model.layers[1].rate == 0.25);
  CHECK(ScheduleErrorOf(head + R"({"type": "dropout", "rate": 1}, {"type": "dense", "units": 10}]}})") ==
        "job.json: model.layers[0].rate: must be below 1 (a dropout of every value)");
  CHECK(ScheduleErrorOf(head + R"({"type": "dropout"}, {"type": "dense", "units": 10}]}})") ==
        "job.json: model.layers[0].rate: missing (expected a number)");
  CHECK(ScheduleErrorOf(head + R"({"type": "dropout", "rate": 0.5, "units": 3}, {"type": "dense", "units": 10}]}})") ==
        "job.json: model.layers[0].units: unknown field (expected one of: rate, type)");
}

}  // namespace
}  // namespace tfd::config
