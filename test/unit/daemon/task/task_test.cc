// daemon/task: the flags, the choice of task, the start event every role writes, and the one check
// between a job and a cluster (common/config/job_cluster.h) that tfd and tfctl share.
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/config/cluster.h"
#include "common/config/job.h"
#include "common/config/job_cluster.h"
#include "daemon/task/flags.h"
#include "daemon/task/lifecycle.h"
#include "daemon/task/select.h"
#include "test/test_util.h"

namespace tfd::task {
namespace {

Result<ParsedFlags> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "tfd");
  std::ostringstream out;
  return ParseTaskFlags(static_cast<int>(args.size()), args.data(), out);
}

std::string ParseError(std::vector<const char*> args) {
  Result<ParsedFlags> got = Parse(std::move(args));
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kInvalidArgument);
  return got.status().message();
}

constexpr const char* kCluster = R"({"cluster": {"ps": ["localhost:2222"], "worker": ["localhost:2223", "localhost:2224"]}, )";

// Appended, not added up: GCC 12 at -O3 warns (-Warray-bounds) about the operator+ chain.
std::string Cluster(const std::string& task) {
  std::string out = kCluster;
  out.append(R"("task": )").append(task).append("}");
  return out;
}

config::JobSpec Job(const std::string& update) {
  Result<config::JobSpec> job = config::ParseJobSpec(
      R"({"model": "softmax", "data": "d", "epochs": 1, "batch_size": 10, "optimizer": {"type": "sgd", "learning_rate": 0.1}, "update": )" +
          update + "}",
      "job.json");
  REQUIRE(job.ok());
  return *job;
}

config::ClusterSpec ClusterOf(int ps, int workers) {
  config::ClusterSpec c;
  for (int i = 0; i < ps; ++i) c.ps.push_back({"localhost", static_cast<std::uint16_t>(2000 + i)});
  for (int i = 0; i < workers; ++i) c.worker.push_back({"localhost", static_cast<std::uint16_t>(3000 + i)});
  return c;
}

}  // namespace

TEST_CASE("ParseTaskFlags converts every timeout to milliseconds once and keeps the defaults", "[unit][task]") {
  Result<ParsedFlags> got = Parse({"--standalone", "--job", "j.json", "--peer-timeout", "2.5", "--idle-timeout", "7"});
  REQUIRE(got.ok());
  const TaskFlags& f = got->flags;
  CHECK(f.peer_timeout == std::chrono::milliseconds(2500));
  CHECK(f.startup_timeout == std::chrono::milliseconds(120000));
  CHECK(f.step_timeout == std::chrono::milliseconds(300000));
  CHECK(f.reconnect_timeout == std::chrono::milliseconds(60000));
  REQUIRE(f.idle_timeout.has_value());
  CHECK(*f.idle_timeout == std::chrono::milliseconds(7000));
  CHECK(f.Connection().peer_timeout == std::chrono::milliseconds(2500));
  CHECK(f.Connection().heartbeat_interval == std::chrono::milliseconds(625));
  CHECK_FALSE(got->exit_now);
}

TEST_CASE("ParseTaskFlags refuses, in one line naming the flag, what no task takes", "[unit][task]") {
  CHECK(ParseError({"--peer-timeout", "0"}) == "--peer-timeout: expected a number of seconds above 0");
  CHECK(ParseError({"--startup-timeout", "-3"}) == "--startup-timeout: expected a number of seconds above 0");
  CHECK(ParseError({"--step-timeout", "5s"}).find("step-timeout") != std::string::npos);
  CHECK(ParseError({"--log-level", "loud"}) == "--log-level: expected debug, info, warn or error, got \"loud\"");
  CHECK(ParseError({"--log-format", "xml"}) == "--log-format: expected text or json, got \"xml\"");
  CHECK(ParseError({"--shard-limit", "-1"}) == "--shard-limit: expected a count of examples >= 0, got -1");
  CHECK(ParseError({"--gpu-memory-fraction", "1.5"}) == "--gpu-memory-fraction: expected a number in (0, 1], got 1.5");
  CHECK(ParseError({"--device", "gpu"}).starts_with("--device: "));
  CHECK(ParseError({"--slurm-port-base", "9000"}) == "--slurm-port-base: only with --slurm-ps");
  CHECK(ParseError({"--metrics", "nope:x"}).starts_with("--metrics: "));
  CHECK(ParseError({"--grace", "3"}).ends_with("(see tfd --help)"));
}

TEST_CASE("ParseTaskFlags prints --help and --version and says to exit", "[unit][task]") {
  for (const char* flag : {"--help", "--version"}) {
    std::ostringstream out;
    const char* args[] = {"tfd", flag};
    Result<ParsedFlags> got = ParseTaskFlags(2, args, out);
    REQUIRE(got.ok());
    CHECK(got->exit_now);
    CHECK(out.str().starts_with("tfd"));
  }
}

TEST_CASE("SelectTask takes the role from TF_CONFIG and refuses flags the role does not take", "[unit][task]") {
  Result<ParsedFlags> worker = Parse({"--job", "j.json"});
  REQUIRE(worker.ok());
  Result<TaskPlace> w = SelectTask(worker->flags, Cluster(R"({"type": "worker", "index": 1})").c_str());
  REQUIRE(w.ok());
  CHECK(w->role == Role::kWorker);
  CHECK(w->name == "worker:1");
  REQUIRE(w->tf.has_value());
  CHECK(w->tf->task.index == 1);

  Result<ParsedFlags> ps = Parse({});
  REQUIRE(ps.ok());
  Result<TaskPlace> p = SelectTask(ps->flags, Cluster(R"({"type": "ps", "index": 0})").c_str());
  REQUIRE(p.ok());
  CHECK(p->role == Role::kPs);

  Result<ParsedFlags> ps_device = Parse({"--device", "cuda:0"});
  REQUIRE(ps_device.ok());
  CHECK(SelectTask(ps_device->flags, Cluster(R"({"type": "ps", "index": 0})").c_str()).status().message() ==
        "--device: a ps task trains nothing and never uses a GPU");
  Result<ParsedFlags> sweep = Parse({"--job", "j.json", "--sweep", "s.json"});
  REQUIRE(sweep.ok());
  CHECK(SelectTask(sweep->flags, Cluster(R"({"type": "worker", "index": 0})").c_str()).status().message() ==
        "--sweep: only for the coordinator task (TF_CONFIG task.type \"coordinator\"), not this task (worker:0)");
  CHECK(SelectTask(ps->flags, Cluster(R"({"type": "worker", "index": 0})").c_str()).status().message() ==
        "--job FILE is required (see tfd --help)");
  CHECK(SelectTask(ps->flags, nullptr).status().message().starts_with("no task: set TF_CONFIG"));
  CHECK(SelectTask(ps->flags, Cluster(R"({"type": "worker", "index": 5})").c_str()).status().message().starts_with("TF_CONFIG: "));
}

TEST_CASE("SelectTask: --standalone and --coordinator take no cluster, and --coordinator needs HOST:PORT and an index", "[unit][task]") {
  Result<ParsedFlags> solo = Parse({"--standalone", "--job", "j.json"});
  REQUIRE(solo.ok());
  Result<TaskPlace> s = SelectTask(solo->flags, Cluster(R"({"type": "worker", "index": 0})").c_str());
  REQUIRE(s.ok());  // TF_CONFIG is not read for --standalone
  CHECK(s->role == Role::kStandalone);
  CHECK(s->name == "standalone");
  CHECK_FALSE(s->tf.has_value());
  Result<ParsedFlags> solo_flags = Parse({"--standalone", "--job", "j.json", "--job_name", "worker"});
  REQUIRE(solo_flags.ok());
  CHECK(SelectTask(solo_flags->flags, nullptr).status().message() == "--standalone takes no cluster flags or --tf-config");

  Result<ParsedFlags> generic = Parse({"--coordinator", "[::1]:7000", "--task_index", "2"});
  REQUIRE(generic.ok());
  Result<TaskPlace> g = SelectTask(generic->flags, nullptr);
  REQUIRE(g.ok());
  CHECK(g->role == Role::kGenericWorker);
  CHECK(g->coordinator_host == "::1");
  CHECK(g->coordinator_port == 7000);
  CHECK(g->worker_index == 2);
  CHECK(g->name == "worker:2");
  Result<ParsedFlags> bad = Parse({"--coordinator", "host", "--task_index", "2"});
  REQUIRE(bad.ok());
  CHECK(SelectTask(bad->flags, nullptr).status().message() == "--coordinator: expected HOST:PORT, got \"host\"");
  Result<ParsedFlags> no_index = Parse({"--coordinator", "h:1"});
  REQUIRE(no_index.ok());
  CHECK(SelectTask(no_index->flags, nullptr).status().message() == "--coordinator needs --task_index N (this worker's index)");
}

TEST_CASE("LoadToken refuses a cluster on other hosts without a token, unless --insecure", "[unit][task]") {
  const std::string remote = R"({"cluster": {"ps": ["pc-01:2222"], "worker": ["localhost:2223"]}, "task": {"type": "worker", "index": 0}})";
  Result<ParsedFlags> f = Parse({"--job", "j.json"});
  REQUIRE(f.ok());
  Result<TaskPlace> place = SelectTask(f->flags, remote.c_str());
  REQUIRE(place.ok());
  Status refused = LoadToken(f->flags, *place).status();
  CHECK(refused.message().starts_with("the cluster has tasks on other hosts (ps pc-01:2222) and this task has no cluster token"));
  Result<ParsedFlags> insecure = Parse({"--job", "j.json", "--insecure"});
  REQUIRE(insecure.ok());
  Result<std::shared_ptr<const transport::ClusterToken>> none = LoadToken(insecure->flags, *place);
  REQUIRE(none.ok());
  CHECK(*none == nullptr);
}

TEST_CASE("Every role's start event has role, mode, rank, chief and pid, then its own fields", "[unit][task]") {
  testing::TempDir dir;
  const std::string path = dir / "events.jsonl";
  {
    std::FILE* out = std::fopen(path.c_str(), "w");
    REQUIRE(out != nullptr);
    EventWriter events(out, "ps:1", true);
    EmitStart(events, {.role = "ps", .rank = 1, .extra = {{"port", std::int64_t{2222}}}});
    EmitStart(events, {.role = "worker", .mode = "sync", .rank = 0, .chief = true});
    std::fclose(out);
  }
  const std::vector<nlohmann::json> lines = testing::ReadJsonLines(path);
  REQUIRE(lines.size() == 2);
  for (const nlohmann::json& e : lines) {
    CHECK(e["event"] == "start");
    for (const char* key : {"role", "mode", "rank", "chief", "pid"}) CHECK(e.contains(key));
  }
  CHECK(lines[0]["role"] == "ps");
  CHECK(lines[0]["mode"] == "");
  CHECK(lines[0]["rank"] == 1);
  CHECK(lines[0]["chief"] == false);
  CHECK(lines[0]["port"] == 2222);
  CHECK(lines[1]["mode"] == "sync");
  CHECK(lines[1]["chief"] == true);
  CHECK_FALSE(lines[1].contains("port"));
  CHECK(NewIncarnation() != NewIncarnation());
}

TEST_CASE("CheckJobOnCluster refuses each mismatch between the update mode and the cluster", "[unit][task][config]") {
  using config::CheckJobOnCluster;
  CHECK(CheckJobOnCluster(ClusterOf(1, 2), Job(R"({"mode": "sync"})"), "job.json: ").ok());
  CHECK(CheckJobOnCluster(ClusterOf(0, 2), Job(R"({"mode": "sync"})"), "job.json: ").message() ==
        "cluster.ps: empty: sync mode needs at least one ps task");
  CHECK(CheckJobOnCluster(ClusterOf(0, 2), Job(R"({"mode": "async"})"), "job.json: ").message() ==
        "cluster.ps: empty: async mode needs at least one ps task");
  CHECK(CheckJobOnCluster(ClusterOf(1, 2), Job(R"({"mode": "allreduce"})"), "job.json: ").message().starts_with(
      "cluster.ps: 1 ps tasks, but allreduce mode has none"));
  CHECK(CheckJobOnCluster(ClusterOf(0, 3), Job(R"({"mode": "allreduce"})"), "job.json: ").ok());
  CHECK(CheckJobOnCluster(ClusterOf(1, 2), Job(R"({"mode": "sync", "total_num_replicas": 3})"), "job.json: ").message() ==
        "job.json: update.total_num_replicas: 3, but the cluster has 2 workers");
  CHECK(CheckJobOnCluster(ClusterOf(1, 2), Job(R"({"mode": "sync", "replicas_to_aggregate": 3})"), "job.json: ").message() ==
        "job.json: update.replicas_to_aggregate: 3, but the cluster has 2 workers");
  config::ClusterSpec with_coordinator = ClusterOf(0, 2);
  with_coordinator.coordinator.push_back({"localhost", 4000});
  CHECK(CheckJobOnCluster(with_coordinator, Job(R"({"mode": "sync"})"), "job.json: ").ok());  // the coordinator hands out the jobs
}

}  // namespace tfd::task
