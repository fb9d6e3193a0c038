// Model parallelism's parts that need no second process: the job spec's model_parallel object and
// its errors, the stage plan, micro-batch accumulation against a whole batch, the layer-range
// passes against ComputeGradients, the owned ranges each stage updates, and tfctl's live table of
// replicas.
#include <cmath>
#include <numeric>
#include <string>

#include <catch2/catch.hpp>

#include "common/base/random.h"
#include "common/config/job.h"
#include "common/model/model.h"
#include "daemon/pipeline/stage_plan.h"
#include "daemon/pipeline/stage_updater.h"
#include "launcher/live_table.h"

namespace tfd {
namespace {

std::string JobWith(const std::string& mp, int batch = 100) {
  return R"({"model": "dnn", "data": "d", "epochs": 1, "batch_size": )" + std::to_string(batch) +
         R"(, "optimizer": {"type": "sgd", "learning_rate": 0.1}, "model_parallel": )" + mp + "}";
}

std::string ErrorOf(const std::string& text) {
  auto got = config::ParseJobSpec(text, "job.json");
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kInvalidArgument);
  return got.status().message();
}

TEST_CASE("model_parallel parses with its defaults", "[unit][config][model_parallel]") {
  auto none = config::ParseJobSpec(R"({"model": "dnn", "data": "d", "epochs": 1, "batch_size": 10, "optimizer": {"type": "adam"}})", "j");
  REQUIRE(none.ok());
  CHECK_FALSE(none->model_parallel.enabled());
  auto got = config::ParseJobSpec(JobWith(R"({"split": "layers", "stages": 2})"), "job.json");
  REQUIRE(got.ok());
  CHECK(got->model_parallel.split == config::ModelParallelSpec::Split::kLayers);
  CHECK(got->model_parallel.stages == 2);
  CHECK(got->model_parallel.microbatches == 1);
  CHECK(got->model_parallel.schedule == config::ModelParallelSpec::Schedule::kGpipe);
  CHECK(got->model_parallel.boundaries.empty());
  got = config::ParseJobSpec(JobWith(R"({"split": "layers", "stages": 3, "microbatches": 4, "schedule": "1f1b", "boundaries": [2, 4]})"), "j");
  REQUIRE(got.ok());
  CHECK(got->model_parallel.schedule == config::ModelParallelSpec::Schedule::kOneFOneB);
  CHECK(got->model_parallel.boundaries == std::vector<int>{2, 4});
  CHECK(got->model_parallel.microbatches == 4);
}

TEST_CASE("model_parallel errors name the JSON path and what was expected", "[unit][config][model_parallel]") {
  CHECK_THAT(ErrorOf(JobWith(R"({"split": "rows", "stages": 2})")),
             Catch::Contains("job.json: model_parallel.split") && Catch::Contains("expected layers or units"));
  CHECK_THAT(ErrorOf(JobWith(R"({"split": "layers"})")), Catch::Contains("model_parallel.stages"));
  CHECK_THAT(ErrorOf(JobWith(R"({"split": "layers", "stages": 1})")), Catch::Contains("model_parallel.stages"));
  CHECK_THAT(ErrorOf(JobWith(R"({"split": "layers", "stages": 2, "microbatches": 0})")), Catch::Contains("model_parallel.microbatches"));
  CHECK_THAT(ErrorOf(JobWith(R"({"split": "layers", "stages": 2, "microbatches": 3})")),
             Catch::Contains("model_parallel.microbatches: expected a divisor of batch_size 100, got 3"));
  CHECK_THAT(ErrorOf(JobWith(R"({"split": "layers", "stages": 2, "schedule": "pipedream"})")),
             Catch::Contains("model_parallel.schedule") && Catch::Contains("gpipe or 1f1b"));
  CHECK_THAT(ErrorOf(JobWith(R"({"split": "layers", "stages": 3, "boundaries": [4, 2]})")),
             Catch::Contains("model_parallel.boundaries[1]: expected a layer index above 4"));
  CHECK_THAT(ErrorOf(JobWith(R"({"split": "layers", "stages": 3, "boundaries": [0, 2]})")),
             Catch::Contains("model_parallel.boundaries[0]: expected a layer index above 0"));
  CHECK_THAT(ErrorOf(JobWith(R"({"split": "layers", "stages": 3, "boundaries": [2]})")),
             Catch::Contains("model_parallel.boundaries: expected an array of 2 layer indices"));
  CHECK_THAT(ErrorOf(JobWith(R"({"split": "units", "stages": 2, "boundaries": [2]})")), Catch::Contains("model_parallel.boundaries"));
  CHECK_THAT(ErrorOf(JobWith(R"({"split": "layers", "stages": 2, "extra": 1})")), Catch::Contains("model_parallel"));
}

std::unique_ptr<model::Model> Build(const std::string& name, int batch, tensor::ActShape in = {28, 28, 1}) {
  config::ModelSpec spec;
  spec.name = name;
  auto m = model::Model::Build(spec, in, 10, batch);
  REQUIRE(m.ok());
  (*m)->Initialize(7);
  return std::move(m).value();
}

TEST_CASE("the stage plan balances the dnn and refuses what does not fit", "[unit][model_parallel]") {
  auto dnn = Build("dnn", 4);
  config::ModelParallelSpec spec;
  spec.split = config::ModelParallelSpec::Split::kLayers;
  spec.stages = 2;
  auto plan = pipeline::PlanLayers(spec, *dnn);
  REQUIRE(plan.ok());
  REQUIRE(plan->first.size() == 3);
  CHECK(plan->first.front() == 0);
  CHECK(plan->first.back() == 6);
  // The first layer (784 x 160) is the costliest: it stands alone, or nearly, on stage 0.
  CHECK(plan->first[1] >= 1);
  CHECK(plan->first[1] <= 2);
  CHECK(std::abs(plan->cost[0] + plan->cost[1] - 1) < 1e-9);
  spec.stages = 7;
  CHECK_THAT(pipeline::PlanLayers(spec, *dnn).status().message(), Catch::Contains("model_parallel.stages: expected at most 6"));
  spec.stages = 3;
  spec.boundaries = {2, 6};
  CHECK_THAT(pipeline::PlanLayers(spec, *dnn).status().message(),
             Catch::Contains("model_parallel.boundaries[1]: expected a layer index below 6"));
  spec.boundaries = {2, 4};
  plan = pipeline::PlanLayers(spec, *dnn);
  REQUIRE(plan.ok());
  CHECK(plan->first == std::vector<std::size_t>{0, 2, 4, 6});

  spec.split = config::ModelParallelSpec::Split::kUnits;
  spec.stages = 2;
  CHECK(pipeline::CheckUnits(spec, *dnn).ok());
  spec.stages = 11;  // the logits layer has 10 units: some stages hold none of it, as a regression output
  CHECK(pipeline::CheckUnits(spec, *dnn).ok());
  spec.stages = 161;  // a hidden layer has 160
  CHECK_THAT(pipeline::CheckUnits(spec, *dnn).message(),
             Catch::Contains("model_parallel.stages: expected at most 160 (the units of hidden dense layer 0)"));
  auto cnn = Build("cnn", 2);
  spec.stages = 2;
  CHECK_THAT(pipeline::CheckUnits(spec, *cnn).message(), Catch::Contains("model_parallel.split") && Catch::Contains("conv2d"));
}

void FillBatch(std::vector<float>& x, std::vector<ClassId>& y, std::int64_t width) {
  Rng rng(3, 0);
  for (float& v : x) v = static_cast<float>(rng.Uniform());
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<ClassId>(i % 10);
  (void)width;
}

TEST_CASE("micro-batch gradients summed in order are the mean of the whole batch's, within rounding", "[unit][model_parallel]") {
  const int batch = 8;
  auto whole = Build("dnn", batch), micro = Build("dnn", batch);
  std::vector<float> x(static_cast<std::size_t>(batch * whole->input_size()));
  std::vector<ClassId> y(batch);
  FillBatch(x, y, whole->input_size());
  const tensor::LossResult a = whole->ComputeGradients(x.data(), y);
  std::vector<float> acc;
  const tensor::LossResult b = micro->ComputeMicrobatchGradients(x.data(), y, 4, 0, acc);
  CHECK(std::abs(a.loss - b.loss) < 1e-5);
  CHECK(a.correct == b.correct);
  double worst = 0;
  for (std::size_t i = 0; i < whole->grads().size(); ++i)
    worst = std::max(worst, std::abs(double{whole->grads()[i]} - micro->grads()[i]) / (std::abs(double{whole->grads()[i]}) + 1e-3));
  CHECK(worst < 1e-3);  // float sums in another order
}

TEST_CASE("the layer-range passes at any rows give ComputeGradients' bits", "[unit][model_parallel]") {
  const int batch = 6;
  auto whole = Build("dnn", batch), split = Build("dnn", batch);
  std::vector<float> x(static_cast<std::size_t>(batch * whole->input_size()));
  std::vector<ClassId> y(batch);
  FillBatch(x, y, whole->input_size());
  // Micro-batch 1 of 2 (rows 3-5), on two "stages" [0, 2) and [2, 6) of one model.
  const float* x1 = x.data() + 3 * whole->input_size();
  const auto y1 = std::span<const ClassId>(y).subspan(3, 3);
  whole->SetDropoutSeed(9);
  whole->ComputeGradients(x1, y1);
  split->SetDropoutSeed(9);
  const float* mid = split->ForwardLayers(0, 2, x1, 3, 3, true);
  std::vector<float> h(mid, mid + 3 * split->layer_output_shape(1).size());
  split->ForwardLayers(2, 6, h.data(), 3, 3, true);
  split->LossGradient(3, y1);
  std::vector<float> dh(h.size());
  split->BackwardLayers(2, 6, h.data(), 3, nullptr, dh.data(), 3);
  split->BackwardLayers(0, 2, x1, 3, dh.data(), nullptr, 3);
  CHECK(std::equal(whole->grads().begin(), whole->grads().end(), split->grads().begin()));
}

// A regression dnn: one linear output trained on the mean squared error.
std::unique_ptr<model::Model> BuildRegression(int batch) {
  config::ModelSpec spec;
  spec.name = "dnn";
  auto m = model::Model::Build(spec, {1, 1, 8}, model::Outputs(1, tensor::LossKind::kMse), batch);
  REQUIRE(m.ok());
  (*m)->Initialize(7);
  return std::move(m).value();
}

TEST_CASE("the layer-range passes of a regression model give ComputeGradients' bits and its error sums", "[unit][model_parallel][regression]") {
  const int batch = 6;
  auto whole = BuildRegression(batch), split = BuildRegression(batch);
  std::vector<float> x(static_cast<std::size_t>(batch * whole->input_size())), y(batch);
  Rng rng(5, 0);
  for (float& v : x) v = static_cast<float>(rng.Uniform());
  for (int i = 0; i < batch; ++i) y[static_cast<std::size_t>(i)] = 3 * x[static_cast<std::size_t>(i * 8)] - 1;
  // Micro-batch 1 of 2 (rows 3-5) of float targets, on two "stages" [0, 3) and [3, 6).
  const float* x1 = x.data() + 3 * whole->input_size();
  const tensor::Labels y1 = tensor::Labels(std::span<const float>(y), 1).Rows(3, 3);
  const tensor::LossResult want = whole->ComputeGradients(x1, y1);
  const float* mid = split->ForwardLayers(0, 3, x1, 3, 3, true);
  std::vector<float> h(mid, mid + 3 * split->layer_output_shape(2).size());
  split->ForwardLayers(3, 6, h.data(), 3, 3, true);
  const tensor::LossResult got = split->LossGradient(3, y1);
  std::vector<float> dh(h.size());
  split->BackwardLayers(3, 6, h.data(), 3, nullptr, dh.data(), 3);
  split->BackwardLayers(0, 3, x1, 3, dh.data(), nullptr, 3);
  CHECK(std::equal(whole->grads().begin(), whole->grads().end(), split->grads().begin()));
  CHECK(got.loss == want.loss);
  CHECK(got.abs_error == want.abs_error);
  CHECK(got.squared_error == want.squared_error);
  CHECK(want.abs_error > 0);
}

TEST_CASE("a regression model's one output splits by units: one stage holds it, every parameter once", "[unit][model_parallel][regression]") {
  auto dnn = BuildRegression(2);
  config::ModelParallelSpec spec;
  spec.split = config::ModelParallelSpec::Split::kUnits;
  spec.stages = 3;
  REQUIRE(pipeline::CheckUnits(spec, *dnn).ok());
  std::vector<int> owners(dnn->params().size(), 0);
  for (int s = 0; s < 3; ++s)
    for (const pipeline::OwnedRange& r : pipeline::UnitRanges(*dnn, s, 3))
      for (std::size_t i = r.begin; i < r.end; ++i) ++owners[i];
  CHECK(std::all_of(owners.begin(), owners.end(), [](int n) { return n == 1; }));
  CHECK(pipeline::UnitSlice(1, 0, 3) == std::pair{0, 0});
  CHECK(pipeline::UnitSlice(1, 2, 3) == std::pair{0, 1});
}

TEST_CASE("each stage's owned ranges cover the parameters once", "[unit][model_parallel]") {
  auto dnn = Build("dnn", 2);
  for (bool units : {false, true}) {
    std::vector<int> owners(dnn->params().size(), 0);
    for (int s = 0; s < 3; ++s) {
      const std::vector<pipeline::OwnedRange> ranges =
          units ? pipeline::UnitRanges(*dnn, s, 3) : pipeline::LayerRanges(*dnn, s * 2, s * 2 + 2);
      for (const pipeline::OwnedRange& r : ranges)
        for (std::size_t i = r.begin; i < r.end; ++i) ++owners[i];
    }
    INFO((units ? "units" : "layers"));
    CHECK(std::all_of(owners.begin(), owners.end(), [](int n) { return n == 1; }));
  }
}

launcher::LiveRow Stage(const std::string& name, int replica, int stage, double step, double busy, const std::string& state = "training") {
  launcher::LiveRow r;
  r.name = name;
  r.replica = replica;
  r.stage = stage;
  r.stages = 2;
  r.epoch = 1;
  r.global_step = step;
  r.busy = busy;
  r.state = state;
  r.loss = stage == 1 ? 0.5 : -1;
  return r;
}

TEST_CASE("tfctl's live table gathers each replica's stages into one row", "[unit][model_parallel][launcher]") {
  launcher::LiveRow chief;
  chief.name = "evaluator:0";
  // Workers in rank order: replica 0's stages, then replica 1's, the second reported out of order.
  const std::vector<launcher::LiveRow> rows = {Stage("worker:0", 0, 0, 40, 0.29), Stage("worker:1", 0, 1, 39, 0.454),
                                               Stage("worker:3", 1, 1, 40, -1, "failed (1)"), Stage("worker:2", 1, 0, 40, 0.5), chief};
  const std::vector<launcher::LiveRow> got = launcher::ByReplica(rows);
  REQUIRE(got.size() == 3);
  CHECK(got[0].name == "replica 0");
  CHECK(got[0].global_step == 39);  // the stage that is behind
  CHECK(got[0].loss == 0.5);        // the last stage's
  CHECK(got[0].state == "training, stages 0:29% 1:45%");
  CHECK(got[1].name == "replica 1");
  CHECK(got[1].state == "stage 0 training, stage 1 failed (1), stages 0:50% 1:-");
  CHECK(got[2].name == "evaluator:0");
  const std::vector<std::string> lines = launcher::FormatLiveTable(got);
  REQUIRE(lines.size() == 4);
  CHECK(lines[1].rfind("replica 0", 0) == 0);
  CHECK(lines[1].find("training, stages 0:29% 1:45%") != std::string::npos);
  // Not a model-parallel job: one row per worker, as they are.
  launcher::LiveRow w;
  w.name = "worker:0";
  CHECK(launcher::ByReplica({w, w}).size() == 2);
}

}  // namespace
}  // namespace tfd
