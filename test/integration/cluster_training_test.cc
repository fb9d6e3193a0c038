// Training with a ps cluster of tfd processes on synthetic data: sync runs bit-identical across
// repeats and ps counts, equal to one process with the combined batch, and a backup worker.
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
