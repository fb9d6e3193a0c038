// Starting and stopping tfd processes: workers before their ps, a ps that never starts, SIGTERM,
// and systemd's READY=1. Every wait has a deadline that fails the test instead of hanging.
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/integration/cluster_util.h"
#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing::cluster_lifecycle_test {
namespace {

using namespace std::chrono_literals;

TEST_CASE("workers started before their ps wait for it and still train", "[integration][cluster]") {
  TempDir data;
  LocalCluster c({.num_ps = 2, .num_workers = 2, .job = SyntheticJob(data, 600, 100, R"({"mode": "async"})", 1)});
  c.StartWorker(1);
  c.StartWorker(0);
  std::this_thread::sleep_for(1500ms);
  c.StartPs(1);
  std::this_thread::sleep_for(500ms);
  c.StartPs(0);
  for (int i = 0; i < 2; ++i) {
    TaskResult w = c.Finish("worker", i);
    INFO(w.err);
    CHECK(w.exit_code == 0);
  }
  for (int i = 0; i < 2; ++i) CHECK(c.Finish("ps", i, 30s).exit_code == 0);
}

TEST_CASE("a ps that never starts makes the worker exit 1 naming it", "[integration][cluster]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 1, .job = SyntheticJob(data, 200, 50, R"({"mode": "async"})", 1)});
  c.StartWorker(0, {"--startup-timeout", "2"});
  TaskResult w = c.Finish("worker", 0, 60s);
  CHECK(w.exit_code == 1);
  const std::string ps = c.endpoint("ps", 0);
  INFO(w.err);
  CHECK(w.err.find("ps:0 at " + ps + " did not accept a connection in time") != std::string::npos);
}

TEST_CASE("SIGTERM stops a ps and a worker within a second each", "[integration][cluster]") {
  TempDir data;
  auto cluster = StartTraining(data);
  LocalCluster& c = *cluster;
  c.process("worker", 0).Signal(SIGTERM);
  // Generous for a loaded machine; the design target is well under a second.
  TaskResult w = c.Finish("worker", 0, 5s);
  CHECK(w.exit_code == 128 + SIGTERM);
  CHECK(w.err.find("stopped by a signal") != std::string::npos);
  c.process("ps", 0).Signal(SIGTERM);
  TaskResult p = c.Finish("ps", 0, 5s);
  CHECK(p.exit_code == 128 + SIGTERM);
}

TEST_CASE("a ps and a worker tell systemd READY=1 through NOTIFY_SOCKET once they are up", "[integration][cluster]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 1, .job = SyntheticJob(data, 400, 50, R"({"mode": "async"})", 1)});
  // The datagram socket systemd would provide.
  const std::string path = c.dir() / "notify.sock";
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  Process ps({kTfd}, {"TF_CONFIG=" + c.TfConfig("ps", 0), "NOTIFY_SOCKET=" + path}, c.dir() / "ps.out", c.dir() / "ps.err");
  auto receive = [&] {
    char buf[1024];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  };
  const std::string from_ps = receive();
  INFO(ps.err());
  CHECK(from_ps.find("READY=1") != std::string::npos);
  CHECK(from_ps.find("STATUS=ps:0 listening on port") != std::string::npos);
  Process worker({kTfd, "--job", c.dir() / "job.json"}, {"TF_CONFIG=" + c.TfConfig("worker", 0), "NOTIFY_SOCKET=" + path},
                 c.dir() / "w.out", c.dir() / "w.err");
  std::string from_worker;
  for (int i = 0; i < 5 && from_worker.find("READY=1") == std::string::npos; ++i) from_worker = receive();
  INFO(worker.err());
  CHECK(from_worker.find("STATUS=worker:0 training from global step 0") != std::string::npos);
  CHECK(worker.Wait(60s) == std::optional<int>(0));
  CHECK(ps.Wait(30s) == std::optional<int>(0));
  close(fd);
}

}  // namespace
}  // namespace tfd::testing::cluster_lifecycle_test
