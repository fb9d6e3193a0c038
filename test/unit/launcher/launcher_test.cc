// tfctl's pieces below the command line: the background run of up --detach, process checks, and the
// setup and checks that up and validate share.
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/config/cluster_file.h"
#include "launcher/commands.h"
#include "launcher/live_table.h"
#include "launcher/runner.h"
#include "test/test_util.h"

namespace tfd::launcher {
namespace {

using testing::ReadAll;
using testing::TempDir;

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

// Reaps the background child a test started (tfctl leaves it to init; a test is its parent).
int ReapBackground(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

pid_t PidFrom(const std::string& path) { return static_cast<pid_t>(std::atol(ReadAll(path).c_str())); }

TEST_CASE("RunInBackground returns once ready; the background process logs, writes its pid and exits with body's code",
          "[unit][launcher]") {
  TempDir dir;
  BackgroundOptions options{.log_path = dir / "bg.log", .pid_path = dir / "bg.pid", .ready_timeout_secs = 20};
  const Status s = RunInBackground(
      [&] {
        std::printf("background says hi\n");
        std::ofstream(dir / "ready") << "1";
        while (!Exists(dir / "stop")) usleep(10'000);
        return 3;
      },
      [&] { return Exists(dir / "ready"); }, options);
  REQUIRE(s.ok());
  const pid_t pid = PidFrom(dir / "bg.pid");
  REQUIRE(pid > 0);
  CHECK(pid != getpid());
  CHECK(ProcessAlive(pid));
  std::ofstream(dir / "stop") << "1";
  CHECK(ReapBackground(pid) == 3);
  CHECK(ReadAll(dir / "bg.log") == "background says hi\n");
}

TEST_CASE("RunInBackground reports a background process that ends before it is ready", "[unit][launcher]") {
  TempDir dir;
  const Status s = RunInBackground([] { return 1; }, [] { return false; },
                                   {.log_path = dir / "bg.log", .pid_path = dir / "bg.pid", .ready_timeout_secs = 20});
  CHECK(s.code() == Code::kUnavailable);
}

TEST_CASE("RunInBackground gives up waiting after the timeout and leaves the process running", "[unit][launcher]") {
  TempDir dir;
  const Status s = RunInBackground(
      [&] {
        while (!Exists(dir / "stop")) usleep(10'000);
        return 0;
      },
      [] { return false; }, {.log_path = dir / "bg.log", .pid_path = dir / "bg.pid", .ready_timeout_secs = 0.2});
  CHECK(s.code() == Code::kDeadlineExceeded);
  const pid_t pid = PidFrom(dir / "bg.pid");
  REQUIRE(pid > 0);
  CHECK(ProcessAlive(pid));
  std::ofstream(dir / "stop") << "1";
  CHECK(ReapBackground(pid) == 0);
}

TEST_CASE("ProcessAlive is false for no pid", "[unit][launcher]") {
  CHECK(ProcessAlive(getpid()));
  CHECK_FALSE(ProcessAlive(0));
  CHECK_FALSE(ProcessAlive(-1));
}

TEST_CASE("PortFree sees a bound port and passes names it cannot test", "[unit][launcher]") {
  boost::asio::io_context io;
  auto acceptor = std::make_unique<boost::asio::ip::tcp::acceptor>(
      io, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  const std::uint16_t port = acceptor->local_endpoint().port();
  CHECK_FALSE(PortFree("127.0.0.1", port));
  CHECK_FALSE(PortFree("localhost", port));
  acceptor.reset();
  CHECK(PortFree("127.0.0.1", port));
  CHECK(PortFree("pc-02", port));
}

// A local cluster file in `dir`: 1 ps + 1 worker, tfd = /bin/true, data = dir.
std::string LocalClusterFile(const TempDir& dir, const std::string& workdir) {
  const std::string file = dir / "c.json";
  testing::WriteFile(file, R"({"name": "t", "cluster": {"ps": ["127.0.0.1:)" + std::to_string(testing::FreePort()) +
                               R"("], "worker": ["127.0.0.1:2001"]}, "train": {"model": "mlp", "data": ")" + dir.path() +
                               R"(", "epochs": 3, "batch_size": 20, "optimizer": {"type": "sgd", "learning_rate": 0.1}},
                               "launch": {"tfd": "/bin/true", "workdir": ")" + workdir + R"("}})");
  return file;
}

TEST_CASE("SetUpRun names an absolute run folder and hands the token to the plan only when given", "[unit][launcher]") {
  TempDir dir;
  const ClusterArgs args{.file = LocalClusterFile(dir, dir.path()), .run_dir_override = dir / "runs"};
  Result<RunSetup> validate = SetUpRun(args, "");
  REQUIRE(validate.ok());
  CHECK(validate->run_dir.is_absolute());
  CHECK(validate->run_dir.parent_path() == std::filesystem::path(dir / "runs"));
  CHECK(validate->run_dir.filename().string().ends_with("-t"));
  CHECK(validate->options.token_path.empty());
  CHECK(validate->options.job_path == (validate->run_dir / "job.json").string());
  REQUIRE(validate->plan.size() == 2);
  Result<RunSetup> up = SetUpRun(args, std::string(64, 'a'));
  REQUIRE(up.ok());
  CHECK(up->options.token_path == (up->run_dir / "token").string());
  CHECK(Describe(up->file) == args.file + ": 1 ps + 1 workers; mlp on " + dir.path() + ", 3 epochs, batch 20 per worker, async updates");
  CHECK(SetUpRun({.file = dir / "missing.json"}, "").status().code() == Code::kNotFound);
}

TEST_CASE("an evaluator on another host than the chief gets a one-line shared-folder note", "[unit][launcher][evaluator]") {
  TempDir dir;
  auto file_with_evaluator_on = [&](const std::string& host) {
    const std::string file = dir / ("e-" + host + ".json");
    testing::WriteFile(file, R"({"name": "t", "cluster": {"ps": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001"], "evaluator": [")" +
                                 host + R"(:2002"]}, "train": {"model": "mlp", "data": "d", "epochs": 1, "batch_size": 20,
                                 "optimizer": {"type": "sgd", "learning_rate": 0.1}, "checkpoint": {"dir": "/shared/ck"},
                                 "evaluation": "evaluator"}})");
    Result<RunSetup> run = SetUpRun({.file = file, .run_dir_override = dir / "runs"}, "");
    REQUIRE(run.ok());
    return *run;
  };
  const RunSetup remote = file_with_evaluator_on("pc-09");
  CHECK(Describe(remote.file).find(": 1 ps + 1 workers + 1 evaluator; mlp on d,") != std::string::npos);
  CHECK(SharedFolderNote(remote) ==
        "note: the evaluator runs on pc-09 and the chief on 127.0.0.1: train.checkpoint.dir (\"/shared/ck\") must be one shared "
        "folder (a network filesystem) on both hosts, or the evaluator sees no checkpoint");
  CHECK(SharedFolderNote(file_with_evaluator_on("localhost")).empty());  // a local child shares this machine's folders
}

TEST_CASE("CheckCluster passes a runnable local cluster and names a missing workdir", "[unit][launcher]") {
  TempDir dir;
  Result<RunSetup> good = SetUpRun({.file = LocalClusterFile(dir, dir.path())}, "");
  REQUIRE(good.ok());
  const Status ok = CheckCluster(*good);
  INFO(ok.ToString());
  CHECK(ok.ok());
  Result<RunSetup> bad = SetUpRun({.file = LocalClusterFile(dir, dir / "nowhere")}, "");
  REQUIRE(bad.ok());
  const Status s = CheckCluster(*bad);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message() == dir / "c.json" + ": launch.workdir: \"" + dir / "nowhere" + "\" is not a folder");
}

// A cluster file `name` in `dir`: `workers` workers on 127.0.0.1 (ports from 3001), `ps` ps tasks on
// free ports, the job `train`, and tfd as /bin/true run in `dir`.
std::string LocalClusterFile(const TempDir& dir, const std::string& name, int workers, int ps, const nlohmann::json& train) {
  nlohmann::json cluster;
  for (int i = 0; i < ps; ++i) cluster["ps"].push_back("127.0.0.1:" + std::to_string(testing::FreePort()));
  for (int i = 0; i < workers; ++i) cluster["worker"].push_back("127.0.0.1:" + std::to_string(3001 + i));
  const std::string path = dir / name;
  testing::WriteFile(path, nlohmann::json{{"name", "t"},
                                          {"cluster", cluster},
                                          {"train", train},
                                          {"launch", {{"tfd", "/bin/true"}, {"workdir", dir.path()}}}}
                               .dump());
  return path;
}

TEST_CASE("CheckCluster refuses a model-parallel cluster of the wrong shape before starting anything; Describe says the split",
          "[unit][launcher][pipeline]") {
  TempDir dir;
  // `workers` workers, `ps` ps tasks, the dnn split by layers in 2 stages.
  auto file = [&](int workers, int ps) {
    return LocalClusterFile(dir, "mp-" + std::to_string(workers) + "-" + std::to_string(ps) + ".json", workers, ps,
                            {{"model", "dnn"},
                             {"data", dir.path()},
                             {"epochs", 1},
                             {"batch_size", 40},
                             {"optimizer", {{"type", "sgd"}, {"learning_rate", 0.1}}},
                             {"model_parallel", {{"split", "layers"}, {"stages", 2}, {"microbatches", 4}, {"schedule", "1f1b"}}}});
  };
  Result<RunSetup> good = SetUpRun({.file = file(4, 0)}, "");
  REQUIRE(good.ok());
  const Status ok = CheckCluster(*good);
  INFO(ok.ToString());
  CHECK(ok.ok());
  CHECK(Describe(good->file).ends_with("; dnn on " + dir.path() +
                                        ", 1 epochs, batch 40 per worker, model parallel: split by layers, 2 replica(s) of 2 stages, 4 "
                                        "micro-batches (1f1b)"));
  Result<RunSetup> odd = SetUpRun({.file = file(3, 0)}, "");
  REQUIRE(odd.ok());
  CHECK(CheckCluster(*odd).message() == file(3, 0) + ": train.model_parallel.stages: the cluster's 3 workers are not a multiple of 2 "
                                                     "stages (each replica needs one worker per stage)");
  Result<RunSetup> with_ps = SetUpRun({.file = file(2, 1)}, "");
  REQUIRE(with_ps.ok());
  CHECK(CheckCluster(*with_ps).message().starts_with(file(2, 1) + ": cluster.ps: 1 ps tasks, but a model-parallel job's"));
}

TEST_CASE("ReadyWorkers counts workers' ready events, not the ps's", "[unit][launcher]") {
  TempDir dir;
  CHECK(ReadyWorkers(dir.path()) == 0);
  testing::WriteFile(dir / "metrics.jsonl", R"({"ts":1,"task":"ps:0","event":"ready"}
{"ts":1,"task":"worker:0","event":"start"}
{"ts":2,"task":"worker:0","event":"ready"}
not json
{"ts":2,"task":"worker:1","event":"ready"})");
  CHECK(ReadyWorkers(dir.path()) == 2);
}

TEST_CASE("ApplyEvent: a task's events fill its row and the facts summary.json keeps", "[unit][launcher]") {
  LiveRow row;
  TaskFacts facts;
  auto apply = [&](const std::string& line) {
    Result<config::Event> e = config::ParseEvent(line);
    REQUIRE(e.ok());
    ApplyEvent(*e, row, facts);
  };
  apply(R"({"task":"worker:0","event":"start","pid":4242})");
  CHECK(facts.pid == 4242);
  CHECK(row.stage == -1);
  apply(R"({"task":"worker:0","event":"ready"})");
  CHECK(row.state == "training");
  apply(R"({"task":"worker:0","event":"epoch","epoch":2,"global_step":40,"loss":0.5,"accuracy":0.8,"samples_per_sec":900})");
  CHECK(row.epoch == 2);
  CHECK(row.global_step == 40);
  CHECK(row.loss == 0.5);
  CHECK(row.test_accuracy == -1);  // the epoch event had none: still unknown
  CHECK_FALSE(facts.final_global_step.has_value());
  apply(R"({"task":"worker:0","event":"peer_lost","global_step":99})");
  CHECK(row.global_step == 40);  // other events change nothing
  apply(R"({"task":"worker:0","event":"done","global_step":60.4,"test_accuracy":0.91,"params_sha256":"ab12"})");
  CHECK(row.state == "done");
  CHECK(facts.final_global_step == 60);
  CHECK(facts.final_test_accuracy == 0.91);
  CHECK(facts.params_sha256 == "ab12");
  apply(R"({"task":"worker:0","event":"done"})");  // a second done replaces every fact
  CHECK_FALSE(facts.final_global_step.has_value());
  CHECK(facts.params_sha256.empty());
  const double step = row.global_step;
  apply(R"({"task":"worker:0","event":"exported","path":"/r/model/1","version":"1","global_step":30})");
  apply(R"({"task":"worker:0","event":"exported","path":"/r/model/2","version":"2","global_step":60})");
  CHECK(facts.exported_path == "/r/model/2");  // the latest version folder it wrote
  CHECK(facts.exported_version == "2");
  CHECK(facts.exported_step == 60);
  CHECK(row.global_step == step);  // an export is no progress
  LiveRow stage;
  TaskFacts stage_facts;
  Result<config::Event> e = config::ParseEvent(R"({"task":"worker:1","event":"start","pid":7,"stage":1,"stages":2,"replica":0})");
  REQUIRE(e.ok());
  ApplyEvent(*e, stage, stage_facts);
  CHECK(stage.stage == 1);
  CHECK(stage.stages == 2);
  CHECK(stage.replica == 0);
}

}  // namespace
TEST_CASE("CheckCluster refuses a ps-mode job on a cluster without a ps, as tfd would at start", "[unit][launcher]") {
  TempDir dir;
  auto file = [&](const std::string& mode, int ps) {
    return LocalClusterFile(dir, mode + "-" + std::to_string(ps) + ".json", 2, ps,
                            {{"model", "softmax"},
                             {"data", dir.path()},
                             {"epochs", 1},
                             {"batch_size", 10},
                             {"update", {{"mode", mode}}},
                             {"optimizer", {{"type", "sgd"}, {"learning_rate", 0.1}}}});
  };
  Result<RunSetup> sync_no_ps = SetUpRun({.file = file("sync", 0)}, "");
  REQUIRE(sync_no_ps.ok());
  CHECK(CheckCluster(*sync_no_ps).message() == file("sync", 0) + ": cluster.ps: empty: sync mode needs at least one ps task");
  Result<RunSetup> allreduce_ps = SetUpRun({.file = file("allreduce", 1)}, "");
  REQUIRE(allreduce_ps.ok());
  CHECK(CheckCluster(*allreduce_ps).message().starts_with(file("allreduce", 1) + ": cluster.ps: 1 ps tasks, but allreduce mode has none"));
  Result<RunSetup> sync_ps = SetUpRun({.file = file("sync", 1)}, "");
  REQUIRE(sync_ps.ok());
  const Status ok = CheckCluster(*sync_ps);
  INFO(ok.ToString());
  CHECK(ok.ok());
}

}  // namespace tfd::launcher
