// tfctl sweep end to end: tfctl as the coordinator of two generic tfd workers on synthetic data.
#include <signal.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/http/server.h"
#include "test/system/tfctl_util.h"

namespace tfd::testing::sweep_test {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

json BaseJob(const TempDir& dir, int epochs) {
  return {{"model", {{"name", "mlp"}, {"init", "glorot_uniform"}}},
          {"data", dir.path()},
          {"epochs", epochs},
          {"batch_size", 20},
          {"log_every_steps", 0},
          {"optimizer", {{"type", "sgd"}, {"learning_rate", 0.1}}}};
}

// A sweep's base job: a sweep ranks its trials on a validation set, never the test set.
json SweepJob(const TempDir& dir, int epochs) {
  json job = BaseJob(dir, epochs);
  job["validation_split"] = 100;
  return job;
}

std::string Command(const TempDir& dir, const std::string& sweep_file) {
  return kTfctl + " sweep " + sweep_file + " --workers 2 --tfd " + kTfd + " --run-dir " + (dir / "runs");
}

TEST_CASE("a sweep of 6 trials on 2 workers: the right best, a pruned trial and FAILED ones, and a runnable best.json",
          "[system][sweep]") {
  TempDir dir;
  WriteSyntheticMnist(dir / "", 800, 100);
  // batch_size 5000 cannot be trained on 800 examples: those trials fail while the sweep goes on.
  json sweep = {{"job", SweepJob(dir, 3)},
                {"space", {{"optimizer.learning_rate", {0.3, 0.03, 0.001}}, {"batch_size", {20, 5000}}}},
                {"objective", {{"metric", "loss"}, {"mode", "min"}}},
                {"scheduler", {{"type", "asha"}, {"grace_epochs", 1}, {"reduction_factor", 3}, {"max_epochs", 3}}}};
  WriteFile(dir / "sweep.json", sweep.dump(2));
  CommandResult r = RunCommand(Command(dir, dir / "sweep.json") + " --no-metrics", dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const std::string run = RunFolder(dir);
  // --no-metrics: no worker serves any (a live sweep's are checked in the Ctrl-C test below).
  CHECK(json::parse(ReadAll(run + "/targets.json")) == json::array());
  for (int i = 0; i < 2; ++i) CHECK(ReadAll(run + "/worker-" + std::to_string(i) + ".log").find("metrics on http") == std::string::npos);
  std::vector<json> lines = ReadJsonLines(run + "/trials.jsonl");
  std::map<int, json> last;  // each trial's last line
  for (const json& l : lines) last[l["trial"].get<int>()] = l;
  REQUIRE(last.size() == 6);
  int failed = 0, stopped = 0, done = 0;
  for (const auto& [id, l] : last) {
    const std::string status = l["status"];
    const int batch = l["params"]["batch_size"];
    if (batch == 5000) {
      CHECK(status == "FAILED");
      CHECK_THAT(l["reason"].get<std::string>(), Catch::Contains("batch"));
    }
    failed += status == "FAILED";
    stopped += status == "STOPPED";
    done += status == "DONE";
  }
  CHECK(failed == 3);
  CHECK(stopped >= 1);  // the slowest learning rate cannot be in the top third at rung 1
  CHECK(done >= 1);
  for (const auto& [id, l] : last)
    if (l["status"] == "STOPPED") CHECK_THAT(l["reason"].get<std::string>(), Catch::Contains("ASHA"));
  // The best: the smallest loss any trial reported; learning rate 0.3 on this easy set.
  double best_loss = 1e9;
  double best_lr = 0;
  for (const json& l : lines)
    if (l["event"] == "epoch" && l.contains("loss") && l["loss"].get<double>() < best_loss) {
      best_loss = l["loss"];
      best_lr = l["params"]["optimizer.learning_rate"];
    }
  CHECK(best_lr == 0.3);
  json best = json::parse(ReadAll(run + "/best.json"));
  CHECK(best["optimizer"]["learning_rate"] == 0.3);
  CHECK(best["batch_size"] == 20);
  const std::string csv = ReadAll(run + "/leaderboard.csv");
  // Ranked by the training loss; the test accuracy at each trial's best epoch is shown, never used.
  CHECK_THAT(csv, Catch::StartsWith("trial,status,epoch,loss,best,test_accuracy,worker,attempts,params,reason\n"));
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 7);
  CHECK_THAT(r.out, Catch::Contains("best: trial"));
  // best.json runs as is.
  CommandResult again = RunCommand(kTfd + " --standalone --job " + run + "/best.json", dir);
  INFO(again.err);
  CHECK(again.exit_code == 0);
  // Each trial that trained to its end exported its model; the best one's is the run's model.
  int exported = 0;
  for (const auto& [id, l] : last) {
    const bool has = std::filesystem::exists(run + "/trials/" + std::to_string(id) + "/model/1/model.json");
    if (l["status"] == "FAILED") CHECK_FALSE(has);
    exported += has;
  }
  CHECK(exported == done);
  REQUIRE(std::filesystem::exists(run + "/model/1/model.json"));
  int best_id = -1;  // the one trial with learning rate 0.3 and batch size 20
  for (const auto& [id, l] : last)
    if (l["params"]["optimizer.learning_rate"] == 0.3 && l["params"]["batch_size"] == 20) best_id = id;
  REQUIRE(best_id >= 0);
  CHECK(ReadAll(run + "/model/1/model.json") == ReadAll(run + "/trials/" + std::to_string(best_id) + "/model/1/model.json"));
  CHECK_THAT(r.out, Catch::Contains("tfctl: model " + run + "/model (trial "));
  CHECK_THAT(r.out, Catch::Contains("serve it: tfd serve --model " + run + "/model"));
  CommandResult predicted = RunCommand(kTfd + " predict --model " + run + "/model --data " + dir.path(), dir);
  INFO(predicted.err);
  CHECK(predicted.exit_code == 0);
}

TEST_CASE("a worker killed mid-sweep: its trial resumes on the other worker after its last reported epoch and finishes there",
          "[system][sweep]") {
  TempDir dir;
  WriteSyntheticMnist(dir / "", 4000, 100);
  // Long enough (seconds) that the kill below lands while the trial trains, however fast a step is.
  constexpr int kEpochs = 300;
  json sweep = {{"job", SweepJob(dir, kEpochs)}, {"space", {{"optimizer.learning_rate", {0.1}}}}, {"objective", {{"metric", "val_accuracy"}}}};
  WriteFile(dir / "sweep.json", sweep.dump(2));
  CommandResult r;
  std::thread tfctl([&] { r = RunCommand(Command(dir, dir / "sweep.json"), dir); });
  // Wait for the trial's first epoch, then kill the worker that runs it.
  int victim = -1;
  std::string run;
  const auto until = std::chrono::steady_clock::now() + 120s;
  while (victim < 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(20ms);
    if (run.empty() && std::filesystem::exists(dir / "runs")) run = RunFolder(dir);
    if (run.empty()) continue;
    for (const json& l : ReadJsonLines(run + "/trials.jsonl"))
      if (l["event"] == "epoch") victim = l["worker"];
  }
  REQUIRE(victim >= 0);
  std::map<int, int> pids;
  std::ifstream in(run + "/workers.txt");
  for (int i, pid; in >> i >> pid;) pids[i] = pid;
  REQUIRE(pids.contains(victim));
  REQUIRE(kill(pids[victim], SIGKILL) == 0);
  tfctl.join();
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  std::vector<json> lines = ReadJsonLines(run + "/trials.jsonl");
  bool lost = false;
  json end;
  for (const json& l : lines) {
    lost |= l["event"] == "worker_lost" && l["worker"] == victim;
    if (l["event"] == "end") end = l;
  }
  CHECK(lost);
  REQUIRE(end.is_object());
  CHECK(end["status"] == "DONE");
  CHECK(end["worker"] == 1 - victim);
  CHECK(end["attempt"] == 2);
  CHECK(end["epoch"] == kEpochs);
  // The second placement resumed from the trial's checkpoint: after the last epoch the killed
  // worker reported (k >= 1, since the kill came after an epoch line), not from epoch 1. Every
  // epoch is recorded exactly once: 1..k by attempt 1, k+1..kEpochs by attempt 2 on the other worker.
  int resume_epoch = -1, last_first_attempt = 0, first_second_attempt = 0;
  std::map<int, int> seen;  // epoch -> lines
  for (const json& l : lines) {
    if (l["event"] == "placed" && l["attempt"] == 2) resume_epoch = l.value("resume_epoch", 0);
    if (l["event"] != "epoch") continue;
    const int e = l["epoch"];
    ++seen[e];
    if (l["attempt"] == 1) {
      CHECK(l["worker"] == victim);
      last_first_attempt = std::max(last_first_attempt, e);
    } else {
      CHECK(l["worker"] == 1 - victim);
      if (first_second_attempt == 0) first_second_attempt = e;
    }
  }
  CHECK(resume_epoch >= 1);
  CHECK(resume_epoch == last_first_attempt);
  CHECK(first_second_attempt == resume_epoch + 1);
  CHECK(seen.size() == static_cast<std::size_t>(kEpochs));
  for (const auto& [e, n] : seen) {
    INFO("epoch " << e);
    CHECK(n == 1);
  }
  CHECK(seen.begin()->first == 1);
  CHECK(seen.rbegin()->first == kEpochs);
  // The worker log says it resumed, and the trial's newest checkpoint is in the run folder.
  CHECK_THAT(ReadAll(run + "/worker-" + std::to_string(1 - victim) + ".log"),
             Catch::Contains("resuming after epoch " + std::to_string(resume_epoch)));
  bool file = false;
  for (const auto& f : std::filesystem::directory_iterator(run + "/trials/0/ckpt")) file |= f.path().extension() == ".tfdckpt";
  CHECK(file);
}

TEST_CASE("a bad sweep file is exit 2 naming the JSON path; nothing starts", "[system][sweep]") {
  TempDir dir;
  json sweep = {{"job", SweepJob(dir, 1)}, {"search", "random"}, {"max_trials", 2},
                {"space", {{"optimizer.learning_rate", {{"log_uniform", {0, 1}}}}}}};
  WriteFile(dir / "sweep.json", sweep.dump(2));
  CommandResult r = RunCommand(Command(dir, dir / "sweep.json"), dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("space.optimizer.learning_rate.log_uniform[0]: log_uniform needs bounds above 0"));
  CHECK_FALSE(std::filesystem::exists(dir / "runs"));
  // The test set never chooses: a test_accuracy objective, and a job without a validation split.
  json on_test = {{"job", SweepJob(dir, 1)}, {"space", {{"optimizer.learning_rate", {0.1}}}}, {"objective", {{"metric", "test_accuracy"}}}};
  WriteFile(dir / "on_test.json", on_test.dump(2));
  CommandResult t = RunCommand(Command(dir, dir / "on_test.json"), dir);
  CHECK(t.exit_code == 2);
  CHECK_THAT(t.err, Catch::Contains("objective.metric: \"test_accuracy\": a sweep never chooses on the test set"));
  json no_split = {{"job", BaseJob(dir, 1)}, {"space", {{"optimizer.learning_rate", {0.1}}}}};
  WriteFile(dir / "no_split.json", no_split.dump(2));
  CommandResult n = RunCommand(Command(dir, dir / "no_split.json"), dir);
  CHECK(n.exit_code == 2);
  CHECK_THAT(n.err, Catch::Contains("job.validation_split: missing: a sweep ranks its trials by val_accuracy on a validation set"));
  CHECK_FALSE(std::filesystem::exists(dir / "runs"));
}

TEST_CASE("Ctrl-C stops every trial and keeps what was written", "[system][sweep]") {
  TempDir dir;
  WriteSyntheticMnist(dir / "", 4000, 100);
  json sweep = {{"job", SweepJob(dir, 200)}, {"space", {{"optimizer.learning_rate", {0.1, 0.05, 0.01}}}}};
  WriteFile(dir / "sweep.json", sweep.dump(2));
  CommandResult r;
  std::thread tfctl([&] { r = RunCommand("exec " + Command(dir, dir / "sweep.json"), dir); });
  std::string run;
  bool epoch = false;
  const auto until = std::chrono::steady_clock::now() + 120s;
  while (!epoch && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(20ms);
    if (run.empty() && std::filesystem::exists(dir / "runs")) run = RunFolder(dir);
    if (!run.empty())
      for (const json& l : ReadJsonLines(run + "/trials.jsonl")) epoch |= l["event"] == "epoch";
  }
  REQUIRE(epoch);
  // Every worker serves its metrics where targets.json says, labelled with the run folder's name.
  const json targets = json::parse(ReadAll(run + "/targets.json"));
  REQUIRE(targets.size() == 2);
  std::set<std::string> addresses;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const std::string at = targets[i]["targets"][0];
    addresses.insert(at);
    CHECK(targets[i]["labels"]["job"] == "worker");
    CHECK(targets[i]["labels"]["task"] == std::to_string(i));
    CHECK(targets[i]["labels"]["run"] == std::filesystem::path(run).filename().string());
    REQUIRE(at.starts_with("127.0.0.1:"));
    // The other worker may still be starting on a loaded machine: asked again for up to 30 s.
    Result<http::Fetched> got = Status::Unavailable("not asked");
    for (const auto deadline = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < deadline;) {
      got = http::Get("127.0.0.1", static_cast<std::uint16_t>(std::stoi(at.substr(10))), "/metrics", 5000);
      if (got.ok()) break;
      std::this_thread::sleep_for(100ms);
    }
    INFO(at << ": " << (got.ok() ? got->body.substr(0, 300) : got.status().ToString()));
    REQUIRE(got.ok());
    CHECK(got->status == 200);
    CHECK(got->body.find(fmt::format(R"(job="worker",task="{}",run="{}")", i, std::filesystem::path(run).filename().string())) !=
          std::string::npos);
  }
  CHECK(addresses.size() == 2);
  // tfctl's pid: the process whose command line is this sweep's (exec'd by the shell).
  const std::vector<std::string> procs = ProcessesMentioning(dir / "sweep.json");
  int tfctl_pid = -1;
  for (const std::string& p : procs)
    if (p.find(" sweep ") != std::string::npos) tfctl_pid = std::stoi(p.substr(0, p.find(':')));
  REQUIRE(tfctl_pid > 0);
  kill(tfctl_pid, SIGINT);
  tfctl.join();
  INFO(r.out << r.err);
  CHECK(r.exit_code == 130);
  const std::string csv = ReadAll(run + "/leaderboard.csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 4);
  CHECK(csv.find("RUNNING") == std::string::npos);
  CHECK(csv.find("STOPPED") != std::string::npos);
  CHECK(WaitUntilNoneLeft(dir.path(), 30s));
}

}  // namespace
}  // namespace tfd::testing::sweep_test

namespace tfd::testing::sweep_test {
namespace {

TEST_CASE("an ensemble of 3 members on 2 workers: the averaged prediction is the mean of the members' predictions", "[system][sweep][ensemble]") {
  TempDir dir;
  WriteSyntheticMnist(dir / "", 800, 100);
  json job = BaseJob(dir, 2);
  job["optimizer"]["learning_rate"] = 0.05;
  job["ensemble"] = {{"members", 3}, {"vary", {{"batch_size", {20, 25, 40}}}}};
  WriteFile(dir / "job.json", job.dump(2));
  CommandResult r = RunCommand(kTfctl + " ensemble " + (dir / "job.json") + " --workers 2 --tfd " + kTfd + " --run-dir " + (dir / "runs"), dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("ensemble_test_accuracy"));
  const std::string run = RunFolder(dir);
  json summary = json::parse(ReadAll(run + "/ensemble.json"));
  REQUIRE(summary["epochs"].size() == 2);
  CHECK(summary["epochs"][1]["members"] == 3);
  CHECK(summary["predictions_epoch"] == 2);
  const int classes = summary["classes"];
  REQUIRE(classes == 10);  // MNIST's ten outputs; the synthetic labels use the first four
  const std::string labels = ReadAll(run + "/predictions/labels.u8");
  REQUIRE(labels.size() == 100);
  const std::vector<float> mean = ReadFloats(run + "/predictions/ensemble.f32");
  REQUIRE(mean.size() == 100u * classes);
  std::vector<std::vector<float>> members;
  for (int k = 0; k < 3; ++k) members.push_back(ReadFloats(run + "/predictions/member-" + std::to_string(k) + ".f32"));
  auto argmax = [&](const float* row) { return static_cast<int>(std::max_element(row, row + classes) - row); };
  int hits = 0;
  double best_member = 0;
  for (int k = 0; k < 3; ++k) {
    REQUIRE(members[k].size() == 100u * classes);
    int member_hits = 0;
    for (int i = 0; i < 100; ++i) member_hits += argmax(&members[k][i * classes]) == labels[i];
    best_member = std::max(best_member, member_hits / 100.0);
  }
  for (int i = 0; i < 100; ++i) {
    float row_sum = 0;
    for (int c = 0; c < classes; ++c) {
      const float expected = (members[0][i * classes + c] + members[1][i * classes + c] + members[2][i * classes + c]) / 3;
      CHECK(mean[i * classes + c] == Approx(expected).margin(1e-6));
      row_sum += members[0][i * classes + c];
    }
    CHECK(row_sum == Approx(1).margin(1e-4));  // a member's softmax
    hits += argmax(&mean[i * classes]) == labels[i];
  }
  CHECK(summary["epochs"][1]["ensemble_test_accuracy"].get<double>() == Approx(hits / 100.0));
  CHECK(summary["epochs"][1]["best_member_test_accuracy"].get<double>() == Approx(best_member));
  // The members trained with their own seeds and batch sizes: their predictions differ.
  CHECK(members[0] != members[1]);
  // Each member exported its own network; an ensemble is no single model, so there is no RUN/model.
  for (int k = 0; k < 3; ++k) CHECK(std::filesystem::exists(run + "/members/" + std::to_string(k) + "/model/1/model.json"));
  CHECK_FALSE(std::filesystem::exists(run + "/model"));
  // tfd refuses to train an ensemble job alone.
  CommandResult alone = RunCommand(kTfd + " --standalone --job " + (dir / "job.json"), dir);
  CHECK(alone.exit_code == 2);
  CHECK_THAT(alone.err, Catch::Contains("tfctl ensemble"));
}

}  // namespace
}  // namespace tfd::testing::sweep_test
