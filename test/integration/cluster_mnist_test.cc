// Clusters of tfd processes training on the real MNIST files (fetched by scripts/test): accuracy in
// async, sync and allreduce mode, a worker killed and restarted mid-run, and a units split against
// one process. Without MNIST in
// TFD_MNIST_DIR the binary exits 77, which ctest reports as skipped. Every wait has a deadline
// that fails the test instead of hanging.
#include <cmath>
#include <csignal>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/catch/subjects.h"
#include "test/integration/cluster_util.h"
#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing::cluster_mnist_test {
namespace {

using namespace std::chrono_literals;

std::string g_mnist;  // set by main: this binary runs only with MNIST

TEST_CASE("1 ps + 2 workers, async, reach 94% on MNIST in 3 epochs; the ps exits 0", "[integration][cluster][mnist]") {
  // Adam 2e-3 reaches 95.5-95.8% here in async runs (their interleaving varies).
  LocalCluster c({.num_ps = 1, .num_workers = 2,
                  .job = Job(g_mnist, R"({"mode": "async"})", 3, R"({"type": "adam", "learning_rate": 0.002})")});
  auto done = RunToCompletion(c);
  for (const auto& d : done) {
    INFO(d.dump());
    CHECK(d["test_accuracy"].get<double>() >= 0.94);
    CHECK(d["local_step"] == 900);  // 60000 / 2 workers / batch 100 * 3 epochs
  }
}

TEST_CASE("1 ps + 2 workers, sync, reach 94% on MNIST in 3 epochs with identical workers", "[integration][cluster][mnist]") {
  // Deterministic: 94.95% every run.
  LocalCluster c({.num_ps = 1, .num_workers = 2,
                  .job = Job(g_mnist, R"({"mode": "sync", "replicas_to_aggregate": 2, "total_num_replicas": 2})", 3,
                             R"({"type": "adam", "learning_rate": 0.002})")});
  auto done = RunToCompletion(c);
  CHECK(done[0]["test_accuracy"].get<double>() >= 0.94);
  CHECK(done[0]["global_step"] == 900);  // one global step per pair of gradients
  CHECK(done[0]["params_sha256"] == done[1]["params_sha256"]);
}

TEST_CASE("the dnn seed configuration converges in async mode with 2 workers", "[integration][cluster][mnist]") {
  // PyTorch's RPC parameter server diverges here (0.098 after one epoch); so does raw async
  // momentum without staleness scaling (8.9% after an epoch). It reaches 95-97% after two epochs
  // (async runs vary with the interleaving, more so on a loaded machine); 90% tells the two apart.
  LocalCluster c({.num_ps = 1, .num_workers = 2,
                  .job = Job(g_mnist, R"({"mode": "async"})", 2, R"({"type": "momentum", "learning_rate": 0.01, "momentum": 0.95})", 50,
                             R"("dnn")")});
  auto done = RunToCompletion(c);
  for (const auto& d : done) {
    INFO(d.dump());
    CHECK(d["test_accuracy"].get<double>() >= 0.90);
  }
}

TEST_CASE("allreduce: 2 and 3 workers reach 94% on MNIST in 3 epochs with bit-identical parameters", "[integration][cluster][mnist][allreduce]") {
  for (int n : {2, 3}) {
    LocalCluster c({.num_ps = 0, .num_workers = n,
                    .job = Job(g_mnist, R"({"mode": "allreduce"})", 3, R"({"type": "adam", "learning_rate": 0.003})")});
    auto done = RunToCompletion(c);
    INFO(n << " workers: " << done[0].dump());
    CHECK(done[0]["test_accuracy"].get<double>() >= 0.94);
    CHECK(done[0]["global_step"] == 3 * (60000 / n / 100));
    for (int i = 1; i < n; ++i) {
      CHECK(done[static_cast<std::size_t>(i)]["params_sha256"] == done[0]["params_sha256"]);
      CHECK(done[static_cast<std::size_t>(i)]["test_accuracy"] == done[0]["test_accuracy"]);
    }
  }
}

TEST_CASE("async: a worker killed mid-epoch and restarted resumes its shard; accuracy holds", "[integration][cluster][mnist][fault]") {
  const std::string job = Job(g_mnist, R"({"mode": "async"})", 3, R"({"type": "adam", "learning_rate": 0.002})");
  LocalCluster undisturbed({.num_ps = 1, .num_workers = 2, .job = job});
  const double reference = RunToCompletion(undisturbed)[0]["test_accuracy"].get<double>();

  LocalCluster c({.num_ps = 1, .num_workers = 2, .job = job});
  c.StartPs(0);
  c.StartWorker(0);
  c.StartWorker(1, {"--log-level", "info"});
  c.AwaitEvent("worker", 1, "epoch", {{"epoch", 1}});
  c.process("worker", 1).Signal(SIGKILL);
  c.AwaitEvent("ps", 0, "peer_lost", {}, 60s, [](const nlohmann::json& e) { return e.value("peer", "").starts_with("worker:1"); });
  // The others go on meanwhile; the restarted worker (a new incarnation) picks up where the ps
  // says its last applied step was, in the same data order.
  c.StartWorker(1);
  TaskResult w1 = c.Finish("worker", 1);
  CHECK(w1.exit_code == 0);
  CHECK(HasEvent(w1.out, "resumed", {{"epoch", 2}}));
  REQUIRE(w1.done.is_object());
  CHECK(w1.done["local_step"] == 900);  // counted across both incarnations: no step taken twice
  TaskResult w0 = c.Finish("worker", 0);
  CHECK(w0.exit_code == 0);
  REQUIRE(w0.done.is_object());
  TaskResult ps = c.Finish("ps", 0, 30s);
  CHECK(ps.exit_code == 0);
  CHECK(HasEvent(ps.out, "peer_lost", {}, [](const nlohmann::json& e) { return e.value("peer", "").starts_with("worker:1 (local pid "); }));
  CHECK(HasEvent(ps.out, "peer_rejoined", {}, [](const nlohmann::json& e) { return e.value("peer", "").starts_with("worker:1 (local pid "); }));
  // Async runs interleave differently every time: undisturbed ones have ended anywhere from 94.6% to
  // 95.8% here on a loaded machine. The fault must not cost accuracy beyond that spread.
  INFO("undisturbed " << reference << ", disturbed " << w0.done["test_accuracy"].get<double>());
  CHECK(w0.done["test_accuracy"].get<double>() >= reference - 0.015);
  CHECK(w0.done["test_accuracy"].get<double>() >= 0.94);
}

TEST_CASE("the dnn split by units on 2 workers keeps standalone's accuracy within 0.2 points after 5 epochs", "[integration][cluster][mnist][model_parallel]") {
  const std::string job = R"({"model": "dnn", "data": ")" + g_mnist + R"(", "epochs": 5, "batch_size": 200,
      "optimizer": {"type": "momentum", "learning_rate": 0.01, "momentum": 0.95}, "seed": 1, "log_every_steps": 0,
      "model_parallel": {"split": "units", "stages": 2}})";
  TempDir dir;
  WriteFile(dir / "job.json", job);
  CommandResult solo = RunCommand(std::string(TFD_BINARY) + " --standalone --log-format json --job " + dir / "job.json", dir);
  INFO(solo.err);
  REQUIRE(solo.exit_code == 0);
  const std::vector<nlohmann::json> solo_done = ParseEvents(solo.out, "done");
  REQUIRE(solo_done.size() == 1);
  LocalCluster c({.num_ps = 0, .num_workers = 2, .job = job});
  auto done = RunToCompletion(c);
  const double want = solo_done[0]["test_accuracy"].get<double>();
  for (const auto& d : done) {
    INFO(d.dump());
    CHECK(std::abs(d["test_accuracy"].get<double>() - want) <= 0.002);
    CHECK(d["params_sha256"] == done[0]["params_sha256"]);
  }
  CHECK(want >= 0.97);
}

// Why this subject cannot run here ("" when it can): tfd_process_tests then skips it (exit 77).
std::string CannotRunHere(const std::string&) { return MissingMnist(&g_mnist); }
const SubjectNeeds kNeeds(__FILE__, &CannotRunHere);

}  // namespace
}  // namespace tfd::testing::cluster_mnist_test
