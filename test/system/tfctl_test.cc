// tfctl as a user runs it: whole clusters of real tfd processes on this machine, from a cluster file.
#include <dirent.h>
#include <pwd.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/system/tfctl_util.h"
#include "test/test_util.h"

namespace tfd::testing::tfctl_test {
namespace {

using namespace std::chrono_literals;

TEST_CASE("tfctl up trains a local cluster to completion and writes the run folder", "[system][tfctl]") {
  TempDir dir;
  const std::string file = ClusterFile(dir, 2);
  Process p({kTfctl, "up", file}, {}, dir / "out", dir / "err");
  auto code = p.Wait(120s);
  INFO("stdout:\n" << p.out() << "\nstderr:\n" << p.err());
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  const std::string run = RunFolder(dir);
  REQUIRE_FALSE(run.empty());
  for (const char* f : {"cluster.json", "job.json", "metrics.jsonl", "summary.json", "ps:0.log", "worker:0.log", "worker:1.log"})
    CHECK(std::filesystem::exists(run + "/" + f));
  // The run's token: a file only its owner can read, and in no log.
  struct stat st {};
  REQUIRE(stat((run + "/token").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  const std::string token = ReadAll(run + "/token").substr(0, 64);
  CHECK(token.size() == 64);
  for (const char* f : {"ps:0.log", "worker:0.log", "worker:1.log", "metrics.jsonl"}) CHECK(ReadAll(run + "/" + f).find(token) == std::string::npos);
  CHECK(p.out().find(token) == std::string::npos);
  // Both workers' per-epoch metrics are there.
  std::map<std::string, int> epochs;
  std::istringstream metrics(ReadAll(run + "/metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    auto e = nlohmann::json::parse(line);
    if (e["event"] == "epoch") epochs[e["task"].get<std::string>()]++;
  }
  CHECK(epochs["worker:0"] == 2);
  CHECK(epochs["worker:1"] == 2);
  auto summary = nlohmann::json::parse(ReadAll(run + "/summary.json"));
  CHECK(summary["exit_code"] == 0);
  REQUIRE(summary["tasks"].size() == 3);
  for (const auto& t : summary["tasks"]) {
    CHECK(t["exit_code"] == 0);
    if (t["task"] != "ps:0") CHECK(t["test_accuracy"].get<double>() > 0.5);
  }
  // Lines are streamed with the task's prefix, and the table is in the output.
  CHECK(p.out().find("[worker:1] info worker=1 epoch=2 ") != std::string::npos);
  CHECK(p.out().find("worker:0       2 ") != std::string::npos);
  // The chief exported the trained model into the run folder; the summary names it, and the
  // output ends with the commands that serve it and predict with it.
  CHECK(std::filesystem::exists(run + "/model/1/model.json"));
  REQUIRE(summary.contains("model"));
  CHECK(summary["model"]["task"] == "worker:0");
  CHECK(summary["model"]["path"] == run + "/model/1");
  CHECK(summary["model"]["version"] == "1");
  CHECK_THAT(p.out(), Catch::Contains("tfctl: model " + run + "/model/1 (version 1"));
  CHECK_THAT(p.out(), Catch::EndsWith("tfctl: serve it: tfd serve --model " + run + "/model\n" +
                                      "tfctl: predict with it: tfd predict --model " + run + "/model --data " + dir.path() + "\n"));
  CommandResult predicted = RunCommand(kTfd + " predict --model " + run + "/model --data " + dir.path() + " --out " + (dir / "p.csv"), dir);
  INFO(predicted.err);
  CHECK(predicted.exit_code == 0);
  CHECK_THAT(ReadAll(dir / "p.csv"), Catch::StartsWith("class,probability\n"));
  CHECK_THAT(ReadAll(run + "/report.html"), Catch::Contains("<table id=\"model\">"));
}

TEST_CASE("tfctl up names a failed task with its last lines and exits 1", "[system][tfctl]") {
  TempDir dir;
  const std::string file = ClusterFile(dir, 2);
  std::filesystem::resize_file(dir / "train-images-idx3-ubyte", 100);  // every worker fails to load it
  Process p({kTfctl, "up", file}, {}, dir / "out", dir / "err");
  auto code = p.Wait(60s);
  INFO("stdout:\n" << p.out() << "\nstderr:\n" << p.err());
  REQUIRE(code.has_value());
  CHECK(*code == 1);
  CHECK(p.err().find("failed with exit code 2; its last lines:") != std::string::npos);
  CHECK(p.err().find("truncated IDX file") != std::string::npos);
  CHECK(WaitUntilNoneLeft(dir.path(), 10s));  // the ps was stopped too
}

TEST_CASE("launch.restart on-failure: a ps killed mid-run is started again and the run completes", "[system][tfctl]") {
  TempDir dir;
  auto f = nlohmann::json::parse(ReadAll(ClusterFile(dir, 40)));
  // Sync updates keep the chief in step with worker:1, so the ps dies while the chief still trains
  // (async, a chief that started first could finish its 40 epochs before worker:1's second).
  f["train"]["update"] = {{"mode", "sync"}};
  f["launch"]["restart"] = {{"ps", "on-failure"}};
  f["launch"]["max_restarts"] = 2;
  WriteFile(dir / "restart.json", f.dump(2));
  Process p({kTfctl, "up", dir / "restart.json"}, {}, dir / "out", dir / "err");
  REQUIRE(RunEventWithin(dir, "epoch", {{"task", "worker:1"}, {"epoch", 2}}, 60s));
  // The ps is the task without --job.
  std::string ps_pid;
  for (const std::string& proc : ProcessesMentioning(dir.path()))
    if (proc.find(kTfd) != std::string::npos && proc.find("--job") == std::string::npos) ps_pid = proc.substr(0, proc.find(':'));
  REQUIRE_FALSE(ps_pid.empty());
  kill(std::stoi(ps_pid), SIGKILL);
  auto code = p.Wait(120s);
  INFO("stdout:\n" << p.out() << "\nstderr:\n" << p.err());
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  CHECK(p.out().find("[tfctl] ps:0 failed with exit code 137; starting it again (1 of 2)") != std::string::npos);
  CHECK(p.out().find("reconnected to ps:0 (") != std::string::npos);
  auto summary = nlohmann::json::parse(ReadAll(RunFolder(dir) + "/summary.json"));
  CHECK(summary["exit_code"] == 0);
  REQUIRE(summary["tasks"].size() == 3);
  for (const auto& t : summary["tasks"]) {
    CHECK(t["exit_code"] == 0);
    CHECK(t["restarts"] == (t["task"] == "ps:0" ? 1 : 0));
  }
}

TEST_CASE("Ctrl-C on tfctl stops every task and exits 130", "[system][tfctl]") {
  TempDir dir;
  const std::string file = ClusterFile(dir, 100000);
  Process p({kTfctl, "up", file, "--grace", "5"}, {}, dir / "out", dir / "err");
  REQUIRE(RunEventWithin(dir, "epoch", {{"epoch", 1}}, 60s));
  p.Signal(SIGINT);
  auto code = p.Wait(30s);
  INFO("stdout:\n" << p.out());
  REQUIRE(code.has_value());
  CHECK(*code == 130);
  CHECK(WaitUntilNoneLeft(dir.path(), 10s));
  auto summary = nlohmann::json::parse(ReadAll(RunFolder(dir) + "/summary.json"));
  CHECK(summary["exit_code"] == 130);
}

TEST_CASE("kill -9 of tfctl leaves no tfd behind", "[system][tfctl]") {
  TempDir dir;
  const std::string file = ClusterFile(dir, 100000);
  Process p({kTfctl, "up", file}, {}, dir / "out", dir / "err");
  REQUIRE(RunEventWithin(dir, "epoch", {{"epoch", 1}}, 60s));
  p.Signal(SIGKILL);
  p.Wait(10s);
  INFO("left: " << ProcessesMentioning(dir.path()).size());
  CHECK(WaitUntilNoneLeft(dir.path(), 10s));
}

TEST_CASE("tfctl up --detach returns with the run going on; status, logs and down act on it", "[system][tfctl]") {
  TempDir dir;
  const std::string file = ClusterFile(dir, 100000);
  CommandResult up = RunCommand(kTfctl + " up " + file + " --detach", dir);
  INFO(up.out << up.err);
  REQUIRE(up.exit_code == 0);
  CHECK(up.out.find("every task is up") != std::string::npos);
  const std::string run = RunFolder(dir);
  REQUIRE_FALSE(run.empty());
  CHECK(ProcessesMentioning(dir.path()).size() >= 2);  // the workers train on after up returned
  // Wait for an epoch, then look at it.
  (void)RunEventWithin(dir, "epoch", {{"task", "worker:0"}, {"epoch", 1}}, 60s);
  CommandResult status = RunCommand(kTfctl + " status " + run, dir);
  INFO(status.out);
  CHECK(status.exit_code == 0);
  CHECK(status.out.find(": running") != std::string::npos);
  CHECK(status.out.find("worker:0   epoch") != std::string::npos);
  CommandResult logs = RunCommand(kTfctl + " logs " + run + " worker:1", dir);
  CHECK(logs.out.find("[worker:1] ") != std::string::npos);
  CHECK(logs.out.find("[worker:0] ") == std::string::npos);
  CommandResult down = RunCommand(kTfctl + " down " + run, dir);
  INFO(down.out << down.err);
  CHECK(down.exit_code == 0);
  CHECK(WaitUntilNoneLeft(dir.path(), 10s));
  auto summary = nlohmann::json::parse(ReadAll(run + "/summary.json"));
  CHECK(summary["exit_code"] == 130);
  CHECK(RunCommand(kTfctl + " status " + run, dir).out.find(": finished") != std::string::npos);
}

TEST_CASE("tfctl validate refuses, in one line with exit 2, what would fail at start", "[system][tfctl]") {
  TempDir dir;
  auto validate = [&](const std::string& file) {
    CommandResult r = RunCommand(kTfctl + " validate " + file, dir);
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    return r.err;
  };
  SECTION("a good file") {
    CommandResult r = RunCommand(kTfctl + " validate " + ClusterFile(dir, 1), dir);
    // A free port picked here can be taken by another process's outgoing connection before tfctl
    // checks it; that is the machine, not the file: pick others.
    for (int retry = 0; retry < 3 && r.exit_code != 0 && r.err.find("in use") != std::string::npos; ++retry)
      r = RunCommand(kTfctl + " validate " + ClusterFile(dir, 1), dir);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("1 ps + 2 workers") != std::string::npos);
    // The job's data check ran where the workers run, as training reads the data.
    INFO(r.out);
    CHECK(r.out.find("data on this machine: 800 training + 100 test examples of 8x8x1 uint8, 10 classes") != std::string::npos);
  }
  SECTION("a missing tfd") { CHECK(validate(ClusterFile(dir, 1, "/nonexistent/tfd")).find("launch.tfd: \"/nonexistent/tfd\" is not an executable file") != std::string::npos); }
  SECTION("a ps port already in use") {
    const std::string file = ClusterFile(dir, 1);
    auto f = nlohmann::json::parse(ReadAll(file));
    const std::string ep = f["cluster"]["ps"][0];
    Process holder({kTfd, "--log-format", "json"}, {"TF_CONFIG=" + nlohmann::json{{"cluster", f["cluster"]}, {"task", {{"type", "ps"}, {"index", 0}}}}.dump()},
                   dir / "h.out", dir / "h.err");
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (!HasEvent(ReadAll(dir / "h.out"), "start") && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(20ms);
    CHECK(validate(file).find("cluster.ps[0]: " + ep + " is already in use on this machine") != std::string::npos);
  }
  SECTION("a host ssh cannot reach") {
    const std::string file = ClusterFile(dir, 1);
    auto f = nlohmann::json::parse(ReadAll(file));
    f["cluster"]["worker"][1] = "pc-02.invalid:2222";
    WriteFile(file, f.dump());
    CommandResult r = RunCommand(kTfctl + " validate " + file, dir);
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.err.find("cannot reach pc-02.invalid with ssh (exit 255): ssh: Could not resolve hostname pc-02.invalid") != std::string::npos);
  }
  SECTION("data that does not load") {
    const std::string file = ClusterFile(dir, 1);
    auto f = nlohmann::json::parse(ReadAll(file));
    WriteFile(dir / "ragged.csv", "a,b,label\n1,2,x\n3,y\n");
    f["train"]["data"] = {{"train", dir / "ragged.csv"}, {"test_split", 1}};
    WriteFile(file, f.dump());
    CHECK(validate(file).find("train.data on this machine: tfd: " + (dir / "ragged.csv") + ":3: 2 fields, but the header has 3") !=
          std::string::npos);
  }
  SECTION("a bad file") {
    WriteFile(dir / "bad.json", R"({"cluster": {"worker": ["x:1"]}})");
    CHECK(validate(dir / "bad.json").find("bad.json: train: missing") != std::string::npos);
  }
}

// ClusterFile with step events every `log_every_steps` steps and `launch` fields merged in, written to dir/name.
std::string ChaosClusterFile(const TempDir& dir, int epochs, const nlohmann::json& launch, const std::string& name,
                             const nlohmann::json& update = nullptr, int log_every_steps = 5) {
  auto f = nlohmann::json::parse(ReadAll(ClusterFile(dir, epochs)));
  f["train"]["log_every_steps"] = log_every_steps;
  if (!update.is_null()) f["train"]["update"] = update;
  for (auto it = launch.begin(); it != launch.end(); ++it) f["launch"][it.key()] = it.value();
  WriteFile(dir / name, f.dump(2));
  return dir / name;
}

// Runs tfctl chaos with `args` to its end, checks its exit code, and returns its stdout.
std::string RunChaos(const TempDir& dir, std::vector<std::string> args, int expected_exit_code) {
  args.insert(args.begin(), {kTfctl, "chaos"});
  Process p(args, {}, dir / "out", dir / "err");
  auto code = p.Wait(300s);
  INFO("stdout:\n" << p.out() << "\nstderr:\n" << p.err());
  REQUIRE(code.has_value());
  CHECK(*code == expected_exit_code);
  return p.out();
}

// A metrics.jsonl's lines but its step events: what a failed check on a run's events shows.
std::string WithoutStepEvents(const std::string& jsonl) {
  std::string kept;
  std::istringstream in(jsonl);
  for (std::string line; std::getline(in, line);)
    if (line.find("\"event\":\"step\"") == std::string::npos) kept += line + "\n";
  return kept;
}

nlohmann::json ChaosReport(const TempDir& dir) { return nlohmann::json::parse(ReadAll(RunFolder(dir) + "/chaos.json")); }

TEST_CASE("tfctl chaos kills a restartable ps mid-run; the run survives and the verdict is kept", "[system][tfctl][chaos]") {
  TempDir dir;
  // The ps dies while both workers still train, however late tfctl acts on the trigger: worker:0
  // writes its events (here one a step, about 130 bytes) into a pipe that tfctl reads, and blocks
  // once it is full. The read that brings the 3rd step event holds at most 64 KiB after it, and
  // the pipe takes 64 KiB more before tfctl sends the kill: worker:0 is then at most about 1000
  // steps past its 3rd, of the 3000 (150 epochs of 20) it trains. Sync keeps worker:1 in step with
  // it (async, a worker that started first could be done; a restarted ps would then wait its
  // startup timeout for it, past the deadline).
  const std::string file = ChaosClusterFile(dir, 150, {{"restart", {{"ps", "on-failure"}}}, {"timeouts", {{"peer", 2}}}}, "chaos.json",
                                            {{"mode", "sync"}}, /*log_every_steps=*/1);
  const std::string out = RunChaos(dir, {file, "--kill", "ps", "--at", "step:3", "--from", "worker:0"}, 0);
  INFO(out);
  CHECK(out.find("[tfctl] chaos: sent SIGKILL to ps:0 (pid ") != std::string::npos);
  CHECK(out.find("chaos task=ps:0 exit_code=0 restarts=1 ") != std::string::npos);
  // Both workers were still training when the ps died: each went on with the restarted one.
  CHECK(out.find("[worker:0] info reconnected to ps:0 (") != std::string::npos);
  CHECK(out.find("[worker:1] info reconnected to ps:0 (") != std::string::npos);
  CHECK(out.find("chaos verdict=kept survival=promised: launch.restart starts ps tasks again") != std::string::npos);
  const auto report = ChaosReport(dir);
  CHECK(report["verdict"] == "kept");
  CHECK(report["fault"]["sent"] == true);
  CHECK(report["trigger"]["from"] == "worker:0");
  CHECK(report["deadline_secs"] == 120 + 30);  // tfd's startup timeout outlasts 2 x 2 + 60
  REQUIRE(report["tasks"].size() == 3);
  for (const auto& t : report["tasks"]) {
    CHECK(t["exit_code"] == 0);
    CHECK(t["past_deadline"] == false);
    CHECK(t["exit_after_secs"].get<double>() > 0);
  }
  CHECK(report["tasks"][1]["test_accuracy"].get<double>() > 0.3);  // worker:0 trained to the end
}

TEST_CASE("tfctl chaos stops a worker for less than the reconnect timeout; every task still finishes", "[system][tfctl][chaos]") {
  TempDir dir;
  const std::string file = ChaosClusterFile(dir, 4, {{"timeouts", {{"peer", 1}}}}, "chaos.json");
  const std::string out = RunChaos(dir, {file, "--kill", "worker:1", "--at", "step:2", "--stop", "3"}, 0);
  INFO(out);
  CHECK(out.find("[tfctl] chaos: sent SIGCONT to worker:1") != std::string::npos);
  const auto report = ChaosReport(dir);
  CHECK(report["verdict"] == "kept");
  CHECK(report["fault"]["action"] == "stop");
  CHECK(report["survival_promised"] == true);
  REQUIRE(report["tasks"].size() == 3);
  for (const auto& t : report["tasks"]) CHECK(t["exit_code"] == 0);
}

TEST_CASE("tfctl chaos: a run that recovered may train on past the deadline, which its progress moves", "[system][tfctl][chaos]") {
  TempDir dir;
  // Async, so the run survives losing worker:1. The kill lands early in the run: tfctl sends it on
  // worker:1's 3rd step event (15 steps in; worker:1 cannot run far ahead of tfctl, which reads its
  // events through a pipe), and the chief, which started with worker:1 and trains at its pace, then
  // has most of its 4000 epochs (80000 steps, about 20 s on a loaded 2-core machine) to go: far past
  // the 5 s deadline, which each of its step events moves on.
  // The deadline still covers what follows the chief's last epoch: the ps gives worker:1 up after
  // the peer and reconnect timeouts (2 s), however late the fault came.
  const std::string file = ChaosClusterFile(dir, 4000, {{"timeouts", {{"peer", 1}, {"reconnect", 1}}}}, "chaos.json");
  const std::string out = RunChaos(dir, {file, "--kill", "worker:1", "--at", "step:3", "--deadline", "5"}, 0);
  INFO(out);
  const auto report = ChaosReport(dir);
  CHECK(report["verdict"] == "kept");
  CHECK(report["fault"]["sent"] == true);
  REQUIRE(report["tasks"].size() == 3);
  bool outlasted = false, chief_seen = false;
  for (const auto& t : report["tasks"]) {
    CHECK(t["past_deadline"] == false);
    if (t["task"] == "worker:0") {
      chief_seen = true;
      CHECK(t["exit_code"] == 0);
      outlasted = t["exit_after_secs"].is_number() && t["exit_after_secs"].get<double>() > 5;
    }
  }
  REQUIRE(chief_seen);
  // The chief trained on for longer than the deadline after the fault, and was not killed for it.
  CHECK(outlasted);
}

TEST_CASE("tfctl chaos refuses bad input in one line with exit 2, before anything starts", "[system][tfctl][chaos]") {
  TempDir dir;
  const std::string file = ChaosClusterFile(dir, 1, nlohmann::json::object(), "c.json");
  auto refused = [&](const std::string& args) {
    CommandResult r = RunCommand(kTfctl + " chaos " + args, dir);
    INFO(r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    return r.err;
  };
  CHECK(refused(file + " --kill worker:5 --at step") == "tfctl: --kill worker:5: the cluster has 2 workers (worker:0, worker:1)\n");
  CHECK(refused(file + " --kill gpu --at step").find("--kill gpu: unknown role \"gpu\"") != std::string::npos);
  CHECK(refused(file + " --kill ps --at stepz").find("--at stepz: tfd emits no event \"stepz\"") != std::string::npos);
  CHECK(refused(file + " --kill ps --at step:0").find("--at step:0: N must be a whole number >= 1") != std::string::npos);
  CHECK(refused(file + " --kill ps --at step --stop 3 --signal kill").find("--stop and --signal") != std::string::npos);
  CHECK(refused(file + " --kill ps --at step --from ps:2").find("--from ps:2: the cluster has 1 ps (ps:0)") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "runs"));
  // A run folder whose tfctl has ended.
  const std::string run = dir / "runs/old";
  std::filesystem::create_directories(run);
  std::filesystem::copy_file(file, run + "/cluster.json");
  WriteFile(run + "/tfctl.pid", "999999999\n");
  CHECK(refused(run + " --kill ps --at step").find("the run has ended (its tfctl is not running)") != std::string::npos);
}

TEST_CASE("tfctl chaos on a live detached run signals the task by its start event's pid and reports", "[system][tfctl][chaos]") {
  TempDir dir;
  const std::string file = ChaosClusterFile(dir, 400, {{"restart", {{"worker", "on-failure"}}}}, "chaos.json");
  CommandResult up = RunCommand(kTfctl + " up " + file + " --detach", dir);
  INFO(up.out << up.err);
  REQUIRE(up.exit_code == 0);
  const std::string run = RunFolder(dir);
  const std::string out = RunChaos(dir, {run, "--kill", "worker:1", "--at", "step", "--signal", "term", "--deadline", "250"}, 0);
  INFO(out);
  CHECK(out.find("tfctl: chaos: sent SIGTERM to worker:1 (pid ") != std::string::npos);
  const auto report = nlohmann::json::parse(ReadAll(run + "/chaos.json"));
  CHECK(report["verdict"] == "kept");
  CHECK(report["tasks"][2]["restarts"] == 1);
  CHECK(WaitUntilNoneLeft(dir.path(), 10s));
}

// ClusterFile's cluster with both workers on "localhost", reached through `sshd`.
std::string SshClusterFile(const TempDir& dir, const LoopbackSshd& sshd, int epochs, const std::string& known_hosts = "known_hosts") {
  auto f = nlohmann::json::parse(ReadAll(ClusterFile(dir, epochs)));
  const std::vector<int> ports = FreePorts(static_cast<int>(f["cluster"]["worker"].size()));
  for (std::size_t i = 0; i < ports.size(); ++i) f["cluster"]["worker"][i] = "localhost:" + std::to_string(ports[i]);
  f["launch"]["hosts"] = {{"localhost", sshd.HostEntry(known_hosts)}};
  WriteFile(dir / "ssh.json", f.dump(2));
  return dir / "ssh.json";
}

TEST_CASE("tfctl up reaches worker hosts through a real sshd and trains to completion", "[system][tfctl][ssh]") {
  TempDir dir;
  LoopbackSshd sshd(dir);
  const std::string file = SshClusterFile(dir, sshd, 2);
  Process p({kTfctl, "up", file}, {}, dir / "out", dir / "err");
  auto code = p.Wait(120s);
  INFO("stdout:\n" << p.out() << "\nstderr:\n" << p.err());
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  auto summary = nlohmann::json::parse(ReadAll(RunFolder(dir) + "/summary.json"));
  REQUIRE(summary["tasks"].size() == 3);
  for (const auto& t : summary["tasks"]) CHECK(t["exit_code"] == 0);
  CHECK(p.out().find("[worker:1] info worker=1 epoch=2 ") != std::string::npos);
  // The remote tasks got the run's token over ssh's stdin, into a file only its owner can read.
  const std::string run = RunFolder(dir);
  const std::string remote_token = (std::filesystem::path(dir / "remote") / "runs" / std::filesystem::path(run).filename() / "token").string();
  struct stat st {};
  REQUIRE(stat(remote_token.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(ReadAll(remote_token) == ReadAll(run + "/token"));
  // worker:0, the chief, is on the ssh host: it exported into its own run folder there, and the
  // summary says where, host first.
  const std::string remote_model = (std::filesystem::path(dir / "remote") / "runs" / std::filesystem::path(run).filename() / "model").string();
  CHECK(std::filesystem::exists(remote_model + "/1/model.json"));
  REQUIRE(summary.contains("model"));
  CHECK(summary["model"]["host"] == "localhost");
  CHECK(summary["model"]["path"] == remote_model + "/1");
  CHECK_THAT(p.out(), Catch::Contains("tfctl: serve it on localhost: tfd serve --model " + remote_model + "\n"));
}

TEST_CASE("kill -9 of tfctl leaves no tfd behind on an ssh host", "[system][tfctl][ssh]") {
  TempDir dir;
  LoopbackSshd sshd(dir);
  const std::string file = SshClusterFile(dir, sshd, 100000);
  Process p({kTfctl, "up", file}, {}, dir / "out", dir / "err");
  REQUIRE(RunEventWithin(dir, "epoch", {{"epoch", 1}}, 60s));
  // The remote tasks run in the test dir (found by their working folder): they are there now ...
  const auto before = ProcessesMentioning(dir.path());
  INFO("running before: " << before.size());
  REQUIRE(before.size() >= 2);
  p.Signal(SIGKILL);
  p.Wait(10s);
  // ... and none survives: their watchdog stops them when the dead tfctl's ssh closes their stdin.
  const bool none_left = WaitUntilNoneLeft(dir.path(), 15s);
  for (const auto& left : ProcessesMentioning(dir.path())) UNSCOPED_INFO("left: " << left);
  CHECK(none_left);
}

TEST_CASE("tfctl chaos kills a worker on an ssh host by its pid there; the async run survives it", "[system][tfctl][ssh][chaos]") {
  TempDir dir;
  LoopbackSshd sshd(dir);
  // worker:1 must still train when the kill lands, after its 1st step event reaches tfctl and an ssh
  // round trip, on a loaded machine: 1000 epochs are 20,000 steps (about 6 s of training here).
  auto f = nlohmann::json::parse(ReadAll(SshClusterFile(dir, sshd, 1000)));
  f["train"]["log_every_steps"] = 5;
  f["launch"]["timeouts"] = {{"peer", 1}, {"reconnect", 4}};
  WriteFile(dir / "ssh-chaos.json", f.dump(2));
  const std::string out = RunChaos(dir, {dir / "ssh-chaos.json", "--kill", "worker:1", "--at", "step:1"}, 0);
  CHECK(out.find("[tfctl] chaos: sent SIGKILL to worker:1 (pid ") != std::string::npos);
  const auto report = ChaosReport(dir);
  CHECK(report["verdict"] == "kept");
  REQUIRE(report["tasks"].size() == 3);
  for (const auto& t : report["tasks"]) {
    if (t["task"] == "worker:1") CHECK(t["exit_code"] != 0);  // killed on its host; ssh reports it
    else CHECK(t["exit_code"] == 0);
  }
  const std::string events = ReadAll(RunFolder(dir) + "/metrics.jsonl");
  INFO("tfctl chaos stdout:\n" << out << "\nmetrics.jsonl, but step events:\n" << WithoutStepEvents(events));
  CHECK(HasEvent(events, "gave_up", {{"task", "ps:0"}}, [](const nlohmann::json& e) { return e.value("peer", "").starts_with("worker:1"); }));
  CHECK(WaitUntilNoneLeft(dir.path(), 10s));
}

TEST_CASE("a wrong host key fails closed with ssh's reason, before anything starts", "[system][tfctl][ssh]") {
  TempDir dir;
  LoopbackSshd sshd(dir);
  const std::string file = SshClusterFile(dir, sshd, 1, "wrong_known_hosts");
  CommandResult r = RunCommand(kTfctl + " up " + file, dir);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("cannot reach localhost with ssh (exit 255)") != std::string::npos);
  CHECK(r.err.find("Host key verification failed") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "runs"));  // nothing started, no run folder
}

}  // namespace
}  // namespace tfd::testing::tfctl_test
