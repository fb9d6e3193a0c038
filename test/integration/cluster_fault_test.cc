// Faults in a ps cluster of tfd processes: a worker lost under each on_worker_loss rule, a ps
// killed, dead or stopped (restarted mid-run, or after a worker finished), and a stopped worker
// that comes back. docs/reliability.md lists them.
// Every wait has a deadline that fails the test instead of hanging.
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/integration/cluster_util.h"
#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing::cluster_fault_test {
namespace {

using namespace std::chrono_literals;

TEST_CASE("sync: a lost worker makes the others fail with its name instead of waiting", "[integration][cluster]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 2, .job = SyntheticJob(data, 2000, 50, R"({"mode": "sync"})", 1000)});
  c.StartPs(0);
  c.StartWorker(0);
  c.StartWorker(1);
  c.EventWithin("worker", 0, "epoch", {{"epoch", 1}}, 60s);  // worker 1 is killed after a minute at most, epoch or not
  c.process("worker", 1).Signal(SIGKILL);
  TaskResult w = c.Finish("worker", 0, 30s);
  CHECK(w.exit_code == 1);
  INFO(w.err);
  CHECK(w.err.find("cannot complete: it needs 2 gradients") != std::string::npos);
  CHECK(w.err.find("worker:1 (local pid ") != std::string::npos);
  CHECK(w.err.find("was lost") != std::string::npos);
}

TEST_CASE("a worker whose ps dies and stays dead gets an error naming the ps after the reconnect timeout", "[integration][cluster]") {
  TempDir data;
  auto cluster = StartTraining(data, {"--reconnect-timeout", "2"});
  LocalCluster& c = *cluster;
  c.process("ps", 0).Signal(SIGKILL);  // the ps dies outright
  TaskResult w = c.Finish("worker", 0, 30s);
  CHECK(w.exit_code == 1);
  INFO(w.err);
  const std::string ps = "ps:0 (" + c.endpoint("ps", 0) + ")";
  CHECK(w.err.find("lost " + ps + ": ") != std::string::npos);
  CHECK(w.err.find("reconnecting (for up to 2 s)") != std::string::npos);
  CHECK(w.err.find("error lost " + ps + " (") != std::string::npos);
  CHECK(w.err.find(") and could not reconnect: ps:0 at " + c.endpoint("ps", 0) +
                   " did not accept a connection in time") != std::string::npos);
}

TEST_CASE("a worker whose ps stops answering (SIGSTOP) gets an error naming it after the peer and reconnect timeouts",
          "[integration][cluster]") {
  TempDir data;
  auto cluster = StartTraining(data, {"--peer-timeout", "2", "--reconnect-timeout", "3"});
  LocalCluster& c = *cluster;
  c.process("ps", 0).Signal(SIGSTOP);
  TaskResult w = c.Finish("worker", 0, 30s);
  c.process("ps", 0).Signal(SIGCONT);
  CHECK(w.exit_code == 1);
  INFO(w.err);
  CHECK(w.err.find("ps:0 (" + c.endpoint("ps", 0) + ") sent nothing for 2.0 s") != std::string::npos);
  CHECK(w.err.find("could not reconnect") != std::string::npos);  // it accepts connections, but answers nothing
}

TEST_CASE("sync, on_worker_loss wait: the others wait for a killed worker, which comes back and resumes", "[integration][cluster][fault]") {
  TempDir data;
  // 2 workers x 50 steps per epoch (batch 20), 30 epochs.
  LocalCluster c({.num_ps = 1, .num_workers = 2,
                  .job = SyntheticJob(data, 2000, 50, R"({"mode": "sync", "on_worker_loss": "wait"})", 30)});
  c.StartPs(0);
  c.StartWorker(0);
  c.StartWorker(1);
  c.AwaitEvent("worker", 1, "epoch", {{"epoch", 2}});
  c.process("worker", 1).Signal(SIGKILL);
  c.AwaitEvent("ps", 0, "peer_lost", {}, 60s, [](const nlohmann::json& e) { return e.value("peer", "").starts_with("worker:1 (local pid "); });  // it waits for the lost worker to come back
  c.StartWorker(1);
  TaskResult w1 = c.Finish("worker", 1);
  TaskResult w0 = c.Finish("worker", 0);
  CHECK(w0.exit_code == 0);
  CHECK(w1.exit_code == 0);
  CHECK(HasEvent(w1.out, "resumed"));
  REQUIRE(w0.done.is_object());
  REQUIRE(w1.done.is_object());
  CHECK(w0.done["global_step"] == 1500);  // every step aggregated both workers' gradients: none lost, none doubled
  CHECK(w0.done["params_sha256"] == w1.done["params_sha256"]);
  CHECK(c.Finish("ps", 0, 30s).exit_code == 0);
}

TEST_CASE("sync, on_worker_loss shrink: the others go on with a smaller quorum, logged, and the ps ends", "[integration][cluster][fault]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 3,
                  .job = SyntheticJob(data, 3000, 50, R"({"mode": "sync", "on_worker_loss": "shrink", "min_replicas": 2})", 20)});
  c.StartPs(0);
  for (int i = 0; i < 3; ++i) c.StartWorker(i);
  c.AwaitEvent("worker", 2, "epoch", {{"epoch", 1}});
  c.process("worker", 2).Signal(SIGKILL);
  for (int i = 0; i < 2; ++i) {
    TaskResult w = c.Finish("worker", i);
    CHECK(w.exit_code == 0);
    CHECK(w.done.is_object());
  }
  TaskResult ps = c.Finish("ps", 0, 30s);
  CHECK(ps.exit_code == 0);
  INFO(ps.err);
  CHECK(HasEvent(ps.out, "quorum", {{"quorum", 2}}));
  CHECK(HasEvent(ps.out, "peer_lost", {}, [](const nlohmann::json& e) { return e.value("peer", "").starts_with("worker:2 (local pid "); }));
}

TEST_CASE("sync, on_worker_loss shrink below min_replicas fails the step naming the lost worker", "[integration][cluster][fault]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 2,
                  .job = SyntheticJob(data, 2000, 50, R"({"mode": "sync", "on_worker_loss": "shrink", "min_replicas": 2})", 1000)});
  c.StartPs(0);
  c.StartWorker(0);
  c.StartWorker(1);
  c.AwaitEvent("worker", 1, "epoch", {{"epoch", 1}});
  c.process("worker", 1).Signal(SIGKILL);
  TaskResult w0 = c.Finish("worker", 0, 60s);
  CHECK(w0.exit_code == 1);
  INFO(w0.err);
  CHECK(w0.err.find("was lost (fewer than min_replicas 2)") != std::string::npos);
  c.process("ps", 0).Signal(SIGTERM);
  c.Finish("ps", 0, 10s);
}

TEST_CASE("a ps killed mid-run and restarted is initialised again by the chief; training goes on from its step",
          "[integration][cluster][fault]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 2, .job = SyntheticJob(data, 2000, 200, R"({"mode": "async"})", 30)});
  c.StartPs(0);
  // Worker 1 first, waiting for the chief's INIT, so neither can finish before the other starts.
  c.StartWorker(1);
  AwaitLine(c.process("worker", 1), "connected to ps:0 (");
  c.StartWorker(0);
  c.AwaitEvent("worker", 1, "epoch", {{"epoch", 1}});  // both are training
  const nlohmann::json epoch3 = c.AwaitEvent("worker", 0, "epoch", {{"epoch", 3}});
  c.process("ps", 0).Signal(SIGKILL);
  std::this_thread::sleep_for(500ms);
  c.StartPs(0);  // as systemd's Restart=on-failure or tfctl would
  TaskResult w0 = c.Finish("worker", 0);
  TaskResult w1 = c.Finish("worker", 1);
  CHECK(w0.exit_code == 0);
  CHECK(w1.exit_code == 0);
  INFO(w0.err);
  CHECK(w0.err.find("reconnected to ps:0 (") != std::string::npos);
  CHECK(w0.err.find("restarted: initialised again from this chief's parameters at global_step ") != std::string::npos);
  INFO(w1.err);
  CHECK(w1.err.find("reconnected to ps:0 (") != std::string::npos);  // restarted, or already initialised again by then
  // No re-initialised weights: the chief's accuracy after the restart is as high as before it.
  REQUIRE(w0.done.is_object());
  CHECK(w0.done["test_accuracy"].get<double>() >= 0.9);
  CHECK(w0.done["local_step"] == 1500);
  TaskResult ps = c.Finish("ps", 0, 30s);
  CHECK(ps.exit_code == 0);
  INFO(ps.err);
  // It starts counting at the step the chief last saw from the killed ps, not at 0: at least the
  // global_step of the chief's epoch-3 line, read before the kill (its own 150 pushes at least;
  // how many of worker 1's came first depends on how fast worker 1 got going).
  REQUIRE(epoch3["global_step"].is_number_integer());
  const long long seen = epoch3["global_step"].get<long long>();
  CHECK(seen >= 50 * 3);
  const auto at = ps.err.find("async mode, at global_step ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stoll(ps.err.substr(at + 27)) >= seen);
}

// Sync: the ps dies after answering one worker's pull of a step but not the other's. The chief
// re-initialises it at the step it last saw, one behind worker 1's, and worker 1's step in flight
// must still count. Parameters of 13 MB do not fit the loopback's socket buffers, so a chief stopped
// while its pull is answered holds a partial PARAMS when the ps is killed; each of the three rounds
// catches it there if the stop falls in its pull (the test passes either way, as the fix must).
TEST_CASE("sync: a ps killed and restarted while one worker holds the next step's parameters; both finish",
          "[integration][cluster][fault]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 800, 100);
  LocalCluster c({.num_ps = 1, .num_workers = 2,
                  .job = Job(data.path(), R"({"mode": "sync"})", 5, R"({"type": "sgd", "learning_rate": 0.05})", 20,
                             R"({"layers": [{"type": "dense", "units": 4096, "activation": "relu"}, {"type": "dense", "units": 10}]})")});
  c.StartPs(0);
  c.StartWorker(1);
  AwaitLine(c.process("worker", 1), "connected to ps:0 (");
  c.StartWorker(0);
  for (int round = 1; round <= 3; ++round) {
    c.AwaitEvent("worker", 0, "epoch", {{"epoch", round}}, 120s);
    c.process("worker", 0).Signal(SIGSTOP);
    std::this_thread::sleep_for(300ms);
    c.process("ps", 0).Signal(SIGKILL);
    c.Finish("ps", 0, 30s);
    c.StartPs(0);
    c.process("worker", 0).Signal(SIGCONT);
    c.AwaitEvent("ps", 0, "ready", {}, 60s);
  }
  TaskResult w0 = c.Finish("worker", 0, 300s);
  TaskResult w1 = c.Finish("worker", 1, 60s);
  INFO(w0.err);
  INFO(w1.err);
  CHECK(w0.exit_code == 0);
  CHECK(w1.exit_code == 0);
  CHECK(w1.err.find("PUSH for step") == std::string::npos);
  REQUIRE(w0.done.is_object());
  CHECK(w0.done["test_accuracy"].get<double>() >= 0.8);
  TaskResult ps = c.Finish("ps", 0, 30s);
  CHECK(ps.exit_code == 0);
}

// Async, 1 ps (started with `ps_flags`) + 2 workers: `other` is stopped (SIGSTOP) after its first
// epoch while the other worker trains to its end, until the ps has counted that worker's DONE.
void StopOtherUntilFirstDone(LocalCluster& c, int other, const std::vector<std::string>& ps_flags = {}) {
  c.StartPs(0, ps_flags);
  c.StartWorker(1);
  AwaitLine(c.process("worker", 1), "connected to ps:0 (");
  c.StartWorker(0);
  c.AwaitEvent("worker", other, "epoch", {{"epoch", 1}});
  c.process("worker", other).Signal(SIGSTOP);
  c.AwaitEvent("ps", 0, "worker_done", {{"done", 1}}, 120s);
}

// The ps killed and started again, as systemd's Restart=on-failure or tfctl would.
void RestartPs(LocalCluster& c, const std::vector<std::string>& ps_flags = {}) {
  c.process("ps", 0).Signal(SIGKILL);
  c.Finish("ps", 0, 30s);
  c.StartPs(0, ps_flags);
}

// The ps counts `finisher`'s DONE first; continued, `other` hears of it (peer_done) from its next
// reply, and the ps is killed and restarted while `other` is stopped again, so `other` is the one
// to find it empty.
void RestartPsOnceOtherHeardDone(LocalCluster& c, int finisher, int other) {
  StopOtherUntilFirstDone(c, other);
  c.process("worker", other).Signal(SIGCONT);
  c.AwaitEvent("worker", other, "peer_done", {{"peer", "worker:" + std::to_string(finisher)}}, 60s);
  c.process("worker", other).Signal(SIGSTOP);
  RestartPs(c);
  c.process("worker", other).Signal(SIGCONT);
}

TEST_CASE("async: a ps restarted after the chief finished is initialised by the worker still training, which finishes",
          "[integration][cluster][fault]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 2, .job = SyntheticJob(data, 2000, 200, R"({"mode": "async"})", 40)});
  RestartPsOnceOtherHeardDone(c, 0, 1);
  TaskResult w1 = c.Finish("worker", 1, 120s);
  INFO(w1.err);
  CHECK(w1.exit_code == 0);
  CHECK(w1.err.find("restarted: initialised again from this worker's parameters (the chief has finished)") != std::string::npos);
  REQUIRE(w1.done.is_object());
  CHECK(w1.done["local_step"] == 2000);
  TaskResult ps = c.Finish("ps", 0, 30s);
  INFO(ps.err);
  CHECK(ps.exit_code == 0);
  CHECK(c.Events("ps", 0, "gave_up").empty());  // the chief was not waited for
  REQUIRE(ps.done.is_object());
  CHECK(ps.done["workers_done"] == 2);
  CHECK(c.Finish("worker", 0).exit_code == 0);
}

TEST_CASE("async: a ps restarted after a worker finished learns it from the chief's INIT and ends without waiting for it",
          "[integration][cluster][fault]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 2, .job = SyntheticJob(data, 2000, 200, R"({"mode": "async"})", 40)});
  RestartPsOnceOtherHeardDone(c, 1, 0);
  TaskResult w0 = c.Finish("worker", 0, 120s);
  INFO(w0.err);
  CHECK(w0.exit_code == 0);
  CHECK(w0.err.find("restarted: initialised again from this chief's parameters") != std::string::npos);
  // Within 30 s, well inside the restarted ps's --startup-timeout (120 s): worker 1 was not awaited.
  TaskResult ps = c.Finish("ps", 0, 30s);
  INFO(ps.err);
  CHECK(ps.exit_code == 0);
  CHECK(c.Events("ps", 0, "gave_up").empty());
  REQUIRE(ps.done.is_object());
  CHECK(ps.done["workers_done"] == 2);
  CHECK(c.Finish("worker", 1).exit_code == 0);
}

// Async, 1 ps + 2 workers: `other` is stopped while `finisher` trains to its end, so the ps counts
// `finisher`'s DONE while no worker still training can hear of it, and holds its ack; the ps is
// killed and restarted then, and `other` continued. The finisher, still waiting for its ack,
// reconnects and tells the restarted ps again. (The ps's peer timeout is long enough that the
// stopped worker stays connected: lost, it would release the ack.)
void RestartPsBeforeAnyoneHeardDone(LocalCluster& c, int finisher, int other) {
  const std::vector<std::string> patient = {"--peer-timeout", "120"};
  StopOtherUntilFirstDone(c, other, patient);
  std::this_thread::sleep_for(300ms);
  REQUIRE_FALSE(c.process("worker", finisher).Wait(0ms).has_value());  // still waiting for its ack
  RestartPs(c, patient);
  c.process("worker", other).Signal(SIGCONT);
}

// What the two cases below check: every task exits 0, the restarted ps waited for nobody and
// counted both DONEs, and the finisher told it again.
void CheckEveryoneFinished(LocalCluster& c, int finisher) {
  TaskResult w0 = c.Finish("worker", 0, 120s);
  TaskResult w1 = c.Finish("worker", 1, 120s);
  INFO(w0.err);
  INFO(w1.err);
  CHECK(w0.exit_code == 0);
  CHECK(w1.exit_code == 0);
  CHECK((finisher == 0 ? w0 : w1).err.find("reconnected to ps:0 (") != std::string::npos);
  TaskResult ps = c.Finish("ps", 0, 30s);
  INFO(ps.err);
  CHECK(ps.exit_code == 0);
  CHECK(c.Events("ps", 0, "gave_up").empty());
  REQUIRE(ps.done.is_object());
  CHECK(ps.done["workers_done"] == 2);
}

TEST_CASE("async: a ps killed after the chief's DONE, before any worker heard of it, and restarted: the chief tells it again",
          "[integration][cluster][fault]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 2, .job = SyntheticJob(data, 2000, 200, R"({"mode": "async"})", 40)});
  RestartPsBeforeAnyoneHeardDone(c, 0, 1);
  CheckEveryoneFinished(c, 0);
}

TEST_CASE("async: a ps killed after a worker's DONE, before the chief heard of it, and restarted: the worker tells it again",
          "[integration][cluster][fault]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 2, .job = SyntheticJob(data, 2000, 200, R"({"mode": "async"})", 40)});
  RestartPsBeforeAnyoneHeardDone(c, 1, 0);
  CheckEveryoneFinished(c, 1);
}

TEST_CASE("a worker stopped (SIGSTOP) past the peer timeout reconnects when continued and finishes", "[integration][cluster][fault]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 2, .job = SyntheticJob(data, 2000, 50, R"({"mode": "async"})", 40)});
  c.StartPs(0, {"--peer-timeout", "2"});
  c.StartWorker(0);
  c.StartWorker(1, {"--peer-timeout", "2"});
  c.AwaitEvent("worker", 1, "epoch", {{"epoch", 1}});
  c.process("worker", 1).Signal(SIGSTOP);
  c.AwaitEvent("ps", 0, "peer_lost", {}, 60s, [](const nlohmann::json& e) { return e.value("peer", "").starts_with("worker:1"); });
  c.process("worker", 1).Signal(SIGCONT);
  TaskResult w1 = c.Finish("worker", 1);
  CHECK(w1.exit_code == 0);
  INFO(w1.err);
  CHECK(w1.err.find("reconnected to ps:0 (") != std::string::npos);
  REQUIRE(w1.done.is_object());
  CHECK(w1.done["local_step"] == 2000);
  CHECK(c.Finish("worker", 0).exit_code == 0);
  TaskResult ps = c.Finish("ps", 0, 30s);
  CHECK(ps.exit_code == 0);
  CHECK(HasEvent(ps.out, "peer_rejoined"));
}

}  // namespace
}  // namespace tfd::testing::cluster_fault_test
