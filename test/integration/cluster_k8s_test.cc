// A cluster as Kubeflow's TFJob operator starts it: each task's TF_CONFIG in the operator's format
// (service names "<job>-<type>-<i>.<ns>.svc:PORT", the same port for every task, each task on its
// own address as a pod is), the cluster token from a file mounted the way a Secret volume is
// (a symlink into ..data/, mode 0400), /healthz for the probes, and names whose records appear only
// after the tasks have started: each task runs in its own mount namespace whose /etc/hosts is a
// file of the test's, and the test writes the records into it mid-start. Also SIGTERM, as the
// kubelet sends it on deletion, ends every task within the grace period. Exits 77 (skipped) when not
// root (unshare --mount needs it) or without unshare.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <regex>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/http/server.h"
#include "test/catch/subjects.h"
#include "test/local_cluster.h"

namespace tfd::testing::cluster_k8s_test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// What the operator writes (kubeflow/training-operator, tensorflow.go): lower-case replica types,
// one service per replica, "environment": "cloud".
std::string OperatorTfConfig(int port, const std::string& type, int index) {
  nlohmann::json c = {{"cluster",
                       {{"ps", {"mnist-ps-0.team-a.svc:" + std::to_string(port)}},
                        {"worker", {"mnist-worker-0.team-a.svc:" + std::to_string(port), "mnist-worker-1.team-a.svc:" + std::to_string(port)}}}},
                      {"task", {{"type", type}, {"index", index}}},
                      {"environment", "cloud"}};
  return c.dump();
}

// The records the cluster DNS would serve: each replica on its own loopback address, as on its own pod.
const char* kRecords =
    "127.0.0.1 localhost\n127.0.0.21 mnist-ps-0.team-a.svc\n127.0.0.22 mnist-worker-0.team-a.svc\n127.0.0.23 mnist-worker-1.team-a.svc\n";
const char* kAddress[] = {"127.0.0.21", "127.0.0.22", "127.0.0.23"};  // ps 0, worker 0, worker 1

// Writes `text` into the hosts file in place (the tasks' /etc/hosts is a bind mount of this inode).
void WriteHosts(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::in | std::ios::out | std::ios::trunc);
  out << text;
}

// A pod: tfd in its own mount namespace, /etc/hosts bound to `hosts`, TF_CONFIG in its environment.
class Pod {
 public:
  Pod(const TempDir& dir, const std::string& name, const std::string& hosts, const std::string& tf_config, std::vector<std::string> args)
      : name_(name) {
    std::vector<std::string> argv = {"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                                     "mount --bind \"$0\" /etc/hosts && exec \"$@\"", hosts, kTfd, "--log-format", "json"};
    argv.insert(argv.end(), args.begin(), args.end());
    process_ = std::make_unique<Process>(argv, std::vector<std::string>{"TF_CONFIG=" + tf_config}, dir / (name + ".out"), dir / (name + ".err"));
    REQUIRE(process_->started());
  }
  Process& process() { return *process_; }
  // The port its --metrics server chose (logged as "metrics on http://ADDR:PORT/metrics").
  int MetricsPort() {
    AwaitLine(*process_, "/metrics", 60s);
    std::smatch m;
    const std::string err = process_->err();
    REQUIRE(std::regex_search(err, m, std::regex("metrics on http://[0-9.]+:([0-9]+)/metrics")));
    return std::stoi(m[1]);
  }

 private:
  std::string name_;
  std::unique_ptr<Process> process_;
};

// The token as a Secret volume holds it: DIR/secret/token -> ..data/token, the file mode 0400.
std::string MountedToken(const TempDir& dir) {
  fs::create_directories(dir / "secret/..data");
  WriteFile(dir / "secret/..data/token", "6b3a0c1f9e2d4857a1c0ffee12345678deadbeef00112233445566778899aabb\n");
  fs::permissions(dir / "secret/..data/token", fs::perms::owner_read);
  fs::create_symlink("..data/token", dir / "secret/token");
  return dir / "secret/token";
}

struct K8sCluster {
  TempDir dir;
  std::string hosts = dir / "hosts";
  int port = FreePort();
  std::vector<std::unique_ptr<Pod>> pods;  // ps 0, worker 0, worker 1

  // Starts the three pods with an empty hosts file (no records yet); `epochs` of synthetic data.
  explicit K8sCluster(int epochs) {
    WriteFile(hosts, "127.0.0.1 localhost\n");
    const std::string job = SyntheticJobFile(epochs);
    const std::string token = MountedToken(dir);
    const std::vector<std::string> common = {"--token-file", token, "--startup-timeout", "240", "--metrics", "127.0.0.1:0"};
    auto args = [&](int pod, bool worker) {
      std::vector<std::string> a = common;
      a.insert(a.end(), {"--bind", kAddress[pod]});
      if (worker) a.insert(a.end(), {"--job", job});
      return a;
    };
    pods.push_back(std::make_unique<Pod>(dir, "ps0", hosts, OperatorTfConfig(port, "ps", 0), args(0, false)));
    pods.push_back(std::make_unique<Pod>(dir, "worker0", hosts, OperatorTfConfig(port, "worker", 0), args(1, true)));
    pods.push_back(std::make_unique<Pod>(dir, "worker1", hosts, OperatorTfConfig(port, "worker", 1), args(2, true)));
  }
  std::string SyntheticJobFile(int epochs) {
    WriteSyntheticMnist(dir / "", 800, 100);
    WriteFile(dir / "job.json", Job(dir.path(), R"({"mode": "async"})", epochs, R"({"type": "sgd", "learning_rate": 0.1})", 20));
    return dir / "job.json";
  }
};

TEST_CASE("a TFJob's TF_CONFIG, late DNS records and a mounted token: the cluster trains to the end", "[k8s]") {
  K8sCluster c(2);
  // The workers keep trying the ps's name, which does not resolve yet.
  AwaitLine(c.pods[1]->process(), "cannot resolve mnist-ps-0.team-a.svc", 60s);
  // The probes' endpoint answers while a task waits.
  const int health_port = c.pods[1]->MetricsPort();
  Result<http::Fetched> health = http::Get("127.0.0.1", static_cast<std::uint16_t>(health_port), "/healthz");
  REQUIRE(health.ok());
  CHECK(health->status == 200);
  CHECK(health->body.starts_with("ok worker:0 "));
  // The records appear: the workers reach the ps and train to the end.
  WriteHosts(c.hosts, kRecords);
  for (int w : {1, 2}) {
    Process& p = c.pods[static_cast<std::size_t>(w)]->process();
    const std::optional<int> code = p.Wait(300s);
    INFO("worker " << w - 1 << " stderr:\n" << p.err());
    REQUIRE(code.has_value());
    CHECK(*code == 0);
    const std::vector<nlohmann::json> epochs = ParseEvents(p.out(), "epoch");
    CHECK(epochs.size() == 2);
    CHECK(ParseEvents(p.out(), "done").size() == 1);
    // It reached the ps at its pod address, under its service name.
    CHECK(p.err().find("connected to ps:0 (mnist-ps-0.team-a.svc:" + std::to_string(c.port) + ")") != std::string::npos);
  }
  Process& ps = c.pods[0]->process();
  const std::optional<int> ps_code = ps.Wait(60s);
  INFO("ps stderr:\n" << ps.err());
  REQUIRE(ps_code.has_value());
  CHECK(*ps_code == 0);
}

TEST_CASE("SIGTERM, as the kubelet sends it, ends every task within the grace period", "[k8s]") {
  K8sCluster c(100000);
  WriteHosts(c.hosts, kRecords);
  for (int w : {1, 2}) AwaitEvent(c.pods[static_cast<std::size_t>(w)]->process(), "epoch", {{"epoch", 1}}, 120s);
  for (auto& pod : c.pods) pod->process().Signal(SIGTERM);
  // Kubernetes' default terminationGracePeriodSeconds is 30; every task ends well inside it, with
  // 128 + SIGTERM (a task stopped, not a failure of its own).
  for (std::size_t i = 0; i < c.pods.size(); ++i) {
    Process& p = c.pods[i]->process();
    const std::optional<int> code = p.Wait(30s);
    INFO("task " << i << " stderr:\n" << p.err());
    REQUIRE(code.has_value());
    CHECK(*code == 128 + SIGTERM);
  }
}

// Why this subject cannot run here ("" when it can): tfd_process_tests then skips it (exit 77).
std::string CannotRunHere(const std::string&) {
  if (geteuid() != 0) return fmt::format("each task runs in its own mount namespace (unshare --mount), which needs root; uid {}", geteuid());
  if (!std::filesystem::exists("/usr/bin/unshare")) return "/usr/bin/unshare (util-linux) is not installed";
  return "";
}
const SubjectNeeds kNeeds(__FILE__, &CannotRunHere);

}  // namespace
}  // namespace tfd::testing::cluster_k8s_test
