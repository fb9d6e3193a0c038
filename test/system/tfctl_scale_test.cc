// tfctl scale on a live elastic run: real tfd processes started by tfctl up --detach.
#include <sys/types.h>

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/system/tfctl_util.h"
#include "test/test_util.h"

namespace tfd::testing::tfctl_scale_test {
namespace {

using namespace std::chrono_literals;

// ClusterFile's 1 ps + `workers` workers, async, with "elastic": {2, 3}; a worker that stops is
// given up on after 3 s.
std::string ElasticClusterFile(const TempDir& dir, int epochs, int workers, bool elastic = true) {
  auto f = nlohmann::json::parse(ReadAll(ClusterFile(dir, epochs)));
  while (static_cast<int>(f["cluster"]["worker"].size()) < workers) f["cluster"]["worker"].push_back("127.0.0.1:" + std::to_string(FreePort()));
  if (elastic) f["train"]["elastic"] = {{"min_workers", 2}, {"max_workers", 3}};
  f["launch"]["timeouts"] = {{"reconnect", 3}};
  WriteFile(dir / "cluster.json", f.dump(2));
  return dir / "cluster.json";
}

std::vector<nlohmann::json> Events(const std::string& run, const std::string& task, const std::string& event) {
  std::vector<nlohmann::json> out;
  std::istringstream in(ReadAll(run + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (!e.is_discarded() && e.value("task", "") == task && e.value("event", "") == event) out.push_back(e);
  }
  return out;
}

// Waits for the run's tfctl to end (summary.json written); false after `limit`.
bool WaitForRunEnd(const std::string& run, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!std::filesystem::exists(run + "/summary.json") && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(100ms);
  return std::filesystem::exists(run + "/summary.json");
}

nlohmann::json SummaryOf(const std::string& run, const std::string& task) {
  auto summary = nlohmann::json::parse(ReadAll(run + "/summary.json"));
  for (const auto& t : summary["tasks"])
    if (t["task"] == task) return t;
  return {};
}

TEST_CASE("tfctl scale 2 -> 3 mid-run: the third worker joins, trains, and the run exits 0", "[system][tfctl][scale]") {
  TempDir dir;
  const std::string file = ElasticClusterFile(dir, 3000, 2);
  CommandResult up = RunCommand(kTfctl + " up " + file + " --detach", dir);
  INFO(up.out << up.err << (up.exit_code == 0 ? std::string() : RunLogs(dir)));
  REQUIRE(up.exit_code == 0);
  const std::string run = RunFolder(dir);
  REQUIRE_FALSE(run.empty());

  // Refused with exit 2 and one line, starting nothing: outside min_workers..max_workers.
  for (const auto& [n, words] : {std::pair{"1", "outside the job's elastic min_workers 2 .. max_workers 3"},
                                 std::pair{"4", "outside the job's elastic min_workers 2 .. max_workers 3"}}) {
    CommandResult r = RunCommand(kTfctl + " scale " + run + " --workers " + n, dir);
    INFO(r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(words) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  CHECK_FALSE(std::filesystem::exists(run + "/worker:2.log"));
  CHECK_FALSE(std::filesystem::exists(run + "/scale.request"));

  // Already 2: nothing to do.
  CommandResult same = RunCommand(kTfctl + " scale " + run + " --workers 2", dir);
  INFO(same.out << same.err);
  CHECK(same.exit_code == 0);
  CHECK(same.out.find("2 workers run") != std::string::npos);

  CommandResult scale = RunCommand(kTfctl + " scale " + run + " --workers 3", dir);
  INFO(scale.out << scale.err);
  REQUIRE(scale.exit_code == 0);
  CHECK(scale.out.find("started worker:2; 3 workers run") != std::string::npos);
  CHECK(scale.out.find("worker:2 ready") != std::string::npos);
  CommandResult status = RunCommand(kTfctl + " status " + run, dir);
  INFO(status.out);
  CHECK(status.out.find("running, 3 workers") != std::string::npos);
  CHECK(status.out.find("worker:2") != std::string::npos);

  REQUIRE(WaitForRunEnd(run, 300s));
  const auto summary = nlohmann::json::parse(ReadAll(run + "/summary.json"));
  INFO(summary.dump(1) << ReadAll(run + "/tfctl.log"));
  CHECK(summary["exit_code"] == 0);
  CHECK(SummaryOf(run, "worker:2")["exit_code"] == 0);
  CHECK_FALSE(Events(run, "worker:2", "epoch").empty());  // it trained
  CHECK(HasEvent(ReadAll(run + "/metrics.jsonl"), "share", {{"task", "worker:2"}, {"workers", 3}}));  // it joined a run of 3
  CHECK(HasEvent(ReadAll(run + "/metrics.jsonl"), "membership", {{"task", "ps:0"}, {"workers", 3}}));
  CHECK(Events(run, "worker:2", "scale").size() == 1);

  // The run is over: refused, exit 2.
  CommandResult over = RunCommand(kTfctl + " scale " + run + " --workers 3", dir);
  INFO(over.err);
  CHECK(over.exit_code == 2);
  CHECK(over.err.find("the run is over") != std::string::npos);
  CHECK(WaitUntilNoneLeft(dir.path(), 10s));
}

TEST_CASE("tfctl scale 3 -> 2 stops the highest-ranked worker; its exit is no failure", "[system][tfctl][scale]") {
  TempDir dir;
  const std::string file = ElasticClusterFile(dir, 3000, 3);
  CommandResult up = RunCommand(kTfctl + " up " + file + " --detach", dir);
  INFO(up.out << up.err << (up.exit_code == 0 ? std::string() : RunLogs(dir)));
  REQUIRE(up.exit_code == 0);
  const std::string run = RunFolder(dir);
  CommandResult scale = RunCommand(kTfctl + " scale " + run + " --workers 2", dir);
  INFO(scale.out << scale.err);
  REQUIRE(scale.exit_code == 0);
  CHECK(scale.out.find("stopping worker:2; 2 workers run") != std::string::npos);
  REQUIRE(WaitForRunEnd(run, 300s));
  const auto summary = nlohmann::json::parse(ReadAll(run + "/summary.json"));
  INFO(summary.dump(1) << ReadAll(run + "/tfctl.log") << ReadAll(run + "/ps:0.log"));
  CHECK(summary["exit_code"] == 0);
  CHECK(SummaryOf(run, "worker:2").value("scaled_down", false));
  CHECK(SummaryOf(run, "worker:1")["exit_code"] == 0);
  CHECK(HasEvent(ReadAll(run + "/metrics.jsonl"), "membership", {{"task", "ps:0"}, {"workers", 2}}));
  CHECK(WaitUntilNoneLeft(dir.path(), 10s));
}

TEST_CASE("tfctl scale refuses a missing folder and a job that is not elastic, exit 2", "[system][tfctl][scale]") {
  TempDir dir;
  CommandResult missing = RunCommand(kTfctl + " scale " + (dir / "runs/nope") + " --workers 3", dir);
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("no such run folder") != std::string::npos);
  // A run folder of a job without "elastic" (the check comes before any look at its tfctl).
  std::filesystem::create_directories(dir / "run");
  std::filesystem::copy_file(ElasticClusterFile(dir, 1, 2, /*elastic=*/false), dir / "run/cluster.json");
  CommandResult plain = RunCommand(kTfctl + " scale " + (dir / "run") + " --workers 3", dir);
  INFO(plain.err);
  CHECK(plain.exit_code == 2);
  CHECK(plain.err.find("train.elastic: the job is not elastic") != std::string::npos);
  CHECK(std::count(plain.err.begin(), plain.err.end(), '\n') == 1);
  CHECK_FALSE(std::filesystem::exists(dir / "run/scale.request"));
  CommandResult usage = RunCommand(kTfctl + " scale " + (dir / "run"), dir);
  CHECK(usage.exit_code == 2);
}

TEST_CASE("tfctl scale 2 -> 3 on an elastic allreduce run: the third worker joins the ring at a commit", "[system][tfctl][scale]") {
  TempDir dir;
  auto f = nlohmann::json::parse(ReadAll(ClusterFile(dir, 1500)));
  f["cluster"].erase("ps");
  f["train"]["update"] = {{"mode", "allreduce"}};
  f["train"]["elastic"] = {{"min_workers", 2}, {"max_workers", 3}, {"commit_every_steps", 10}};
  WriteFile(dir / "cluster.json", f.dump(2));
  CommandResult up = RunCommand(kTfctl + " up " + (dir / "cluster.json") + " --detach", dir);
  INFO(up.out << up.err << (up.exit_code == 0 ? std::string() : RunLogs(dir)));
  REQUIRE(up.exit_code == 0);
  const std::string run = RunFolder(dir);
  REQUIRE_FALSE(run.empty());
  CommandResult scale = RunCommand(kTfctl + " scale " + run + " --workers 3", dir);
  INFO(scale.out << scale.err);
  REQUIRE(scale.exit_code == 0);
  CHECK(scale.out.find("started worker:2; 3 workers run") != std::string::npos);
  CHECK(scale.out.find("worker:2 ready") != std::string::npos);

  REQUIRE(WaitForRunEnd(run, 300s));
  const auto summary = nlohmann::json::parse(ReadAll(run + "/summary.json"));
  INFO(summary.dump(1) << ReadAll(run + "/tfctl.log") << ReadAll(run + "/worker:2.log"));
  CHECK(summary["exit_code"] == 0);
  CHECK(SummaryOf(run, "worker:2")["exit_code"] == 0);
  const std::vector<nlohmann::json> joined = Events(run, "worker:2", "joined");
  REQUIRE(joined.size() == 1);
  CHECK(joined[0]["global_step"].get<std::int64_t>() % 10 == 0);  // at a commit
  for (const char* task : {"worker:0", "worker:1", "worker:2"})
    CHECK(HasEvent(ReadAll(run + "/metrics.jsonl"), "membership", {{"task", task}, {"workers", 3}}));
  const std::vector<nlohmann::json> done0 = Events(run, "worker:0", "done"), done2 = Events(run, "worker:2", "done");
  REQUIRE(done0.size() == 1);
  REQUIRE(done2.size() == 1);
  CHECK(done0[0]["params_sha256"] == done2[0]["params_sha256"]);
  CHECK(WaitUntilNoneLeft(dir.path(), 10s));
}

}  // namespace
}  // namespace tfd::testing::tfctl_scale_test
