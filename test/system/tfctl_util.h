#pragma once
// What the tfctl system tests share: the binaries under test, the run folder a run made, and the
// processes a run may have left behind.

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "test/test_util.h"

namespace tfd::testing {

inline const std::string kTfctl = TFCTL_BINARY;
inline const std::string kTfd = TFD_BINARY;

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
    if (cmd.find("tfctl_tests") != std::string::npos || cmd.find("chaos_tests") != std::string::npos ||
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

}  // namespace tfd::testing
