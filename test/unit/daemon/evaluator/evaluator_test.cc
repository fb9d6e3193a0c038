// The evaluator's pieces that need no process: its idle limit and loading a checkpoint's tensors
// into a model by name.
#include <catch2/catch.hpp>

#include "daemon/evaluator/evaluator.h"
#include "test/unit/model_fixtures.h"

namespace tfd::evaluator {
namespace {

using namespace std::chrono_literals;

TEST_CASE("the idle limit is 3 x checkpoint.every_secs, at least 60 s, and 600 s for a step schedule", "[unit][evaluator]") {
  CHECK(IdleTimeoutFor({.dir = "d", .every_steps = 100}) == 600s);
  CHECK(IdleTimeoutFor({.dir = "d", .every_secs = 5}) == 60s);
  CHECK(IdleTimeoutFor({.dir = "d", .every_steps = 10, .every_secs = 100}) == 300s);
}

// A checkpoint holding `model`'s variables, each value set to its flat index plus `base`.
ckpt::Checkpoint CheckpointOf(const model::Model& model, float base) {
  ckpt::Checkpoint c;
  for (const model::Variable& v : model.variables()) {
    ckpt::NamedTensor t{.name = v.name, .shape = v.shape, .values = {}, .slots = {}};
    for (std::int64_t i = 0; i < v.size; ++i) t.values.push_back(base + static_cast<float>(v.offset + i));
    c.tensors.push_back(std::move(t));
  }
  return c;
}

TEST_CASE("LoadParams copies the tensors by name, in any order", "[unit][evaluator]") {
  auto m = testing::SmallSoftmax();
  ckpt::Checkpoint c = CheckpointOf(*m, 0.5f);
  std::swap(c.tensors.front(), c.tensors.back());
  REQUIRE(LoadParams(c, *m, "ck").ok());
  for (std::size_t i = 0; i < m->params().size(); ++i) CHECK(m->params()[i] == 0.5f + static_cast<float>(i));
}

TEST_CASE("LoadParams names the file and the variable that does not fit", "[unit][evaluator]") {
  auto m = testing::SmallSoftmax();
  ckpt::Checkpoint renamed = CheckpointOf(*m, 0);
  const std::string name = renamed.tensors[0].name;
  renamed.tensors[0].name = "other/kernel";
  Status s = LoadParams(renamed, *m, "ck-1");
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message() == "ck-1: holds no tensor " + name + " of the job's model (is it the chief's checkpoint of this job?)");
  ckpt::Checkpoint reshaped = CheckpointOf(*m, 0);
  reshaped.tensors[0].shape = {1};
  reshaped.tensors[0].values.resize(1);
  s = LoadParams(reshaped, *m, "ck-2");
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().starts_with("ck-2: tensor " + name + " has shape [1], the job's model has ["));
}

}  // namespace
}  // namespace tfd::evaluator

namespace tfd::evaluator {
namespace {

TEST_CASE("an evaluation's scores: the accuracies, or a regression's MAE and RMSE in their place", "[unit][evaluator][regression]") {
  using Scored = std::vector<std::pair<std::string, double>>;
  EvalResult c{.test_loss = 0.5, .test_accuracy = 0.9, .val_loss = 0.4, .val_accuracy = 0.8};
  CHECK(Scores(c) == Scored{{"test_loss", 0.5}, {"test_accuracy", 0.9}, {"val_loss", 0.4}, {"val_accuracy", 0.8}});
  EvalResult r{.test_loss = 0.02, .regression = true, .test_mae = 0.1, .test_rmse = 0.15};
  CHECK(Scores(r) == Scored{{"test_loss", 0.02}, {"test_mae", 0.1}, {"test_rmse", 0.15}});
  r.val_loss = 0.03, r.val_mae = 0.12, r.val_rmse = 0.17;
  CHECK(Scores(r) == Scored{{"test_loss", 0.02}, {"test_mae", 0.1}, {"test_rmse", 0.15}, {"val_loss", 0.03}, {"val_mae", 0.12}, {"val_rmse", 0.17}});
}

}  // namespace
}  // namespace tfd::evaluator
