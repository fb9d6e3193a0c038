// The hierarchical all-reduce (collective/hier_ring.h) in a cluster of tfd processes: 4 workers,
// two on 127.0.0.1 and two on 127.0.0.2 (both loopback, two "hosts" to the grouping by address).
// Every worker ends with the same bits, run after run; the flat ring sums in another order, so
// its parameters equal these within float rounding, not bit for bit.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/ckpt/checkpoint.h"
#include "test/integration/cluster_util.h"
#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing {
namespace {

const std::vector<std::string> kTwoHosts = {"127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2"};

struct Run {
  std::vector<TaskResult> workers;
  std::vector<float> params;  // the chief's last checkpoint, tensors in order
};

Run RunFour(const TempDir& data, const std::string& hierarchical, const std::string& ckpt_dir) {
  const std::string job = Job(data.path(), R"({"mode": "allreduce", "bucket_kb": 16, "hierarchical": )" + hierarchical + "}", 2,
                              R"({"type": "momentum", "learning_rate": 0.02, "momentum": 0.9})", 20, R"({"name": "dnn"})",
                              R"(, "checkpoint": {"dir": ")" + ckpt_dir + R"(", "every_steps": 100000, "keep": 1})");
  LocalCluster c({.num_ps = 0, .num_workers = 4, .job = job, .worker_hosts = kTwoHosts});
  c.StartAll();
  Run r{c.FinishAll(), {}};
  Result<std::vector<std::string>> files = ckpt::List(ckpt_dir);
  REQUIRE(files.ok());
  REQUIRE(!files->empty());
  Result<ckpt::Checkpoint> last = ckpt::Load(files->front());
  REQUIRE(last.ok());
  for (const ckpt::NamedTensor& t : last->tensors) r.params.insert(r.params.end(), t.values.begin(), t.values.end());
  return r;
}

std::string TopologyOf(const TaskResult& w) {
  for (const nlohmann::json& e : ParseEvents(w.out))
    if (e["event"] == "topology") return e["topology"].get<std::string>();
  return "(no topology event)";
}

TEST_CASE("hierarchical allreduce, 2 hosts x 2 workers: bit-identical across workers and runs, the flat ring's within rounding",
          "[integration][cluster][allreduce]") {
  TempDir data, dirs;
  WriteSyntheticMnist(data.path(), 800, 100);
  const Run first = RunFour(data, R"("auto")", dirs / "a");
  const Run second = RunFour(data, "true", dirs / "b");
  const Run flat = RunFour(data, "false", dirs / "c");
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
  CHECK(first.params == second.params);
  REQUIRE(first.params.size() == flat.params.size());
  REQUIRE(!first.params.empty());
  float worst = 0;
  for (std::size_t i = 0; i < first.params.size(); ++i) worst = std::max(worst, std::abs(first.params[i] - flat.params[i]));
  INFO("largest difference from the flat ring's parameters: " << worst);
  CHECK(worst < 1e-4f);
}

}  // namespace
}  // namespace tfd::testing
