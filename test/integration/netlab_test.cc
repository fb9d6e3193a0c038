// The lab harness (test/bench/netlab.py) on three hosts: network namespaces on a bridge, each link
// shaped at the 10g preset, one epoch of the dnn in allreduce and in sync (the ps on host 0). Each
// host's veth must have sent at least the payload its worker's mode needs per step, times its
// steps, so no task's traffic went around its own namespace's address; the ps must have seen the
// other hosts' workers come from their hosts' addresses. A harness killed while its lab was up
// leaves it behind, and the next run with the same prefix clears it first. Root, iproute2 and
// MNIST only (else exit 77, skipped).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "test/catch/subjects.h"
#include "test/test_util.h"

namespace tfd::testing::netlab_test {
namespace {

using namespace std::chrono_literals;

std::string g_mnist;
const std::string kHarness = TFD_SOURCE_DIR "/test/bench/netlab.py";

bool NamespaceExists(const std::string& name) { return std::filesystem::exists("/run/netns/" + name); }

// Removes whatever a run with `prefix` left (its namespaces, their tasks, its links) when the test
// ends, however it ends: the harness cleans up after itself, this is for a harness that could not.
class LabGuard {
 public:
  explicit LabGuard(std::string prefix) : prefix_(std::move(prefix)) {}
  ~LabGuard() {
    if (std::system(fmt::format("/usr/bin/python3 {} --clean --prefix {} >/dev/null 2>&1", kHarness, prefix_).c_str()) != 0)
      std::fprintf(stderr, "netlab --clean --prefix %s failed: remove its namespaces by hand\n", prefix_.c_str());
  }
  LabGuard(const LabGuard&) = delete;
  LabGuard& operator=(const LabGuard&) = delete;

 private:
  std::string prefix_;
};

std::vector<std::string> HarnessArgv(const std::string& prefix, const std::string& report) {
  return {"/usr/bin/python3", kHarness, "--tfd", TFD_BINARY, "--data", g_mnist, "--hosts", "3", "--links", "10g", "--modes",
          "allreduce,sync", "--epochs", "1", "--no-peer", "--timeout", "150", "--prefix", prefix, "--report", report};
}

// Starts the harness and SIGKILLs it as soon as its last namespace exists: the lab stays behind.
void KillMidway(const TempDir& dir, const std::string& prefix) {
  Process p(HarnessArgv(prefix, dir / "killed.json"), {}, dir / "killed.out", dir / "killed.err");
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!NamespaceExists(prefix + "-h2") && std::chrono::steady_clock::now() < deadline && !p.Wait(0ms))
    std::this_thread::sleep_for(20ms);
  INFO("the first run's output: " << p.out() << p.err());
  REQUIRE(NamespaceExists(prefix + "-h2"));
  p.Signal(SIGKILL);
  p.Wait(10s);
}

// Host i's address ("10.77.0.4"), as the report lists them.
std::string HostAddress(const nlohmann::json& row, int i) { return row["addresses"][i].get<std::string>(); }

TEST_CASE("netlab: each host's task sends through its own namespace's veth, and a killed run's lab is cleared", "[integration][netlab]") {
  TempDir dir;
  const std::string prefix = fmt::format("tfi{}", getpid() % 100000);
  LabGuard guard(prefix);
  KillMidway(dir, prefix);

  Process p(HarnessArgv(prefix, dir / "report.json"), {}, dir / "out", dir / "err");
  std::optional<int> code = p.Wait(300s);
  if (!code) {
    p.Signal(SIGTERM);  // the harness removes its lab on SIGTERM
    p.Wait(20s);
  }
  INFO("stdout:\n" << p.out() << "\nstderr:\n" << p.err());
  REQUIRE(code.has_value());
  REQUIRE(*code == 0);
  for (int i = 0; i < 3; ++i) CHECK_FALSE(NamespaceExists(fmt::format("{}-h{}", prefix, i)));  // its own teardown
  CHECK_FALSE(std::filesystem::exists(fmt::format("/sys/class/net/{}-br", prefix)));

  const auto report = nlohmann::json::parse(ReadAll(dir / "report.json"));
  REQUIRE(report["rows"].size() == 2);
  for (const auto& row : report["rows"]) {
    INFO(row.dump());
    REQUIRE_FALSE(row.contains("error"));
    for (int i = 0; i < 3; ++i) {
      const double steps = row["steps"][i].get<double>(), floor = row["expected_bytes_per_step"][i].get<double>();
      REQUIRE(steps == 400);  // 60,000 examples / 3 workers / batch 50
      CHECK(row["tx_bytes"][i].get<double>() >= floor * steps);
      CHECK(row["bytes_per_step"][i].get<double>() < 1.2 * floor);  // headers and TCP/IP on top, no more
    }
    const auto& hashes = row["params_sha256"];
    CHECK(hashes[0] == hashes[1]);
    CHECK(hashes[1] == hashes[2]);
  }
  const auto& sync = report["rows"][1];
  REQUIRE(sync["mode"] == "sync");
  CHECK(sync["ps_peers"]["worker:0"] == "local");  // beside the ps on host 0
  CHECK(sync["ps_peers"]["worker:1"] == HostAddress(sync, 1));
  CHECK(sync["ps_peers"]["worker:2"] == HostAddress(sync, 2));
}

// --rounds: each configuration runs once per round, in turn; the report and the output give each
// one's median and each round's hierarchical / flat ratio. A short run: 300 examples per worker.
TEST_CASE("netlab --rounds runs every configuration once a round and gives their medians and ratios", "[integration][netlab]") {
  TempDir dir;
  const std::string prefix = fmt::format("tfr{}", getpid() % 100000);
  LabGuard guard(prefix);
  {
    Process bad({"/usr/bin/python3", kHarness, "--rounds", "0", "--prefix", prefix}, {}, dir / "bad.out", dir / "bad.err");
    const std::optional<int> code = bad.Wait(60s);
    INFO(bad.err());
    REQUIRE(code.has_value());
    CHECK(*code == 2);
    CHECK(bad.err().find("--rounds: 0 is not in [1, 100]") != std::string::npos);
  }
  Process p({"/usr/bin/python3", kHarness, "--tfd", TFD_BINARY, "--data", g_mnist, "--hosts", "2", "--workers-per-host", "2", "--links",
             "none", "--modes", "allreduce", "--hierarchical", "false,true", "--epochs", "1", "--shard-limit", "300", "--rounds", "2",
             "--no-peer", "--timeout", "150", "--prefix", prefix, "--report", dir / "report.json"},
            {}, dir / "out", dir / "err");
  std::optional<int> code = p.Wait(300s);
  if (!code) {
    p.Signal(SIGTERM);
    p.Wait(20s);
  }
  INFO("stdout:\n" << p.out() << "\nstderr:\n" << p.err());
  REQUIRE(code.has_value());
  REQUIRE(*code == 0);
  const auto report = nlohmann::json::parse(ReadAll(dir / "report.json"));
  REQUIRE(report["rows"].size() == 4);
  const std::vector<std::pair<std::string, int>> order = {{"false", 0}, {"true", 0}, {"false", 1}, {"true", 1}};
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto& row = report["rows"][i];
    INFO(row.dump());
    REQUIRE_FALSE(row.contains("error"));
    CHECK(row["hierarchical"] == order[i].first);
    CHECK(row["round"] == order[i].second);
  }
  REQUIRE(report["rounds"].size() == 1);
  const auto& rounds = report["rounds"][0];
  REQUIRE(rounds["configurations"].size() == 2);
  for (const auto& [name, c] : rounds["configurations"].items()) {
    INFO(name);
    CHECK(c["rounds"] == 2);
    CHECK(c["min"].get<double>() <= c["median"].get<double>());
    CHECK(c["median"].get<double>() <= c["max"].get<double>());
  }
  const auto& ratios = rounds["hierarchical_over_flat"]["none"];
  REQUIRE(ratios.size() == 2);
  for (int r = 0; r < 2; ++r) {
    const double flat = report["rows"][2 * r]["samples_per_sec"].get<double>(), hier = report["rows"][2 * r + 1]["samples_per_sec"].get<double>();
    CHECK(ratios[r].get<double>() == Approx(hier / flat));
  }
  CHECK(p.out().find("hierarchical / flat samples/s per round: ") != std::string::npos);
}

// Why this subject cannot run here ("" when it can): tfd_process_tests then skips it (exit 77).
std::string CannotRunHere(const std::string&) {
  if (geteuid() != 0) return fmt::format("network namespaces need root; this test runs as uid {}", geteuid());
  if (std::system("ip netns list >/dev/null 2>&1") != 0 || std::system("tc -V >/dev/null 2>&1") != 0)
    return "ip netns or tc (iproute2) does not work here";
  if (!std::filesystem::exists("/usr/bin/python3")) return "the harness needs /usr/bin/python3";
  return MissingMnist(&g_mnist);
}
const SubjectNeeds kNeeds(__FILE__, &CannotRunHere);

}  // namespace
}  // namespace tfd::testing::netlab_test
