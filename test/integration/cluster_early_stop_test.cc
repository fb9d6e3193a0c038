// Early stopping in a cluster: the chief decides at the end of an epoch and every task obeys and
// exits 0 (ps modes: through the ps's PUSH_ACKs; allreduce: in an end-of-epoch collective).
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/integration/cluster_util.h"
#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing::cluster_early_stop_test {
namespace {

using namespace std::chrono_literals;

// No epoch can improve val_accuracy by more than 1: the chief stops after epoch 2 of kEpochs.
const std::string kStopAfterTwo =
    R"(, "validation_split": 200, "early_stopping": {"monitor": "val_accuracy", "patience": 1, "min_delta": 1.0})";
// Enough that an async worker cannot run all its epochs before the chief's decision reaches it: the
// chief evaluates the validation and test sets at each epoch's end, and on a loaded machine a
// worker:1 ran all of 20 (600 steps) in 0.1 s while the chief took 0.14 s over its first two.
constexpr int kEpochs = 1000;

std::string StoppingJob(const TempDir& data, const std::string& update) {
  WriteSyntheticMnist(data.path(), 1400, 100);
  return Job(data.path(), update, kEpochs, R"({"type": "sgd", "learning_rate": 0.1})", 20, R"({"name": "mlp", "init": "glorot_uniform"})",
             kStopAfterTwo);
}

void CheckStoppedEarly(LocalCluster& c) {
  for (int i = 0; i < c.num_ps(); ++i) c.StartPs(i);
  for (int i = 0; i < c.num_workers(); ++i) c.StartWorker(i);
  const std::vector<TaskResult> workers = c.FinishAll();  // every worker and ps exits 0
  const TaskResult& chief = workers[0];
  INFO(chief.err);
  CHECK(HasEvent(chief.out, "early_stopping", {{"epoch", 2}},
                 [](const nlohmann::json& e) { return FieldHas(e, "reason", "val_accuracy did not improve by 1 for 1 epoch (best "); }));
  const auto epochs = ParseEvents(chief.out, "epoch");
  REQUIRE(epochs.size() == 2);
  CHECK(epochs[1]["val_accuracy"].get<double>() >= 0);
  CHECK(epochs[1].contains("val_loss"));
  for (std::size_t i = 1; i < workers.size(); ++i) {
    INFO("worker " << i << ":\n" << workers[i].err);
    CHECK(HasEvent(workers[i].out, "early_stopping", {}, [](const nlohmann::json& e) { return !e.value("reason", "").empty(); }));
    CHECK(ParseEvents(workers[i].out, "epoch").size() < static_cast<std::size_t>(kEpochs));
    CHECK_FALSE(ParseEvents(workers[i].out, "early_stopping").empty());
  }
}

TEST_CASE("early stopping ends a 1 ps + 2 worker run for every task, async and sync", "[integration][cluster][early_stopping]") {
  for (const char* mode : {R"({"mode": "sync"})", R"({"mode": "async"})"}) {
    INFO(mode);
    TempDir data;
    LocalCluster c({.num_ps = 1, .num_workers = 2, .job = StoppingJob(data, mode)});
    CheckStoppedEarly(c);
  }
}

TEST_CASE("early stopping ends an allreduce run on every worker after the same epoch", "[integration][cluster][early_stopping]") {
  TempDir data;
  LocalCluster c({.num_ps = 0, .num_workers = 2, .job = StoppingJob(data, R"({"mode": "allreduce"})")});
  CheckStoppedEarly(c);
  // Every worker left after epoch 2 with the same parameters.
  const auto w0 = c.Events("worker", 0, "done"), w1 = c.Events("worker", 1, "done");
  REQUIRE((w0.size() == 1 && w1.size() == 1));
  CHECK(w0[0]["params_sha256"] == w1[0]["params_sha256"]);
  CHECK(w0[0]["global_step"] == w1[0]["global_step"]);
  CHECK(c.Events("worker", 1, "epoch").size() == 2);
}

// The chief writes the rule's record after every epoch it judges, before any save has made the
// checkpoint folder: the record is what lets a chief restarted before its first save keep its
// patience. Sync, 1 ps + 1 worker, a save only at the end; the rule stops the run after epoch 2.
TEST_CASE("the early-stopping record is written before the first save has made the checkpoint folder",
          "[integration][cluster][early_stopping]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 1400, 100);
  const std::string ckpt_dir = (std::filesystem::path(data.path()) / "ckpt").string();
  const std::string job = Job(data.path(), R"({"mode": "sync"})", kEpochs, R"({"type": "sgd", "learning_rate": 0.1})", 20,
                              R"({"name": "mlp", "init": "glorot_uniform"})",
                              kStopAfterTwo + R"(, "checkpoint": {"dir": ")" + ckpt_dir + R"(", "every_steps": 1000000})");
  LocalCluster c({.num_ps = 1, .num_workers = 1, .job = job});
  const std::vector<TaskResult> done = c.Run();
  INFO(done[0].err);
  CHECK(done[0].err.find("early-stopping record") == std::string::npos);  // no "... was not written"
  std::ifstream in(std::filesystem::path(ckpt_dir) / "early_stopping.json");
  REQUIRE(in.good());
  const nlohmann::json record = nlohmann::json::parse(in, nullptr, false);
  REQUIRE(record.is_object());
  CHECK(record["epoch"] == 2);
}

// A run checkpointed at every epoch's end (`every_steps`), every task killed once the chief's
// checkpoint at epoch 2's end (or the first after it) is written, and started again: the chief
// resumes from the checkpoint with the rule's patience where it was, so it stops after epoch 21 as an
// undisturbed run does (counting afresh, it would stop after epoch 23 or later). 6000 training
// examples; no epoch improves val_accuracy by 1, so epoch 1 is the best and patience 20 runs out
// after epoch 21. Patience 20 leaves the kill 19 epochs (seconds) of room after the checkpoint's
// event, which a slow disk delays. `*cluster` is left with the other tasks still to finish.
void ResumeAfterEpochTwoKill(const TempDir& data, const std::string& update, int num_ps, int num_workers, int every_steps,
                                   std::unique_ptr<LocalCluster>* cluster) {
  WriteSyntheticMnist(data.path(), 6200, 100);
  const std::string ckpt_dir = (std::filesystem::path(data.path()) / "ckpt").string();
  const std::string job = Job(data.path(), update, 40, R"({"type": "sgd", "learning_rate": 0.1})", 20,
                              R"({"name": "mlp", "init": "glorot_uniform"})",
                              R"(, "validation_split": 200, "early_stopping": {"monitor": "val_accuracy", "patience": 20, "min_delta": 1.0},)"
                              R"( "checkpoint": {"dir": ")" + ckpt_dir + R"(", "every_steps": )" + std::to_string(every_steps) + "}");
  *cluster = std::make_unique<LocalCluster>(LocalClusterOptions{.num_ps = num_ps, .num_workers = num_workers, .job = job});
  LocalCluster& c = **cluster;
  c.StartAll();
  // Epoch 2's save, or the first after it: one falling due while the last is still being written
  // waits for that write (a loaded machine's first write can outlast an epoch of this small model).
  c.AwaitEvent("worker", 0, "checkpoint", nlohmann::json::object(), 120s,
               [&](const nlohmann::json& e) { return e.value("global_step", 0) >= 2 * every_steps; });
  for (int i = 0; i < num_workers; ++i) c.process("worker", i).Signal(SIGKILL);
  for (int i = 0; i < num_ps; ++i) c.process("ps", i).Signal(SIGKILL);
  TaskResult first = c.Finish("worker", 0, 30s);
  for (int i = 1; i < num_workers; ++i) c.Finish("worker", i, 30s);
  for (int i = 0; i < num_ps; ++i) c.Finish("ps", i, 30s);
  REQUIRE(ParseEvents(first.out, "early_stopping").empty());  // killed before the rule could end it
  REQUIRE(ParseEvents(first.out, "epoch").size() < 21);
  c.StartAll();
  TaskResult chief = c.Finish("worker", 0, 180s);
  INFO(chief.err);
  CHECK(chief.exit_code == 0);
  CHECK(HasEvent(chief.out, "restored", {}));
  CHECK(chief.err.find("early stopping: resumed after epoch ") != std::string::npos);
  CHECK(HasEvent(chief.out, "early_stopping", {{"epoch", 21}},
                 [](const nlohmann::json& e) { return FieldHas(e, "reason", "val_accuracy did not improve by 1 for 20 epochs (best "); }));
  const auto epochs = ParseEvents(chief.out, "epoch");
  REQUIRE_FALSE(epochs.empty());
  CHECK(epochs.front()["epoch"].get<int>() >= 3);
  CHECK(epochs.back()["epoch"] == 21);
}

// Sync, 1 ps + 1 worker: 300 steps of 20 an epoch; the ps and the chief killed.
TEST_CASE("a run resumed from its checkpoint stops early after the same epoch as an undisturbed one",
          "[integration][cluster][early_stopping][fault]") {
  TempDir data;
  std::unique_ptr<LocalCluster> c;
  ResumeAfterEpochTwoKill(data, R"({"mode": "sync"})", 1, 1, 300, &c);
  CHECK(c->Finish("ps", 0, 30s).exit_code == 0);
}

// Allreduce, two workers: 150 steps of 20 on each worker's 3000 examples an epoch; both killed,
// the ring stops after epoch 21 on both.
TEST_CASE("an allreduce run resumed from its checkpoint stops early after the same epoch as an undisturbed one",
          "[integration][cluster][early_stopping][fault][allreduce]") {
  TempDir data;
  std::unique_ptr<LocalCluster> c;
  ResumeAfterEpochTwoKill(data, R"({"mode": "allreduce"})", 0, 2, 150, &c);
  TaskResult other = c->Finish("worker", 1, 30s);
  INFO(other.err);
  CHECK(other.exit_code == 0);
  CHECK(ParseEvents(other.out, "epoch").back()["epoch"] == 21);
}

}  // namespace
}  // namespace tfd::testing::cluster_early_stop_test
