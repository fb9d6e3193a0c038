// Regression targets: the mean squared and absolute error losses and their gradients (finite
// differences as in gradient_test.cc), a regression model's gradients, a CSV regression source
// loaded with its targets, and the job fields that regression refuses.
#include <cmath>
#include <functional>
#include <random>

#include <catch2/catch.hpp>

#include "common/config/job.h"
#include "common/config/sweep.h"
#include "common/data/source.h"
#include "common/model/model.h"
#include "common/tensor/loss.h"
#include "test/test_util.h"

namespace tfd {
namespace {

using tensor::LossKind;
using tensor::LossResult;

constexpr float kStep = 1e-2f;

// Relative error of an analytic derivative `a` against the central difference `n` (gradient_test.cc's rule).
double RelativeError(double a, double n) { return std::abs(a - n) / std::max(std::abs(a) + std::abs(n), 1e-2); }

// (L(v + h) - L(v - h)) / 2h, h = kStep, with `v` restored.
double CentralDifference(float* v, const std::function<double()>& loss) {
  const float saved = *v;
  *v = saved + kStep;
  const double up = loss();
  *v = saved - kStep;
  const double down = loss();
  *v = saved;
  return (up - down) / (2.0 * kStep);
}

// Outputs and targets in [-2, 2], each pair at least 0.1 apart, so |o - t| has no kink within a step.
void DrawPairs(std::vector<float>* outputs, std::vector<float>* targets, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (std::size_t i = 0; i < outputs->size(); ++i) {
    do (*outputs)[i] = u(gen), (*targets)[i] = u(gen); while (std::abs((*outputs)[i] - (*targets)[i]) < 0.1f);
  }
}

void CheckLossGradient(LossKind kind) {
  const int rows = 4, width = 3;
  std::vector<float> out(rows * width), target(rows * width), d(rows * width);
  DrawPairs(&out, &target, kind == LossKind::kMse ? 21 : 22);
  const LossResult r = tensor::RegressionLoss(out.data(), target, kind, d.data());
  CHECK(r.loss > 0);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double n = CentralDifference(&out[i], [&] { return tensor::RegressionLoss(out.data(), target, kind, nullptr).loss; });
    INFO("output " << i << " analytic " << d[i] << " numeric " << n);
    CHECK(RelativeError(d[i], n) <= 1e-2);
  }
}

TEST_CASE("mse and mae gradients match finite differences", "[unit][gradient][regression]") {
  SECTION("mse") { CheckLossGradient(LossKind::kMse); }
  SECTION("mae") { CheckLossGradient(LossKind::kMae); }
}

TEST_CASE("mse and mae average over rows and targets and sum the errors behind MAE and RMSE", "[unit][loss][regression]") {
  const std::vector<float> out = {1, 2, 3, 4}, target = {0, 2, 5, 4.5f};
  const LossResult mse = tensor::RegressionLoss(out.data(), target, LossKind::kMse, nullptr);
  CHECK(mse.loss == Approx((1 + 0 + 4 + 0.25) / 4.0));
  CHECK(mse.abs_error == Approx(3.5));
  CHECK(mse.squared_error == Approx(5.25));
  std::vector<float> d(4);
  const LossResult mae = tensor::ComputeLoss(LossKind::kMae, out.data(), tensor::Labels(std::span(target), 2), 2, d.data());
  CHECK(mae.loss == Approx(3.5 / 4));
  CHECK(mae.squared_error == Approx(5.25));  // both losses measure both errors
  CHECK(d == std::vector<float>{0.25f, 0.0f, -0.25f, -0.25f});
  const tensor::Labels rows = tensor::Labels(std::span(target), 2).Rows(1, 1);
  CHECK(rows.rows() == 1);
  CHECK(rows.targets[0] == 5.0f);
}

TEST_CASE("a regression model's gradients match finite differences of its mse", "[unit][gradient][regression]") {
  config::ModelSpec spec;
  spec.name = "layers";
  spec.layers = {config::LayerSpec{.kind = config::LayerSpec::Kind::kDense, .units = 5, .activation = config::Activation::kTanh},
                 config::LayerSpec{.kind = config::LayerSpec::Kind::kDense, .units = 2}};
  auto built = model::Model::Build(spec, {1, 1, 3}, model::Outputs(2, LossKind::kMse), 4);
  REQUIRE(built.ok());
  model::Model& m = **built;
  CHECK(m.regression());
  m.Initialize(5);
  std::mt19937 gen(23);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(12), t(8);
  for (float& v : x) v = u(gen);
  for (float& v : t) v = 3 * u(gen);
  const tensor::Labels y(std::span<const float>(t), 2);
  m.ComputeGradients(x.data(), y);
  const std::vector<float> analytic(m.grads().begin(), m.grads().end());
  auto loss = [&] { return tensor::ComputeLoss(LossKind::kMse, m.Forward(x.data(), 4), y, 2, nullptr).loss; };
  for (std::size_t i = 0; i < m.params().size(); ++i) {
    INFO("param " << i);
    CHECK(RelativeError(analytic[i], CentralDifference(&m.params()[i], loss)) <= 1e-2);
  }
  // The last layer must have one unit per target.
  auto wrong = model::Model::Build(spec, {1, 1, 3}, model::Outputs(1, LossKind::kMse), 4);
  REQUIRE(!wrong.ok());
  CHECK(wrong.status().message().find("(it has 2 units)") != std::string::npos);
  CHECK(wrong.status().message().find("1 units (one per regression target of the data)") != std::string::npos);
}

const char* kRegressionJob = R"({"model": "dnn", "epochs": 2, "batch_size": 2, "optimizer": {"type": "sgd", "learning_rate": 0.1}, )";

std::string JobError(const std::string& rest) {
  Result<config::JobSpec> job = config::ParseJobSpec(std::string(kRegressionJob) + rest + "}", "job.json");
  return job.ok() ? "" : job.status().message();
}

TEST_CASE("a regression data spec reads its loss; the fields regression has no use for are refused", "[unit][config][regression]") {
  const std::string data = R"("data": {"train": "a.csv", "test_split": 0.2, "task": "regression")";
  Result<config::JobSpec> mae = config::ParseJobSpec(std::string(kRegressionJob) + data + R"(, "loss": "mae"}})", "job.json");
  REQUIRE(mae.ok());
  CHECK(mae->data.loss == config::DataSpec::Loss::kMae);
  Result<config::JobSpec> mse = config::ParseJobSpec(std::string(kRegressionJob) + data + "}}", "job.json");
  REQUIRE(mse.ok());
  CHECK(mse->data.loss == config::DataSpec::Loss::kMse);
  CHECK(JobError(data + R"(, "loss": "huber"})") == "job.json: data.loss: unknown loss \"huber\" (expected mse or mae)");
  CHECK(JobError(R"("data": {"train": "a.csv", "test_split": 0.2, "loss": "mae"})") ==
        "job.json: data.loss: is a regression field (set \"task\": \"regression\"); classification trains on softmax cross-entropy");
  // The GPU path trains regression too (docs/gpu.md): a cuda device is no reason to refuse it.
  CHECK(JobError(data + R"(}, "device": "cuda:0")") == "");
  CHECK(JobError(data + R"(}, "stop_at_accuracy": 0.9)") ==
        "job.json: stop_at_accuracy: the data's task is regression, which has no accuracy: stop with \"early_stopping\" (monitor "
        "val_mae, val_loss or loss)");
  CHECK(JobError(data + R"(}, "validation_split": 0.1, "early_stopping": {"monitor": "val_accuracy"})") ==
        "job.json: early_stopping.monitor: val_accuracy: the data's task is regression, which has no accuracy (expected val_mae, "
        "val_loss or loss)");
  CHECK(JobError(R"("data": "mnist", "validation_split": 0.1, "early_stopping": {"monitor": "val_mae"})") ==
        "job.json: early_stopping.monitor: val_mae: the data's task is classification (expected val_accuracy, val_loss or loss)");
  CHECK(JobError(data + R"(}, "validation_split": 0.1, "early_stopping": {"monitor": "val_mae", "patience": 2})").empty());
  CHECK(JobError(data + R"(}, "early_stopping": {"monitor": "mae"})") ==
        "job.json: early_stopping.monitor: unknown metric \"mae\" (expected val_mae, val_loss or loss)");
  CHECK(JobError(data + R"(}, "model_parallel": {"stages": 2, "split": "layers"})").empty());  // it trains there too
  // Ensembles average a regression's outputs and the evaluator task scores its MAE and RMSE: both are taken.
  CHECK(JobError(data + R"(}, "ensemble": {"members": 2})").empty());
  CHECK(JobError(data + R"(}, "evaluation": "evaluator", "checkpoint": {"dir": "ckpt"})").empty());
  CHECK(JobError(R"("data": {"train": "a.csv", "test": "b.csv", "split_seed": 4})") ==
        "job.json: data.split_seed: seeds the test_split's shuffle, but no test_split holds a test set out");
}

TEST_CASE("a regression CSV loads its targets; the held-out test and validation sets take theirs along", "[unit][data][regression]") {
  testing::TempDir dir;
  std::string csv = "x0,x1,y\n";
  for (int i = 0; i < 10; ++i) csv += fmt::format("{},{},{}\n", i, 2 * i, 0.5 * i);
  testing::WriteFile(dir.path() + "/r.csv", csv);
  Result<config::JobSpec> job = config::ParseJobSpec(
      std::string(kRegressionJob) + R"("data": {"train": ")" + dir.path() + R"(/r.csv", "test_split": 3, "task": "regression"}})", "job.json");
  REQUIRE(job.ok());
  Result<data::DataSplits> loaded = data::LoadData(job->data, 7);
  REQUIRE(loaded.ok());
  data::DataSplits& d = *loaded;
  CHECK(d.train.regression());
  CHECK(d.train.num_classes == 0);
  CHECK(d.train.outputs() == 1);
  CHECK(d.train.size == 7);
  CHECK(d.test.size == 3);
  CHECK(d.test.num_targets == 1);
  REQUIRE(d.test.targets.size() == 3);
  // Every example keeps its own target: y = x0 / 2.
  for (const data::Dataset* s : {&d.train, &d.test}) {
    for (std::uint32_t i = 0; i < s->size; ++i) {
      std::vector<float> x(2);
      float t = -1;
      data::FillBatch(*s, std::span(&i, 1), x.data(), nullptr, &t);
      CHECK(t == 0.5f * x[0]);
    }
  }
  data::HoldOut(&d, 2);
  CHECK(d.train.targets.size() == 5);
  CHECK(d.validation.targets.size() == 2);
  CHECK(d.validation.num_targets == 1);
  CHECK(model::OutputsFor(d.train, job->data).loss == LossKind::kMse);
}

}  // namespace
}  // namespace tfd
