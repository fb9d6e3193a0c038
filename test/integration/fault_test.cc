// Real tfd processes with the fault proxy on the worker↔ps link: a partition longer than
// --peer-timeout (both ways, and worker→ps only), a short one that heals, a reset and a flipped
// bit. Synthetic data, so no MNIST is needed. Every wait has a deadline that fails the test instead of hanging.
//
// Placing the proxy: the cluster id is a hash of the TF_CONFIG cluster spec, so every task gets the
// same spec, whose ps entry is 127.0.0.1:P. The ps binds 127.0.0.2:P instead (--bind takes an
// address; the port always comes from TF_CONFIG) and the proxy listens on 127.0.0.1:P, forwarding
// to 127.0.0.2:P. The worker dials 127.0.0.1:P and so reaches the ps through the proxy.
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/local_cluster.h"
#include "test/test_util.h"
#include "test/tools/fault_proxy.h"

namespace tfd::testing::fault_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kPsBindAddress = "127.0.0.2";
constexpr auto kLogLag = 10s;  // how long a peer's log line may trail what the test saw

// One ps and one worker with the proxy between them.
class ProxiedCluster {
 public:
  explicit ProxiedCluster(int epochs)
      : cluster_({.num_ps = 1,
                  .num_workers = 1,
                  .job = Job(data_.path(), R"({"mode": "async"})", epochs, R"({"type": "sgd", "learning_rate": 0.1})", 20)}) {
    WriteSyntheticMnist(data_.path(), 2000, 50);  // 100 steps an epoch at batch 20
    const auto ps_port = static_cast<std::uint16_t>(cluster_.port("ps", 0));
    auto proxy = FaultProxy::Start(
        {.listen_address = "127.0.0.1", .listen_port = ps_port, .target_host = kPsBindAddress, .target_port = ps_port});
    INFO(proxy.status().message());
    REQUIRE(proxy.ok());
    proxy_ = std::move(proxy).value();
  }

  FaultProxy& proxy() { return *proxy_; }
  std::string ps_address() const { return cluster_.endpoint("ps", 0); }

  void Start(std::vector<std::string> worker_extra) {
    cluster_.StartPs(0, {"--bind", kPsBindAddress, "--peer-timeout", std::to_string(kPeerTimeoutSecs)});
    // The worker retries a refused connect, but the proxy always accepts and then resets the
    // client when the ps is not up yet, which the worker takes as fatal: start it once the ps
    // listens.
    const auto until = Clock::now() + 30s;
    while (cluster_.Events("ps", 0, "start").empty() && Clock::now() < until && !ps().Wait(0ms))
      std::this_thread::sleep_for(10ms);
    INFO(ps().err());
    REQUIRE_FALSE(cluster_.Events("ps", 0, "start").empty());
    std::vector<std::string> extra = {"--peer-timeout", std::to_string(kPeerTimeoutSecs)};
    extra.insert(extra.end(), worker_extra.begin(), worker_extra.end());
    cluster_.StartWorker(0, extra);
  }

  // Waits until the worker has pushed `bytes` through the proxy (training is under way).
  void WaitForTraffic(std::uint64_t bytes) {
    const auto until = Clock::now() + 60s;
    while (proxy_->bytes_forwarded(Direction::kClientToServer) < bytes && Clock::now() < until && !worker().Wait(0ms))
      std::this_thread::sleep_for(10ms);
    INFO(worker().err());
    REQUIRE(proxy_->bytes_forwarded(Direction::kClientToServer) >= bytes);
    REQUIRE_FALSE(worker().Wait(0ms).has_value());  // still training
  }

  Process& worker() { return cluster_.process("worker", 0); }
  Process& ps() { return cluster_.process("ps", 0); }
  LocalCluster& cluster() { return cluster_; }

  // The worker's "done" event, or null.
  nlohmann::json Done() {
    const std::vector<nlohmann::json> done = cluster_.Events("worker", 0, "done");
    return done.empty() ? nlohmann::json(nullptr) : done.front();
  }

  static constexpr int kPeerTimeoutSecs = 2;

 private:
  TempDir data_;
  std::unique_ptr<FaultProxy> proxy_;
  LocalCluster cluster_;  // declared after proxy_: its processes are killed before the proxy closes
};

// Runs the same job with no fault and returns the final parameters' hash.
std::string CleanRunHash(int epochs) {
  ProxiedCluster c(epochs);
  c.Start({});
  std::optional<int> code = c.worker().Wait(60s);
  INFO(c.worker().err());
  REQUIRE(code == 0);
  REQUIRE(c.Done().is_object());
  return c.Done()["params_sha256"].get<std::string>();
}

TEST_CASE("a partition longer than --peer-timeout and --reconnect-timeout makes the worker exit 1 naming the ps",
          "[integration][fault]") {
  ProxiedCluster c(/*epochs=*/1000);
  c.Start({"--reconnect-timeout", "3"});
  c.WaitForTraffic(1 << 20);
  c.proxy().Stall(Direction::kBoth);
  const auto stalled = Clock::now();
  std::optional<int> code = c.worker().Wait(30s);
  const double detect_s = std::chrono::duration<double>(Clock::now() - stalled).count();
  const std::string err = c.worker().err();
  INFO(err);
  REQUIRE(code.has_value());
  CHECK(*code == 1);
  CHECK(err.find("ps:0 (" + c.ps_address() + ") sent nothing for 2.0 s") != std::string::npos);
  CHECK(err.find("reconnecting (for up to 3 s)") != std::string::npos);
  CHECK(err.find(") and could not reconnect: ") != std::string::npos);
  CHECK(detect_s >= ProxiedCluster::kPeerTimeoutSecs + 3);  // the peer timeout, then the reconnect timeout
  // The ps, on its side of the partition, gives up on the worker too, and keeps running.
  CHECK(c.cluster().EventWithin("ps", 0, "peer_lost", {}, kLogLag, [](const nlohmann::json& e) { return FieldHas(e, "peer", "worker:0"); }).is_object());
  CHECK_FALSE(c.ps().Wait(0ms).has_value());
}

TEST_CASE("a stalled worker-to-ps link: the ps drops the silent worker, which exits 1 naming the ps", "[integration][fault]") {
  ProxiedCluster c(/*epochs=*/1000);
  c.Start({"--reconnect-timeout", "3"});
  c.WaitForTraffic(1 << 20);
  c.proxy().Stall(Direction::kClientToServer);  // the ps's heartbeats still reach the worker
  const auto stalled = Clock::now();
  std::optional<int> code = c.worker().Wait(30s);
  const double detect_s = std::chrono::duration<double>(Clock::now() - stalled).count();
  INFO(c.worker().err());
  INFO(c.ps().err());
  REQUIRE(code.has_value());
  CHECK(*code == 1);
  CHECK(c.cluster()
            .EventWithin("ps", 0, "peer_lost", {}, kLogLag,
                         [](const nlohmann::json& e) { return e.value("peer", "").starts_with("worker:0 (127.0.0.1:"); })
            .is_object());
  CHECK(HasEvent(c.ps().out(), "peer_lost", {}, [](const nlohmann::json& e) { return FieldHas(e, "message", "sent nothing for 2.0 s"); }));
  CHECK(c.worker().err().find("ps:0 (" + c.ps_address() + ") closed the connection") != std::string::npos);
  CHECK(detect_s >= ProxiedCluster::kPeerTimeoutSecs);
}

TEST_CASE("a partition shorter than --peer-timeout heals: training completes with the same parameters", "[integration][fault]") {
  const int epochs = 30;
  const std::string clean = CleanRunHash(epochs);
  ProxiedCluster c(epochs);
  c.Start({});
  c.WaitForTraffic(1 << 20);
  c.proxy().Stall(Direction::kBoth);
  std::this_thread::sleep_for(200ms);  // a write under way when the stall began may still finish
  const std::uint64_t held = c.proxy().bytes_forwarded(Direction::kClientToServer);
  std::this_thread::sleep_for(800ms);
  CHECK(c.proxy().bytes_forwarded(Direction::kClientToServer) == held);  // nothing got through
  CHECK_FALSE(c.worker().Wait(0ms).has_value());
  c.proxy().Resume(Direction::kBoth);
  std::optional<int> code = c.worker().Wait(60s);
  INFO(c.worker().err());
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  const nlohmann::json done = c.Done();
  REQUIRE(done.is_object());
  CHECK(done["local_step"] == epochs * 100);
  // One async worker is deterministic: a healed partition loses or repeats nothing.
  CHECK(done["params_sha256"] == clean);
  CHECK(c.ps().Wait(30s) == 0);
  CHECK(c.proxy().connections_accepted() == 1);  // the same connection throughout
}

TEST_CASE("a reset link: the worker reconnects, sends its step again, and ends with the undisturbed parameters",
          "[integration][fault]") {
  const int epochs = 30;
  const std::string clean = CleanRunHash(epochs);
  ProxiedCluster c(epochs);
  c.Start({});
  c.WaitForTraffic(1 << 20);
  c.proxy().ResetAll();
  std::optional<int> code = c.worker().Wait(60s);
  INFO(c.worker().err());
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  // The reset surfaces on whichever call meets it first: the read loop's, or a write in flight.
  const std::string lost = "lost ps:0 (" + c.ps_address() + "): ps:0 (" + c.ps_address() + "): ";
  CHECK((c.worker().err().find(lost + "read: Connection reset by peer") != std::string::npos ||
         c.worker().err().find(lost + "write: Connection reset by peer") != std::string::npos));
  CHECK(c.worker().err().find("reconnected to ps:0 (" + c.ps_address() + ")") != std::string::npos);
  const nlohmann::json done = c.Done();
  REQUIRE(done.is_object());
  // Every step applied once: the step in flight at the reset was sent again with the same
  // (incarnation, local step), so a ps that had applied it dropped the copy.
  CHECK(done["local_step"] == epochs * 100);
  CHECK(done["params_sha256"] == clean);
  CHECK(c.proxy().connections_accepted() == 2);
}

TEST_CASE("a flipped bit on the worker-to-ps link never yields a wrong model", "[integration][fault]") {
  const int epochs = 30;
  const std::string clean = CleanRunHash(epochs);
  ProxiedCluster c(epochs);
  // A bit in a request id would leave a request unanswered: the step timeout bounds that case too.
  c.Start({"--step-timeout", "10"});
  c.WaitForTraffic(1 << 20);
  // A megabyte further on: nearly always inside a PUSH payload (30 KB of floats per 28-byte
  // header), which the ps's CRC check refuses, closing the connection; the worker reconnects and
  // sends the step again. A damaged header is refused as well.
  c.proxy().CorruptAt(Direction::kClientToServer, c.proxy().bytes_forwarded(Direction::kClientToServer) + (1 << 20));
  std::optional<int> code = c.worker().Wait(60s);
  INFO(c.worker().err());
  INFO(c.ps().err());
  REQUIRE(code.has_value());
  if (*code == 0) {
    CHECK(c.worker().err().find("reconnected to ps:0 (" + c.ps_address() + ")") != std::string::npos);
    REQUIRE(c.Done().is_object());
    CHECK(c.Done()["params_sha256"] == clean);  // the damaged gradient was never applied
  } else {
    CHECK(*code == 1);
    CHECK(c.worker().err().find("ps:0 (" + c.ps_address() + ")") != std::string::npos);
  }
}

}  // namespace
}  // namespace tfd::testing::fault_test
