// TF_CONFIG and the seeds' cluster flags: what parses, who is chief, worker ranks, the cluster
// fingerprint, and the exact error for each kind of mistake.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "common/base/sha256.h"
#include "common/config/cluster.h"

namespace tfd::config {
namespace {

constexpr const char* kCluster =
    R"("cluster": {"chief": ["pc-00:2222"], "worker": ["pc-01:2222", "pc-02:2222"], "ps": ["pc-03:2222", "pc-04:2223"]})";

std::string TfConfigText(const std::string& cluster, const std::string& task, const std::string& extra = "") {
  return "{" + cluster + ", \"task\": " + task + extra + "}";
}

std::string ClusterErrorOf(const std::string& text, const std::string& source = "TF_CONFIG") {
  auto got = ParseTfConfig(text, source);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kInvalidArgument);
  return got.status().message();
}

std::string FlagsErrorOf(std::string_view job, int index, std::string_view ps, std::string_view workers) {
  auto got = TfConfigFromFlags(job, index, ps, workers);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kInvalidArgument);
  return got.status().message();
}

TfConfig Parsed(const std::string& text) {
  auto got = ParseTfConfig(text, "TF_CONFIG");
  INFO(text);
  if (!got.ok()) FAIL(got.status().ToString());
  return *got;
}

TEST_CASE("ParseTfConfig accepts TensorFlow's TF_CONFIG with chief, worker, ps and the ignored keys", "[unit][cluster]") {
  const TfConfig c = Parsed(TfConfigText(kCluster, R"({"type": "worker", "index": 1})",
                                         R"(, "rpc_layer": "grpc", "environment": "cloud")"));
  REQUIRE(c.cluster.chief.size() == 1);
  CHECK(c.cluster.chief[0] == Endpoint{"pc-00", 2222});
  REQUIRE(c.cluster.worker.size() == 2);
  CHECK(c.cluster.worker[0] == Endpoint{"pc-01", 2222});
  CHECK(c.cluster.worker[1] == Endpoint{"pc-02", 2222});
  REQUIRE(c.cluster.ps.size() == 2);
  CHECK(c.cluster.ps[0] == Endpoint{"pc-03", 2222});
  CHECK(c.cluster.ps[1] == Endpoint{"pc-04", 2223});
  CHECK(c.cluster.evaluator.empty());
  CHECK(c.task == TaskId{TaskType::kWorker, 1});
  CHECK(c.task.ToString() == "worker:1");
  CHECK(c.self() == Endpoint{"pc-02", 2222});
  CHECK(c.cluster.num_workers() == 3);
  CHECK_FALSE(c.is_chief());

  // An evaluator, our "tfd" extension block, and an index written as 1.0 are accepted too.
  const TfConfig e = Parsed(R"({"cluster": {"worker": ["a:1"], "evaluator": ["b:2"]},
                                "task": {"type": "evaluator", "index": 0.0}, "tfd": {"token_file": "/etc/tfd/token"}})");
  CHECK(e.token_file == "/etc/tfd/token");
  CHECK(c.token_file.empty());
  CHECK(e.task == TaskId{TaskType::kEvaluator, 0});
  CHECK(e.self() == Endpoint{"b", 2});
  CHECK(Parsed(TfConfigText(kCluster, R"({"type": "ps", "index": 1.0})")).task == TaskId{TaskType::kPs, 1});
}

TEST_CASE("the chief is the chief task if there is one, else worker 0", "[unit][cluster]") {
  SECTION("with a chief task") {
    CHECK(Parsed(TfConfigText(kCluster, R"({"type": "chief", "index": 0})")).is_chief());
    CHECK_FALSE(Parsed(TfConfigText(kCluster, R"({"type": "worker", "index": 0})")).is_chief());
    CHECK_FALSE(Parsed(TfConfigText(kCluster, R"({"type": "worker", "index": 1})")).is_chief());
    CHECK_FALSE(Parsed(TfConfigText(kCluster, R"({"type": "ps", "index": 0})")).is_chief());
  }
  SECTION("without a chief task") {
    const std::string cluster = R"("cluster": {"worker": ["w0:1", "w1:1"], "ps": ["p0:1"]})";
    CHECK(Parsed(TfConfigText(cluster, R"({"type": "worker", "index": 0})")).is_chief());
    CHECK_FALSE(Parsed(TfConfigText(cluster, R"({"type": "worker", "index": 1})")).is_chief());
    CHECK_FALSE(Parsed(TfConfigText(cluster, R"({"type": "ps", "index": 0})")).is_chief());
  }
}

TEST_CASE("worker ranks put the chief first, then the workers", "[unit][cluster]") {
  SECTION("with a chief task") {
    const ClusterSpec c = Parsed(TfConfigText(kCluster, R"({"type": "ps", "index": 0})")).cluster;
    REQUIRE(c.num_workers() == 3);
    CHECK(c.WorkerRank({TaskType::kChief, 0}) == 0);
    CHECK(c.WorkerRank({TaskType::kWorker, 0}) == 1);
    CHECK(c.WorkerRank({TaskType::kWorker, 1}) == 2);
    CHECK(c.WorkerTask(0) == TaskId{TaskType::kChief, 0});
    CHECK(c.WorkerTask(1) == TaskId{TaskType::kWorker, 0});
    CHECK(c.WorkerTask(2) == TaskId{TaskType::kWorker, 1});
    for (int rank = 0; rank < c.num_workers(); ++rank) CHECK(c.WorkerRank(c.WorkerTask(rank)) == rank);
    CHECK(c.EndpointOf(c.WorkerTask(0)) == Endpoint{"pc-00", 2222});
  }
  SECTION("without a chief task") {
    const ClusterSpec c =
        Parsed(R"({"cluster": {"worker": ["w0:1", "w1:1", "w2:1"]}, "task": {"type": "worker", "index": 2}})").cluster;
    REQUIRE(c.num_workers() == 3);
    for (int i = 0; i < 3; ++i) {
      CHECK(c.WorkerRank({TaskType::kWorker, i}) == i);
      CHECK(c.WorkerTask(i) == TaskId{TaskType::kWorker, i});
    }
    CHECK(c.EndpointOf(c.WorkerTask(0)) == Endpoint{"w0", 1});
  }
}

TEST_CASE("ClusterSpec::Id is equal for equal specs and changes with any endpoint", "[unit][cluster]") {
  const ClusterSpec base = Parsed(TfConfigText(kCluster, R"({"type": "ps", "index": 0})")).cluster;
  // The same spec from another task's TF_CONFIG, with other key order and spacing.
  const ClusterSpec same =
      Parsed(R"({"task": {"index": 1, "type": "worker"}, "cluster": {"ps": ["pc-03:2222","pc-04:2223"],
                 "worker": ["pc-01:2222", "pc-02:2222"], "chief": ["pc-00:2222"]}})")
          .cluster;
  CHECK(same.Id() == base.Id());
  CHECK(ClusterSpec(base).Id() == base.Id());

  std::set<std::uint64_t> ids = {base.Id()};
  int variants = 0;
  for (TaskType t : {TaskType::kChief, TaskType::kWorker, TaskType::kPs}) {
    for (std::size_t i = 0; i < base.Tasks(t).size(); ++i) {
      INFO(TaskTypeName(t) << "[" << i << "]");
      ClusterSpec host = base, port = base;
      const_cast<std::vector<Endpoint>&>(host.Tasks(t))[i].host += "x";
      const_cast<std::vector<Endpoint>&>(port.Tasks(t))[i].port += 1;
      CHECK(host.Id() != base.Id());
      CHECK(port.Id() != base.Id());
      ids.insert(host.Id());
      ids.insert(port.Id());
      variants += 2;
    }
  }
  CHECK(static_cast<int>(ids.size()) == variants + 1);

  // Same endpoints under another job, or in another order, are another cluster.
  ClusterSpec moved = base;
  moved.evaluator.push_back(moved.ps.back());
  moved.ps.pop_back();
  CHECK(moved.Id() != base.Id());
  ClusterSpec swapped = base;
  std::swap(swapped.worker[0], swapped.worker[1]);
  CHECK(swapped.Id() != base.Id());
}

TEST_CASE("TF_CONFIG errors name the source and the field exactly", "[unit][cluster]") {
  CHECK(ClusterErrorOf("{\"cluster\": ", "TF_CONFIG") == "TF_CONFIG: not valid JSON");
  CHECK(ClusterErrorOf("", "/etc/tf_config.json") == "/etc/tf_config.json: not valid JSON");
  CHECK(ClusterErrorOf("[1, 2]") == "TF_CONFIG: (top level): expected an object, got an array");
  CHECK(ClusterErrorOf(R"({"task": {"type": "worker", "index": 0}})") ==
        R"(TF_CONFIG: cluster: missing (expected {"ps": ["host:port", ...], "worker": [...]}))");
  CHECK(ClusterErrorOf(std::string("{") + kCluster + "}") == R"(TF_CONFIG: task: missing (expected {"type": "worker", "index": 0}))");
  CHECK(ClusterErrorOf(TfConfigText(kCluster, R"({"type": "master", "index": 0})")) ==
        R"(TF_CONFIG: task.type: unknown task type "master" (expected chief, worker, ps, evaluator or coordinator))");
  CHECK(ClusterErrorOf(TfConfigText(kCluster, R"({"index": 0})")) == "TF_CONFIG: task.type: missing (expected a string)");
  CHECK(ClusterErrorOf(TfConfigText(kCluster, R"({"type": "worker"})")) == "TF_CONFIG: task.index: missing (expected an integer)");
  CHECK(ClusterErrorOf(TfConfigText(kCluster, R"({"type": "worker", "index": 0, "port": 1})")) ==
        "TF_CONFIG: task.port: unknown field (expected one of: index, type)");
  CHECK(ClusterErrorOf(TfConfigText(kCluster, R"({"type": "worker", "index": 0})", R"(, "tfd": {"token": "abc"})")) ==
        "TF_CONFIG: tfd.token: unknown field (expected one of: base_workers, token_file)");
  CHECK(ClusterErrorOf(TfConfigText(kCluster, R"({"type": "worker", "index": 0})", R"(, "tfd": {"token_file": 7})")) ==
        "TF_CONFIG: tfd.token_file: expected a string, got 7");
}

TEST_CASE("a coordinator task: at most one, beside worker tasks only; the cluster id counts it", "[unit][cluster]") {
  constexpr const char* kSweep = R"("cluster": {"coordinator": ["pc-00:2222"], "worker": ["pc-01:2222", "pc-02:2222"]})";
  const TfConfig c = Parsed(TfConfigText(kSweep, R"({"type": "coordinator", "index": 0})"));
  CHECK(c.task == TaskId{TaskType::kCoordinator, 0});
  CHECK(c.task.ToString() == "coordinator:0");
  CHECK(c.self() == Endpoint{"pc-00", 2222});
  CHECK_FALSE(c.is_chief());
  CHECK(c.cluster.num_workers() == 2);
  const TfConfig w = Parsed(TfConfigText(kSweep, R"({"type": "worker", "index": 1})"));
  CHECK(w.cluster.Id() == c.cluster.Id());
  ClusterSpec without = c.cluster;
  without.coordinator.clear();
  CHECK(without.Id() != c.cluster.Id());
  // A cluster without a coordinator keeps the id it had before coordinators existed.
  ClusterSpec plain;
  plain.worker = {{"pc-01", 2222}};
  CHECK(plain.Id() == Fingerprint64("chief=;worker=pc-01:2222,;ps=;evaluator=;"));

  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"coordinator": ["pc-00:1", "pc-00:2"], "worker": ["pc-01:1"]})",
                             R"({"type": "worker", "index": 0})")) == "TF_CONFIG: cluster.coordinator: 2 tasks, at most one allowed");
  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"coordinator": ["pc-00:1"], "worker": ["pc-01:1"], "ps": ["pc-02:1"]})",
                             R"({"type": "worker", "index": 0})")) ==
        "TF_CONFIG: cluster.ps: a cluster with a coordinator has worker tasks only (the coordinator hands each worker its trials)");
  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"coordinator": ["pc-00:1"], "chief": ["pc-01:1"]})", R"({"type": "coordinator", "index": 0})")) ==
        "TF_CONFIG: cluster.chief: a cluster with a coordinator has worker tasks only (the coordinator hands each worker its trials)");
  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"coordinator": ["pc-00:1"]})", R"({"type": "coordinator", "index": 0})")) ==
        "TF_CONFIG: cluster: no chief or worker task (training needs at least one)");
  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"coordinator": ["pc-00:1"], "worker": ["pc-00:1"]})", R"({"type": "worker", "index": 0})")) ==
        R"(TF_CONFIG: cluster.coordinator[0]: "pc-00:1" is listed twice)");
}

TEST_CASE("a task index out of range or not an integer is refused", "[unit][cluster]") {
  CHECK(ClusterErrorOf(TfConfigText(kCluster, R"({"type": "worker", "index": 2})")) ==
        "TF_CONFIG: task.index: 2 is out of range: cluster.worker has 2 tasks");
  CHECK(ClusterErrorOf(TfConfigText(kCluster, R"({"type": "chief", "index": 1})")) ==
        "TF_CONFIG: task.index: 1 is out of range: cluster.chief has 1 task");
  CHECK(ClusterErrorOf(TfConfigText(kCluster, R"({"type": "evaluator", "index": 0})")) ==
        R"(TF_CONFIG: task.type: "evaluator" has no tasks in cluster)");
  CHECK(ClusterErrorOf(TfConfigText(kCluster, R"({"type": "worker", "index": 1.5})")) ==
        "TF_CONFIG: task.index: expected an integer in [0, 1048576], got 1.5");
  CHECK(ClusterErrorOf(TfConfigText(kCluster, R"({"type": "worker", "index": "1"})")) ==
        R"(TF_CONFIG: task.index: expected an integer in [0, 1048576], got "1")");
  CHECK(ClusterErrorOf(TfConfigText(kCluster, R"({"type": "worker", "index": -1})")) ==
        "TF_CONFIG: task.index: expected an integer in [0, 1048576], got -1");
  CHECK(ClusterErrorOf(TfConfigText(kCluster, R"({"type": "worker", "index": null})")) ==
        "TF_CONFIG: task.index: expected an integer in [0, 1048576], got null");
}

TEST_CASE("bad cluster entries are refused with the entry's path", "[unit][cluster]") {
  const std::string task = R"({"type": "worker", "index": 0})";
  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"worker": ["pc-01:2222", "pc-02:2222", "pc-03"]})", task)) ==
        R"(TF_CONFIG: cluster.worker[2]: "pc-03" has no port)");
  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"worker": ["pc-01:2222"], "ps": ["pc-04:70000"]})", task)) ==
        R"(TF_CONFIG: cluster.ps[0]: "pc-04:70000": port "70000" is not a number in [1, 65535])");
  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"worker": ["pc-01:0"]})", task)) ==
        R"(TF_CONFIG: cluster.worker[0]: "pc-01:0": port "0" is not a number in [1, 65535])");
  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"worker": ["pc-01:2222"], "ps": ["pc-02:22x"]})", task)) ==
        R"(TF_CONFIG: cluster.ps[0]: "pc-02:22x": port "22x" is not a number in [1, 65535])");
  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"worker": ["pc-01:2222", "pc-01:2222"]})", task)) ==
        R"(TF_CONFIG: cluster.worker[1]: "pc-01:2222" is listed twice)");
  // Across jobs: the later job's entry is named.
  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"worker": ["pc-01:2222"], "ps": ["pc-01:2222"]})", task)) ==
        R"(TF_CONFIG: cluster.ps[0]: "pc-01:2222" is listed twice)");
  // The same host on another port is fine.
  CHECK(Parsed(TfConfigText(R"("cluster": {"worker": ["pc-01:2222"], "ps": ["pc-01:2223"]})", task)).cluster.ps.size() == 1);
  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"chief": ["pc-00:2222", "pc-05:2222"], "worker": ["pc-01:2222"]})", task)) ==
        "TF_CONFIG: cluster.chief: 2 tasks, at most one allowed");
  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"worker": ["a:1"], "evaluator": ["b:1", "c:1"]})", task)) ==
        "TF_CONFIG: cluster.evaluator: 2 tasks, at most one allowed");
  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"ps": ["pc-03:2222"]})", R"({"type": "ps", "index": 0})")) ==
        "TF_CONFIG: cluster: no chief or worker task (training needs at least one)");
  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"worker": "pc-01:2222"})", task)) ==
        R"(TF_CONFIG: cluster.worker: expected a list of "host:port" strings, got "pc-01:2222")");
  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"worker": [2222]})", task)) ==
        R"(TF_CONFIG: cluster.worker[0]: expected a "host:port" string, got 2222)");
  CHECK(ClusterErrorOf(TfConfigText(R"("cluster": {"worker": ["a:1"], "master": ["b:1"]})", task)) ==
        "TF_CONFIG: cluster.master: unknown field (expected one of: chief, coordinator, evaluator, ps, worker)");
}

TEST_CASE("an unknown top-level TF_CONFIG key is refused with the known ones", "[unit][cluster]") {
  CHECK(ClusterErrorOf(TfConfigText(kCluster, R"({"type": "worker", "index": 0})", R"(, "rpc": "grpc")")) ==
        "TF_CONFIG: rpc: unknown field (expected one of: cluster, environment, rpc_layer, task, tfd)");
}

TEST_CASE("ParseEndpoint reads host:port and bracketed IPv6", "[unit][cluster]") {
  auto ep = ParseEndpoint("pc-01.lab:2222");
  REQUIRE(ep.ok());
  CHECK(*ep == Endpoint{"pc-01.lab", 2222});
  CHECK(ep->ToString() == "pc-01.lab:2222");

  ep = ParseEndpoint("[::1]:2222");
  REQUIRE(ep.ok());
  CHECK(ep->host == "::1");
  CHECK(ep->port == 2222);
  CHECK(ep->ToString() == "[::1]:2222");

  ep = ParseEndpoint("[fe80::1:2]:65535");
  REQUIRE(ep.ok());
  CHECK(ep->host == "fe80::1:2");
  CHECK(ep->port == 65535);
  CHECK(ep->ToString() == "[fe80::1:2]:65535");

  ep = ParseEndpoint("10.0.0.7:1");
  REQUIRE(ep.ok());
  CHECK(*ep == Endpoint{"10.0.0.7", 1});

  // IPv6 in a TF_CONFIG too.
  const TfConfig c = Parsed(R"({"cluster": {"worker": ["[::1]:2222"], "ps": ["[::1]:2223"]}, "task": {"type": "ps", "index": 0}})");
  CHECK(c.self() == Endpoint{"::1", 2223});
}

TEST_CASE("ParseEndpoint errors say what is wrong", "[unit][cluster]") {
  auto error = [](std::string_view text) {
    auto ep = ParseEndpoint(text);
    REQUIRE_FALSE(ep.ok());
    CHECK(ep.status().code() == Code::kInvalidArgument);
    return ep.status().message();
  };
  CHECK(error("pc-03") == R"("pc-03" has no port)");
  CHECK(error("") == R"("" has no port)");
  CHECK(error("::1:2222") == R"("::1:2222": write an IPv6 address in brackets, as [::1]:2222)");
  CHECK(error("[::1]") == R"("[::1]" has no port)");
  CHECK(error("[::1]2222") == R"("[::1]2222" has no port)");
  CHECK(error("[::1:2222") == R"("[::1:2222" has no closing ']')");
  CHECK(error(":2222") == R"(":2222" has no host)");
  CHECK(error("[]:2222") == R"("[]:2222" has no host)");
  CHECK(error("pc 01:2222") == R"("pc 01:2222": ' ' cannot be part of a host name or address)");
  CHECK(error("pc/01:2222") == R"("pc/01:2222": '/' cannot be part of a host name or address)");
  CHECK(error("pc-01:") == R"("pc-01:": port "" is not a number in [1, 65535])");
  CHECK(error("pc-01:65536") == R"("pc-01:65536": port "65536" is not a number in [1, 65535])");
  CHECK(error("pc-01:-1") == R"("pc-01:-1": port "-1" is not a number in [1, 65535])");
  CHECK(error("pc-01:99999999999") == R"("pc-01:99999999999": port "99999999999" is not a number in [1, 65535])");
  CHECK(error("[::1]:0") == R"("[::1]:0": port "0" is not a number in [1, 65535])");
}

TEST_CASE("TfConfigFromFlags builds the cluster from the seeds' flags", "[unit][cluster]") {
  auto got = TfConfigFromFlags("worker", 1, "pc-03:2222,pc-04:2222", "pc-01:2222,pc-02:2222");
  REQUIRE(got.ok());
  CHECK(got->cluster.chief.empty());
  CHECK(got->cluster.evaluator.empty());
  CHECK(got->cluster.ps == std::vector<Endpoint>{{"pc-03", 2222}, {"pc-04", 2222}});
  CHECK(got->cluster.worker == std::vector<Endpoint>{{"pc-01", 2222}, {"pc-02", 2222}});
  CHECK(got->task == TaskId{TaskType::kWorker, 1});
  CHECK(got->self() == Endpoint{"pc-02", 2222});
  CHECK_FALSE(got->is_chief());
  CHECK(got->cluster.WorkerRank(got->task) == 1);

  auto chief = TfConfigFromFlags("worker", 0, "pc-03:2222,pc-04:2222", "pc-01:2222,pc-02:2222");
  REQUIRE(chief.ok());
  CHECK(chief->is_chief());
  // Every task of one cluster computes the same cluster id.
  CHECK(chief->cluster.Id() == got->cluster.Id());

  auto ps = TfConfigFromFlags("ps", 1, "pc-03:2222,pc-04:2222", "pc-01:2222,pc-02:2222");
  REQUIRE(ps.ok());
  CHECK(ps->task == TaskId{TaskType::kPs, 1});
  CHECK(ps->self() == Endpoint{"pc-04", 2222});
  CHECK_FALSE(ps->is_chief());
  CHECK(ps->cluster.Id() == got->cluster.Id());

  // The flags and the equivalent TF_CONFIG describe the same cluster.
  const TfConfig tf = Parsed(R"({"cluster": {"worker": ["pc-01:2222", "pc-02:2222"], "ps": ["pc-03:2222", "pc-04:2222"]},
                                 "task": {"type": "worker", "index": 1}})");
  CHECK(tf.cluster.Id() == got->cluster.Id());

  // No ps at all is allowed for a worker (standalone-like).
  auto lone = TfConfigFromFlags("worker", 0, "", "localhost:2222");
  REQUIRE(lone.ok());
  CHECK(lone->cluster.ps.empty());
  CHECK(lone->is_chief());
}

TEST_CASE("TfConfigFromFlags errors name the flag and the entry", "[unit][cluster]") {
  const std::string_view ps = "pc-03:2222,pc-04:2222", workers = "pc-01:2222,pc-02:2222";
  CHECK(FlagsErrorOf("chief", 0, ps, workers) == R"(--job_name: expected ps or worker, got "chief")");
  CHECK(FlagsErrorOf("master", 0, ps, workers) == R"(--job_name: expected ps or worker, got "master")");
  CHECK(FlagsErrorOf("", 0, ps, workers) == R"(--job_name: expected ps or worker, got "")");
  CHECK(FlagsErrorOf("worker", 0, "pc-03:2222,pc-04", workers) == R"(--ps_hosts: entry 1: "pc-04" has no port)");
  CHECK(FlagsErrorOf("worker", 0, ps, "pc-01:2222,pc-02:0") ==
        R"(--worker_hosts: entry 1: "pc-02:0": port "0" is not a number in [1, 65535])");
  CHECK(FlagsErrorOf("worker", 0, ps, "pc-01:2222,,pc-02:2222") == R"(--worker_hosts: entry 1 is empty (a stray comma?))");
  CHECK(FlagsErrorOf("worker", 0, ps, "pc-01:2222,") == R"(--worker_hosts: entry 1 is empty (a stray comma?))");
  CHECK(FlagsErrorOf("worker", 2, ps, workers) == "flags: task.index: 2 is out of range: cluster.worker has 2 tasks");
  CHECK(FlagsErrorOf("worker", -1, ps, workers) == "flags: task.index: -1 is out of range: cluster.worker has 2 tasks");
  CHECK(FlagsErrorOf("ps", 2, ps, workers) == "flags: task.index: 2 is out of range: cluster.ps has 2 tasks");
  CHECK(FlagsErrorOf("ps", 0, "", workers) == R"(flags: task.type: "ps" has no tasks in cluster)");
  CHECK(FlagsErrorOf("ps", 0, ps, "") == "flags: cluster: no chief or worker task (training needs at least one)");
  CHECK(FlagsErrorOf("worker", 0, "pc-01:2222", workers) == R"(flags: cluster.ps[0]: "pc-01:2222" is listed twice)");
}

TEST_CASE("tfd.base_workers: a joining worker's cluster id counts only the workers the run started with", "[unit][cluster]") {
  Result<TfConfig> base = ParseTfConfig(TfConfigText(kCluster, R"({"type": "worker", "index": 0})"), "TF_CONFIG");
  REQUIRE(base.ok());
  ClusterSpec grown = base->cluster;
  grown.worker.push_back(Endpoint{"pc-09", 2222});
  CHECK(grown.Id() != base->cluster.Id());
  grown.base_workers = static_cast<int>(base->cluster.worker.size());
  CHECK(grown.Id() == base->cluster.Id());
  CHECK(grown.base_num_workers() == base->cluster.num_workers());
  CHECK(ClusterErrorOf(TfConfigText(kCluster, R"({"type": "worker", "index": 0})", R"(, "tfd": {"base_workers": 9})")) ==
        "TF_CONFIG: tfd.base_workers: 9 is more than the " + std::to_string(base->cluster.worker.size()) + " workers of cluster.worker");
}

}  // namespace
}  // namespace tfd::config
