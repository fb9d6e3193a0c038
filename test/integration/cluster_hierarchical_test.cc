// The hierarchical all-reduce (collective/hier_ring.h) in a cluster of tfd processes: 4 workers,
// two on 127.0.0.1 and two on 127.0.0.2 (both loopback, two "hosts" to the grouping by address).
// Every worker ends with the same bits, run after run; the flat ring sums in another order, so
// results equal these within float rounding (compared on the last epoch's loss), not bit for bit.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/integration/cluster_util.h"
#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing::cluster_hierarchical_test {
namespace {

const std::vector<std::string> kTwoHosts = {"127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2"};

// Allreduce workers write no checkpoints: the chief's last epoch loss stands for its parameters.
struct Run {
  std::vector<TaskResult> workers;
  double last_loss = -1;
};

Run RunFour(const TempDir& data, const std::string& hierarchical) {
  const std::string job = Job(data.path(), R"({"mode": "allreduce", "bucket_kb": 16, "hierarchical": )" + hierarchical + "}", 2,
                              R"({"type": "momentum", "learning_rate": 0.02, "momentum": 0.9})", 20, R"({"name": "dnn"})");
  LocalCluster c({.num_ps = 0, .num_workers = 4, .job = job, .worker_hosts = kTwoHosts});
  c.StartAll();
  Run r{c.FinishAll()};
  for (const nlohmann::json& e : ParseEvents(r.workers[0].out, "epoch")) r.last_loss = e["loss"].get<double>();
  return r;
}

std::string TopologyOf(const TaskResult& w) {
  for (const nlohmann::json& e : ParseEvents(w.out))
    if (e["event"] == "topology") return e["topology"].get<std::string>();
  return "(no topology event)";
}

TEST_CASE("hierarchical allreduce, 2 hosts x 2 workers: bit-identical across workers and runs, the flat ring's within rounding",
          "[integration][cluster][allreduce]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 800, 100);
  const Run first = RunFour(data, R"("auto")");
  const Run second = RunFour(data, "true");
  const Run flat = RunFour(data, "false");
  REQUIRE(first.workers[0].done["params_sha256"].is_string());
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("worker " << i << ":\n" << first.workers[i].err);
    CHECK(TopologyOf(first.workers[i]) == "hierarchical");
    CHECK(TopologyOf(second.workers[i]) == "hierarchical");
    CHECK(TopologyOf(flat.workers[i]) == "flat");
    CHECK(first.workers[i].err.find("topology: hierarchical (2 hosts, at most 2 workers on one: update.hierarchical auto)") !=
          std::string::npos);
    CHECK(first.workers[i].done["params_sha256"] == first.workers[0].done["params_sha256"]);
    CHECK(second.workers[i].done["params_sha256"] == first.workers[0].done["params_sha256"]);
    CHECK(flat.workers[i].done["params_sha256"] == flat.workers[0].done["params_sha256"]);
  }
  REQUIRE(first.last_loss >= 0);
  CHECK(first.last_loss == second.last_loss);
  INFO("last epoch loss: hierarchical " << first.last_loss << ", flat " << flat.last_loss);
  CHECK(std::abs(first.last_loss - flat.last_loss) < 1e-3 * std::max(1.0, flat.last_loss));
}

}  // namespace
}  // namespace tfd::testing::cluster_hierarchical_test
