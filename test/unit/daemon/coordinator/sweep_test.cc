#include <catch2/catch.hpp>

#include <filesystem>
#include <set>
#include <string>

#include <fmt/format.h>

#include "common/config/sweep.h"
#include "daemon/coordinator/asha.h"
#include "daemon/coordinator/sweep_run.h"
#include "test/test_util.h"

namespace tfd {
namespace {

constexpr const char* kJob = R"("job": {"model": "dnn", "data": "d", "epochs": 3, "batch_size": 50, "validation_split": 100,
                                        "optimizer": {"type": "momentum", "learning_rate": 0.1, "momentum": 0.9}})";

Result<config::SweepSpec> Parse(const std::string& rest) { return config::ParseSweepSpec("{" + std::string(kJob) + ", " + rest + "}", "s.json"); }

std::string SweepErrorOf(const std::string& rest) {
  Result<config::SweepSpec> s = Parse(rest);
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == Code::kInvalidArgument);
  return s.status().message();
}

TEST_CASE("a grid sweep parses with its defaults and gives the grid, dimensions by path, the last fastest", "[unit][sweep]") {
  Result<config::SweepSpec> s = Parse(R"("space": {"optimizer.learning_rate": [0.1, 0.01], "batch_size": {"choice": [50, 100, 200]}})");
  INFO(s.status().message());
  REQUIRE(s.ok());
  CHECK(s->search == config::SweepSpec::Search::kGrid);
  CHECK(s->metric == "val_accuracy");
  CHECK(s->maximize);
  CHECK(s->shown == std::vector<std::string>{"test_accuracy"});  // reported beside the winner, never used to choose
  CHECK_FALSE(s->asha);
  std::vector<config::Trial> trials = config::GenerateTrials(*s);
  REQUIRE(trials.size() == 6);
  CHECK(trials[0].params[0] == std::pair<std::string, std::string>{"batch_size", "50"});
  CHECK(trials[0].params[1] == std::pair<std::string, std::string>{"optimizer.learning_rate", "0.1"});
  CHECK(trials[1].params[1].second == "0.01");
  CHECK(trials[2].params[0].second == "100");
  CHECK(trials[5].params[0].second == "200");
  Result<config::JobSpec> job = config::ParseJobSpec(trials[3].job_text, "trial 3");
  REQUIRE(job.ok());
  CHECK(job->optimizer.learning_rate == 0.01);
  CHECK(job->batch_size == 100);
  CHECK(job->optimizer.momentum == 0.9);  // the rest of the job is kept
  s->max_trials = 4;
  CHECK(config::GenerateTrials(*s).size() == 4);
}

TEST_CASE("a random sweep is the same for a seed and differs for another; draws stay in bounds", "[unit][sweep]") {
  const std::string space = R"("search": "random", "max_trials": 20, "space": {"optimizer.learning_rate": {"log_uniform": [0.001, 1]},
      "optimizer.momentum": {"uniform": [0.5, 0.99]}, "batch_size": {"choice": [50, 100]}, "seed": {"uniform": [1, 1000], "integer": true}})";
  Result<config::SweepSpec> a = Parse(space + R"(, "seed": 7)");
  Result<config::SweepSpec> b = Parse(space + R"(, "seed": 7)");
  Result<config::SweepSpec> c = Parse(space + R"(, "seed": 8)");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  std::vector<config::Trial> ta = config::GenerateTrials(*a), tb = config::GenerateTrials(*b), tc = config::GenerateTrials(*c);
  REQUIRE(ta.size() == 20);
  std::set<std::string> batches;
  bool any_differs = false;
  for (std::size_t i = 0; i < ta.size(); ++i) {
    CHECK(ta[i].job_text == tb[i].job_text);
    any_differs |= ta[i].job_text != tc[i].job_text;
    Result<config::JobSpec> job = config::ParseJobSpec(ta[i].job_text, "t");
    REQUIRE(job.ok());
    CHECK(job->optimizer.learning_rate >= 0.001);
    CHECK(job->optimizer.learning_rate <= 1);
    CHECK(job->optimizer.momentum >= 0.5);
    CHECK(job->optimizer.momentum <= 0.99);
    CHECK(ta[i].params[3].second.find('.') == std::string::npos);  // integer
    batches.insert(ta[i].params[0].second);  // batch_size: dimensions go by path
  }
  CHECK(any_differs);
  CHECK(batches.size() == 2);
}

TEST_CASE("ASHA sets every trial's epochs to max_epochs; objective, parallel and workers parse", "[unit][sweep]") {
  Result<config::SweepSpec> s = Parse(R"("space": {"batch_size": [50]}, "objective": {"metric": "loss"}, "parallel": 3, "workers": 4,
      "scheduler": {"type": "asha", "grace_epochs": 2, "max_epochs": 18})");
  REQUIRE(s.ok());
  CHECK_FALSE(s->maximize);  // loss: min by default
  CHECK(s->parallel == 3);
  CHECK(s->workers == 4);
  CHECK(s->asha);
  CHECK(s->scheduler.reduction_factor == 3);
  Result<config::JobSpec> job = config::ParseJobSpec(config::GenerateTrials(*s)[0].job_text, "t");
  REQUIRE(job.ok());
  CHECK(job->epochs == 18);
  Result<config::SweepSpec> d = Parse(R"("space": {"batch_size": [50]}, "scheduler": "asha")");
  REQUIRE(d.ok());
  CHECK(d->scheduler.max_epochs == 3);  // the job's epochs
}

TEST_CASE("bad sweep files are errors naming the JSON path", "[unit][sweep]") {
  CHECK_THAT(SweepErrorOf(R"("space": {})"), Catch::StartsWith("s.json: space: expected a non-empty object"));
  CHECK_THAT(SweepErrorOf(R"("search": "random", "max_trials": 2, "space": {"optimizer.momentum": {"gaussian": [0, 1]}})"),
             Catch::StartsWith("s.json: space.optimizer.momentum: expected one of") && Catch::Contains("\"gaussian\""));
  CHECK_THAT(SweepErrorOf(R"("search": "random", "max_trials": 2, "space": {"optimizer.learning_rate": {"log_uniform": [0, 1]}})"),
             Catch::StartsWith("s.json: space.optimizer.learning_rate.log_uniform[0]: log_uniform needs bounds above 0"));
  CHECK_THAT(SweepErrorOf(R"("search": "random", "max_trials": 2, "space": {"optimizer.learning_rate": {"uniform": [1, 0.5]}})"),
             Catch::StartsWith("s.json: space.optimizer.learning_rate.uniform: expected low < high"));
  CHECK_THAT(SweepErrorOf(R"("space": {"batch_size": [50]}, "objective": {"metric": "f1"})"),
             Catch::StartsWith("s.json: objective.metric: unknown metric \"f1\""));
  CHECK_THAT(SweepErrorOf(R"("space": {"batch_size": [50]}, "objective": {"metric": "loss", "mode": "up"})"),
             Catch::StartsWith("s.json: objective.mode: unknown mode \"up\""));
  CHECK_THAT(SweepErrorOf(R"("space": {"optimizer.momentum": {"uniform": [0.1, 0.9]}})"),
             Catch::StartsWith("s.json: space.optimizer.momentum: grid search takes only choices"));
  CHECK_THAT(SweepErrorOf(R"("search": "random", "space": {"batch_size": [50]})"), Catch::StartsWith("s.json: max_trials: missing"));
  CHECK_THAT(SweepErrorOf(R"("search": "bayes", "space": {"batch_size": [50]})"), Catch::StartsWith("s.json: search: unknown search \"bayes\""));
  CHECK_THAT(SweepErrorOf(R"("space": {"batch_size": [50]}, "scheduler": {"type": "hyperband"})"),
             Catch::StartsWith("s.json: scheduler.type: unknown scheduler \"hyperband\""));
  CHECK_THAT(SweepErrorOf(R"("space": {"batch_size": [50]}, "scheduler": {"type": "asha", "reduction_factor": 1})"),
             Catch::StartsWith("s.json: scheduler.reduction_factor: expected an integer in [2, 1000]"));
  CHECK_THAT(SweepErrorOf(R"("space": {"batch_size": [50]}, "scheduler": {"type": "asha", "grace_epochs": 5})"),
             Catch::StartsWith("s.json: scheduler.grace_epochs: 5 is beyond max_epochs 3"));
  CHECK_THAT(SweepErrorOf(R"("space": {"batch_size": [50]}, "parallel": -1)"), Catch::StartsWith("s.json: parallel: expected an integer"));
  CHECK_THAT(SweepErrorOf(R"("space": {"batch_size": [50]}, "trials": 3)"), Catch::StartsWith("s.json: trials: unknown field"));
  // A value that makes an invalid job names the trial and the job's field.
  CHECK_THAT(SweepErrorOf(R"("space": {"batch_size": [50, -1]})"), Catch::StartsWith("s.json: trial 1's job: batch_size: expected an integer"));
  CHECK_THAT(SweepErrorOf(R"("space": {"model.units": [5]})"), Catch::Contains("space.model.units: \"model\" is \"dnn\" in the job spec, not an object"));
  Result<config::SweepSpec> none = config::ParseSweepSpec(R"({"space": {"a": [1]}})", "s.json");
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.status().message(), Catch::StartsWith("s.json: job: missing"));
}

// A regression job (a CSV target) with `extra` fields, as a sweep file's "job".
std::string RegressionSweep(const std::string& job_extra, const std::string& rest) {
  return R"({"job": {"model": "mlp", "data": {"train": "y.csv", "task": "regression", "test_split": 0.2}, "epochs": 3, "batch_size": 20,
                     "optimizer": {"type": "adam", "learning_rate": 0.01})" + job_extra + "}, " + rest + "}";
}

TEST_CASE("a regression sweep ranks by val_mae (min) by default and shows the test MAE and RMSE beside it", "[unit][sweep][regression]") {
  Result<config::SweepSpec> s =
      config::ParseSweepSpec(RegressionSweep(R"(, "validation_split": 0.2)", R"("space": {"optimizer.learning_rate": [0.1, 0.01]})"), "s.json");
  INFO(s.status().message());
  REQUIRE(s.ok());
  CHECK(s->metric == "val_mae");
  CHECK_FALSE(s->maximize);
  CHECK(s->shown == std::vector<std::string>{"test_mae", "test_rmse"});
  CHECK(config::GenerateTrials(*s).size() == 2);
  // Another validation metric, or the training loss; "max" is taken as told.
  for (const char* metric : {"val_rmse", "val_loss", "loss", "mae", "rmse"}) {
    Result<config::SweepSpec> m = config::ParseSweepSpec(
        RegressionSweep(R"(, "validation_split": 0.2)", fmt::format(R"("space": {{"batch_size": [10]}}, "objective": {{"metric": "{}"}})", metric)),
        "s.json");
    INFO(metric << ": " << m.status().message());
    REQUIRE(m.ok());
    CHECK_FALSE(m->maximize);
  }
  Result<config::SweepSpec> up = config::ParseSweepSpec(
      RegressionSweep(R"(, "validation_split": 0.2)", R"("space": {"batch_size": [10]}, "objective": {"metric": "val_mae", "mode": "max"})"), "s.json");
  REQUIRE(up.ok());
  CHECK(up->maximize);
  // A classification sweep ranks by val_accuracy and shows test_accuracy.
  Result<config::SweepSpec> c = Parse(R"("space": {"batch_size": [50]})");
  REQUIRE(c.ok());
  CHECK(c->metric == "val_accuracy");
  CHECK(c->shown == std::vector<std::string>{"test_accuracy"});
}

TEST_CASE("a regression sweep without a validation set, or ranking by the test set or an accuracy, is an error naming the field",
          "[unit][sweep][regression]") {
  auto error = [](const std::string& job_extra, const std::string& rest) {
    Result<config::SweepSpec> s = config::ParseSweepSpec(RegressionSweep(job_extra, rest), "s.json");
    REQUIRE_FALSE(s.ok());
    CHECK(s.status().code() == Code::kInvalidArgument);
    return s.status().message();
  };
  const std::string val = R"(, "validation_split": 0.2)";
  CHECK_THAT(error("", R"("space": {"batch_size": [10]})"),
             Catch::StartsWith("s.json: job.validation_split: missing: a sweep ranks its trials by val_mae on a validation set, never the "
                               "test set: set validation_split"));
  CHECK_THAT(error("", R"("space": {"batch_size": [10]}, "objective": {"metric": "loss"})"), Catch::StartsWith("s.json: job.validation_split: missing"));
  CHECK_THAT(error(val, R"("space": {"batch_size": [10]}, "objective": {"metric": "test_mae"})"),
             Catch::StartsWith("s.json: objective.metric: \"test_mae\": a sweep never chooses on the test set, which is reported, not tuned on: "
                               "set validation_split and rank on val_mae or val_loss"));
  CHECK_THAT(error(val, R"("space": {"batch_size": [10]}, "objective": {"metric": "test_accuracy"})"),
             Catch::StartsWith("s.json: objective.metric: \"test_accuracy\": the data's task is regression, which has no accuracy"));
  CHECK_THAT(error(val, R"("space": {"data.task": ["regression", "classification"]})"),
             Catch::StartsWith("s.json: trial 1's job: data.task: classification, where the base job's is regression"));
  // A classifier has no MAE.
  CHECK_THAT(SweepErrorOf(R"("space": {"batch_size": [50]}, "objective": {"metric": "val_mae"})"),
             Catch::StartsWith("s.json: objective.metric: \"val_mae\": the data's task is classification"));
}

// A classification sweep: the test set is reported, never the objective, and every sweep needs a
// validation set to rank on, as a regression's does.
TEST_CASE("a classification sweep ranking by test_accuracy, or whose job has no validation split, is an error naming the field",
          "[unit][sweep]") {
  CHECK(SweepErrorOf(R"("space": {"batch_size": [50]}, "objective": {"metric": "test_accuracy"})") ==
        "s.json: objective.metric: \"test_accuracy\": a sweep never chooses on the test set, which is reported, not tuned on: set "
        "validation_split and rank on val_accuracy or val_loss (expected val_accuracy, val_loss, accuracy or loss)");
  const auto without_split = [](const std::string& rest) {
    Result<config::SweepSpec> s = config::ParseSweepSpec(
        R"({"job": {"model": "dnn", "data": "d", "epochs": 3, "batch_size": 50, "optimizer": {"type": "sgd", "learning_rate": 0.1}}, )" + rest + "}",
        "s.json");
    REQUIRE_FALSE(s.ok());
    CHECK(s.status().code() == Code::kInvalidArgument);
    return s.status().message();
  };
  CHECK(without_split(R"("space": {"batch_size": [50]})") ==
        "s.json: job.validation_split: missing: a sweep ranks its trials by val_accuracy on a validation set, never the test set: set "
        "validation_split (a fraction or a count of training examples, e.g. 5000 for MNIST)");
  // Whatever the metric, as for regression: the training loss too.
  CHECK_THAT(without_split(R"("space": {"batch_size": [50]}, "objective": {"metric": "loss"})"),
             Catch::StartsWith("s.json: job.validation_split: missing: a sweep ranks its trials by loss"));
  // The test metric is refused before the missing split, so the message says what is wrong with it.
  CHECK_THAT(without_split(R"("space": {"batch_size": [50]}, "objective": {"metric": "test_accuracy"})"),
             Catch::StartsWith("s.json: objective.metric: \"test_accuracy\": a sweep never chooses on the test set"));
  // A trial that does not evaluate each epoch reports no val_accuracy.
  Result<config::SweepSpec> none = config::ParseSweepSpec(
      R"({"job": {"model": "dnn", "data": "d", "epochs": 3, "batch_size": 50, "validation_split": 100, "evaluation": "none",
                  "optimizer": {"type": "sgd", "learning_rate": 0.1}}, "space": {"batch_size": [50]}})",
      "s.json");
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().message() == "s.json: objective.metric: no trial reports val_accuracy each epoch: the job's evaluation is not \"chief\"");
}

using D = coordinator::Asha::Decision;

TEST_CASE("ASHA's rungs are grace times powers of eta below max_epochs", "[unit][sweep][asha]") {
  CHECK(coordinator::Asha(1, 3, 9, true).rungs() == std::vector<int>{1, 3});
  CHECK(coordinator::Asha(1, 3, 10, true).rungs() == std::vector<int>{1, 3, 9});
  CHECK(coordinator::Asha(2, 2, 16, true).rungs() == std::vector<int>{2, 4, 8});
  CHECK(coordinator::Asha(4, 3, 4, true).rungs().empty());
}

TEST_CASE("ASHA keeps the top 1/eta of the trials that reached a rung so far (hand-worked)", "[unit][sweep][asha]") {
  coordinator::Asha asha(1, 3, 9, /*maximize=*/true);  // rungs 1 and 3
  CHECK(asha.OnEpoch(0, 1, 0.50) == D::kContinue);  // n=1, keep 1, 0 better
  CHECK(asha.OnEpoch(1, 1, 0.70) == D::kContinue);  // n=2, keep 1, 0 better
  CHECK(asha.OnEpoch(2, 1, 0.60) == D::kStop);      // n=3, keep 1, 1 better (0.70)
  CHECK(asha.OnEpoch(3, 1, 0.40) == D::kStop);      // n=4, keep 2, 3 better
  CHECK(asha.OnEpoch(4, 1, 0.65) == D::kContinue);  // n=5, keep 2, 1 better
  CHECK(asha.OnEpoch(0, 2, 0.10) == D::kContinue);  // not a rung
  CHECK(asha.OnEpoch(0, 9, 0.10) == D::kContinue);  // the last epoch is not a rung
}

TEST_CASE("ASHA: a tie keeps the newcomer; minimising flips the order", "[unit][sweep][asha]") {
  coordinator::Asha asha(1, 2, 8, /*maximize=*/true);
  CHECK(asha.OnEpoch(0, 1, 0.5) == D::kContinue);
  CHECK(asha.OnEpoch(1, 1, 0.5) == D::kContinue);  // n=2, keep 1, none strictly better
  CHECK(asha.OnEpoch(2, 1, 0.5) == D::kContinue);  // n=3, keep 2, none strictly better
  CHECK(asha.OnEpoch(3, 1, 0.4) == D::kStop);      // n=4, keep 2, 3 better
  coordinator::Asha loss(1, 2, 8, /*maximize=*/false);
  CHECK(loss.OnEpoch(0, 1, 0.3) == D::kContinue);
  CHECK(loss.OnEpoch(1, 1, 0.9) == D::kStop);      // n=2, keep 1, 0.3 is better
  CHECK(loss.OnEpoch(2, 1, 0.1) == D::kContinue);
}

TEST_CASE("ASHA: rungs reached out of order decide on their own records; a repeated report keeps its decision", "[unit][sweep][asha]") {
  coordinator::Asha asha(1, 3, 9, /*maximize=*/true);  // rungs 1 and 3
  CHECK(asha.OnEpoch(0, 1, 0.5) == D::kContinue);
  CHECK(asha.OnEpoch(0, 3, 0.8) == D::kContinue);  // first at rung 3 before anyone else reached rung 1 again
  CHECK(asha.OnEpoch(1, 1, 0.9) == D::kContinue);  // rung 1: n=2, keep 1, none better
  CHECK(asha.OnEpoch(2, 1, 0.6) == D::kStop);      // rung 1: n=3, keep 1, 0.9 better
  CHECK(asha.OnEpoch(1, 3, 0.75) == D::kStop);     // rung 3: n=2, keep 1, 0.8 better (rung 1's 0.9 does not count)
  // A re-placed trial reports its rungs again: the first decision stands, whatever the metric now.
  CHECK(asha.OnEpoch(2, 1, 0.99) == D::kStop);
  CHECK(asha.OnEpoch(1, 1, 0.01) == D::kContinue);
  CHECK(asha.OnEpoch(3, 1, 0.7) == D::kContinue);  // n=4 (repeats not recounted), keep 2, only 0.9 better
  CHECK(asha.OnEpoch(4, 1, 0.55) == D::kStop);     // n=5, keep 2, 0.9, 0.7 and 0.6 better
}

}  // namespace
}  // namespace tfd

namespace tfd {
namespace {

TEST_CASE("an ensemble job: members get seed + k and their vary values; bad fields are named", "[unit][sweep][ensemble]") {
  const std::string base = R"({"model": "dnn", "data": "d", "epochs": 2, "batch_size": 50, "seed": 10,
                               "optimizer": {"type": "sgd", "learning_rate": 0.1}, )";
  Result<config::SweepSpec> e = config::ParseEnsembleSpec(base + R"("ensemble": {"members": 3, "vary": {"optimizer.learning_rate": [0.1, 0.2, 0.3]}}})", "e.json");
  INFO(e.status().message());
  REQUIRE(e.ok());
  std::vector<config::Trial> members = config::GenerateTrials(*e);
  REQUIRE(members.size() == 3);
  for (int k = 0; k < 3; ++k) {
    Result<config::JobSpec> job = config::ParseJobSpec(members[k].job_text, "m");
    REQUIRE(job.ok());
    CHECK(job->seed == 10u + static_cast<unsigned>(k));
    CHECK(job->ensemble.members == 0);  // a member is a plain job
    CHECK(job->optimizer.learning_rate == Approx(0.1 * (k + 1)));
  }
  auto error = [&](const std::string& ensemble) {
    Result<config::SweepSpec> bad = config::ParseEnsembleSpec(base + ensemble + "}", "e.json");
    REQUIRE_FALSE(bad.ok());
    return bad.status().message();
  };
  CHECK_THAT(error(R"("ensemble": {"members": 1})"), Catch::StartsWith("e.json: ensemble.members: expected an integer in [2, 1024]"));
  CHECK_THAT(error(R"("ensemble": {"members": 2, "vary": {"seed": [1]}})"),
             Catch::StartsWith("e.json: ensemble.vary.seed: expected an array of 2 values"));
  CHECK_THAT(error(R"("ensemble": {"members": 2, "vary": {"batch_size": [10, 0]}})"), Catch::StartsWith("e.json: member 1's job: batch_size"));
  Result<config::SweepSpec> none = config::ParseEnsembleSpec(base + R"("shuffle": true})", "e.json");
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.status().message(), Catch::StartsWith("e.json: ensemble: missing"));
}

}  // namespace
}  // namespace tfd

namespace tfd {
namespace {

// The run folder's resume record: the sweep file, its SHA-256 and the workers it was started with
// (tfctl sweep --resume starts as many again); a record from before "workers" was kept says 0, and
// one whose count is out of range is refused naming resume.json.
TEST_CASE("resume.json records the sweep's workers, and --resume reads them back", "[unit][sweep][resume]") {
  testing::TempDir dir;
  const std::string file = dir / "lr.json";
  testing::WriteFile(file, "{" + std::string(kJob) + R"(, "space": {"optimizer.learning_rate": [0.1, 0.01]}, "workers": 3})");
  Result<coordinator::PreparedSweep> prepared = coordinator::PrepareSweep(file, /*ensemble=*/false, /*workers=*/0);
  REQUIRE(prepared.ok());
  REQUIRE(coordinator::MakeSweepFolder(dir / "run", file, *prepared, false).ok());
  CHECK(coordinator::RecordedSweepFile(dir / "run").value() == std::filesystem::absolute(file).string());
  CHECK(coordinator::RecordedSweepWorkers(dir / "run").value() == 3);
  // --workers given at the start is what the folder records.
  prepared = coordinator::PrepareSweep(file, false, 5);
  REQUIRE(prepared.ok());
  REQUIRE(coordinator::MakeSweepFolder(dir / "run5", file, *prepared, false).ok());
  CHECK(coordinator::RecordedSweepWorkers(dir / "run5").value() == 5);

  std::filesystem::create_directories(dir / "old");
  testing::WriteFile(dir / "old/resume.json", R"({"sweep": "/x/lr.json", "sha256": "00"})");
  CHECK(coordinator::RecordedSweepWorkers(dir / "old").value() == 0);
  for (const std::string bad : {"0", "4097", "1.5", "\"2\""}) {
    INFO("workers " << bad);
    testing::WriteFile(dir / "old/resume.json", R"({"sweep": "/x/lr.json", "sha256": "00", "workers": )" + bad + "}");
    const Result<int> got = coordinator::RecordedSweepWorkers(dir / "old");
    REQUIRE_FALSE(got.ok());
    CHECK(got.status().message().find("old/resume.json: expected") != std::string::npos);
    CHECK(got.status().message().find("\"workers\": N in [1, 4096]") != std::string::npos);
  }
}

}  // namespace
}  // namespace tfd
