#include <cmath>
#include <vector>

#include <catch2/catch.hpp>

#include "common/config/job.h"
#include "daemon/train/observer.h"
#include "daemon/train/standalone.h"
#include "test/test_util.h"

namespace tfd::train {
namespace {

class Recorder final : public TrainObserver {
 public:
  void OnStep(const StepStats& s) override { steps.push_back(s); }
  void OnEpoch(const EpochStats& e) override { epochs.push_back(e); }
  void OnEnd(bool ok) override { ends.push_back(ok); }
  std::vector<StepStats> steps;
  std::vector<EpochStats> epochs;
  std::vector<bool> ends;
};

TEST_CASE("observers see every step and epoch of a run, with its schedule's rate and timings, and its end", "[observer]") {
  tfd::testing::TempDir dir;
  tfd::testing::WriteSyntheticMnist(dir.path(), 400, 100, 28, 10);
  Result<config::JobSpec> job = config::ParseJobSpec(
      R"({"model": {"name": "softmax"}, "data": ")" + dir.path() + R"(", "epochs": 2, "batch_size": 50, "seed": 3,
          "optimizer": {"type": "sgd", "learning_rate": {"schedule": "piecewise_constant", "boundaries": [5], "values": [0.1, 0.01]}}})",
      "job.json");
  REQUIRE(job.ok());
  Recorder first, second;
  EventWriter events(stdout, "standalone", false);
  REQUIRE(RunStandalone(*job, events, {.observers = {&first, &second}}).ok());
  REQUIRE(first.steps.size() == 16);  // 400 / 50 steps a epoch, two epochs
  CHECK(second.steps.size() == 16);
  for (std::size_t i = 0; i < first.steps.size(); ++i) {
    const StepStats& s = first.steps[i];
    CHECK(s.local_step == static_cast<std::int64_t>(i) + 1);
    CHECK(s.global_step == s.local_step);
    CHECK(s.epoch == (i < 8 ? 1 : 2));
    CHECK(s.examples == 50);
    CHECK(std::isfinite(s.loss));
    CHECK(s.compute_seconds >= 0);
    CHECK(s.update_seconds >= 0);
    CHECK(s.wall_time > 1.7e9);
    // The rate that step's update used: piecewise_constant keeps 0.1 while the update count is <= 5 (Keras).
    CHECK(s.learning_rate == Approx(i <= 5 ? 0.1 : 0.01));
  }
  REQUIRE(first.epochs.size() == 2);
  CHECK(first.epochs[1].epoch == 2);
  CHECK(first.epochs[1].global_step == 16);
  CHECK(first.epochs[1].test_accuracy.has_value());
  CHECK_FALSE(first.epochs[1].val_accuracy.has_value());
  CHECK(first.ends == std::vector<bool>{true});
  CHECK(second.ends == std::vector<bool>{true});
}

}  // namespace
}  // namespace tfd::train
