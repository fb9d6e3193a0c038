// The evaluator task with real tfd processes on synthetic data: it evaluates the chief's
// checkpoints and ends after the final one with the chief's own accuracy (a regression job's MAE and
// RMSE); it gives up, naming what it waited for, when the chief dies or never saves; a file it
// cannot read is a warning. Every wait has a deadline that fails the test instead of hanging.
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing::evaluator_test {
namespace {

using namespace std::chrono_literals;

// A job on the synthetic data in `dir` (2000 examples, batch 20) that checkpoints into dir/ckpt
// every `every_steps` steps, keeping every file, with `extra` added.
std::string EvalJob(const TempDir& dir, const std::string& update, int epochs, int every_steps, const std::string& extra) {
  return Job(dir.path(), update, epochs, R"({"type": "sgd", "learning_rate": 0.1})", 20, R"({"name": "mlp", "init": "glorot_uniform"})",
             R"(, "checkpoint": {"dir": ")" + (dir / "ckpt") + R"(", "every_steps": )" + std::to_string(every_steps) +
                 R"(, "keep": 1000})" + extra);
}

// One ps, one async worker and an evaluator; the job checkpoints every `every_steps` steps.
LocalClusterOptions AsyncWithEvaluator(const TempDir& dir, int epochs, int every_steps) {
  return {.num_ps = 1, .num_workers = 1, .job = EvalJob(dir, R"({"mode": "async"})", epochs, every_steps, ""), .dir = &dir,
          .evaluator = true};
}

// Runs every task of `cluster` and its evaluator (idle limit 120 s) to the end; the evaluator must
// exit 0 having evaluated two checkpoints at least. Its result goes to `eval`, its eval events to
// `evals`; the workers' results are returned.
std::vector<TaskResult> RunWithEvaluator(LocalCluster& cluster, TaskResult* eval, std::vector<nlohmann::json>* evals) {
  cluster.StartAll();
  cluster.StartEvaluator({"--idle-timeout", "120"});
  std::vector<TaskResult> workers = cluster.FinishAll();
  *eval = cluster.Finish("evaluator", 0, 120s);
  INFO("evaluator stderr:\n" << eval->err);
  CHECK(eval->exit_code == 0);
  *evals = ParseEvents(eval->out, "eval");
  REQUIRE(evals->size() >= 2);
  return workers;
}

// In sync mode (the chief's checkpoints of the ps's state) and beside an allreduce ring (its rank 0's).
TEST_CASE("the evaluator evaluates the chief's checkpoints and ends on the final one with the chief's accuracy",
          "[integration][evaluator]") {
  for (const auto& [mode, num_ps] : {std::pair<std::string, int>{R"({"mode": "sync"})", 1}, {R"({"mode": "allreduce"})", 0}}) {
    INFO(mode);
    TempDir dir;
    WriteSyntheticMnist(dir.path(), 2000, 200);
    LocalCluster cluster({.num_ps = num_ps, .num_workers = 2, .job = EvalJob(dir, mode, 3, 40, R"(, "evaluation": "evaluator")"),
                          .dir = &dir, .evaluator = true});
    TaskResult eval;
    std::vector<nlohmann::json> evals;
    std::vector<TaskResult> workers = RunWithEvaluator(cluster, &eval, &evals);
    INFO("evaluator stderr:\n" << eval.err);
    for (std::size_t i = 1; i < evals.size(); ++i) CHECK(evals[i]["global_step"] > evals[i - 1]["global_step"]);
    const nlohmann::json& last = evals.back();
    CHECK(last["final"] == true);
    for (std::size_t i = 0; i + 1 < evals.size(); ++i) CHECK(evals[i]["final"] == false);
    // The final checkpoint holds the parameters the chief evaluated last (every worker's, allreduce).
    const nlohmann::json& chief_done = workers[0].done;
    CHECK(last["global_step"] == chief_done["global_step"]);
    CHECK(last["test_accuracy"].get<double>() == chief_done["test_accuracy"].get<double>());
    CHECK(last["test_loss"].get<double>() > 0);
    CHECK_FALSE(last.contains("val_loss"));  // the job has no validation split
    CHECK(last["checkpoint"].get<std::string>().find("ckpt-000000000150.tfdckpt") != std::string::npos);
    CHECK(HasEvent(eval.out, "eval", {{"global_step", 150}}));
    // With "evaluation": "evaluator" the chief skips its per-epoch evaluation; its done event stays.
    const std::vector<nlohmann::json> chief_epochs = ParseEvents(workers[0].out, "epoch");
    REQUIRE(chief_epochs.size() == 3);
    for (const nlohmann::json& e : chief_epochs) CHECK_FALSE(e.contains("test_accuracy"));
    CHECK(workers[0].checkpoints.back()["final"] == true);
    CHECK(workers[1].checkpoints.empty());  // the chief alone writes
  }
}

TEST_CASE("the evaluator reports the validation split when the job has one", "[integration][evaluator]") {
  TempDir dir;
  WriteSyntheticMnist(dir.path(), 2000, 200);
  LocalCluster cluster({.num_ps = 1, .num_workers = 1,
                        .job = EvalJob(dir, R"({"mode": "async"})", 1, 1000, R"(, "validation_split": 0.2)"), .dir = &dir,
                        .evaluator = true});
  cluster.StartAll();
  cluster.StartEvaluator();
  std::vector<TaskResult> workers = cluster.FinishAll();
  TaskResult eval = cluster.Finish("evaluator", 0, 120s);
  INFO("evaluator stderr:\n" << eval.err);
  CHECK(eval.exit_code == 0);
  const std::vector<nlohmann::json> evals = ParseEvents(eval.out, "eval");
  REQUIRE(evals.size() == 1);  // one epoch of 80 steps, saved only at the end
  CHECK(evals[0]["final"] == true);
  CHECK(evals[0]["val_accuracy"].get<double>() >= 0);
  CHECK(evals[0]["val_loss"].get<double>() > 0);
  CHECK(evals[0]["test_accuracy"].get<double>() == workers[0].done["test_accuracy"].get<double>());
}

TEST_CASE("the evaluator scores a regression job's checkpoints with MAE and RMSE; the final one's are the chief's",
          "[integration][evaluator][regression]") {
  TempDir dir;
  const std::string csv = WriteLinearCsv(dir, 600);
  const std::string job = R"({"model": {"layers": [{"type": "dense", "units": 16, "activation": "tanh"}, {"type": "dense", "units": 1}]},
      "data": {"train": ")" + csv + R"(", "test_split": 0.2, "task": "regression"}, "epochs": 3, "batch_size": 20,
      "optimizer": {"type": "adam", "learning_rate": 0.02}, "update": {"mode": "async"}, "seed": 3, "log_every_steps": 0,
      "evaluation": "evaluator", "checkpoint": {"dir": ")" + (dir / "ckpt") + R"(", "every_steps": 30, "keep": 1000}})";
  LocalCluster cluster({.num_ps = 1, .num_workers = 1, .job = job, .dir = &dir, .evaluator = true});
  TaskResult eval;
  std::vector<nlohmann::json> evals;  // 72 steps, saved every 30 and at the end
  std::vector<TaskResult> workers = RunWithEvaluator(cluster, &eval, &evals);
  INFO("evaluator stderr:\n" << eval.err);
  for (const nlohmann::json& e : evals) {
    REQUIRE(e["test_mae"].is_number());
    CHECK(e["test_rmse"].get<double>() >= e["test_mae"].get<double>());
    CHECK(e["test_loss"].get<double>() > 0);
    CHECK_FALSE(e.contains("test_accuracy"));
  }
  const nlohmann::json& last = evals.back();
  CHECK(last["final"] == true);
  const nlohmann::json& chief_done = workers[0].done;
  INFO("chief's done event: " << chief_done.dump() << "\nthe last eval event: " << last.dump());
  REQUIRE(chief_done["test_mae"].is_number());
  CHECK(last["global_step"] == chief_done["global_step"]);
  CHECK(last["test_mae"].get<double>() == Approx(chief_done["test_mae"].get<double>()).margin(5e-5));
  CHECK(last["test_rmse"].get<double>() == Approx(chief_done["test_rmse"].get<double>()).margin(5e-5));
  CHECK(last["test_mae"].get<double>() < 0.2);  // ~0.05 from these runs; the noise alone gives 0.025
  CHECK(eval.err.find(" test_mae=") != std::string::npos);
}

TEST_CASE("the evaluator gives up within its idle limit when the chief is killed, naming what it waited for",
          "[integration][evaluator]") {
  TempDir dir;
  WriteSyntheticMnist(dir.path(), 2000, 200);
  LocalCluster cluster(AsyncWithEvaluator(dir, 1000, 50));
  cluster.StartAll();
  cluster.StartEvaluator({"--idle-timeout", "3"});
  cluster.AwaitEvent("evaluator", 0, "eval", {}, 90s);
  cluster.process("worker", 0).Signal(SIGKILL);
  // 3 s of idle limit plus polls and the evaluation under way; a generous bound that still fails loudly.
  TaskResult eval = cluster.Finish("evaluator", 0, 60s);
  CHECK(eval.exit_code == 1);
  CHECK(eval.err.find("no new checkpoint in " + (dir / "ckpt") + " for 3 s (--idle-timeout): waited for the chief's next or final "
                      "checkpoint; the last global step evaluated is ") != std::string::npos);
  const std::vector<nlohmann::json> errors = ParseEvents(eval.out, "error");
  REQUIRE(errors.size() == 1);
  CHECK(errors[0]["message"].get<std::string>().find("the last global step evaluated is") != std::string::npos);
}

TEST_CASE("an evaluator that sees no checkpoint gives up after --startup-timeout; an unreadable file is a warning",
          "[integration][evaluator]") {
  TempDir dir;
  WriteSyntheticMnist(dir.path(), 200, 50);
  LocalCluster cluster(AsyncWithEvaluator(dir, 1, 10));
  std::filesystem::create_directories(dir / "ckpt");
  WriteFile(dir / "ckpt/ckpt-000000000007.tfdckpt", "not a checkpoint");
  cluster.StartEvaluator({"--startup-timeout", "2"});
  TaskResult eval = cluster.Finish("evaluator", 0, 60s);
  CHECK(eval.exit_code == 1);
  CHECK(eval.err.find("cannot evaluate checkpoint " + (dir / "ckpt/ckpt-000000000007.tfdckpt") + ": ") != std::string::npos);
  CHECK(eval.err.find("no checkpoint in " + (dir / "ckpt") + " within 2 s (--startup-timeout) of the start: waited for the chief's "
                      "first checkpoint; no checkpoint evaluated yet") != std::string::npos);
}

TEST_CASE("an evaluator refuses a job without checkpoints, and a cluster with one refuses evaluation none (exit 2)",
          "[integration][evaluator]") {
  TempDir dir;
  WriteSyntheticMnist(dir.path(), 200, 50);
  LocalCluster cluster({.num_ps = 1, .num_workers = 1, .dir = &dir, .evaluator = true});
  WriteFile(dir / "plain.json", Job(dir.path(), R"({"mode": "async"})", 1, R"({"type": "sgd", "learning_rate": 0.1})", 20));
  cluster.StartEvaluator({"--job", dir / "plain.json"});
  TaskResult eval = cluster.Finish("evaluator", 0, 60s);
  CHECK(eval.exit_code == 2);
  CHECK(eval.err.find("checkpoint: missing: the cluster has an evaluator task, which evaluates the chief's checkpoints") !=
        std::string::npos);
  WriteFile(dir / "none.json", EvalJob(dir, R"({"mode": "async"})", 1, 10, R"(, "evaluation": "none")"));
  cluster.StartWorker(0, {"--job", dir / "none.json"});
  TaskResult chief = cluster.Finish("worker", 0, 60s);
  CHECK(chief.exit_code == 2);
  CHECK(chief.err.find("none.json: evaluation: \"none\", but the cluster has an evaluator task") != std::string::npos);
}

}  // namespace
}  // namespace tfd::testing::evaluator_test
