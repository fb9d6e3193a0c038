// Elastic runs (docs/operations.md, "Elastic runs"): workers that join a running job and workers
// that leave it for good, in async and sync mode, as real tfd processes on synthetic data.
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "test/integration/cluster_util.h"

namespace tfd::testing::cluster_elastic_test {
namespace {

using namespace std::chrono_literals;

// The softmax on 2000 synthetic examples, batch 20, `epochs` long, elastic within [min, max]
// (`extra`: more fields of the elastic section), with `optimizer`.
std::string ElasticJob(const TempDir& data, const std::string& update, int epochs, int min_workers, int max_workers,
                       const std::string& extra = "", const std::string& optimizer = R"({"type": "sgd", "learning_rate": 0.1})") {
  WriteSyntheticMnist(data.path(), 2000, 50);
  return Job(data.path(), update, epochs, optimizer, 20, R"({"name": "softmax"})",
             R"(, "elastic": {"min_workers": )" + std::to_string(min_workers) + R"(, "max_workers": )" + std::to_string(max_workers) +
                 extra + "}");
}

// The "membership" events of a task's stdout.
std::vector<nlohmann::json> MembershipEvents(const TaskResult& t) {
  std::vector<nlohmann::json> out;
  for (nlohmann::json& e : ParseEvents(t.out))
    if (e["event"] == "membership") out.push_back(std::move(e));
  return out;
}

bool Has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// Waits for worker:i, which must finish (exit 0, a done event) after taking share i of `workers`
// from some epoch on; returns what it wrote.
TaskResult FinishWithShare(LocalCluster& c, int i, int workers) {
  TaskResult w = c.Finish("worker", i);
  INFO(w.err);
  CHECK(w.exit_code == 0);
  CHECK(w.done.is_object());
  CHECK(HasEvent(w.out, "share", {{"workers", workers}}, [](const nlohmann::json& e) { return e.value("epoch", 0) >= 1; }));
  CHECK(HasEvent(w.out, "share", {{"index", i}, {"workers", workers}}));
  return w;
}

TEST_CASE("elastic async: a worker that joins pulls the parameters and takes a share from the next epoch", "[integration][elastic]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 2, .job = ElasticJob(data, R"({"mode": "async"})", 300, 1, 4)});
  c.StartPs(0);
  c.StartWorker(0);
  c.StartWorker(1);
  c.AwaitEvent("worker", 0, "epoch", {{"epoch", 1}});
  c.StartJoiner(2);
  const TaskResult joiner = FinishWithShare(c, 2, 3);
  CHECK(Has(joiner.err, "joined the run: 3 workers"));
  // From the epoch after the join, each original worker takes a third of the data.
  for (int i = 0; i < 2; ++i) FinishWithShare(c, i, 3);
  TaskResult ps = c.Finish("ps", 0, 30s);
  INFO(ps.err);
  CHECK(ps.exit_code == 0);
  CHECK(HasEvent(ps.out, "membership", {{"workers", 3}}));
  CHECK(HasEvent(ps.out, "worker_done", {}, [](const nlohmann::json& e) { return e.value("peer", "").starts_with("worker:2 (local pid "); }));
  CHECK(HasEvent(ps.out, "worker_done", {{"done", 3}}));  // the joiner's DONE counted as the others'
}

TEST_CASE("elastic async: a worker lost for good is given up on and its share goes to the others", "[integration][elastic]") {
  TempDir data;
  // Enough epochs that the two left still train well after the ps gives up on the third (1 s):
  // on a fast machine 400 epochs of this model took about 1 s.
  LocalCluster c({.num_ps = 1, .num_workers = 3, .job = ElasticJob(data, R"({"mode": "async"})", 2000, 1, 3)});
  c.StartPs(0, {"--reconnect-timeout", "1"});
  for (int i = 0; i < 3; ++i) c.StartWorker(i);
  c.AwaitEvent("worker", 2, "epoch", {{"epoch", 1}});
  c.process("worker", 2).Signal(SIGKILL);
  for (int i = 0; i < 2; ++i) FinishWithShare(c, i, 2);
  TaskResult ps = c.Finish("ps", 0, 30s);
  INFO(ps.err);
  CHECK(ps.exit_code == 0);
  CHECK(HasEvent(ps.out, "gave_up", {}, [](const nlohmann::json& e) { return FieldHas(e, "peer", "worker:2"); }));
  CHECK(HasEvent(ps.out, "membership", {{"workers", 2}}));
}

TEST_CASE("elastic: a loss that leaves fewer than min_workers ends the run with a message", "[integration][elastic]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 3, .job = ElasticJob(data, R"({"mode": "async"})", 100000, 3, 3)});
  c.StartPs(0, {"--reconnect-timeout", "1"});
  for (int i = 0; i < 3; ++i) c.StartWorker(i);
  c.AwaitEvent("worker", 2, "epoch", {{"epoch", 1}});
  c.process("worker", 2).Signal(SIGKILL);
  TaskResult ps = c.Finish("ps", 0, 60s);
  INFO(ps.err);
  CHECK(ps.exit_code != 0);
  CHECK(HasEvent(ps.out, "run_ended", {}, [](const nlohmann::json& e) { return FieldHas(e, "message", "2 workers left, fewer than elastic min_workers 3"); }));
  for (int i = 0; i < 2; ++i) {
    TaskResult w = c.Finish("worker", i, 60s);
    INFO(w.err);
    CHECK(w.exit_code != 0);
    CHECK(Has(w.err, "fewer than elastic min_workers 3"));
  }
}

TEST_CASE("a worker beyond the cluster's list is refused when the job is not elastic", "[integration][elastic]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 200, 20);
  LocalCluster c({.num_ps = 1, .num_workers = 1, .job = Job(data.path(), R"({"mode": "async"})", 1, R"({"type": "sgd", "learning_rate": 0.1})", 20)});
  c.StartJoiner(1);
  TaskResult joiner = c.Finish("worker", 1, 60s);
  CHECK(joiner.exit_code == 2);
  CHECK(Has(joiner.err, "worker:1 joins a cluster of 1 workers"));
  CHECK(Has(joiner.err, "no \"elastic\" section"));
}

TEST_CASE("elastic sync: total_num_replicas follows the membership at step boundaries, logged", "[integration][elastic]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 2, .job = ElasticJob(data, R"({"mode": "sync", "on_worker_loss": "wait"})", 150, 1, 3)});
  c.StartPs(0, {"--reconnect-timeout", "1"});
  c.StartWorker(0);
  c.StartWorker(1);
  c.AwaitEvent("worker", 0, "epoch", {{"epoch", 1}});
  c.StartJoiner(2);
  c.AwaitEvent("worker", 2, "share", {{"workers", 3}});
  c.AwaitEvent("ps", 0, "membership", {{"workers", 3}});  // a sync job's total_num_replicas follows it
  // The joiner leaves for good: the steps go on with the two left.
  c.AwaitEvent("worker", 2, "epoch");
  c.process("worker", 2).Signal(SIGKILL);
  for (int i = 0; i < 2; ++i) {
    TaskResult w = c.Finish("worker", i);
    INFO(w.err);
    CHECK(w.exit_code == 0);
    CHECK(w.done.is_object());
  }
  TaskResult ps = c.Finish("ps", 0, 30s);
  INFO(ps.err);
  CHECK(ps.exit_code == 0);
  CHECK(HasEvent(ps.out, "gave_up", {}, [](const nlohmann::json& e) { return FieldHas(e, "peer", "worker:2"); }));
  CHECK(Has(ps.err, "a worker left for good; elastic min_workers 1, max_workers 3); sync: total_num_replicas 2"));
}

TEST_CASE("elastic allreduce: a killed worker's ring re-forms from the last commit; the survivors finish bit-identical",
          "[integration][elastic][allreduce]") {
  TempDir data;
  const std::string momentum = R"({"type": "momentum", "learning_rate": 0.05, "momentum": 0.9})";
  LocalCluster c({.num_ps = 0, .num_workers = 3,
                  .job = ElasticJob(data, R"({"mode": "allreduce"})", 150, 2, 3, R"(, "commit_every_steps": 7)", momentum)});
  for (int i = 0; i < 3; ++i) c.StartWorker(i, {"--peer-timeout", "3"});
  c.AwaitEvent("worker", 2, "epoch", {{"epoch", 3}});
  c.process("worker", 2).Signal(SIGKILL);
  std::vector<TaskResult> left;
  for (int i = 0; i < 2; ++i) {
    TaskResult w = c.Finish("worker", i, 120s);
    INFO(w.err);
    CHECK(w.exit_code == 0);
    REQUIRE(w.done.is_object());
    CHECK(HasEvent(w.out, "membership", {}, [](const nlohmann::json& e) { return e.value("lost", "").starts_with("worker:2 (127.0.0.1:"); }));
    CHECK(Has(w.err, "lost; elastic min_workers 2, max_workers 3); rolled back to the commit at global_step "));
    // The data is re-sharded over the two at once: the epoch in progress goes on with the new shares.
    CHECK(HasEvent(w.out, "share", {{"index", i}, {"workers", 2}}));
    const std::vector<nlohmann::json> events = MembershipEvents(w);
    REQUIRE(events.size() == 1);
    CHECK(events[0]["workers"] == 2);
    CHECK(events[0]["lost"].get<std::string>().starts_with("worker:2 "));
    // The step it takes effect from follows the commit, which is a multiple of commit_every_steps.
    const std::int64_t commit = events[0]["commit_step"].get<std::int64_t>();
    CHECK(commit > 0);
    CHECK(commit % 7 == 0);
    CHECK(events[0]["global_step"] == commit + 1);
    left.push_back(std::move(w));
  }
  CHECK(MembershipEvents(left[0])[0]["global_step"] == MembershipEvents(left[1])[0]["global_step"]);
  CHECK(left[0].done["params_sha256"] == left[1].done["params_sha256"]);
  CHECK(left[0].done["global_step"] == left[1].done["global_step"]);
}

TEST_CASE("elastic allreduce: when the chief is lost, the next rank leads the re-formed ring", "[integration][elastic][allreduce]") {
  TempDir data;
  LocalCluster c({.num_ps = 0, .num_workers = 3, .job = ElasticJob(data, R"({"mode": "allreduce"})", 120, 2, 3, R"(, "commit_every_steps": 5)")});
  for (int i = 0; i < 3; ++i) c.StartWorker(i, {"--peer-timeout", "3"});
  c.AwaitEvent("worker", 0, "epoch", {{"epoch", 2}});
  c.process("worker", 0).Signal(SIGKILL);
  std::vector<TaskResult> left;
  for (int i = 1; i < 3; ++i) {
    TaskResult w = c.Finish("worker", i, 120s);
    INFO(w.err);
    CHECK(w.exit_code == 0);
    REQUIRE(w.done.is_object());
    CHECK(HasEvent(w.out, "membership", {}, [](const nlohmann::json& e) { return e.value("lost", "").starts_with("worker:0 (127.0.0.1:"); }));
    CHECK(HasEvent(w.out, "membership", {{"rank", i - 1}}));
    left.push_back(std::move(w));
  }
  CHECK(left[0].done["params_sha256"] == left[1].done["params_sha256"]);
}

TEST_CASE("elastic allreduce: a loss below min_workers ends every task within the peer timeout, with a message",
          "[integration][elastic][allreduce]") {
  TempDir data;
  LocalCluster c({.num_ps = 0, .num_workers = 3, .job = ElasticJob(data, R"({"mode": "allreduce"})", 100000, 3, 3)});
  for (int i = 0; i < 3; ++i) c.StartWorker(i, {"--peer-timeout", "3"});
  c.AwaitEvent("worker", 2, "epoch", {{"epoch", 2}});
  c.process("worker", 2).Signal(SIGKILL);
  for (int i = 0; i < 2; ++i) {
    TaskResult w = c.Finish("worker", i, 3s + 20s);  // the peer timeout and a margin
    INFO(w.err);
    CHECK(w.exit_code == 1);
    CHECK(Has(w.err, "elastic: the run is over: 2 workers left, fewer than elastic min_workers 3 (worker:2 (127.0.0.1:"));
  }
}

TEST_CASE("elastic allreduce: a worker started mid-run joins the ring at a commit; all three finish bit-identical",
          "[integration][elastic][allreduce]") {
  TempDir data;
  const std::string momentum = R"({"type": "momentum", "learning_rate": 0.05, "momentum": 0.9})";
  LocalCluster c({.num_ps = 0, .num_workers = 2,
                  .job = ElasticJob(data, R"({"mode": "allreduce"})", 3000, 2, 3, R"(, "commit_every_steps": 7)", momentum)});
  // Long enough for the joiner to start and ask (a few seconds) before the last epoch.
  for (int i = 0; i < 2; ++i) c.StartWorker(i, {"--peer-timeout", "3"});
  c.AwaitEvent("worker", 0, "epoch", {{"epoch", 2}});
  c.StartJoiner(2, {"--peer-timeout", "3"});
  std::vector<TaskResult> all;
  for (int i = 0; i < 3; ++i) {
    TaskResult w = c.Finish("worker", i, 120s);
    INFO(w.err);
    CHECK(w.exit_code == 0);
    REQUIRE(w.done.is_object());
    const std::vector<nlohmann::json> events = MembershipEvents(w);
    REQUIRE(events.size() == 1);
    CHECK(events[0]["workers"] == 3);
    CHECK(events[0].value("joined", "").starts_with("worker:2 (127.0.0.1:"));
    CHECK(events[0]["rank"] == i);
    // It joined at a commit: the step the new ring goes on from follows one.
    const std::int64_t commit = events[0]["commit_step"].get<std::int64_t>();
    CHECK(commit > 0);
    CHECK(commit % 7 == 0);
    CHECK(events[0]["global_step"] == commit + 1);
    CHECK(HasEvent(w.out, "share", {{"index", i}, {"workers", 3}}));  // re-sharded over three
    all.push_back(std::move(w));
  }
  const nlohmann::json joined = ParseEvents(all[2].out, "joined").at(0);
  CHECK(joined["global_step"] == MembershipEvents(all[0])[0]["commit_step"]);
  CHECK(joined["workers"] == 3);
  for (int i = 1; i < 3; ++i) {
    CHECK(MembershipEvents(all[i])[0]["global_step"] == MembershipEvents(all[0])[0]["global_step"]);
    CHECK(all[i].done["params_sha256"] == all[0].done["params_sha256"]);
    CHECK(all[i].done["global_step"] == all[0].done["global_step"]);
  }
}

TEST_CASE("elastic allreduce: a joiner lost as the ring grows: the others re-form without it and finish",
          "[integration][elastic][allreduce]") {
  TempDir data;
  LocalCluster c({.num_ps = 0, .num_workers = 2, .job = ElasticJob(data, R"({"mode": "allreduce"})", 3000, 2, 3, R"(, "commit_every_steps": 5)")});
  for (int i = 0; i < 2; ++i) c.StartWorker(i, {"--peer-timeout", "3"});
  c.AwaitEvent("worker", 0, "epoch", {{"epoch", 2}});
  c.StartJoiner(2, {"--peer-timeout", "3"});
  c.AwaitEvent("worker", 0, "membership", {{"workers", 3}}, 120s);
  c.process("worker", 2).Signal(SIGKILL);
  std::vector<TaskResult> left;
  for (int i = 0; i < 2; ++i) {
    TaskResult w = c.Finish("worker", i, 120s);
    INFO(w.err);
    CHECK(w.exit_code == 0);
    REQUIRE(w.done.is_object());
    CHECK(HasEvent(w.out, "membership", {{"workers", 2}}, [](const nlohmann::json& e) { return FieldHas(e, "lost", "worker:2 (127.0.0.1:"); }));
    left.push_back(std::move(w));
  }
  CHECK(left[0].done["params_sha256"] == left[1].done["params_sha256"]);
}

TEST_CASE("elastic allreduce: a second loss while the ring re-forms re-forms it again with the workers left",
          "[integration][elastic][allreduce]") {
  TempDir data;
  LocalCluster c({.num_ps = 0, .num_workers = 4, .job = ElasticJob(data, R"({"mode": "allreduce"})", 150, 2, 4, R"(, "commit_every_steps": 5)")});
  for (int i = 0; i < 4; ++i) c.StartWorker(i, {"--peer-timeout", "3"});
  c.AwaitEvent("worker", 3, "epoch", {{"epoch", 2}});
  c.process("worker", 3).Signal(SIGKILL);
  // worker:2 dies as the others start to re-form without worker:3: worker:0 (worker:3's next) forms
  // a ring with worker:2, worker:1 (worker:2's previous) one with worker:3; neither forms, and once
  // the settle time (6 s) is over each drops the suspect that no longer answers a connection.
  std::this_thread::sleep_for(50ms);
  c.process("worker", 2).Signal(SIGKILL);
  std::vector<TaskResult> left;
  for (int i = 0; i < 2; ++i) {
    TaskResult w = c.Finish("worker", i, 180s);
    INFO(w.err);
    CHECK(w.exit_code == 0);
    REQUIRE(w.done.is_object());
    CHECK(HasEvent(w.out, "membership", {{"workers", 2}}, [](const nlohmann::json& e) { return FieldHas(e, "lost", "worker:2 (127.0.0.1:"); }));
    CHECK(HasEvent(w.out, "share", {{"index", i}, {"workers", 2}}));
    left.push_back(std::move(w));
  }
  CHECK(left[0].done["params_sha256"] == left[1].done["params_sha256"]);
}

}  // namespace
}  // namespace tfd::testing::cluster_elastic_test
