// GPU workers in clusters of tfd processes (synthetic data): a sync ps run and an allreduce run of
// two workers sharing cuda:0 are bit-identical run to run, and a GPU cluster learns what the same
// CPU cluster learns; synchronised batch norms leave the same bits on every worker, GPU and CPU
// workers mixed too; a regression CSV trains on the GPU, standalone and in a ring, to the CPU's
// test MAE. Exits 77 (skipped) where no CUDA device is visible.
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/integration/cluster_util.h"
#include "test/local_cluster.h"
#include "test/test_util.h"
#include "test/cuda_session.h"

namespace tfd::testing {
namespace {

// Two workers on one GPU: 0.3 of its memory each (far more than these models need).
constexpr const char* kOnGpu = R"(, "device": "cuda:0", "gpu_memory_fraction": 0.3)";

std::string GpuJob(const TempDir& data, const std::string& update, const std::string& optimizer, const std::string& device_extra) {
  return Job(data.path(), update, 2, optimizer, 20, R"({"name": "mlp", "init": "glorot_uniform"})", device_extra);
}

TEST_CASE("sync ps runs of two GPU workers are bit-identical run to run", "[cuda][cluster]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 1200, 200);
  const std::string job = GpuJob(data, R"({"mode": "sync"})", R"({"type": "adam", "learning_rate": 0.01})", kOnGpu);
  LocalCluster one({.num_ps = 1, .num_workers = 2, .job = job}), again({.num_ps = 1, .num_workers = 2, .job = job});
  const auto a = RunToCompletion(one);
  const auto b = RunToCompletion(again);
  CHECK(a[0]["params_sha256"] == a[1]["params_sha256"]);
  CHECK(a[0]["params_sha256"] == b[0]["params_sha256"]);
  CHECK(one.process("worker", 0).err().find("device: cuda:0 (") != std::string::npos);  // it did train on the GPU
}

TEST_CASE("allreduce runs of two GPU workers are bit-identical run to run", "[cuda][cluster]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 600, 100);
  const std::string job =
      GpuJob(data, R"({"mode": "allreduce"})", R"({"type": "momentum", "learning_rate": 0.05, "momentum": 0.9})", kOnGpu);
  LocalCluster a({.num_ps = 0, .num_workers = 2, .job = job}), b({.num_ps = 0, .num_workers = 2, .job = job});
  const auto first = RunToCompletion(a);
  const auto second = RunToCompletion(b);
  CHECK(first[0]["params_sha256"] == first[1]["params_sha256"]);
  CHECK(first[0]["params_sha256"] == second[0]["params_sha256"]);
}

TEST_CASE("allreduce GPU workers move their own batch norm statistics and learn what CPU workers learn", "[cuda][cluster]") {
  // Without sync each worker's moving statistics follow its own batches (docs/config.md, "Batch
  // norm"): the workers' params_sha256 differ only if the device's moved statistics came back.
  TempDir data;
  WriteSyntheticMnist(data.path(), 1200, 400);
  const std::string model = R"({"layers": [{"type": "conv2d", "filters": 6, "kernel_size": 3, "padding": "same", "activation": "relu"},
      {"type": "batch_norm", "momentum": 0.9},
      {"type": "residual", "activation": "relu", "layers": [{"type": "conv2d", "filters": 6, "kernel_size": 3, "padding": "same"},
                                                            {"type": "batch_norm", "momentum": 0.9}]},
      {"type": "max_pool2d", "pool_size": 2}, {"type": "flatten"}, {"type": "dense", "units": 10}]})";
  const std::string opt = R"({"type": "adam", "learning_rate": 0.003})", update = R"({"mode": "allreduce"})";
  LocalCluster gpu({.num_ps = 0, .num_workers = 2, .job = Job(data.path(), update, 2, opt, 20, model, kOnGpu)});
  LocalCluster cpu({.num_ps = 0, .num_workers = 2, .job = Job(data.path(), update, 2, opt, 20, model, "")});
  const auto on_gpu = RunToCompletion(gpu);
  const auto on_cpu = RunToCompletion(cpu);
  CHECK(on_gpu[0]["params_sha256"] != on_gpu[1]["params_sha256"]);
  CHECK(gpu.process("worker", 0).err().find("device: cuda:0 (") != std::string::npos);
  const double g = on_gpu[0]["test_accuracy"].get<double>(), c = on_cpu[0]["test_accuracy"].get<double>();
  INFO("gpu " << g << " cpu " << c);
  CHECK(std::abs(g - c) <= 0.05);
}

// The batch-norm residual net above with every batch norm synchronised ("sync": true).
std::string SyncBatchNormJob(const TempDir& data, const std::string& device_extra) {
  const std::string model = R"({"layers": [{"type": "conv2d", "filters": 6, "kernel_size": 3, "padding": "same", "activation": "relu"},
      {"type": "batch_norm", "momentum": 0.9, "sync": true},
      {"type": "residual", "activation": "relu", "layers": [{"type": "conv2d", "filters": 6, "kernel_size": 3, "padding": "same"},
                                                            {"type": "batch_norm", "momentum": 0.9, "sync": true}]},
      {"type": "max_pool2d", "pool_size": 2}, {"type": "flatten"}, {"type": "dense", "units": 10}]})";
  return Job(data.path(), R"({"mode": "allreduce"})", 1, R"({"type": "adam", "learning_rate": 0.003})", 20, model, device_extra);
}

TEST_CASE("three allreduce GPU workers with synchronised batch norms end with the same bits, run to run", "[cuda][cluster]") {
  // The batch statistics are summed over the ring, so every worker moves the same moving
  // statistics: the whole parameter set, not only the trained part, is the same on each.
  TempDir data;
  WriteSyntheticMnist(data.path(), 600, 100);
  const std::string job = SyncBatchNormJob(data, kOnGpu);
  LocalCluster a({.num_ps = 0, .num_workers = 3, .job = job}), b({.num_ps = 0, .num_workers = 3, .job = job});
  const auto first = RunToCompletion(a);
  const auto second = RunToCompletion(b);
  CHECK(a.process("worker", 0).err().find("device: cuda:0 (") != std::string::npos);
  CHECK(a.process("worker", 0).err().find("batch_norm sync:") != std::string::npos);
  CHECK(first[0]["params_sha256"] == first[1]["params_sha256"]);
  CHECK(first[0]["params_sha256"] == first[2]["params_sha256"]);
  CHECK(first[0]["params_sha256"] == second[0]["params_sha256"]);
}

TEST_CASE("a GPU worker and a CPU worker with synchronised batch norms in one ring end with the same bits", "[cuda][cluster]") {
  // The GPU worker's sums pair with the CPU worker's call for call, and both move their moving
  // statistics from the same summed floats with the same float operations (docs/gpu.md).
  TempDir data;
  WriteSyntheticMnist(data.path(), 600, 100);
  LocalCluster c({.num_ps = 0, .num_workers = 2, .job = SyncBatchNormJob(data, "")});
  c.StartWorker(0, {"--device", "cuda:0"});
  c.StartWorker(1);
  const std::vector<TaskResult> done = c.FinishAll();
  CHECK(c.process("worker", 0).err().find("device: cuda:0 (") != std::string::npos);
  CHECK(c.process("worker", 1).err().find("device: cuda") == std::string::npos);
  REQUIRE(done[0].done["params_sha256"].is_string());
  CHECK(done[0].done["params_sha256"] == done[1].done["params_sha256"]);
}

TEST_CASE("an async GPU cluster learns what the CPU cluster learns", "[cuda][cluster]") {
  // Not the same bits (GEMM summation order, async arrival order): the test accuracy within 3
  // points on 400 synthetic test examples after 2 epochs.
  TempDir data;
  WriteSyntheticMnist(data.path(), 2000, 400);
  const std::string opt = R"({"type": "sgd", "learning_rate": 0.1})";
  LocalCluster gpu({.num_ps = 1, .num_workers = 2, .job = GpuJob(data, R"({"mode": "async"})", opt, kOnGpu)});
  LocalCluster cpu({.num_ps = 1, .num_workers = 2, .job = GpuJob(data, R"({"mode": "async"})", opt, "")});
  const double on_gpu = RunToCompletion(gpu)[0]["test_accuracy"].get<double>();
  const double on_cpu = RunToCompletion(cpu)[0]["test_accuracy"].get<double>();
  INFO("gpu " << on_gpu << " cpu " << on_cpu);
  CHECK(std::abs(on_gpu - on_cpu) <= 0.03);
}

// regression_test.cc's job (y = 3 x0 - 2 x1 + 0.5 + noise, 20% held out) with `loss`, on `device_extra`.
std::string RegressionJob(const std::string& csv, const std::string& update, const std::string& loss, const std::string& device_extra) {
  return R"({"model": {"layers": [{"type": "dense", "units": 16, "activation": "tanh"}, {"type": "dense", "units": 1}]},
             "data": {"train": ")" + csv + R"(", "test_split": 0.2, "task": "regression", "loss": ")" + loss + R"("},
             "epochs": 8, "batch_size": 20, "optimizer": {"type": "adam", "learning_rate": 0.02},
             "update": )" + update + R"(, "seed": 3, "log_every_steps": 0)" + device_extra + "}";
}

// The done event of a standalone run of `job`.
nlohmann::json StandaloneDone(const TempDir& dir, const std::string& job) {
  WriteFile(dir / "job.json", job);
  CommandResult r = RunCommand(std::string(TFD_BINARY) + " --standalone --log-format json --job " + dir / "job.json", dir);
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  std::istringstream in(r.out);
  nlohmann::json last;
  for (std::string line; std::getline(in, line);) last = nlohmann::json::parse(line);
  REQUIRE(last["event"] == "done");
  return last;
}

TEST_CASE("a regression CSV trains on the GPU to the CPU's test MAE, standalone under mse and mae", "[cuda][regression]") {
  // Not the same bits (GEMM order): both under regression_test.cc's bound (0.12; these runs reach
  // about 0.05), and within 0.02 of each other.
  TempDir dir;
  const std::string csv = WriteLinearCsv(dir, 1000);
  for (const char* loss : {"mse", "mae"}) {
    INFO("loss " << loss);
    const nlohmann::json cpu = StandaloneDone(dir, RegressionJob(csv, R"({"mode": "async"})", loss, ""));
    const nlohmann::json gpu = StandaloneDone(dir, RegressionJob(csv, R"({"mode": "async"})", loss, R"(, "device": "cuda:0")"));
    const double c = cpu["test_mae"].get<double>(), g = gpu["test_mae"].get<double>();
    INFO("test mae: cpu " << c << " gpu " << g);
    CHECK(c < 0.12);
    CHECK(g < 0.12);
    CHECK(std::abs(g - c) <= 0.02);
    CHECK(gpu["test_rmse"].get<double>() >= g);
  }
}

TEST_CASE("allreduce GPU workers train a regression CSV with the same bits run to run, to the stated MAE", "[cuda][cluster][regression]") {
  TempDir dir;
  const std::string csv = WriteLinearCsv(dir, 1000);
  const std::string job = RegressionJob(csv, R"({"mode": "allreduce"})", "mse", kOnGpu);
  LocalCluster a({.num_ps = 0, .num_workers = 2, .job = job}), b({.num_ps = 0, .num_workers = 2, .job = job});
  const auto first = RunToCompletion(a);
  const auto second = RunToCompletion(b);
  CHECK(a.process("worker", 0).err().find("device: cuda:0 (") != std::string::npos);
  CHECK(first[0]["params_sha256"] == first[1]["params_sha256"]);
  CHECK(first[0]["params_sha256"] == second[0]["params_sha256"]);
  REQUIRE(first[0]["test_mae"].is_number());
  CHECK(first[0]["test_mae"].get<double>() < 0.12);
}

}  // namespace
}  // namespace tfd::testing

int main(int argc, char** argv) { return tfd::testing::RunCatchSessionOnCudaDevice(argc, argv); }
