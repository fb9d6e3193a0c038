// Training with a ps cluster of tfd processes on synthetic data: sync runs bit-identical across
// repeats and ps counts, equal to one process with the combined batch, a backup worker, and the
// by_host placement (each ps host the same floats, balanced's parameters).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/integration/cluster_util.h"
#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing::cluster_training_test {
namespace {

using namespace std::chrono_literals;

std::vector<float> ReadFloats(const std::string& path) {
  std::string bytes = ReadAll(path);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

TEST_CASE("sync runs are bit-identical across repeats and across 1 and 2 ps", "[integration][cluster]") {
  TempDir data;
  const std::string job = SyntheticJob(data, 1200, 200, R"({"mode": "sync"})", 2, R"({"type": "adam", "learning_rate": 0.01})");
  LocalCluster one({.num_ps = 1, .num_workers = 2, .job = job}), again({.num_ps = 1, .num_workers = 2, .job = job}),
      two({.num_ps = 2, .num_workers = 2, .job = job});
  const auto a = RunToCompletion(one);
  const auto b = RunToCompletion(again);
  const auto c = RunToCompletion(two);
  CHECK(a[0]["params_sha256"] == a[1]["params_sha256"]);
  CHECK(a[0]["params_sha256"] == b[0]["params_sha256"]);
  CHECK(a[0]["params_sha256"] == c[0]["params_sha256"]);
  CHECK(a[0]["params_sha256"] == c[1]["params_sha256"]);
}

// The floats each ps holds, from the chief's placement lines ("placement: ps:2 holds 39755 floats ...").
std::vector<std::int64_t> PlacedFloats(const std::string& chief_log, int num_ps) {
  std::vector<std::int64_t> floats(static_cast<std::size_t>(num_ps), -1);
  const std::regex line(R"(placement: ps:(\d+) holds (\d+) floats)");
  for (auto it = std::sregex_iterator(chief_log.begin(), chief_log.end(), line); it != std::sregex_iterator(); ++it)
    floats.at(std::stoul((*it)[1].str())) = std::stoll((*it)[2].str());
  return floats;
}

TEST_CASE("by_host placement gives each ps host the same floats and trains balanced's parameters", "[integration][cluster]") {
  // Two ps tasks on 127.0.0.1 and one on 127.0.0.2 (loopback too: a second host by its name).
  TempDir data;
  const std::string job = SyntheticJob(data, 600, 100, R"({"mode": "sync"})", 1, R"({"type": "adam", "learning_rate": 0.01})");
  std::string by_host = job;
  by_host.insert(by_host.rfind('}'), R"(, "placement": "by_host")");
  const std::vector<std::string> hosts = {"127.0.0.1", "127.0.0.1", "127.0.0.2"};
  LocalCluster balanced({.num_ps = 3, .num_workers = 2, .job = job, .ps_hosts = hosts}),
      weighed({.num_ps = 3, .num_workers = 2, .job = by_host, .ps_hosts = hosts});
  const auto a = RunToCompletion(balanced);
  const auto b = RunToCompletion(weighed);
  CHECK(a[0]["params_sha256"] == b[0]["params_sha256"]);  // sync sums each float the same wherever it is held
  CHECK(b[0]["params_sha256"] == b[1]["params_sha256"]);
  const std::vector<std::int64_t> thirds = PlacedFloats(balanced.process("worker", 0).err(), 3);
  const std::vector<std::int64_t> halves = PlacedFloats(weighed.process("worker", 0).err(), 3);
  INFO("balanced " << thirds[0] << " " << thirds[1] << " " << thirds[2] << "; by_host " << halves[0] << " " << halves[1] << " " << halves[2]);
  REQUIRE(std::count(thirds.begin(), thirds.end(), -1) == 0);
  REQUIRE(std::count(halves.begin(), halves.end(), -1) == 0);
  const std::int64_t total = thirds[0] + thirds[1] + thirds[2];
  CHECK(halves[0] + halves[1] + halves[2] == total);
  CHECK(std::abs(thirds[0] - thirds[2]) <= 1);                   // balanced: a third each, two thirds on 127.0.0.1
  CHECK(std::abs(2 * (halves[0] + halves[1]) - total) <= 1);     // by_host: half on each host ...
  CHECK(std::abs(halves[0] - halves[1]) <= 1);                   // ... split between its two ps tasks
}

TEST_CASE("a sync run of 2 workers with batch b matches one process with batch 2b", "[integration][cluster]") {
  // Same seed, same examples per step, same initial weights; only the floating-point order of
  // the gradient sums differs (mean of two means of 10 vs one mean of 20). After 100 sgd steps
  // every parameter must agree within 1e-4 (observed differences are around 1e-6).
  TempDir data;
  WriteSyntheticMnist(data.path(), 2000, 200);
  const std::string opt = R"({"type": "sgd", "learning_rate": 0.1})";
  LocalCluster c({.num_ps = 2, .num_workers = 2, .job = Job(data.path(), R"({"mode": "sync"})", 2, opt, 20)});
  RunToCompletion(c, {"--params-out", "PARAMS"});
  TempDir solo;
  WriteFile(solo / "job.json", Job(data.path(), R"({"mode": "async"})", 2, opt, 40));
  CommandResult r = RunCommand(kTfd + " --standalone --job " + solo / "job.json" + " --params-out " + solo / "params.bin", solo);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::vector<float> cluster = ReadFloats(c.dir() / "params0.bin"), single = ReadFloats(solo / "params.bin");
  REQUIRE(cluster.size() == single.size());
  REQUIRE(cluster.size() == 784 * 100 + 100 + 100 * 10 + 10 - (784 - 64) * 100);  // 8x8 synthetic images
  float max_diff = 0;
  for (std::size_t i = 0; i < cluster.size(); ++i) max_diff = std::max(max_diff, std::abs(cluster[i] - single[i]));
  INFO("max |cluster - single| = " << max_diff);
  CHECK(max_diff <= 1e-4f);
  CHECK(cluster != single);  // the sums really were ordered differently (else the test proves little)
}

TEST_CASE("sync with a backup worker (2 of 3 aggregated) lets every worker finish", "[integration][cluster]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 3,
                  .job = SyntheticJob(data, 1200, 100, R"({"mode": "sync", "replicas_to_aggregate": 2, "total_num_replicas": 3})", 2)});
  auto done = RunToCompletion(c);
  for (const auto& d : done) CHECK(d["test_accuracy"].get<double>() > 0.5);
  // The ps's own clock: every step a worker ran pushed once (the backup's stale ones too) and was
  // answered with parameters; the time it spent applying them is in its done event. A worker that
  // starts late, after the other two have made steps without it (2 of 3 aggregate), resumes at
  // the global step the ps gives it (a sync worker's local step follows the global step) and never
  // runs the steps before it, though its done event's local_step counts them: those are taken off.
  std::int64_t local_steps = 0;
  for (int i = 0; i < 3; ++i) {
    local_steps += done[static_cast<std::size_t>(i)]["local_step"].get<std::int64_t>();
    std::smatch skipped;
    const std::string err = c.process("worker", i).err();
    if (std::regex_search(err, skipped, std::regex(R"(\(local_step (\d+) was applied before this restart\))"))) {
      INFO("worker:" << i << " started at local_step " << skipped[1]);
      local_steps -= std::stoll(skipped[1]);
    }
  }
  const auto ps_done = c.Events("ps", 0, "done");
  REQUIRE(ps_done.size() == 1);
  CHECK(ps_done[0]["pushes"].get<std::int64_t>() == local_steps);
  CHECK(ps_done[0]["replies"].get<std::int64_t>() >= local_steps);
  CHECK(ps_done[0]["apply_s"].get<double>() > 0);
  CHECK(ps_done[0]["reply_s"].get<double>() > 0);
}

}  // namespace
}  // namespace tfd::testing::cluster_training_test
