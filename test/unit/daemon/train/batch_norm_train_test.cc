// A batch norm trained through the standalone trainer (its updater, Adam, the epoch-end
// evaluations): the moving statistics it leaves, against the same averages computed here from the
// batches the trainer fed it. The layer alone: test/unit/common/tensor/normalization_test.cc.
#include <cmath>
#include <vector>

#include <catch2/catch.hpp>

#include "common/config/job.h"
#include "common/data/dataset.h"
#include "daemon/train/job_data.h"
#include "daemon/train/standalone.h"
#include "daemon/train/trainer.h"
#include "test/test_util.h"

namespace tfd::train {
namespace {

// Per feature of `rows` x `c` values: mean and biased variance, in double.
void Moments(const std::vector<float>& x, int c, std::vector<double>* mean, std::vector<double>* var) {
  const std::size_t rows = x.size() / static_cast<std::size_t>(c);
  mean->assign(static_cast<std::size_t>(c), 0.0), var->assign(static_cast<std::size_t>(c), 0.0);
  for (std::size_t r = 0; r < rows; ++r)
    for (int k = 0; k < c; ++k) (*mean)[k] += x[r * c + k] / static_cast<double>(rows);
  for (std::size_t r = 0; r < rows; ++r)
    for (int k = 0; k < c; ++k) (*var)[k] += std::pow(x[r * c + k] - (*mean)[k], 2) / static_cast<double>(rows);
}

TEST_CASE("a standalone run leaves batch_norm's moving statistics at the moving average of the batches it trained on",
          "[unit][norm][train]") {
  testing::TempDir dir;
  testing::WriteSyntheticMnist(dir.path(), 300, 60, 6, 3);
  // The batch norm sees the images themselves, so its batches' statistics do not depend on the
  // weights and this test can compute them; Adam would move a variable whose gradient were not 0.
  Result<config::JobSpec> job = config::ParseJobSpec(
      R"({"model": {"layers": [{"type": "flatten"}, {"type": "batch_norm", "momentum": 0.9}, {"type": "dense", "units": 10}]},
          "data": ")" + dir.path() + R"(", "epochs": 2, "batch_size": 50, "seed": 3, "log_every_steps": 0,
          "optimizer": {"type": "adam", "learning_rate": 0.01}})",
      "job.json");
  REQUIRE(job.ok());
  const std::string params_out = dir.path() + "/params.bin";
  EventWriter events(stdout, "standalone", false);
  const Status trained = RunStandalone(*job, events, {.params_out = params_out});
  INFO(trained.message());
  REQUIRE(trained.ok());
  const std::vector<float> params = testing::ReadFloats(params_out);

  Result<LoadedJob> loaded = LoadJobData(*job, 1);
  REQUIRE(loaded.ok());
  const data::Dataset& train = loaded->data.train;
  const int features = 36, batch = job->batch_size;
  std::vector<double> moving_mean(features, 0.0), moving_var(features, 1.0), mean, var;
  std::vector<float> x(static_cast<std::size_t>(batch) * features);
  std::vector<ClassId> y(static_cast<std::size_t>(batch));
  for (int epoch = 1; epoch <= job->epochs; ++epoch) {
    const std::vector<std::uint32_t> shard = data::EpochShard(train.size, job->seed, epoch, 0, 1, job->shuffle);
    for (std::int64_t s = 0; s < StepsPerEpoch(train.size, 1, batch); ++s) {
      data::FillBatch(train, std::span(shard).subspan(static_cast<std::size_t>(s * batch), static_cast<std::size_t>(batch)), x.data(),
                      y.data());
      Moments(x, features, &mean, &var);
      for (int c = 0; c < features; ++c) {
        moving_mean[c] = 0.9 * moving_mean[c] + 0.1 * mean[c];
        moving_var[c] = 0.9 * moving_var[c] + 0.1 * var[c];
      }
    }
  }
  const model::Model& m = *loaded->model;
  REQUIRE(params.size() == m.params().size());
  REQUIRE(m.variables()[2].name == "batch_norm/moving_mean");
  REQUIRE(m.variables()[3].name == "batch_norm/moving_variance");
  for (int c = 0; c < features; ++c) {
    INFO("feature " << c);
    CHECK(params[static_cast<std::size_t>(m.variables()[2].offset + c)] == Approx(moving_mean[c]).margin(1e-5));
    CHECK(params[static_cast<std::size_t>(m.variables()[3].offset + c)] == Approx(moving_var[c]).margin(1e-5));
  }
}

}  // namespace
}  // namespace tfd::train
