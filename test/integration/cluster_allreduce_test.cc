// Allreduce clusters of tfd processes (no ps, a ring of workers) on synthetic data: bit-identical
// runs whatever the start order or bucket size, a cluster token, uneven shards, a refused ps
// task, a killed worker and synchronised batch norm (2 and 3 workers, one joining with zeros).
// Every wait has a deadline that fails the test instead of hanging.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/ckpt/file.h"
#include "common/transport/auth.h"
#include "test/integration/cluster_util.h"
#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing::cluster_allreduce_test {
namespace {

using namespace std::chrono_literals;

TEST_CASE("allreduce runs are bit-identical across repeats, whatever the start order", "[integration][cluster][allreduce]") {
  TempDir data;
  const std::string job =
      SyntheticJob(data, 600, 100, R"({"mode": "allreduce"})", 2, R"({"type": "momentum", "learning_rate": 0.05, "momentum": 0.9})");
  LocalCluster a({.num_ps = 0, .num_workers = 3, .job = job});
  auto first = RunToCompletion(a);
  LocalCluster b({.num_ps = 0, .num_workers = 3, .job = job});
  for (int i : {2, 0, 1}) {
    b.StartWorker(i);
    std::this_thread::sleep_for(300ms);
  }
  for (int i = 0; i < 3; ++i) {
    TaskResult w = b.Finish("worker", i);
    INFO(w.err);
    REQUIRE(w.exit_code == 0);
    CHECK(w.done["params_sha256"] == first[0]["params_sha256"]);
  }
}

TEST_CASE("allreduce in buckets overlapped with backprop gives the same bits as one bucket after it", "[integration][cluster][allreduce]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 400, 100);
  const std::string optimizer = R"({"type": "momentum", "learning_rate": 0.02, "momentum": 0.9})";
  auto job = [&](int bucket_kb) {
    return Job(data.path(), R"({"mode": "allreduce", "bucket_kb": )" + std::to_string(bucket_kb) + "}", 2, optimizer, 20, R"({"name": "dnn"})");
  };
  // Two workers: each float's sum is one addition, the same whichever bucket it travels in.
  LocalCluster one({.num_ps = 0, .num_workers = 2, .job = job(0)});
  auto after = RunToCompletion(one);
  LocalCluster overlapped({.num_ps = 0, .num_workers = 2, .job = job(16)});  // the dnn's six layers in five buckets
  auto during = RunToCompletion(overlapped);
  REQUIRE(after[0]["params_sha256"].is_string());
  CHECK(after[0]["params_sha256"] == during[0]["params_sha256"]);
  CHECK(during[0]["params_sha256"] == during[1]["params_sha256"]);
  // Three workers: another summation order than one bucket's, but the same bits every run.
  LocalCluster a({.num_ps = 0, .num_workers = 3, .job = job(16)});
  auto first = RunToCompletion(a);
  LocalCluster b({.num_ps = 0, .num_workers = 3, .job = job(16)});
  auto second = RunToCompletion(b);
  for (int i = 0; i < 3; ++i) CHECK(second[static_cast<std::size_t>(i)]["params_sha256"] == first[0]["params_sha256"]);
}

TEST_CASE("allreduce workers on one host pass chunks through shared slots, with the socket's bits", "[integration][cluster][allreduce]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 400, 100);
  const std::string job = Job(data.path(), R"({"mode": "allreduce"})", 2, R"({"type": "momentum", "learning_rate": 0.02, "momentum": 0.9})",
                              20, R"({"name": "dnn"})");
  const ScopedEnv local("TFD_LOCAL_LINK", nullptr);  // same-host links, whatever the test's environment
  auto run = [&](bool shared) {
    const ScopedEnv slots("TFD_RING_SHM", shared ? nullptr : "off");  // inherited by the tasks started below
    LocalCluster c({.num_ps = 0, .num_workers = 3, .job = job});
    c.StartAll();
    return c.FinishAll();
  };
  const std::vector<TaskResult> in_slots = run(true), over_socket = run(false);
  REQUIRE(in_slots.size() == 3);
  REQUIRE(over_socket.size() == 3);
  for (int i = 0; i < 3; ++i) {
    INFO("worker " << i << ":\n" << in_slots[static_cast<std::size_t>(i)].err);
    REQUIRE(in_slots[static_cast<std::size_t>(i)].exit_code == 0);
    REQUIRE(over_socket[static_cast<std::size_t>(i)].exit_code == 0);
    CHECK(in_slots[static_cast<std::size_t>(i)].err.find("go through 8 shared slots of 256 KB") != std::string::npos);
    CHECK(over_socket[static_cast<std::size_t>(i)].err.find("shared slots of") == std::string::npos);
    CHECK(in_slots[static_cast<std::size_t>(i)].done["params_sha256"] == over_socket[0].done["params_sha256"]);
  }
}

TEST_CASE("allreduce with a cluster token: the ring authenticates, and a worker with another token is refused",
          "[integration][cluster][allreduce][auth]") {
  TempDir data;
  const std::string job = SyntheticJob(data, 600, 100, R"({"mode": "allreduce"})", 2);
  LocalCluster a({.num_ps = 0, .num_workers = 2, .job = job});
  const std::string token = a.dir() / "token", other = a.dir() / "other";
  REQUIRE(transport::ClusterToken::Generate().WriteFile(token).ok());
  REQUIRE(transport::ClusterToken::Generate().WriteFile(other).ok());
  auto done = RunToCompletion(a, {"--token-file", token});
  CHECK(done[0]["params_sha256"] == done[1]["params_sha256"]);

  LocalCluster b({.num_ps = 0, .num_workers = 2, .job = job});
  b.StartWorker(0, {"--token-file", token, "--startup-timeout", "20"});
  b.StartWorker(1, {"--token-file", other, "--startup-timeout", "20"});
  // The first to see the other's proof refuses and exits; the other may lose its link to it
  // mid-handshake before reading why, and then says so and points to the peer's log.
  int named = 0;
  for (int i = 0; i < 2; ++i) {
    TaskResult w = b.Finish("worker", i, 60s);
    INFO(w.err);
    CHECK(w.exit_code != 0);
    const bool says_token = w.err.find("holds a different cluster token") != std::string::npos;
    CHECK((says_token || w.err.find("during the token handshake") != std::string::npos));
    named += says_token ? 1 : 0;
  }
  CHECK(named >= 1);
}

TEST_CASE("allreduce with uneven shards: the worker that runs out joins the remaining steps and all finish identical", "[integration][cluster][allreduce]") {
  TempDir data;
  LocalCluster c({.num_ps = 0, .num_workers = 3, .job = SyntheticJob(data, 1200, 100, R"({"mode": "allreduce"})", 2)});
  c.StartWorker(0);
  c.StartWorker(1, {"--shard-limit", "100"});  // 5 batches an epoch where the others have 20
  c.StartWorker(2, {"--shard-limit", "250"});  // 12 batches (the last partial batch is dropped)
  std::vector<TaskResult> w;
  for (int i = 0; i < 3; ++i) {
    w.push_back(c.Finish("worker", i));
    INFO("worker:" << i << " " << w.back().err);
    REQUIRE(w.back().exit_code == 0);
  }
  CHECK(w[0].done["local_step"] == 40);
  CHECK(w[1].done["local_step"] == 10);
  CHECK(w[2].done["local_step"] == 24);
  for (int i = 0; i < 3; ++i) {
    CHECK(w[static_cast<std::size_t>(i)].done["global_step"] == 40);
    CHECK(w[static_cast<std::size_t>(i)].done["params_sha256"] == w[0].done["params_sha256"]);
  }
  CHECK(w[1].err.find("joined_without_data=15") != std::string::npos);
}

// A small convnet with batch norm after the convolution and after the hidden dense layer.
std::string BatchNormModel(bool sync) {
  const std::string bn = std::string(R"({"type": "batch_norm", "momentum": 0.9, "sync": )") + (sync ? "true" : "false") + "}";
  return R"({"layers": [{"type": "conv2d", "filters": 4, "kernel_size": 3, "strides": 2, "padding": "same"}, )" + bn +
         R"(, {"type": "flatten"}, {"type": "dense", "units": 16, "activation": "relu"}, )" + bn + R"(, {"type": "dense", "units": 10}]})";
}

TEST_CASE("sync batch norm keeps allreduce workers bit-identical, moving statistics included",
          "[integration][cluster][allreduce][norm]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 600, 100);
  const std::string sgd = R"({"type": "sgd", "learning_rate": 0.05})";
  LocalCluster two({.num_ps = 0, .num_workers = 2, .job = Job(data.path(), R"({"mode": "allreduce"})", 2, sgd, 50, BatchNormModel(true))});
  auto done = RunToCompletion(two);
  REQUIRE(done[0]["params_sha256"].is_string());
  CHECK(done[1]["params_sha256"] == done[0]["params_sha256"]);
  CHECK(done[0]["test_accuracy"].get<double>() > 0.3);
  // Without sync each worker moves its statistics on its own batches: the workers differ.
  LocalCluster local({.num_ps = 0, .num_workers = 2, .job = Job(data.path(), R"({"mode": "allreduce"})", 2, sgd, 50, BatchNormModel(false))});
  auto apart = RunToCompletion(local);
  CHECK(apart[1]["params_sha256"] != apart[0]["params_sha256"]);
}

TEST_CASE("sync batch norm on three allreduce workers with uneven shards: the joining worker's zero sums keep all identical",
          "[integration][cluster][allreduce][norm]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 600, 100);
  const std::string sgd = R"({"type": "sgd", "learning_rate": 0.05})";
  LocalCluster c({.num_ps = 0, .num_workers = 3, .job = Job(data.path(), R"({"mode": "allreduce"})", 2, sgd, 50, BatchNormModel(true))});
  c.StartWorker(0);
  c.StartWorker(1, {"--shard-limit", "100"});  // 2 batches an epoch where the others have 4: it joins 2 steps with zeros
  c.StartWorker(2);
  std::vector<TaskResult> w;
  for (int i = 0; i < 3; ++i) {
    w.push_back(c.Finish("worker", i));
    INFO("worker:" << i << " " << w.back().err);
    REQUIRE(w.back().exit_code == 0);
    for (const nlohmann::json& e : ParseEvents(w.back().out, "epoch")) CHECK(std::isfinite(e["loss"].get<double>()));
  }
  CHECK(w[1].done["local_step"] == 4);
  CHECK(w[1].err.find("joined_without_data=2") != std::string::npos);
  for (int i = 0; i < 3; ++i) {
    CHECK(w[static_cast<std::size_t>(i)].done["global_step"] == 8);
    CHECK(w[static_cast<std::size_t>(i)].done["params_sha256"] == w[0].done["params_sha256"]);
  }
}

// A small residual convnet: a strided conv, an identity block with batch norm, a strided block
// with a projection (and batch norm unless `bn` is empty), global pooling.
std::string ResidualModel(const std::string& bn) {
  const std::string norm = bn.empty() ? "" : ", " + bn;
  return R"({"layers": [{"type": "conv2d", "filters": 4, "kernel_size": 3, "strides": 2, "padding": "same"},
    {"type": "residual", "activation": "relu", "layers": [{"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same",
     "activation": "relu"})" + norm + R"(]},
    {"type": "residual", "activation": "relu", "layers": [{"type": "conv2d", "filters": 8, "kernel_size": 3, "strides": 2,
     "padding": "same"})" + norm + R"(]},
    {"type": "global_avg_pool2d"}, {"type": "dense", "units": 10}]})";
}

TEST_CASE("residual blocks with sync batch norm keep allreduce workers bit-identical, moving statistics included",
          "[integration][cluster][allreduce][residual]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 600, 100);
  const std::string sgd = R"({"type": "sgd", "learning_rate": 0.1})";
  const std::string model = ResidualModel(R"({"type": "batch_norm", "momentum": 0.9, "sync": true})");
  LocalCluster two({.num_ps = 0, .num_workers = 2, .job = Job(data.path(), R"({"mode": "allreduce"})", 2, sgd, 50, model)});
  auto done = RunToCompletion(two);
  REQUIRE(done[0]["params_sha256"].is_string());
  CHECK(done[1]["params_sha256"] == done[0]["params_sha256"]);
  CHECK(done[0]["test_accuracy"].get<double>() > 0.2);  // 10 classes: it learned something
}

TEST_CASE("residual blocks train in sync ps mode with the same bits on 1 and 2 ps", "[integration][cluster][residual]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 400, 100);
  const std::string job = Job(data.path(), R"({"mode": "sync"})", 1, R"({"type": "adam", "learning_rate": 0.01})", 50, ResidualModel(""));
  LocalCluster one({.num_ps = 1, .num_workers = 2, .job = job}), two({.num_ps = 2, .num_workers = 2, .job = job});
  const auto a = RunToCompletion(one);
  const auto b = RunToCompletion(two);
  REQUIRE(a[0]["params_sha256"].is_string());
  CHECK(a[1]["params_sha256"] == a[0]["params_sha256"]);
  CHECK(b[0]["params_sha256"] == a[0]["params_sha256"]);
  CHECK(b[1]["params_sha256"] == a[0]["params_sha256"]);
}

// The final checkpoint's values in variable order, and its moving statistics alone.
struct SavedParams {
  std::vector<float> all, moved;
};
SavedParams FinalCheckpoint(const std::string& dir) {
  Result<ckpt::Loaded> loaded = ckpt::LoadNewestValid(dir);
  INFO((loaded.ok() ? std::string() : loaded.status().message()));
  REQUIRE(loaded.ok());
  CHECK(loaded->checkpoint.final);
  SavedParams p;
  for (const ckpt::NamedTensor& t : loaded->checkpoint.tensors) {
    p.all.insert(p.all.end(), t.values.begin(), t.values.end());
    if (t.name.find("moving_") != std::string::npos) p.moved.insert(p.moved.end(), t.values.begin(), t.values.end());
  }
  return p;
}

TEST_CASE("batch norm in the ps modes: each worker keeps its own moving statistics, the chief's checkpoint holds the chief's",
          "[integration][cluster][norm]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 600, 100);
  for (const char* mode : {"sync", "async"}) {
    INFO(mode);
    TempDir ckpts;
    std::string job = Job(data.path(), fmt::format(R"({{"mode": "{}"}})", mode), 2, R"({"type": "sgd", "learning_rate": 0.1})", 50,
                          BatchNormModel(false));
    job.insert(job.rfind('}'), R"(, "checkpoint": {"dir": ")" + ckpts.path() + R"(", "every_steps": 5})");
    LocalCluster c({.num_ps = 1, .num_workers = 2, .job = job});
    auto done = RunToCompletion(c, {"--params-out", "PARAMS"});
    REQUIRE(done[0]["params_sha256"].is_string());
    CHECK(done[0]["test_accuracy"].get<double>() > 0.2);  // 10 classes, evaluated with the moving statistics
    const SavedParams saved = FinalCheckpoint(ckpts.path());
    // The statistics moved (the ps's copy stays at mean 0, variance 1) ...
    REQUIRE(!saved.moved.empty());
    CHECK(std::count(saved.moved.begin(), saved.moved.end(), 0.0f) + std::count(saved.moved.begin(), saved.moved.end(), 1.0f) <
          static_cast<std::ptrdiff_t>(saved.moved.size()));
    // ... and the checkpoint is the chief's final parameters, its moving statistics included.
    const std::vector<float> chief = ReadFloats(c.dir() / "params0.bin"), other = ReadFloats(c.dir() / "params1.bin");
    if (std::string(mode) == "sync") {
      CHECK(saved.all == chief);
      // Both workers pulled the same trained variables at the end; only their own statistics differ.
      CHECK(done[0]["params_sha256"] != done[1]["params_sha256"]);
    }
    CHECK(chief != other);
  }
}

TEST_CASE("a synchronised batch norm in a ps mode is refused naming model.layers[i].sync (exit 2)", "[integration][cluster][norm]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 200, 50);
  LocalCluster c({.num_ps = 1, .num_workers = 1,
                  .job = Job(data.path(), R"({"mode": "sync"})", 1, R"({"type": "sgd", "learning_rate": 0.1})", 50, BatchNormModel(true))});
  c.StartWorker(0);
  TaskResult w = c.Finish("worker", 0, 30s);
  INFO(w.err);
  CHECK(w.exit_code == 2);
  CHECK(w.err.find("model.layers[1].sync: a synchronised batch_norm sums over the allreduce ring, which sync mode has not") !=
        std::string::npos);
  // Inside a residual block: named by its path in the block.
  LocalCluster inner({.num_ps = 1, .num_workers = 1,
                      .job = Job(data.path(), R"({"mode": "async"})", 1, R"({"type": "sgd", "learning_rate": 0.1})", 50,
                                 ResidualModel(R"({"type": "batch_norm", "sync": true})"))});
  inner.StartWorker(0);
  TaskResult r = inner.Finish("worker", 0, 30s);
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("model.layers[1].layers[1].sync: a synchronised batch_norm sums over the allreduce ring, which async mode has not") !=
        std::string::npos);
}

// A job with a checkpoint folder `dir`: a save every 10 steps (one epoch of 400 examples on 2
// workers at batch 20) and at the end.
std::string Checkpointed(std::string job, const std::string& dir) {
  job.insert(job.rfind('}'), R"(, "checkpoint": {"dir": ")" + dir + R"(", "every_steps": 10, "keep": 10})");
  return job;
}

TEST_CASE("allreduce: the chief checkpoints the whole network, and a run resumed from it ends with the undisturbed run's bits",
          "[integration][cluster][allreduce][checkpoint]") {
  TempDir data, first;
  const std::string momentum = R"({"type": "momentum", "learning_rate": 0.05, "momentum": 0.9})";
  const std::string job = SyntheticJob(data, 400, 60, R"({"mode": "allreduce"})", 3, momentum);
  LocalCluster a({.num_ps = 0, .num_workers = 2, .job = Checkpointed(job, first.path())});
  auto whole = RunToCompletion(a);
  REQUIRE(whole[0]["params_sha256"].is_string());
  CHECK(whole[1]["params_sha256"] == whole[0]["params_sha256"]);
  Result<std::vector<std::string>> files = ckpt::List(first.path());
  REQUIRE(files.ok());
  // Newest first: step 30 (final), then 20 unless step 10's write was still going on then (a save
  // never waits for the one before: it is taken at the next step the write is done), then 10.
  REQUIRE(files->size() >= 2);
  CHECK(files->front().find("ckpt-000000000030.tfdckpt") != std::string::npos);
  REQUIRE(files->back().find("ckpt-000000000010.tfdckpt") != std::string::npos);
  CHECK(a.Events("worker", 1, "checkpoint").empty());  // the chief alone writes
  {
    Result<ckpt::Checkpoint> last = ckpt::Load(files->front());
    REQUIRE(last.ok());
    CHECK(last->final);
    CHECK(last->global_step == 30);
    CHECK(last->optimizer.slot_names == std::vector<std::string>{"momentum"});
    CHECK(last->num_workers == 2);
    CHECK_FALSE(last->model_card.empty());
    REQUIRE(last->tensors.size() == 4);
    CHECK(last->tensors[0].name == "dense/kernel");
    Result<ckpt::Checkpoint> epoch1 = ckpt::Load(files->back());
    REQUIRE(epoch1.ok());
    REQUIRE(epoch1->cursors.size() == 2);
    CHECK(epoch1->cursors[1].epoch == 1);
    CHECK(epoch1->cursors[1].next == 200);  // every batch of epoch 1's shard done
  }

  // From step 10 (after epoch 1): epochs 2 and 3 again, the same bits as the undisturbed run.
  TempDir b_dir;
  WriteFile(b_dir / "ckpt-000000000010.tfdckpt", ReadAll(files->back()));
  LocalCluster b({.num_ps = 0, .num_workers = 2, .job = Checkpointed(job, b_dir.path())});
  auto resumed = RunToCompletion(b);
  {
    const std::string out = b.process("worker", 0).out();
    INFO(b.process("worker", 0).err());
    CHECK(HasEvent(out, "restored", {{"path", b_dir / "ckpt-000000000010.tfdckpt"}, {"global_step", 10}}));
    CHECK(HasEvent(out, "resumed", {{"epoch", 2}, {"step", 1}, {"steps", 10}}));
  }
  for (const auto& d : resumed) {
    CHECK(d["global_step"] == 30);
    CHECK(d["params_sha256"] == whole[0]["params_sha256"]);
  }

  // Another optimizer: the chief refuses the checkpoint (exit 2) and the other worker ends with its reason.
  TempDir o_dir;
  WriteFile(o_dir / "ckpt-000000000010.tfdckpt", ReadAll(files->back()));
  std::string other = Checkpointed(job, o_dir.path());
  other.replace(other.find("0.05"), 4, "0.07");
  LocalCluster o({.num_ps = 0, .num_workers = 2, .job = other});
  o.StartWorker(0);
  o.StartWorker(1);
  TaskResult chief = o.Finish("worker", 0, 60s), worker1 = o.Finish("worker", 1, 60s);
  INFO(chief.err << "\n" << worker1.err);
  CHECK(chief.exit_code == 2);
  CHECK(chief.err.find("optimizer: " + (o_dir / "ckpt-000000000010.tfdckpt")) != std::string::npos);
  CHECK(worker1.exit_code != 0);
  CHECK(worker1.err.find("optimizer: ") != std::string::npos);
}

TEST_CASE("allreduce refuses a cluster with ps tasks, naming the field (exit 2)", "[integration][cluster][allreduce]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 2, .job = SyntheticJob(data, 200, 50, R"({"mode": "allreduce"})", 1)});
  c.StartWorker(0);
  TaskResult w = c.Finish("worker", 0, 30s);
  INFO(w.err);
  CHECK(w.exit_code == 2);
  CHECK(w.err.find("cluster.ps: 1 ps tasks, but allreduce mode has none") != std::string::npos);
}

TEST_CASE("allreduce: a killed worker makes every other worker fail naming it, within the deadline", "[integration][cluster][allreduce]") {
  TempDir data;
  LocalCluster c({.num_ps = 0, .num_workers = 4, .job = SyntheticJob(data, 2000, 50, R"({"mode": "allreduce"})", 1000)});
  for (int i = 0; i < 4; ++i) c.StartWorker(i, {"--peer-timeout", "5"});
  c.AwaitEvent("worker", 0, "epoch", {{"epoch", 1}}, 60s);
  c.process("worker", 2).Signal(SIGKILL);
  const std::string lost = "worker:2 (" + c.endpoint("worker", 2) + ")";
  for (int i : {0, 1, 3}) {
    TaskResult w = c.Finish("worker", i, 30s);
    INFO("worker:" << i << " " << w.err);
    CHECK(w.exit_code == 1);
    CHECK(w.err.find(lost) != std::string::npos);
  }
}

}  // namespace
}  // namespace tfd::testing::cluster_allreduce_test
