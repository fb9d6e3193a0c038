// Model-parallel clusters of tfd processes on synthetic data: a `layers` split (GPipe and 1F1B)
// gives the bits of tfd --standalone with the same micro-batches; a `units` split comes within
// 1e-5 of them; both train a regression CSV too; a lost stage ends its replica naming it and the
// step; a cluster that the split does not fit is refused with exit 2. Every wait has a deadline that fails the test instead of hanging.
#include <csignal>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/ckpt/file.h"
#include "test/integration/cluster_util.h"
#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing::cluster_pipeline_test {
namespace {

using namespace std::chrono_literals;

// A three-hidden-layer net (with dropout, so the micro-batch masks must agree) on synthetic data.
const char* const kModel = R"({"layers": [{"type": "dense", "units": 32, "activation": "elu"}, {"type": "dropout", "rate": 0.2},
    {"type": "dense", "units": 24, "activation": "tanh"}, {"type": "dense", "units": 16, "activation": "relu"},
    {"type": "dense", "units": 10}]})";
const char* const kOptimizer = R"({"type": "momentum", "learning_rate": 0.05, "momentum": 0.9})";

std::string PipelineJob(const TempDir& data, const std::string& model_parallel, int epochs = 2) {
  return Job(data.path(), R"({"mode": "sync"})", epochs, kOptimizer, 20, kModel, R"(, "model_parallel": )" + model_parallel);
}

struct StandaloneRun {
  nlohmann::json done;
  std::vector<float> params;
  std::vector<nlohmann::json> epochs;
};

std::vector<float> ReadFloats(const std::string& path) {
  const std::string bytes = ReadAll(path);
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

// The largest difference between two parameter vectors of one size, relative to `want` (and to
// 1e-2 where `want` is smaller): what a units split's split sums leave.
double WorstRelativeDiff(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(double{got[i]} - want[i]) / std::max(1e-2, std::abs(double{want[i]})));
  return worst;
}

StandaloneRun RunStandalone(const std::string& job) {
  TempDir dir;
  WriteFile(dir / "job.json", job);
  CommandResult r = RunCommand(std::string(TFD_BINARY) + " --standalone --log-format json --job " + dir / "job.json" + " --params-out " +
                                   dir / "params.bin",
                               dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::vector<nlohmann::json> done = ParseEvents(r.out, "done");
  REQUIRE(done.size() == 1);
  return {done[0], ReadFloats(dir / "params.bin"), ParseEvents(r.out, "epoch")};
}

TEST_CASE("a layers split gives the standalone run's bits, with GPipe and with 1F1B", "[integration][cluster][model_parallel]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 400, 60);
  for (const std::string schedule : {"gpipe", "1f1b"}) {
    const std::string job = PipelineJob(data, R"({"split": "layers", "stages": 2, "microbatches": 4, "schedule": ")" + schedule + "\"}");
    const StandaloneRun solo = RunStandalone(job);
    LocalCluster c({.num_ps = 0, .num_workers = 2, .job = job});
    auto done = RunToCompletion(c);
    INFO(schedule);
    REQUIRE(done[0]["params_sha256"].is_string());
    CHECK(done[0]["params_sha256"] == solo.done["params_sha256"]);
    CHECK(done[1]["params_sha256"] == solo.done["params_sha256"]);
    CHECK(done[0]["test_accuracy"] == solo.done["test_accuracy"]);
  }
  // Three stages at chosen boundaries, one micro-batch: still the same bits.
  const std::string job = PipelineJob(data, R"({"split": "layers", "stages": 3, "boundaries": [1, 3], "schedule": "1f1b"})", 1);
  const StandaloneRun solo = RunStandalone(job);
  LocalCluster c({.num_ps = 0, .num_workers = 3, .job = job});
  auto done = RunToCompletion(c);
  for (const auto& d : done) CHECK(d["params_sha256"] == solo.done["params_sha256"]);
}

TEST_CASE("a layers split keeps each residual block whole and gives the standalone run's bits", "[integration][cluster][model_parallel][residual]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 400, 60);
  // Two blocks (one with a dropout inside, one with a projection): the balanced split puts the
  // boundary between whole layers, so the blocks' inner activations stay on one stage.
  const char* const model = R"({"layers": [{"type": "conv2d", "filters": 4, "kernel_size": 3, "strides": 2, "padding": "same"},
    {"type": "residual", "activation": "relu", "layers": [{"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same",
     "activation": "relu"}, {"type": "dropout", "rate": 0.2}, {"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same"}]},
    {"type": "residual", "layers": [{"type": "conv2d", "filters": 8, "kernel_size": 3, "strides": 2, "padding": "same"}]},
    {"type": "global_avg_pool2d"}, {"type": "dense", "units": 10}]})";
  const std::string job = Job(data.path(), R"({"mode": "sync"})", 1, kOptimizer, 20, model,
                              R"(, "model_parallel": {"split": "layers", "stages": 2, "microbatches": 2, "schedule": "1f1b"})");
  const StandaloneRun solo = RunStandalone(job);
  LocalCluster c({.num_ps = 0, .num_workers = 2, .job = job});
  auto done = RunToCompletion(c);
  REQUIRE(done[0]["params_sha256"].is_string());
  CHECK(done[0]["params_sha256"] == solo.done["params_sha256"]);
  CHECK(done[1]["params_sha256"] == solo.done["params_sha256"]);
}

TEST_CASE("a layers split with batch norm gives the standalone run's bits: each micro-batch moves the statistics once",
          "[integration][cluster][model_parallel][norm]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 400, 60);
  // A batch norm on each stage, one inside a block: 1F1B recomputes a stage's forward pass before
  // most backward passes, which must not move the moving statistics again.
  const char* const model = R"({"layers": [{"type": "conv2d", "filters": 4, "kernel_size": 3, "strides": 2, "padding": "same"},
    {"type": "batch_norm", "momentum": 0.8},
    {"type": "residual", "activation": "relu", "layers": [{"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same"},
     {"type": "batch_norm", "momentum": 0.8}]},
    {"type": "global_avg_pool2d"}, {"type": "dense", "units": 16, "activation": "relu"}, {"type": "batch_norm", "momentum": 0.8},
    {"type": "dense", "units": 10}]})";
  for (const std::string schedule : {"gpipe", "1f1b"}) {
    INFO(schedule);
    const std::string job = Job(data.path(), R"({"mode": "sync"})", 1, kOptimizer, 20, model,
                                R"(, "model_parallel": {"split": "layers", "stages": 2, "microbatches": 4, "schedule": ")" + schedule + "\"}");
    const StandaloneRun solo = RunStandalone(job);
    LocalCluster c({.num_ps = 0, .num_workers = 2, .job = job});
    auto done = RunToCompletion(c);
    REQUIRE(done[0]["params_sha256"].is_string());
    CHECK(done[0]["params_sha256"] == solo.done["params_sha256"]);
    CHECK(done[1]["params_sha256"] == solo.done["params_sha256"]);
    CHECK(done[0]["test_accuracy"] == solo.done["test_accuracy"]);
  }
  // A synchronised one is refused: its sums would need the replicas' ring mid-step.
  const std::string sync_bn = Job(data.path(), R"({"mode": "sync"})", 1, kOptimizer, 20,
                                  R"({"layers": [{"type": "dense", "units": 8}, {"type": "batch_norm", "sync": true}, {"type": "dense", "units": 10}]})",
                                  R"(, "model_parallel": {"split": "layers", "stages": 2})");
  LocalCluster refused({.num_ps = 0, .num_workers = 2, .job = sync_bn});
  refused.StartWorker(0);
  TaskResult w = refused.Finish("worker", 0, 30s);
  INFO(w.err);
  CHECK(w.exit_code == 2);
  CHECK(w.err.find("model.layers[1].sync: a synchronised batch_norm sums over the allreduce ring, which model parallel has not") !=
        std::string::npos);
}

TEST_CASE("a units split comes within 1e-5 of the standalone run, the same bits run to run", "[integration][cluster][model_parallel]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 400, 60);
  const std::string job = PipelineJob(data, R"({"split": "units", "stages": 2, "microbatches": 2})", 1);
  const StandaloneRun solo = RunStandalone(job);
  std::vector<std::string> shas;
  for (int run = 0; run < 2; ++run) {
    LocalCluster c({.num_ps = 0, .num_workers = 2, .job = job});
    auto done = RunToCompletion(c, {"--params-out", "PARAMS"});
    REQUIRE(done[0]["params_sha256"].is_string());
    CHECK(done[1]["params_sha256"] == done[0]["params_sha256"]);
    shas.push_back(done[0]["params_sha256"]);
    const std::vector<float> got = ReadFloats(c.dir() / "params0.bin");
    CHECK(WorstRelativeDiff(got, solo.params) < 1e-5);
  }
  CHECK(shas[0] == shas[1]);
}

// A regression job on WriteLinearCsv's data: two dense layers, 20% held out for test.
std::string RegressionPipelineJob(const std::string& csv, const std::string& model_parallel) {
  return R"({"model": {"layers": [{"type": "dense", "units": 16, "activation": "tanh"}, {"type": "dense", "units": 1}]},
             "data": {"train": ")" + csv + R"(", "test_split": 0.2, "task": "regression"},
             "epochs": 6, "batch_size": 20, "optimizer": {"type": "adam", "learning_rate": 0.02},
             "update": {"mode": "sync"}, "seed": 3, "log_every_steps": 0, "model_parallel": )" + model_parallel + "}";
}

constexpr double kMaxRegressionMae = 0.12;  // these runs reach 0.060; the noise alone gives 0.025

TEST_CASE("a regression model splits by layers with the standalone run's bits and MAE, by units within 1e-5",
          "[integration][cluster][model_parallel][regression]") {
  TempDir data;
  const std::string csv = WriteLinearCsv(data, 1000);
  for (const std::string schedule : {"gpipe", "1f1b"}) {
    const std::string job = RegressionPipelineJob(csv, R"({"split": "layers", "stages": 2, "microbatches": 4, "schedule": ")" + schedule + "\"}");
    const StandaloneRun solo = RunStandalone(job);
    LocalCluster c({.num_ps = 0, .num_workers = 2, .job = job});
    auto done = RunToCompletion(c);
    INFO(schedule << ": " << c.process("worker", 0).err());
    REQUIRE(done[0]["params_sha256"].is_string());
    REQUIRE(solo.done["test_mae"].is_number());
    CHECK(solo.done["test_mae"].get<double>() < kMaxRegressionMae);
    for (int i = 0; i < 2; ++i) {
      CHECK(done[i]["params_sha256"] == solo.done["params_sha256"]);
      CHECK(done[i]["test_mae"] == solo.done["test_mae"]);
      CHECK(done[i]["test_rmse"] == solo.done["test_rmse"]);
      CHECK_FALSE(done[i].contains("test_accuracy"));
      // The training MAE of every epoch, on stage 0 too: the last stage's error sums came back with the gradients.
      const std::vector<nlohmann::json> epochs = c.Events("worker", i, "epoch");
      REQUIRE(epochs.size() == solo.epochs.size());
      for (std::size_t e = 0; e < epochs.size(); ++e) {
        CHECK(epochs[e]["mae"] == solo.epochs[e]["mae"]);
        CHECK(epochs[e]["rmse"] == solo.epochs[e]["rmse"]);
        CHECK(epochs[e]["loss"] == solo.epochs[e]["loss"]);
        CHECK_FALSE(epochs[e].contains("accuracy"));
      }
    }
    CHECK(solo.epochs.back()["mae"].get<double>() < solo.epochs.front()["mae"].get<double>());
  }
  // Units: the one output unit lies on stage 1 only; stage 0 takes part in its gather.
  const std::string job = RegressionPipelineJob(csv, R"({"split": "units", "stages": 2, "microbatches": 2})");
  const StandaloneRun solo = RunStandalone(job);
  LocalCluster c({.num_ps = 0, .num_workers = 2, .job = job});
  auto done = RunToCompletion(c, {"--params-out", "PARAMS"});
  INFO(c.process("worker", 0).err());
  REQUIRE(done[0]["params_sha256"].is_string());
  CHECK(done[1]["params_sha256"] == done[0]["params_sha256"]);
  const std::vector<float> got = ReadFloats(c.dir() / "params0.bin");
  CHECK(WorstRelativeDiff(got, solo.params) < 1e-5);
  REQUIRE(done[0]["test_mae"].is_number());
  CHECK(done[0]["test_mae"].get<double>() == Approx(solo.done["test_mae"].get<double>()).epsilon(1e-4));
  CHECK(done[0]["test_mae"].get<double>() < kMaxRegressionMae);
}

TEST_CASE("the chief's checkpoint holds the whole network under the usual names", "[integration][cluster][model_parallel]") {
  TempDir data, ckpts;
  WriteSyntheticMnist(data.path(), 400, 60);
  std::string job = PipelineJob(data, R"({"split": "layers", "stages": 2, "microbatches": 2, "schedule": "1f1b"})", 1);
  job.insert(job.rfind('}'), R"(, "checkpoint": {"dir": ")" + ckpts.path() + R"(", "every_steps": 7, "keep": 10})");
  LocalCluster c({.num_ps = 0, .num_workers = 2, .job = job});
  auto done = RunToCompletion(c, {"--params-out", "PARAMS"});
  REQUIRE(done[0]["params_sha256"].is_string());
  Result<ckpt::Loaded> loaded = ckpt::LoadNewestValid(ckpts.path());
  REQUIRE(loaded.ok());
  const ckpt::Checkpoint& ck = loaded->checkpoint;
  CHECK(ck.final);
  CHECK(ck.global_step == 20);  // 400 examples / batch 20
  std::vector<std::string> names;
  std::vector<float> values;
  for (const ckpt::NamedTensor& t : ck.tensors) {
    names.push_back(t.name);
    values.insert(values.end(), t.values.begin(), t.values.end());
    REQUIRE(t.slots.size() == 1);  // momentum
    CHECK(t.slots[0].values.size() == t.values.size());
  }
  CHECK(names == std::vector<std::string>{"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias", "dense_2/kernel", "dense_2/bias",
                                          "dense_3/kernel", "dense_3/bias"});
  CHECK(values == ReadFloats(c.dir() / "params0.bin"));
  CHECK(ckpt::List(ckpts.path())->size() == 3);  // steps 7 and 14, and the final one
  // Each stage's figures of the epoch, for tfctl's table and the logs.
  const std::vector<nlohmann::json> stage = c.Events("worker", 1, "stage");
  REQUIRE(stage.size() == 1);
  CHECK(stage[0]["stage"] == 1);
  CHECK(stage[0]["bubble_theory"].get<double>() == Approx(1.0 / 3));  // (S-1)/(M+S-1), S = M = 2
  CHECK(stage[0]["busy"].get<double>() > 0);
  CHECK(stage[0]["busy"].get<double>() <= 1);
  CHECK_FALSE(stage[0].contains("replicas_allreduce_s"));  // one replica: nothing to combine
}

// The job with a checkpoint folder: every 20 steps (one epoch of 400 examples at batch 20) and at the end.
std::string WithCheckpoints(std::string job, const std::string& dir) {
  job.insert(job.rfind('}'), R"(, "checkpoint": {"dir": ")" + dir + R"(", "every_steps": 20, "keep": 10})");
  return job;
}

// A folder holding only `file` (a copy), for a run to restore from.
void CopyOnly(const std::string& file, const TempDir& to) {
  WriteFile(to / std::filesystem::path(file).filename().string(), ReadAll(file));
}

TEST_CASE("a layers run's checkpoint restores onto another split and onto data parallel, and back", "[integration][cluster][model_parallel]") {
  TempDir data, first;
  WriteSyntheticMnist(data.path(), 400, 60);
  // Two stages, two epochs: checkpoints after epoch 1 (step 20) and at the end (step 40).
  LocalCluster a({.num_ps = 0, .num_workers = 2,
                  .job = WithCheckpoints(PipelineJob(data, R"({"split": "layers", "stages": 2, "microbatches": 2, "schedule": "1f1b"})"),
                                         first.path())});
  auto whole = RunToCompletion(a, {"--params-out", "PARAMS"});
  REQUIRE(whole[0]["params_sha256"].is_string());
  Result<std::vector<std::string>> files = ckpt::List(first.path());
  REQUIRE(files.ok());
  REQUIRE(files->size() == 2);
  const std::string after_epoch_1 = files->at(1);
  CHECK(after_epoch_1.find("ckpt-000000000020.tfdckpt") != std::string::npos);

  // Three stages at other boundaries, from step 20: epoch 2 again, the same bits as the whole run.
  TempDir b_dir;
  CopyOnly(after_epoch_1, b_dir);
  LocalCluster b({.num_ps = 0, .num_workers = 3,
                  .job = WithCheckpoints(PipelineJob(data, R"({"split": "layers", "stages": 3, "boundaries": [1, 3], "microbatches": 2})"),
                                         b_dir.path())});
  auto resumed = RunToCompletion(b);
  {
    const std::string out = b.process("worker", 0).out();
    INFO(b.process("worker", 0).err());
    CHECK(HasEvent(out, "restored", {{"path", b_dir / "ckpt-000000000020.tfdckpt"}, {"global_step", 20}, {"stages", 3}}));
    CHECK(HasEvent(out, "resumed", {{"epoch", 2}, {"step", 1}, {"steps", 20}}));
  }
  for (const auto& d : resumed) {
    CHECK(d["global_step"] == 40);
    CHECK(d["params_sha256"] == whole[0]["params_sha256"]);
  }
  REQUIRE(b.Events("worker", 0, "restored").size() == 1);

  // Two replicas of two stages from step 20: 10 steps an epoch now, so every replica starts epoch 2
  // again; the chief's broadcast reaches every stage of both replicas.
  TempDir r_dir;
  CopyOnly(after_epoch_1, r_dir);
  LocalCluster r({.num_ps = 0, .num_workers = 4,
                  .job = WithCheckpoints(PipelineJob(data, R"({"split": "layers", "stages": 2, "microbatches": 2})"), r_dir.path())});
  auto replicas = RunToCompletion(r);
  REQUIRE(replicas[0]["params_sha256"].is_string());
  for (int i = 0; i < 4; ++i) {
    INFO("worker " << i << ": " << r.process("worker", i).err());
    CHECK(HasEvent(r.process("worker", i).out(), "resumed", {{"epoch", 2}, {"step", 1}, {"steps", 10}}));
    CHECK(replicas[i]["params_sha256"] == replicas[0]["params_sha256"]);
    CHECK(replicas[i]["global_step"] == 30);  // 20 updates restored, 10 made
    CHECK(replicas[i]["local_step"] == 20);
  }
  CHECK(replicas[0]["params_sha256"] != whole[0]["params_sha256"]);  // it trained on from the checkpoint, not from scratch

  // Another optimizer: the chief refuses the checkpoint (exit 2) and the other stage ends with its reason.
  TempDir o_dir;
  CopyOnly(after_epoch_1, o_dir);
  std::string other = WithCheckpoints(PipelineJob(data, R"({"split": "layers", "stages": 2})"), o_dir.path());
  const std::string rate = R"("learning_rate": 0.05)";
  other.replace(other.find(rate), rate.size(), R"("learning_rate": 0.07)");
  LocalCluster o({.num_ps = 0, .num_workers = 2, .job = other});
  o.StartWorker(0);
  o.StartWorker(1);
  TaskResult chief = o.Finish("worker", 0, 60s), stage1 = o.Finish("worker", 1, 60s);
  INFO(chief.err << "\n" << stage1.err);
  CHECK(chief.exit_code == 2);
  CHECK(chief.err.find("optimizer: " + (o_dir / "ckpt-000000000020.tfdckpt")) != std::string::npos);
  CHECK(stage1.exit_code != 0);
  CHECK(stage1.err.find("optimizer: ") != std::string::npos);

  // A units split from step 20: within 1e-5 of the whole run (its sums are split).
  TempDir u_dir;
  CopyOnly(after_epoch_1, u_dir);
  LocalCluster u({.num_ps = 0, .num_workers = 2,
                  .job = WithCheckpoints(PipelineJob(data, R"({"split": "units", "stages": 2, "microbatches": 2})"), u_dir.path())});
  auto units = RunToCompletion(u, {"--params-out", "PARAMS"});
  REQUIRE(units[0]["params_sha256"].is_string());
  CHECK(units[0]["global_step"] == 40);
  const std::vector<float> want = ReadFloats(a.dir() / "params0.bin"), got = ReadFloats(u.dir() / "params0.bin");
  CHECK(WorstRelativeDiff(got, want) < 1e-5);

  // Plain data parallel (sync, one ps, one worker) from step 20: the ps takes the whole network.
  TempDir d_dir;
  CopyOnly(after_epoch_1, d_dir);
  std::string dp = Job(data.path(), R"({"mode": "sync"})", 2, kOptimizer, 20, kModel);
  LocalCluster d({.num_ps = 1, .num_workers = 1, .job = WithCheckpoints(dp, d_dir.path())});
  auto plain = RunToCompletion(d);
  {
    INFO(d.process("worker", 0).err());
    CHECK(HasEvent(d.process("worker", 0).out(), "restored", {{"path", d_dir / "ckpt-000000000020.tfdckpt"}, {"global_step", 20}}));
  }
  CHECK(plain[0]["global_step"] == 40);
  CHECK(plain[0]["test_accuracy"].get<double>() >= 0.9);

  // And back: that sync run's final checkpoint (step 40) onto two stages for a third epoch.
  Result<std::vector<std::string>> synced = ckpt::List(d_dir.path());
  REQUIRE(synced.ok());
  REQUIRE_FALSE(synced->empty());
  CHECK(synced->front().find("ckpt-000000000040.tfdckpt") != std::string::npos);
  TempDir e_dir;
  CopyOnly(synced->front(), e_dir);
  LocalCluster e({.num_ps = 0, .num_workers = 2,
                  .job = WithCheckpoints(PipelineJob(data, R"({"split": "layers", "stages": 2})", 3), e_dir.path())});
  auto third = RunToCompletion(e);
  {
    const std::string out = e.process("worker", 0).out();
    INFO(e.process("worker", 0).err());
    CHECK(HasEvent(out, "restored", {{"path", e_dir / "ckpt-000000000040.tfdckpt"}, {"global_step", 40}, {"stages", 2}}));
    CHECK(HasEvent(out, "resumed", {{"epoch", 3}, {"step", 1}, {"steps", 20}}));
  }
  for (const auto& t : third) {
    CHECK(t["global_step"] == 60);
    CHECK(t["params_sha256"] == third[0]["params_sha256"]);
  }
  CHECK(third[0]["test_accuracy"].get<double>() >= 0.9);
}

TEST_CASE("a lost stage ends its replica naming the stage and the step", "[integration][cluster][model_parallel]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 2000, 50);
  LocalCluster c({.num_ps = 0, .num_workers = 2, .job = PipelineJob(data, R"({"split": "layers", "stages": 2, "microbatches": 2})", 1000)});
  for (int i = 0; i < 2; ++i) c.StartWorker(i, {"--peer-timeout", "5"});
  c.AwaitEvent("worker", 0, "epoch", {{"epoch", 1}}, 60s);
  c.process("worker", 1).Signal(SIGKILL);
  TaskResult w = c.Finish("worker", 0, 30s);
  INFO(w.err);
  CHECK(w.exit_code == 1);
  CHECK(w.err.find("worker:1 (stage 1 of replica 0)") != std::string::npos);
  CHECK(w.err.find("local_step") != std::string::npos);
}

TEST_CASE("two replicas of two stages end with the same bits on every task, run to run, as data parallel", "[integration][cluster][model_parallel]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 400, 60);
  // Workers 0, 1 are replica 0 (stages 0, 1), workers 2, 3 replica 1; each replica reads its half.
  const std::string job = PipelineJob(data, R"({"split": "layers", "stages": 2, "microbatches": 2, "schedule": "1f1b"})");
  std::vector<std::string> shas;
  for (int run = 0; run < 2; ++run) {
    LocalCluster c({.num_ps = 0, .num_workers = 4, .job = job});
    auto done = RunToCompletion(c);
    REQUIRE(done.size() == 4);
    REQUIRE(done[0]["params_sha256"].is_string());
    for (const auto& d : done) {
      CHECK(d["params_sha256"] == done[0]["params_sha256"]);
      CHECK(d["test_accuracy"] == done[0]["test_accuracy"]);
      CHECK(d["global_step"] == 20);  // 2 epochs of 200 examples per replica, batch 20
    }
    CHECK(done[0]["test_accuracy"].get<double>() >= 0.9);
    shas.push_back(done[0]["params_sha256"]);
    // The replicas' epoch lines name their stage, and the stage events say which replica.
    const std::vector<nlohmann::json> stage = c.Events("worker", 3, "stage");
    REQUIRE(stage.size() == 2);
    CHECK(stage[0]["stage"] == 1);
    CHECK(stage[0]["replica"] == 1);
    CHECK(stage[0]["replicas_allreduce_s"].get<double>() >= 0);  // its share of the replicas' all-reduce
  }
  CHECK(shas[0] == shas[1]);
  // One micro-batch: each replica's gradient is the whole network's on its batch, and the two are
  // averaged as two allreduce workers average theirs, so the bits are data parallel's.
  const std::string one = PipelineJob(data, R"({"split": "layers", "stages": 2})");
  LocalCluster c({.num_ps = 0, .num_workers = 4, .job = one});
  auto done = RunToCompletion(c);
  LocalCluster d({.num_ps = 0, .num_workers = 2, .job = Job(data.path(), R"({"mode": "allreduce"})", 2, kOptimizer, 20, kModel)});
  auto dp = RunToCompletion(d);
  REQUIRE(dp[0]["params_sha256"].is_string());
  for (const auto& t : done) CHECK(t["params_sha256"] == dp[0]["params_sha256"]);
  // A units split of two replicas: the same bits on every task too.
  LocalCluster u({.num_ps = 0, .num_workers = 4, .job = PipelineJob(data, R"({"split": "units", "stages": 2, "microbatches": 2})", 1)});
  auto units = RunToCompletion(u);
  REQUIRE(units[0]["params_sha256"].is_string());
  for (const auto& t : units) CHECK(t["params_sha256"] == units[0]["params_sha256"]);
}

TEST_CASE("a stage lost in one replica ends every task of every replica, naming it", "[integration][cluster][model_parallel]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 2000, 50);
  LocalCluster c({.num_ps = 0, .num_workers = 4, .job = PipelineJob(data, R"({"split": "layers", "stages": 2, "microbatches": 2})", 1000)});
  for (int i = 0; i < 4; ++i) c.StartWorker(i, {"--peer-timeout", "5"});
  c.AwaitEvent("worker", 0, "epoch", {{"epoch", 1}}, 60s);
  c.process("worker", 1).Signal(SIGKILL);  // stage 1 of replica 0
  for (const int i : {0, 2, 3}) {
    TaskResult w = c.Finish("worker", i, 30s);
    INFO("worker " << i << ": " << w.err);
    CHECK(w.exit_code == 1);
    CHECK(w.err.find("worker:1 (stage 1 of replica 0)") != std::string::npos);
  }
  // Silent instead of gone: stage 0 of replica 1 stopped. Its neighbours give up on it after the
  // peer timeout (5 s) and tell the rest.
  LocalCluster s({.num_ps = 0, .num_workers = 4, .job = PipelineJob(data, R"({"split": "layers", "stages": 2, "microbatches": 2})", 1000)});
  for (int i = 0; i < 4; ++i) s.StartWorker(i, {"--peer-timeout", "5"});
  s.AwaitEvent("worker", 0, "epoch", {{"epoch", 1}}, 60s);
  s.process("worker", 2).Signal(SIGSTOP);
  for (const int i : {0, 1, 3}) {
    TaskResult w = s.Finish("worker", i, 60s);
    INFO("worker " << i << ": " << w.err);
    CHECK(w.exit_code == 1);
    CHECK(w.err.find("worker:2 (stage 0 of replica 1)") != std::string::npos);
  }
  s.process("worker", 2).Signal(SIGKILL);
}

TEST_CASE("a cluster the split does not fit is refused with exit 2 naming both numbers", "[integration][cluster][model_parallel]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 200, 20);
  LocalCluster c({.num_ps = 0, .num_workers = 3, .job = PipelineJob(data, R"({"split": "layers", "stages": 2})", 1)});
  c.StartWorker(0);
  TaskResult w = c.Finish("worker", 0, 30s);
  CHECK(w.exit_code == 2);
  CHECK(w.err.find("3 workers are not a multiple of 2 stages") != std::string::npos);
  LocalCluster d({.num_ps = 0, .num_workers = 2, .job = PipelineJob(data, R"({"split": "layers", "stages": 2, "boundaries": [9]})", 1)});
  d.StartWorker(0);
  w = d.Finish("worker", 0, 30s);
  CHECK(w.exit_code == 2);
  CHECK(w.err.find("model_parallel.boundaries[0]: expected a layer index below 5") != std::string::npos);
  // Replicas combine by all-reduce among same-stage workers; ps tasks are refused, naming what is supported.
  LocalCluster p({.num_ps = 1, .num_workers = 2, .job = PipelineJob(data, R"({"split": "layers", "stages": 2})", 1)});
  p.StartWorker(0);
  w = p.Finish("worker", 0, 30s);
  CHECK(w.exit_code == 2);
  CHECK(w.err.find("cluster.ps: 1 ps tasks, but a model-parallel job's replicas combine their gradients by all-reduce among same-stage "
                   "workers, not through ps tasks") != std::string::npos);
}

}  // namespace
}  // namespace tfd::testing::cluster_pipeline_test
