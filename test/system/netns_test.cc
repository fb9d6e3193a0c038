// Several hosts for real on one machine: the ps and the two workers each in their own network
// namespace, joined by veth pairs to a bridge, so every frame between them crosses real interfaces
// and addresses other than 127.0.0.1 (10.N.0.0/24). Each namespace runs its own sshd, and tfctl
// (outside them all) reaches the tasks through those sshds as it reaches other hosts; the run's
// token goes to each over ssh. Exits 77 (skipped) when not root or without ip (iproute2) or sshd.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "test/catch/subjects.h"
#include "test/system/tfctl_util.h"
#include "test/test_util.h"

namespace tfd::testing::netns_test {
namespace {

using namespace std::chrono_literals;

int Sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

// Three namespaces tfdN-<pid>-{0,1,2} at 10.S.0.2, .3, .4, each behind a veth pair whose other end
// is on a bridge that holds 10.S.0.1 (this side's address, for ssh). The destructor removes them.
class Namespaces {
 public:
  Namespaces() : tag_(std::to_string(getpid() % 100000)), subnet_("10." + std::to_string(200 + getpid() % 50) + ".0.") {
    Remove();  // what a killed earlier run with this pid may have left
    Run("ip link add " + Bridge() + " type bridge");
    Run("ip addr add " + subnet_ + "1/24 dev " + Bridge());
    Run("ip link set " + Bridge() + " up");
    for (int i = 0; i < 3; ++i) {
      const std::string ns = Name(i), outside = "tv" + tag_ + "o" + std::to_string(i), inside = "tv" + tag_ + "i" + std::to_string(i);
      Run("ip netns add " + ns);
      Run("ip link add " + outside + " type veth peer name " + inside);
      Run("ip link set " + inside + " netns " + ns);
      Run("ip link set " + outside + " master " + Bridge() + " up");
      Run("ip -n " + ns + " addr add " + Address(i) + "/24 dev " + inside);
      Run("ip -n " + ns + " link set " + inside + " up");
      Run("ip -n " + ns + " link set lo up");
    }
  }
  ~Namespaces() { Remove(); }
  std::string Name(int i) const { return "tfdn" + tag_ + "-" + std::to_string(i); }
  std::string Address(int i) const { return subnet_ + std::to_string(i + 2); }
  // Bytes this namespace's task received over its veth (the bridge side's transmit count).
  std::uint64_t BytesInto(int i) const {
    // Built with fmt, not a chain of +: GCC 12 at -O3 flags that chain (-Wstringop-overflow), a false alarm.
    const std::string count = ReadAll(fmt::format("/sys/class/net/tv{}o{}/statistics/tx_bytes", tag_, i));
    return std::stoull(fmt::format("0{}", count));
  }

 private:
  std::string Bridge() const { return "tfdbr" + tag_; }
  void Run(const std::string& command) {
    INFO(command);
    REQUIRE(Sh(command) == 0);
  }
  void Remove() {
    for (int i = 0; i < 3; ++i) Sh("ip netns del " + Name(i));  // takes its veth pair with it
    Sh("ip link del " + Bridge());
  }
  std::string tag_, subnet_;
};

TEST_CASE("tasks in three network namespaces, started by tfctl over their sshds, train to completion", "[system][netns]") {
  TempDir dir;
  Namespaces ns;
  std::vector<std::unique_ptr<LoopbackSshd>> sshd;
  for (int i = 0; i < 3; ++i)
    sshd.push_back(std::make_unique<LoopbackSshd>(
        dir, SshdPlace{.address = ns.Address(i), .host = ns.Address(i), .prefix = {"/usr/sbin/ip", "netns", "exec", ns.Name(i)},
                       .folder = "host" + std::to_string(i)}));
  auto f = nlohmann::json::parse(ReadAll(ClusterFile(dir, 2)));
  const int port = FreePort();  // each host has its own addresses: one port for every task, as on separate machines
  f["cluster"] = {{"ps", {ns.Address(0) + ":" + std::to_string(port)}},
                  {"worker", {ns.Address(1) + ":" + std::to_string(port), ns.Address(2) + ":" + std::to_string(port)}}};
  f["launch"]["hosts"] = nlohmann::json::object();
  for (int i = 0; i < 3; ++i) f["launch"]["hosts"][ns.Address(i)] = sshd[static_cast<std::size_t>(i)]->HostEntry("known_hosts");
  WriteFile(dir / "netns.json", f.dump(2));
  const std::uint64_t ps_bytes_before = ns.BytesInto(0);

  Process p({kTfctl, "up", dir / "netns.json"}, {}, dir / "out", dir / "err");
  const std::optional<int> code = p.Wait(300s);
  INFO("stdout:\n" << p.out() << "\nstderr:\n" << p.err());
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  const auto summary = nlohmann::json::parse(ReadAll(RunFolder(dir) + "/summary.json"));
  REQUIRE(summary["tasks"].size() == 3);
  for (const auto& t : summary["tasks"]) CHECK(t["exit_code"] == 0);
  for (int w = 0; w < 2; ++w)
    for (int e = 1; e <= 2; ++e)
      CHECK(HasEvent(ReadAll(RunFolder(dir) + "/metrics.jsonl"), "epoch", {{"task", "worker:" + std::to_string(w)}, {"epoch", e}}));
  // The workers reached the ps at its namespace's address, not 127.0.0.1 ...
  const std::string ps_log = ReadAll(RunFolder(dir) + "/ps:0.log");
  for (int w = 1; w <= 2; ++w) CHECK(ps_log.find(ns.Address(w)) != std::string::npos);
  // ... through its veth: the gradients and pulls of 2 epochs are far more than 100 KB.
  CHECK(ns.BytesInto(0) - ps_bytes_before > 100'000);
  // Each remote task held the run's token, as tfctl gave it over ssh.
  const std::string run_name = std::filesystem::path(RunFolder(dir)).filename().string();
  for (int i = 0; i < 3; ++i)
    CHECK(ReadAll(dir / ("host" + std::to_string(i) + "/remote/runs/" + run_name + "/token")) == ReadAll(RunFolder(dir) + "/token"));
}

// Why this subject cannot run here ("" when it can): tfd_process_tests then skips it (exit 77).
std::string CannotRunHere(const std::string&) {
  if (geteuid() != 0) return fmt::format("network namespaces and veth pairs need root; this test runs as uid {}", geteuid());
  for (const char* tool : {"/usr/sbin/ip", "/usr/sbin/sshd"})
    if (!std::filesystem::exists(tool)) return std::string(tool) + " is not installed (scripts/setup installs iproute2 and openssh-server)";
  return "";
}
const SubjectNeeds kNeeds(__FILE__, &CannotRunHere);

}  // namespace
}  // namespace tfd::testing::netns_test
