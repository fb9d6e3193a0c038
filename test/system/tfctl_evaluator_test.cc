// tfctl up with an evaluator task: started beside the cluster, shown in the table and summary.json.
#include <filesystem>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/system/tfctl_util.h"
#include "test/test_util.h"

namespace tfd::testing::tfctl_evaluator_test {
namespace {

using namespace std::chrono_literals;

TEST_CASE("tfctl up starts the evaluator, which evaluates the checkpoints and ends with the chief's accuracy", "[system][tfctl][evaluator]") {
  TempDir dir;
  WriteSyntheticMnist(dir / "", 800, 100);
  const std::vector<int> ports = FreePorts(4);
  auto ep = [&](int i) { return "127.0.0.1:" + std::to_string(ports[static_cast<std::size_t>(i)]); };
  nlohmann::json f = {
      {"name", "t"},
      {"cluster", {{"ps", {ep(0)}}, {"worker", {ep(1), ep(2)}}, {"evaluator", {ep(3)}}}},
      {"train",
       {{"model", {{"name", "mlp"}, {"init", "glorot_uniform"}}},
        {"data", dir.path()},
        {"epochs", 3},
        {"batch_size", 20},
        {"update", {{"mode", "sync"}}},
        {"optimizer", {{"type", "adam"}, {"learning_rate", 0.01}}},
        {"checkpoint", {{"dir", dir / "ckpt"}, {"every_steps", 20}, {"keep", 100}}},
        {"evaluation", "evaluator"}}},
      {"launch", {{"tfd", kTfd}, {"run_dir", dir / "runs"}}}};
  WriteFile(dir / "cluster.json", f.dump(2));
  Process p({kTfctl, "up", dir / "cluster.json"}, {}, dir / "out", dir / "err");
  auto code = p.Wait(180s);
  INFO("stdout:\n" << p.out() << "\nstderr:\n" << p.err());
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  CHECK(p.out().find("1 ps + 2 workers + 1 evaluator;") != std::string::npos);
  const std::string run = RunFolder(dir);
  REQUIRE_FALSE(run.empty());
  CHECK(std::filesystem::exists(run + "/evaluator:0.log"));
  int evals = 0;
  std::istringstream metrics(ReadAll(run + "/metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    auto e = nlohmann::json::parse(line);
    if (e["event"] == "eval" && e["task"] == "evaluator:0") ++evals;
  }
  CHECK(evals >= 2);
  auto summary = nlohmann::json::parse(ReadAll(run + "/summary.json"));
  CHECK(summary["exit_code"] == 0);
  REQUIRE(summary["tasks"].size() == 4);
  nlohmann::json chief, evaluator;
  for (const auto& t : summary["tasks"]) {
    CHECK(t["exit_code"] == 0);
    if (t["task"] == "worker:0") chief = t;
    if (t["task"] == "evaluator:0") evaluator = t;
  }
  REQUIRE(evaluator.is_object());
  CHECK(evaluator["global_step"] == chief["global_step"]);
  CHECK(evaluator["test_accuracy"].get<double>() == chief["test_accuracy"].get<double>());
  // The table's evaluator row: its last evaluated global step.
  CHECK(p.out().find("evaluator:0     0 " + std::string(11 - std::to_string(chief["global_step"].get<int>()).size(), ' ') +
                     std::to_string(chief["global_step"].get<int>())) != std::string::npos);
}

}  // namespace
}  // namespace tfd::testing::tfctl_evaluator_test
