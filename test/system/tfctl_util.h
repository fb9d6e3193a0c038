#pragma once
// What the tfctl system tests share: the binaries under test, the run folder a run made, the
// processes a run may have left behind, and a real sshd for the remote hosts.

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/test_util.h"

namespace tfd::testing {

inline const std::string kTfctl = TFCTL_BINARY;

// A cluster file for 1 ps + 2 workers on free loopback ports, training on synthetic data in `dir`.
inline std::string ClusterFile(const TempDir& dir, int epochs, const std::string& tfd = kTfd) {
  WriteSyntheticMnist(dir / "", 800, 100);
  const std::vector<int> ports = FreePorts(3);
  nlohmann::json f = {
      {"name", "t"},
      {"cluster",
       {{"ps", {"127.0.0.1:" + std::to_string(ports[0])}},
        {"worker", {"127.0.0.1:" + std::to_string(ports[1]), "127.0.0.1:" + std::to_string(ports[2])}}}},
      {"train",
       {{"model", {{"name", "mlp"}, {"init", "glorot_uniform"}}},
        {"data", dir.path()},
        {"epochs", epochs},
        {"batch_size", 20},
        {"optimizer", {{"type", "adam"}, {"learning_rate", 0.01}}}}},
      {"launch", {{"tfd", tfd}, {"run_dir", dir / "runs"}}}};
  WriteFile(dir / "cluster.json", f.dump(2));
  return dir / "cluster.json";
}

// The first (in these tests, the only) run folder under dir/runs.
inline std::string RunFolder(const TempDir& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir / "runs")) return e.path().string();
  return "";
}

// Every .log file of the run folder under dir/runs (tfctl's and each task's), each after a line
// naming it: what a failed `tfctl up` leaves to say why.
inline std::string RunLogs(const TempDir& dir) {
  std::string all;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir / "runs", ec)) return "no folder " + (dir / "runs");
  const std::string run = RunFolder(dir);
  if (run.empty()) return "no run folder under " + (dir / "runs");
  for (const auto& e : std::filesystem::directory_iterator(run))
    if (e.path().extension() == ".log") all += "== " + e.path().filename().string() + "\n" + ReadAll(e.path().string());
  return all;
}

// The events named `event` (all, where empty) in the metrics.jsonl of the run folder under
// dir/runs: every task's JSON events, tagged with its "task", and tfctl's own rows. None while
// there is no run folder yet.
inline std::vector<nlohmann::json> RunEvents(const TempDir& dir, std::string_view event = {}) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir / "runs", ec)) return {};
  const std::string run = RunFolder(dir);
  return run.empty() ? std::vector<nlohmann::json>{} : ParseEvents(ReadAll(run + "/metrics.jsonl"), event);
}

// Whether the run's metrics.jsonl holds an event named `event` with every field of `fields` (and
// satisfying `also`, where given) within `limit` (polled).
inline bool RunEventWithin(const TempDir& dir, std::string_view event, const nlohmann::json& fields, std::chrono::milliseconds limit,
                           const std::function<bool(const nlohmann::json&)>& also = {}) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const bool last = std::chrono::steady_clock::now() >= until;
    for (const nlohmann::json& e : RunEvents(dir, event))
      if (HasFields(e, fields) && (!also || also(e))) return true;
    if (last) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Processes whose command line mentions `needle` (a test's temp dir), or that run in a folder
// under it: what a run left behind. The test binaries themselves and sshd are passed over.
inline std::vector<std::string> ProcessesMentioning(const std::string& needle) {
  using namespace std::chrono_literals;
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = ReadAll(e.path().string() + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find("tfd_process_tests") != std::string::npos ||
        cmd.find("/usr/sbin/sshd") != std::string::npos)
      continue;
    std::error_code ec;
    const std::string cwd = std::filesystem::read_symlink(e.path() / "cwd", ec).string();
    // A task started through ssh runs in its workdir (the test's dir) with relative paths.
    if (cmd.find(needle) != std::string::npos || (!ec && cwd.starts_with(needle))) found.push_back(pid + ": " + cmd);
  }
  return found;
}

inline bool WaitUntilNoneLeft(const std::string& needle, std::chrono::seconds limit) {
  using namespace std::chrono_literals;
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!ProcessesMentioning(needle).empty() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(50ms);
  return ProcessesMentioning(needle).empty();
}

// Where a test's sshd listens: the address, the host name tfctl's cluster file gives it (its
// known_hosts entry), the words that run sshd (a network namespace's "ip netns exec NS"), and the
// folder under the test's dir for its keys and config.
struct SshdPlace {
  std::string address = "127.0.0.1";
  std::string host = "localhost";
  std::vector<std::string> prefix;
  std::string folder = ".";
};

// A real sshd (a child of the test, so it is reaped), with its own host key, a client key, and a
// known_hosts file that holds the right host key for [host]:port. By default on 127.0.0.1, known
// as localhost.
class LoopbackSshd {
 public:
  explicit LoopbackSshd(const TempDir& dir, SshdPlace place = {})
      : dir_((std::filesystem::path(dir.path()) / place.folder).lexically_normal().string()), place_(std::move(place)), port_(FreePort()) {
    using namespace std::chrono_literals;
    REQUIRE(std::filesystem::exists("/usr/sbin/sshd"));  // scripts/setup installs openssh-server
    std::filesystem::create_directories("/run/sshd");
    std::filesystem::create_directories(dir_);
    REQUIRE(std::system(("ssh-keygen -q -t ed25519 -N '' -f " + In("host_key")).c_str()) == 0);
    REQUIRE(std::system(("ssh-keygen -q -t ed25519 -N '' -f " + In("client_key")).c_str()) == 0);
    REQUIRE(std::system(("ssh-keygen -q -t ed25519 -N '' -f " + In("other_key")).c_str()) == 0);
    std::filesystem::copy_file(In("client_key.pub"), In("authorized_keys"));
    WriteFile(In("sshd_config"), "Port " + std::to_string(port_) + "\nListenAddress " + place_.address + "\nHostKey " + In("host_key") +
                                     "\nPidFile " + In("sshd.pid") + "\nAuthorizedKeysFile " + In("authorized_keys") +
                                     "\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                                     "PermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\n");
    auto key = [&](const std::string& pub) {
      std::string k = ReadAll(In(pub));
      return k.substr(0, k.find(' ', k.find(' ') + 1));
    };
    const std::string entry = "[" + place_.host + "]:" + std::to_string(port_) + " ";
    WriteFile(In("known_hosts"), entry + key("host_key.pub") + "\n");
    WriteFile(In("wrong_known_hosts"), entry + key("other_key.pub") + "\n");
    std::filesystem::create_directories(In("remote"));
    std::vector<std::string> argv = place_.prefix;
    argv.insert(argv.end(), {"/usr/sbin/sshd", "-D", "-e", "-f", In("sshd_config")});
    sshd_ = std::make_unique<Process>(argv, std::vector<std::string>{}, In("sshd.out"), In("sshd.err"));
    // Wait until it accepts logins.
    const auto until = std::chrono::steady_clock::now() + 20s;
    for (;;) {
      CommandResult r = RunCommand("ssh -o BatchMode=yes -o UserKnownHostsFile=" + In("known_hosts") + " -p " + std::to_string(port_) +
                                       " -i " + In("client_key") + " -l " + User() + " " + place_.host + " true",
                                   dir);
      if (r.exit_code == 0) break;
      INFO("sshd: " << ReadAll(In("sshd.err")) << " ssh: " << r.err);
      REQUIRE(std::chrono::steady_clock::now() < until);
      std::this_thread::sleep_for(100ms);
    }
  }
  ~LoopbackSshd() { sshd_->Signal(SIGTERM); }

  static std::string User() {
    const passwd* pw = getpwuid(getuid());
    return pw != nullptr ? pw->pw_name : "root";
  }
  // launch.hosts entry reaching place.host through this sshd.
  nlohmann::json HostEntry(const std::string& known_hosts_file) const {
    return {{"via", "ssh"},
            {"tfd", kTfd},
            {"workdir", In("remote")},  // its own folder: what the remote side writes is told apart
            {"ssh", {{"user", User()}, {"port", port_}, {"identity_file", In("client_key")},
                     {"options", {"UserKnownHostsFile=" + In(known_hosts_file)}}}}};
  }

 private:
  std::string In(const std::string& name) const { return (std::filesystem::path(dir_) / name).string(); }
  std::string dir_;
  SshdPlace place_;
  int port_;
  std::unique_ptr<Process> sshd_;
};

}  // namespace tfd::testing
