#pragma once
// What the cluster tests (cluster_*_test.cc) share beyond LocalCluster: a whole run to the end, a
// long run to disturb, and raw loopback connections that speak to a ps byte by byte.

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing {

// Starts every task of `c` and runs them to the end as LocalCluster::FinishAll does; returns the
// workers' done events. "PARAMS" among `worker_extra` becomes dir()/params<i>.bin for worker i.
inline std::vector<nlohmann::json> RunToCompletion(LocalCluster& c, std::vector<std::string> worker_extra = {}) {
  for (int i = 0; i < c.num_ps(); ++i) c.StartPs(i);
  for (int i = 0; i < c.num_workers(); ++i) {
    std::vector<std::string> extra = worker_extra;
    for (auto& e : extra)
      if (e == "PARAMS") e = c.dir() / ("params" + std::to_string(i) + ".bin");
    c.StartWorker(i, extra);
  }
  std::vector<nlohmann::json> done;
  for (const TaskResult& w : c.FinishAll()) done.push_back(w.done);
  return done;
}

// Writes `train` and `test` synthetic examples (WriteSyntheticMnist) into `data` and returns a job
// on them: `update`, `epochs`, batch 20, `optimizer` (plain SGD at 0.1 unless given).
inline std::string SyntheticJob(const TempDir& data, int train, int test, const std::string& update, int epochs,
                                const std::string& optimizer = R"({"type": "sgd", "learning_rate": 0.1})") {
  WriteSyntheticMnist(data.path(), train, test);
  return Job(data.path(), update, epochs, optimizer, 20);
}

// Starts 1 ps and 1 worker on a long synthetic job (in `data`) and returns once the worker has
// finished its first epoch (failing the test if that takes over a minute).
inline std::unique_ptr<LocalCluster> StartTraining(const TempDir& data, std::vector<std::string> worker_extra = {}) {
  auto c = std::make_unique<LocalCluster>(
      LocalClusterOptions{.num_ps = 1, .num_workers = 1, .job = SyntheticJob(data, 2000, 50, R"({"mode": "async"})", 1000)});
  c->StartPs(0);
  c->StartWorker(0, std::move(worker_extra));
  c->AwaitEvent("worker", 0, "epoch", {{"epoch", 1}}, std::chrono::seconds(60));
  return c;
}

// Connects to 127.0.0.1:port (retrying for 10 s while nothing listens); reads time out after 10 s.
inline int ConnectLoopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = LoopbackAddress(port);
  for (int i = 0; i < 200 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0; ++i) {
    close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    fd = socket(AF_INET, SOCK_STREAM, 0);
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Connects to 127.0.0.1:port, sends `bytes`, and returns what comes back until the peer closes
// (at most 64 KB, within 10 s).
inline std::string Exchange(int port, const std::string& bytes) {
  const int fd = ConnectLoopback(port);
  (void)!write(fd, bytes.data(), bytes.size());
  std::string got;
  char buf[4096];
  for (ssize_t n; got.size() < 65536 && (n = read(fd, buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
  close(fd);
  return got;
}

// `v` as `bytes` little-endian bytes.
inline std::string Le(std::uint64_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

}  // namespace tfd::testing
