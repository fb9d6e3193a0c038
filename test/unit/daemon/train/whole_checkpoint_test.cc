// A whole checkpoint's error feedback (update.compression topk, powersgd) as LoadWholeRestore hands
// it to the replicas that resume: each its own on as many replicas, the saved residuals' mean on
// another count, none under another method; and FeedbackFor's pick.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/config/job.h"
#include "common/model/model.h"
#include "daemon/train/whole_checkpoint.h"
#include "test/test_util.h"
#include "test/unit/model_fixtures.h"

namespace tfd::train {
namespace {

config::JobSpec JobFor(const std::string& dir, config::CompressionSpec::Method method) {
  config::JobSpec job;
  job.batch_size = 4;
  job.optimizer.type = config::OptimizerSpec::Type::kSgd;
  job.optimizer.learning_rate = 0.1;
  job.checkpoint.dir = dir;
  job.checkpoint.keep = 2;
  job.update.compression.method = method;
  return job;
}

TEST_CASE("a whole checkpoint's error feedback resumes per rank on as many replicas, as their mean on another count, and not under "
          "another method",
          "[unit][ckpt][compression]") {
  testing::TempDir dir;
  const std::unique_ptr<model::Model> model = testing::SmallSoftmax();
  const std::size_t n = model->params().size();  // 4 x 10 + 10
  REQUIRE(n == 50);
  const config::JobSpec topk = JobFor(dir.path(), config::CompressionSpec::Method::kTopK);
  WholeState state{.global_step = 6, .updates = 6, .replicas = 2, .epoch = 1, .epoch_steps = 3};
  state.params.assign(n, 0.5f);
  state.feedback = ckpt::ErrorFeedback{.method = config::CompressionSpec::Method::kTopK,
                                       .residuals = {std::vector<float>(n, 1.0f), std::vector<float>(n, -3.0f)},
                                       .shared = {}};
  state.feedback->residuals[1][7] = 5.0f;
  const WholeCheckpointing c{.spec = topk.checkpoint, .optimizer = topk.optimizer, .slot_names = {}, .batch_size = 4};
  REQUIRE(WriteWholeCheckpoint(c, *model, state, "test").ok());

  Result<WholeRestore> same = LoadWholeRestore(topk, *model, exporting::ModelCard{}, 2, 10);
  REQUIRE(same.ok());
  REQUIRE(same->found);
  REQUIRE(same->feedback.has_value());
  REQUIRE(same->feedback->residuals.size() == 2);
  CHECK(FeedbackFor(*same, 0)[0] == 1.0f);
  CHECK(FeedbackFor(*same, 1)[0] == -3.0f);
  CHECK(FeedbackFor(*same, 1)[7] == 5.0f);

  // Three replicas: each takes the mean, (1 + -3) / 2 = -1 and (1 + 5) / 2 = 3 at index 7.
  Result<WholeRestore> three = LoadWholeRestore(topk, *model, exporting::ModelCard{}, 3, 10);
  REQUIRE(three.ok());
  REQUIRE(three->feedback.has_value());
  REQUIRE(three->feedback->residuals.size() == 1);
  for (int rank = 0; rank < 3; ++rank) {
    CHECK(FeedbackFor(*three, rank)[0] == -1.0f);
    CHECK(FeedbackFor(*three, rank)[7] == 3.0f);
    CHECK(FeedbackFor(*three, rank).size() == n);
  }

  // powersgd, or no compression: the parameters resume, the topk residuals do not.
  for (auto method : {config::CompressionSpec::Method::kPowerSgd, config::CompressionSpec::Method::kNone}) {
    Result<WholeRestore> other = LoadWholeRestore(JobFor(dir.path(), method), *model, exporting::ModelCard{}, 2, 10);
    REQUIRE(other.ok());
    CHECK(other->found);
    CHECK(other->params == std::vector<float>(n, 0.5f));
    CHECK_FALSE(other->feedback.has_value());
  }
}

TEST_CASE("a powersgd checkpoint of another rank resumes the error but not Q, whose layout the rank sets", "[unit][ckpt][compression]") {
  testing::TempDir dir;
  const std::unique_ptr<model::Model> model = testing::SmallSoftmax();
  const std::size_t n = model->params().size();
  config::JobSpec job = JobFor(dir.path(), config::CompressionSpec::Method::kPowerSgd);
  job.update.compression.rank = 2;
  WholeState state{.global_step = 4, .updates = 4, .replicas = 1, .epoch = 1, .epoch_steps = 4};
  state.params.assign(n, 0.25f);
  state.feedback = ckpt::ErrorFeedback{.method = config::CompressionSpec::Method::kPowerSgd,
                                       .residuals = {std::vector<float>(n, 2.0f)},
                                       .shared = std::vector<float>(20, 1.0f),
                                       .rank = 2};
  REQUIRE(WriteWholeCheckpoint({.spec = job.checkpoint, .optimizer = job.optimizer, .slot_names = {}, .batch_size = 4}, *model, state, "test")
              .ok());
  Result<WholeRestore> same = LoadWholeRestore(job, *model, exporting::ModelCard{}, 1, 10);
  REQUIRE(same.ok());
  REQUIRE(same->feedback.has_value());
  CHECK(same->feedback->shared.size() == 20);
  job.update.compression.rank = 4;
  Result<WholeRestore> other = LoadWholeRestore(job, *model, exporting::ModelCard{}, 1, 10);
  REQUIRE(other.ok());
  REQUIRE(other->feedback.has_value());
  CHECK(other->feedback->shared.empty());
  CHECK(FeedbackFor(*other, 0)[3] == 2.0f);
  CHECK(FeedbackFor(*other, 5).size() == n);  // one residual: every replica's
}

}  // namespace
}  // namespace tfd::train
