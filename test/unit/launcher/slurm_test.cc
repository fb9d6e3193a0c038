// Slurm hostlists and tasks-per-node lists, and the TF_CONFIG tfd --slurm-ps derives from a task's
// Slurm environment: the layout, the roles, the ports, and the exact error for each mistake.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "common/config/cluster_file.h"
#include "common/config/slurm.h"
#include "launcher/commands.h"

namespace tfd::config {
namespace {

using Strings = std::vector<std::string>;

Strings Hosts(std::string_view list) {
  auto got = ExpandHostlist(list, "SLURM_STEP_NODELIST");
  INFO(list);
  if (!got.ok()) FAIL(got.status().ToString());
  return *got;
}

std::string HostsError(std::string_view list) {
  auto got = ExpandHostlist(list, "SLURM_JOB_NODELIST");
  INFO(list);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kInvalidArgument);
  CHECK(got.status().message().starts_with("SLURM_JOB_NODELIST: "));
  return got.status().message();
}

TEST_CASE("a Slurm hostlist expands in order, with ranges, lists and padding", "[slurm]") {
  CHECK(Hosts("n1") == Strings{"n1"});
  CHECK(Hosts("node[01-04,07]") == Strings{"node01", "node02", "node03", "node04", "node07"});
  CHECK(Hosts("n[1-2],m5,o[3-4,6,7-9]") == Strings{"n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"});
  CHECK(Hosts("n[8-11]") == Strings{"n8", "n9", "n10", "n11"});
  CHECK(Hosts("n[08-11]") == Strings{"n08", "n09", "n10", "n11"});
  CHECK(Hosts("gpu[098-101]") == Strings{"gpu098", "gpu099", "gpu100", "gpu101"});
  CHECK(Hosts("a[2],b") == Strings{"a2", "b"});
  // Several bracket groups in one name: their product, the leftmost varying slowest.
  CHECK(Hosts("r[1-2]n[01-02]") == Strings{"r1n01", "r1n02", "r2n01", "r2n02"});
  CHECK(Hosts("rack[1,3]-node[7-8].lab") == Strings{"rack1-node7.lab", "rack1-node8.lab", "rack3-node7.lab", "rack3-node8.lab"});
  // Duplicates stay: the list says which node each rank runs on.
  CHECK(Hosts("a,a") == Strings{"a", "a"});
  CHECK(Hosts("node-1.example.org") == Strings{"node-1.example.org"});
}

TEST_CASE("a malformed hostlist is an error naming the variable and what is wrong", "[slurm]") {
  CHECK(HostsError("") == "SLURM_JOB_NODELIST: empty (expected a Slurm hostlist like node[01-04])");
  CHECK(HostsError("node[01-04") == "SLURM_JOB_NODELIST: \"node[01-04\": '[' is never closed");
  CHECK(HostsError("node01-04]") == "SLURM_JOB_NODELIST: \"node01-04]\": ']' without '['");
  CHECK(HostsError("node[4-1]") == "SLURM_JOB_NODELIST: \"node[4-1]\": range \"4-1\" ends below its start");
  CHECK(HostsError("node[a-c]") == "SLURM_JOB_NODELIST: \"node[a-c]\": \"a-c\" is not a number or a range of numbers like 01-04");
  CHECK(HostsError("node[1-]") == "SLURM_JOB_NODELIST: \"node[1-]\": \"1-\" is not a number or a range of numbers like 01-04");
  CHECK(HostsError("node[]") == "SLURM_JOB_NODELIST: \"node[]\": empty brackets");
  CHECK(HostsError("node[1,,2]") == "SLURM_JOB_NODELIST: \"node[1,,2]\": an empty range in brackets (a stray comma?)");
  CHECK(HostsError("node[1[2]]") == "SLURM_JOB_NODELIST: \"node[1[2]]\": brackets cannot nest");
  CHECK(HostsError("a,,b") == "SLURM_JOB_NODELIST: \"a,,b\": an empty entry (a stray comma?)");
  CHECK(HostsError("a,") == "SLURM_JOB_NODELIST: \"a,\": an empty entry (a stray comma?)");
  CHECK(HostsError("no de") == "SLURM_JOB_NODELIST: \"no de\": ' ' cannot be part of a host name");
  CHECK(HostsError("n[0-99999]").find("over 65536 names") != std::string::npos);
  CHECK(HostsError("a[0-999]b[0-999]").find("over 65536 names") != std::string::npos);
}

TEST_CASE("a tasks-per-node list expands its repeats", "[slurm]") {
  auto expand = [](std::string_view s) {
    auto got = ExpandTasksPerNode(s, "SLURM_TASKS_PER_NODE");
    if (!got.ok()) FAIL(got.status().ToString());
    return *got;
  };
  CHECK(expand("3") == std::vector<int>{3});
  CHECK(expand("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(expand("3(x2),2,1") == std::vector<int>{3, 3, 2, 1});
  for (std::string_view bad : {"", "0", "2(x0)", "2(x3", "x", "2,,1", "2(3)", "-1", "1(x2)junk"}) {
    auto got = ExpandTasksPerNode(bad, "SLURM_TASKS_PER_NODE");
    INFO(bad);
    REQUIRE_FALSE(got.ok());
    CHECK(got.status().message().starts_with("SLURM_TASKS_PER_NODE: \"" + std::string(bad) + "\": entry"));
  }
}

// A Slurm environment for one task: `vars` is the whole of it.
EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::map<std::string, std::string> Step(int rank, int local_id) {
  // 5 tasks: 2 on node01, 2 on node02, 1 on node04.
  return {{"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_NTASKS", "5"},
          {"SLURM_LOCALID", std::to_string(local_id)},
          {"SLURM_STEP_NODELIST", "node[01-02,04]"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
          {"SLURM_JOB_NODELIST", "ignored[1-9]"}};
}

std::string SlurmError(int num_ps, std::map<std::string, std::string> vars, int port_base = 2222) {
  auto got = TfConfigFromSlurm(num_ps, port_base, Env(std::move(vars)));
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kInvalidArgument);
  return got.status().message();
}

TEST_CASE("the first N ranks are ps tasks and the rest workers, each on its node's next port", "[slurm]") {
  const std::vector<Endpoint> all = {{"node01", 2222}, {"node01", 2223}, {"node02", 2222}, {"node02", 2223}, {"node04", 2222}};
  const int local_ids[] = {0, 1, 0, 1, 0};
  for (int rank = 0; rank < 5; ++rank) {
    auto got = TfConfigFromSlurm(2, 2222, Env(Step(rank, local_ids[rank])));
    INFO(rank);
    if (!got.ok()) FAIL(got.status().ToString());
    CHECK(got->cluster.ps == std::vector<Endpoint>(all.begin(), all.begin() + 2));
    CHECK(got->cluster.worker == std::vector<Endpoint>(all.begin() + 2, all.end()));
    CHECK(got->cluster.chief.empty());
    CHECK(got->task == (rank < 2 ? TaskId{TaskType::kPs, rank} : TaskId{TaskType::kWorker, rank - 2}));
    CHECK(got->self() == all[static_cast<std::size_t>(rank)]);
    CHECK(got->is_chief() == (rank == 2));  // rank N: the first worker
  }
}

TEST_CASE("the job's variables stand in for the step's, and an even spread for a missing layout", "[slurm]") {
  auto got = TfConfigFromSlurm(1, 3000, Env({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_NODELIST", "c[7-8]"},
                                             {"SLURM_TASKS_PER_NODE", "2(x2)"}}));
  REQUIRE(got.ok());
  CHECK(got->cluster.ps == std::vector<Endpoint>{{"c7", 3000}});
  CHECK(got->cluster.worker == std::vector<Endpoint>{{"c7", 3001}, {"c8", 3000}, {"c8", 3001}});
  CHECK(got->task == TaskId{TaskType::kWorker, 2});
  got = TfConfigFromSlurm(0, 3000, Env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NODELIST", "c[7-8]"}}));
  REQUIRE(got.ok());
  CHECK(got->cluster.ps.empty());
  CHECK(got->cluster.worker == std::vector<Endpoint>{{"c7", 3000}, {"c8", 3000}});
  // The job may hold more tasks than the step: the step's first SLURM_NTASKS slots are used.
  got = TfConfigFromSlurm(1, 3000, Env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "3"}, {"SLURM_STEP_NODELIST", "c[7-8]"},
                                        {"SLURM_STEP_TASKS_PER_NODE", "4,4"}}));
  REQUIRE(got.ok());
  CHECK(got->cluster.worker == std::vector<Endpoint>{{"c7", 3001}, {"c7", 3002}});
}

TEST_CASE("a bad Slurm environment or --slurm-ps is a one-line error naming the variable or flag", "[slurm]") {
  CHECK(SlurmError(5, Step(0, 0)) == "--slurm-ps: 5 ps tasks leave no worker among SLURM_NTASKS=5 tasks (expected 0 to 4)");
  CHECK(SlurmError(7, Step(0, 0)).starts_with("--slurm-ps: 7 ps tasks leave no worker"));
  CHECK(SlurmError(1, Step(0, 0), 0) == "--slurm-port-base: expected a port in [1, 65535], got 0");
  CHECK(SlurmError(1, Step(0, 0), 65535) == "--slurm-port-base: 65535 + 2 tasks on node01 passes port 65535");
  auto vars = Step(5, 0);
  CHECK(SlurmError(1, vars) == "SLURM_PROCID: rank 5 is outside the SLURM_NTASKS=5 tasks");
  vars = Step(0, 0);
  vars.erase("SLURM_PROCID");
  CHECK(SlurmError(1, vars) == "SLURM_PROCID: not set (run tfd --slurm-ps under srun, in a Slurm job step)");
  vars = Step(0, 0);
  vars["SLURM_NTASKS"] = "five";
  CHECK(SlurmError(1, vars) == "SLURM_NTASKS: expected a whole number >= 1, got \"five\"");
  vars = Step(0, 0);
  vars["SLURM_STEP_NODELIST"] = "node[01-02,04";
  CHECK(SlurmError(1, vars) == "SLURM_STEP_NODELIST: \"node[01-02,04\": '[' is never closed");
  vars.erase("SLURM_STEP_NODELIST");
  vars.erase("SLURM_JOB_NODELIST");
  CHECK(SlurmError(1, vars) == "SLURM_STEP_NODELIST: not set, nor SLURM_JOB_NODELIST (run tfd --slurm-ps under srun)");
  vars = Step(0, 0);
  vars["SLURM_STEP_TASKS_PER_NODE"] = "2,1";
  CHECK(SlurmError(1, vars) == "SLURM_STEP_TASKS_PER_NODE: \"2,1\" gives 2 nodes, but SLURM_STEP_NODELIST=\"node[01-02,04]\" lists 3");
  // A rank without a host: the layout places fewer tasks than the step has.
  vars["SLURM_STEP_TASKS_PER_NODE"] = "1(x3)";
  CHECK(SlurmError(1, vars) ==
        "SLURM_STEP_TASKS_PER_NODE: \"1(x3)\" on SLURM_STEP_NODELIST=\"node[01-02,04]\" places 3 tasks, but SLURM_NTASKS=5: rank 3 has no host");
  vars.erase("SLURM_STEP_TASKS_PER_NODE");
  CHECK(SlurmError(1, vars) ==
        "SLURM_STEP_TASKS_PER_NODE: not set, and SLURM_NTASKS=5 does not divide evenly over the 3 nodes of SLURM_STEP_NODELIST");
  // A cyclic distribution puts rank 1 on node02: its local id then disagrees with the block layout.
  CHECK(SlurmError(1, Step(1, 0)) ==
        "SLURM_LOCALID: 0, but rank 1 is task 1 on node01 when ranks fill the nodes in order (run srun with --distribution=block)");
}

config::ClusterFile SlurmClusterFile(const std::string& cluster) {
  const std::string text = R"({"name": "mnist", "cluster": )" + cluster + R"(, "train": {"model": {"name": "mlp"}, "data": "data/mnist",
      "epochs": 2, "batch_size": 20, "optimizer": {"type": "sgd", "learning_rate": 0.1}},
      "launch": {"tfd": "/opt/tfd/bin/tfd", "workdir": "/srv/lab", "run_dir": "runs", "env": {"OMP_NUM_THREADS": "1"},
                 "timeouts": {"startup": 300}}})";
  auto f = ParseClusterFile(text, "c.json");
  if (!f.ok()) FAIL(f.status().ToString());
  return *f;
}

TEST_CASE("tfctl slurm's script: the task count, one srun step of tfd --slurm-ps, the job and a token in the run folder", "[slurm]") {
  const auto f = SlurmClusterFile(R"({"ps": ["a:1", "b:1"], "worker": ["c:1", "d:1", "e:1"]})");
  auto script = launcher::SlurmScript(f, {.port_base = 9000, .sbatch_options = {"--partition=cpu"}});
  REQUIRE(script.ok());
  const std::string& s = *script;
  INFO(s);
  CHECK(s.starts_with("#!/bin/bash\n"));
  CHECK(s.find("#SBATCH --ntasks=5\n") != std::string::npos);
  CHECK(s.find("#SBATCH --chdir=/srv/lab\n") != std::string::npos);
  CHECK(s.find("#SBATCH --output=/srv/lab/runs/mnist-%j.log\n") != std::string::npos);
  CHECK(s.find("#SBATCH --partition=cpu\n") != std::string::npos);
  CHECK(s.find("export OMP_NUM_THREADS='1'\n") != std::string::npos);
  CHECK(s.find("\"data\": \"data/mnist\"") != std::string::npos);  // the job, verbatim in a quoted here-document
  CHECK(s.find("umask 077") != std::string::npos);
  CHECK(s.find("srun --distribution=block --kill-on-bad-exit=1 --label '/opt/tfd/bin/tfd' --slurm-ps 2 --slurm-port-base 9000 "
               "--job \"$run/job.json\" --token-file \"$run/token\"") != std::string::npos);
  CHECK(s.find("--startup-timeout 300") != std::string::npos);
  CHECK(s.find("--export-dir \"$run/model\"") != std::string::npos);  // the chief's trained model, in the run folder
  // A chief counts as a worker: TensorFlow's resolver has none, and rank N leads the workers.
  script = launcher::SlurmScript(SlurmClusterFile(R"({"chief": ["x:1"], "worker": ["c:1"]})"), {});
  REQUIRE(script.ok());
  CHECK(script->find("#SBATCH --ntasks=2\n") != std::string::npos);
  CHECK(script->find("--slurm-ps 0 --slurm-port-base 8888") != std::string::npos);
  auto with_evaluator = SlurmClusterFile(R"({"ps": ["a:1"], "worker": ["c:1"]})");
  with_evaluator.cluster.evaluator.push_back({"e", 1});
  script = launcher::SlurmScript(with_evaluator, {});
  REQUIRE_FALSE(script.ok());
  CHECK(script.status().message() == "c.json: cluster.evaluator: tfctl slurm runs ps and worker tasks only (run the evaluator as its own job)");
}

}  // namespace
}  // namespace tfd::config
