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

TEST_CASE("a run resumed from its checkpoint after an epoch ends with the bits of the run that went on", "[observer][sweep]") {
  tfd::testing::TempDir dir;
  tfd::testing::WriteSyntheticMnist(dir.path(), 400, 100, 28, 10);
  Result<config::JobSpec> job = config::ParseJobSpec(
      R"({"model": {"name": "mlp"}, "data": ")" + dir.path() + R"(", "epochs": 3, "batch_size": 50, "seed": 5,
          "optimizer": {"type": "momentum", "momentum": 0.9,
                        "learning_rate": {"schedule": "piecewise_constant", "boundaries": [12], "values": [0.1, 0.02]}}})",
      "job.json");
  REQUIRE(job.ok());
  EventWriter events(stdout, "standalone", false);
  std::vector<ckpt::Checkpoint> saved;  // after epochs 1, 2, 3
  const std::string whole = dir.path() + "/whole.f32", resumed = dir.path() + "/resumed.f32";
  StandaloneOptions straight{.params_out = whole};
  straight.epoch_checkpoint = [&](int epoch, const ckpt::Checkpoint& c) {
    CHECK(epoch == static_cast<int>(saved.size()) + 1);
    saved.push_back(c);
  };
  REQUIRE(RunStandalone(*job, events, straight).ok());
  REQUIRE(saved.size() == 3);
  CHECK(saved[0].global_step == 8);  // 400 examples / 50
  CHECK(saved[0].cursors[0].epoch == 2);
  CHECK(saved[0].optimizer.updates == 8);
  REQUIRE(saved[0].tensors.size() == 4);  // two dense layers' kernels and biases
  CHECK(saved[0].tensors[0].slots.size() == 1);  // momentum

  Recorder recorder;
  std::vector<int> epochs_saved;
  StandaloneOptions again{.params_out = resumed, .observers = {&recorder}};
  again.resume = &saved[0];
  again.epoch_checkpoint = [&](int epoch, const ckpt::Checkpoint&) { epochs_saved.push_back(epoch); };
  REQUIRE(RunStandalone(*job, events, again).ok());
  REQUIRE(recorder.epochs.size() == 2);  // epochs 2 and 3 only
  CHECK(recorder.epochs[0].epoch == 2);
  CHECK(recorder.epochs[0].local_step == 16);
  CHECK(epochs_saved == std::vector<int>{2, 3});
  CHECK(tfd::testing::ReadAll(resumed) == tfd::testing::ReadAll(whole));

  // A checkpoint of another job is refused before any step.
  config::JobSpec other = *job;
  other.batch_size = 40;
  StandaloneOptions wrong{.params_out = ""};
  wrong.resume = &saved[0];
  Status s = RunStandalone(other, events, wrong);
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK_THAT(s.message(), Catch::Contains("steps per epoch"));
  other = *job;
  other.optimizer.momentum = 0.5;
  s = RunStandalone(other, events, wrong);
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK_THAT(s.message(), Catch::Contains("optimizer"));
}

}  // namespace
}  // namespace tfd::train
