// A sweep whose coordinator task is killed (SIGKILL) mid-sweep and started again with --resume
// (docs/sweeps.md, "Resuming a sweep"): the final leaderboard equals an undisturbed sweep's, and
// trials.jsonl reports every epoch of every trial once. And --resume's refusals (exit 2, one line
// naming the file).
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "test/local_cluster.h"
#include "test/sweep_util.h"

namespace tfd::testing::cluster_sweep_resume_test {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr int kMaxEpochs = 4;

json SweepFile(const std::string& data) { return AshaSweepFile(data, kMaxEpochs); }

// One coordinator and one worker (trials run one after another, so ASHA sees the rungs in the
// same order in every run) on free loopback ports.
struct Sweep {
  json cluster;
  std::string run;
  std::unique_ptr<Process> coordinator, worker;

  static std::string TfConfig(const json& cluster, const std::string& type) {
    return json{{"cluster", cluster}, {"task", {{"type", type}, {"index", 0}}}}.dump();
  }
  // `tag` names the log files of this start.
  void Start(const TempDir& dir, const std::string& tag, bool resume) {
    std::vector<std::string> argv = {kTfd, "--log-format", "json", "--sweep", dir / "sweep.json", "--run-dir", run};
    if (resume) argv.push_back("--resume");
    coordinator = std::make_unique<Process>(argv, std::vector<std::string>{"TF_CONFIG=" + TfConfig(cluster, "coordinator")},
                                            dir / ("coordinator-" + tag + ".out"), dir / ("coordinator-" + tag + ".err"));
    worker = std::make_unique<Process>(std::vector<std::string>{kTfd, "--log-format", "json"},
                                       std::vector<std::string>{"TF_CONFIG=" + TfConfig(cluster, "worker")}, dir / ("worker-" + tag + ".out"),
                                       dir / ("worker-" + tag + ".err"));
    REQUIRE(coordinator->started());
    REQUIRE(worker->started());
  }
  void ExpectBothExit0() {
    const std::optional<int> c = coordinator->Wait(300s);
    INFO("coordinator stderr:\n" << coordinator->err());
    REQUIRE(c.has_value());
    CHECK(*c == 0);
    const std::optional<int> w = worker->Wait(60s);
    INFO("worker stderr:\n" << worker->err());
    REQUIRE(w.has_value());
    CHECK(*w == 0);
  }
};

Sweep NewSweep(const std::string& run) {
  const std::vector<int> ports = FreePorts(2);
  return Sweep{.cluster = {{"coordinator", {"127.0.0.1:" + std::to_string(ports[0])}}, {"worker", {"127.0.0.1:" + std::to_string(ports[1])}}},
               .run = run};
}

TEST_CASE("a sweep whose coordinator is killed mid-sweep and resumed ends with the undisturbed sweep's leaderboard, each epoch counted once",
          "[integration][sweep][resume]") {
  TempDir dir;
  // About 4,800 steps an epoch: the kill lands while the chosen trial still has epochs to run (with
  // 1,200 a fast machine finished the trial's epochs before the kill).
  WriteSyntheticMnist(dir / "", 48000, 200, /*side=*/16);
  WriteFile(dir / "sweep.json", SweepFile(dir.path()).dump(2));

  // The undisturbed sweep.
  Sweep ref = NewSweep(dir / "ref");
  ref.Start(dir, "ref", /*resume=*/false);
  ref.ExpectBothExit0();
  const std::map<int, std::map<int, json>> ref_epochs = SweepEpochsOnce(ref.run + "/trials.jsonl");
  const std::map<int, json> ref_ends = SweepEnds(ref.run + "/trials.jsonl");
  REQUIRE(ref_ends.size() == 5);
  // The kill comes after an epoch that a later trial reported and went on from (not its last):
  // that trial then resumes from its checkpoint.
  const auto [kill_trial, kill_epoch] = SweepKillPoint(ref.run + "/trials.jsonl", kMaxEpochs);
  REQUIRE(kill_trial >= 1);
  bool pruned = false;
  for (const auto& [id, end] : ref_ends) pruned |= end["status"] == "STOPPED";
  REQUIRE(pruned);  // ASHA stopped some trial: its rungs are part of what is rebuilt

  // The same sweep, its coordinator killed once trials.jsonl holds that epoch and the trial's
  // folder a committed checkpoint (the coordinator writes the file just after the epoch's line).
  Sweep run = NewSweep(dir / "run");
  run.Start(dir, "first", /*resume=*/false);
  const std::string kill_ckpt = run.run + "/trials/" + std::to_string(kill_trial) + "/ckpt";
  auto has_checkpoint = [&] {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(kill_ckpt, ec))
      if (e.path().extension() == ".tfdckpt") return true;
    return false;
  };
  bool seen = false;
  for (auto until = std::chrono::steady_clock::now() + 300s; !seen && std::chrono::steady_clock::now() < until;) {
    for (const json& l : ReadJsonLines(run.run + "/trials.jsonl"))
      seen |= l["event"] == "epoch" && l["trial"] == kill_trial && l["epoch"] == kill_epoch;
    seen = seen && has_checkpoint();
    if (!seen) std::this_thread::sleep_for(10ms);
  }
  REQUIRE(seen);
  run.coordinator->Signal(SIGKILL);
  REQUIRE(run.coordinator->Wait(30s) == std::optional<int>(128 + SIGKILL));
  // Its worker finds the coordinator gone and ends.
  const std::optional<int> lost = run.worker->Wait(120s);
  REQUIRE(lost.has_value());
  CHECK(*lost != 0);
  // The guard: the kill came before the sweep's end (else there would be nothing to resume).
  REQUIRE(SweepEnds(run.run + "/trials.jsonl").size() < 5);

  run.Start(dir, "resumed", /*resume=*/true);
  const json resumed = AwaitEvent(*run.coordinator, "resumed", json::object(), 60s);
  CHECK(resumed["resumed"].get<int>() >= 1);
  CHECK(resumed["from_checkpoint"].get<int>() >= 1);
  CHECK(resumed["done"].get<int>() + resumed["resumed"].get<int>() + resumed["pending"].get<int>() == 5);
  run.ExpectBothExit0();

  // Every epoch once, with the undisturbed sweep's metrics; the same ends, leaderboard and winner.
  CHECK(SweepEpochsOnce(run.run + "/trials.jsonl") == ref_epochs);
  const std::map<int, json> ends = SweepEnds(run.run + "/trials.jsonl");
  REQUIRE(ends.size() == 5);
  for (const auto& [id, end] : ends) {
    INFO("trial " << id << ": " << end.dump() << " vs " << ref_ends.at(id).dump());
    CHECK(end["status"] == ref_ends.at(id)["status"]);
    CHECK(end["epoch"] == ref_ends.at(id)["epoch"]);
    CHECK(end["params"] == ref_ends.at(id)["params"]);
    CHECK(end.value("reason", "") == ref_ends.at(id).value("reason", ""));
  }
  CHECK(LeaderboardRowsButAttempts(ReadAll(run.run + "/leaderboard.csv")) == LeaderboardRowsButAttempts(ReadAll(ref.run + "/leaderboard.csv")));
  CHECK(json::parse(ReadAll(run.run + "/best_trial.json")) == json::parse(ReadAll(ref.run + "/best_trial.json")));
  // The trial killed mid-run resumed after a committed epoch rather than from its first.
  bool from_checkpoint = false;
  for (const json& l : ReadJsonLines(run.run + "/trials.jsonl"))
    from_checkpoint |= l["event"] == "placed" && l["trial"] == kill_trial && l.value("resume_epoch", 0) >= 1;
  CHECK(from_checkpoint);
}

void ExpectRefused(const CommandResult& r, const std::string& fragment) {
  INFO("stderr:\n" << r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find(fragment) != std::string::npos);
}

TEST_CASE("--resume refuses a folder with no sweep, and a sweep file other than the one the folder was started with", "[integration][sweep][resume][cli]") {
  TempDir dir;
  WriteSyntheticMnist(dir / "", 100, 20);
  WriteFile(dir / "sweep.json", SweepFile(dir.path()).dump(2));
  const std::string tf_config =
      json{{"cluster", {{"coordinator", {"127.0.0.1:" + std::to_string(FreePort())}}, {"worker", {"127.0.0.1:1"}}}},
           {"task", {{"type", "coordinator"}, {"index", 0}}}}
          .dump();
  const auto run = [&](const std::string& sweep, const std::string& run_dir) {
    return RunCommand("TF_CONFIG='" + tf_config + "' " + kTfd + " --sweep " + sweep + " --run-dir " + run_dir + " --resume", dir);
  };
  SECTION("an empty folder") {
    std::filesystem::create_directories(dir / "empty");
    ExpectRefused(run(dir / "sweep.json", dir / "empty"), "empty/resume.json: missing: ");
  }
  SECTION("another sweep file") {
    std::filesystem::create_directories(dir / "run");
    WriteFile(dir / "run/resume.json", json{{"sweep", dir / "sweep.json"}, {"sha256", "00"}}.dump());
    WriteFile(dir / "run/trials.jsonl", "");
    ExpectRefused(run(dir / "sweep.json", dir / "run"), "sweep.json: not the sweep ");
  }
  SECTION("--resume on a worker task") {
    const std::string worker = json{{"cluster", {{"coordinator", {"127.0.0.1:1"}}, {"worker", {"127.0.0.1:2"}}}}, {"task", {{"type", "worker"}, {"index", 0}}}}.dump();
    ExpectRefused(RunCommand("TF_CONFIG='" + worker + "' " + kTfd + " --resume", dir), "--resume: only for the coordinator task");
  }
}

}  // namespace
}  // namespace tfd::testing::cluster_sweep_resume_test
