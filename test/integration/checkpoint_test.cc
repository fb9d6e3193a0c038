// Checkpoints with real tfd processes on synthetic data: what the chief writes, a whole cluster
// killed and started again, a restore onto more ps tasks, a corrupted newest file, an optimizer
// change refused, and a restarted ps given its optimizer slots back. Every wait has a deadline
// that fails the test instead of hanging.
#include <csignal>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/ckpt/file.h"
#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing::checkpoint_test {
namespace {

using namespace std::chrono_literals;

// A cluster whose logs go into `dir`, which also holds the data and the checkpoints, so several
// clusters in turn share them; each worker's --job is given when it starts.
LocalClusterOptions InDir(const TempDir& dir, int num_ps, int num_workers) {
  return {.num_ps = num_ps, .num_workers = num_workers, .dir = &dir, .finish_limit = 60s};
}

// Writes a job file and returns its path. Synthetic data of 2000 examples, batch 20: 100 steps an
// epoch for one worker, 50 each for two.
std::string WriteJob(const TempDir& dir, const std::string& name, int epochs, const std::string& optimizer,
                     const std::string& checkpoint) {
  const std::string path = dir / name;
  WriteFile(path, Job(dir.path(), R"({"mode": "async"})", epochs, optimizer, 20, R"({"name": "mlp", "init": "glorot_uniform"})",
                      checkpoint.empty() ? "" : R"(, "checkpoint": )" + checkpoint));
  return path;
}

const std::string kAdam = R"({"type": "adam", "learning_rate": 0.01})";

// The number after `key` in the first line of `log` that holds `key`; -1 if none.
long long NumberAfter(const std::string& log, const std::string& key) {
  const auto at = log.find(key);
  return at == std::string::npos ? -1 : std::stoll(log.substr(at + key.size()));
}

TEST_CASE("the chief keeps the newest checkpoints, each loadable; a restore onto 2 ps goes on exactly as an unbroken run",
          "[integration][checkpoint]") {
  TempDir dir;
  WriteSyntheticMnist(dir.path(), 2000, 200);
  const std::string ckpt_dir = dir / "ckpt";
  const std::string spec = R"({"dir": ")" + ckpt_dir + R"(", "every_steps": 70, "keep": 2})";

  LocalCluster first(InDir(dir, 1, 1));
  std::vector<TaskResult> w = first.Run({"--job", WriteJob(dir, "3.json", 3, kAdam, spec)});
  CHECK(w[0].done["global_step"] == 300);
  // Due at 70, 140, 210 and 280 (or the first step after the previous write finished) and at the
  // end (300); the newest 2 are kept.
  REQUIRE(w[0].checkpoints.size() >= 2);
  CHECK(w[0].checkpoints.size() <= 5);
  CHECK(w[0].checkpoints.front()["global_step"].get<std::int64_t>() >= 70);
  CHECK(w[0].checkpoints.back()["global_step"] == 300);
  CHECK(w[0].checkpoints.back()["bytes"].get<std::int64_t>() > 0);
  CHECK(w[0].checkpoints.back()["path"] == ckpt_dir + "/ckpt-000000000300.tfdckpt");
  Result<std::vector<std::string>> files = ckpt::List(ckpt_dir);
  REQUIRE(files.ok());
  REQUIRE(files->size() == 2);
  for (const std::string& f : *files) {
    Result<ckpt::Checkpoint> c = ckpt::Load(f);
    INFO(f << ": " << c.status().ToString());
    REQUIRE(c.ok());
    CHECK(c->tensors.size() == 4);
    CHECK(c->optimizer.slot_names == std::vector<std::string>{"m", "v"});
    CHECK(c->optimizer.updates == static_cast<std::int64_t>(c->global_step));
  }
  Result<ckpt::Checkpoint> last = ckpt::Load(files->front());
  REQUIRE(last.ok());
  CHECK(last->global_step == 300);
  REQUIRE(last->cursors.size() == 1);
  CHECK(last->cursors[0].epoch == 4);  // all 3 epochs finished
  CHECK(last->cursors[0].next == 0);

  // Two more epochs on 2 ps, from the checkpoint.
  LocalCluster second(InDir(dir, 2, 1));
  w = second.Run({"--job", WriteJob(dir, "5.json", 5, kAdam, spec)});
  CHECK(HasEvent(w[0].out, "restored",
                 {{"path", ckpt_dir + "/ckpt-000000000300.tfdckpt"}, {"global_step", 300}, {"ps_restored", 2}, {"num_ps", 2}}));
  CHECK(HasEvent(w[0].out, "resumed", {{"epoch", 4}, {"step", 1}, {"steps", 100}}));
  CHECK(w[0].done["global_step"] == 500);
  CHECK(w[0].done["local_step"] == 500);

  // The same 5 epochs in one go: the restored run's parameters are bit-identical (values, Adam's
  // slots and update count all came back, and the data order went on where it stopped).
  LocalCluster unbroken(InDir(dir, 1, 1));
  std::vector<TaskResult> u = unbroken.Run({"--job", WriteJob(dir, "5-plain.json", 5, kAdam, "")});
  CHECK(u[0].done["params_sha256"] == w[0].done["params_sha256"]);
}

TEST_CASE("a cluster killed (SIGKILL) after a checkpoint and started again restores it and finishes its steps",
          "[integration][checkpoint][fault]") {
  TempDir dir;
  WriteSyntheticMnist(dir.path(), 2000, 200);
  const std::string ckpt_dir = dir / "ckpt";
  const std::string job = WriteJob(dir, "job.json", 300, kAdam, R"({"dir": ")" + ckpt_dir + R"(", "every_steps": 500})");
  LocalCluster c(InDir(dir, 1, 2));
  c.StartAll({"--job", job});
  // A checkpoint taken once both workers have finished an epoch, so both have a cursor to resume at:
  // one whose global step is past that of worker 1's first epoch (on a loaded machine worker 0 may
  // take a checkpoint or two before worker 1 has applied a step, and its line may come late).
  const std::int64_t first_epoch = c.AwaitEvent("worker", 1, "epoch", {{"epoch", 1}}, 30s)["global_step"].get<std::int64_t>();
  REQUIRE(first_epoch > 0);
  auto newest_checkpoint = [&] {
    const std::vector<nlohmann::json> written = c.Events("worker", 0, "checkpoint");
    return written.empty() ? std::int64_t{-1} : written.back()["global_step"].get<std::int64_t>();
  };
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (newest_checkpoint() <= first_epoch && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
  REQUIRE(newest_checkpoint() > first_epoch);
  // The fault must come mid-run (a slow disk makes a checkpoint event late).
  REQUIRE(c.Events("worker", 0, "done").empty());
  for (auto [type, i] : {std::pair{"worker", 0}, {"worker", 1}, {"ps", 0}}) c.process(type, i).Signal(SIGKILL);
  for (auto [type, i] : {std::pair{"worker", 0}, {"worker", 1}, {"ps", 0}}) c.Finish(type, i, 10s);
  Result<std::vector<std::string>> files = ckpt::List(ckpt_dir);
  REQUIRE(files.ok());
  REQUIRE_FALSE(files->empty());
  Result<ckpt::Checkpoint> saved = ckpt::Load(files->front());
  REQUIRE(saved.ok());

  c.StartAll({"--job", job});
  std::vector<TaskResult> w = c.FinishAll();
  INFO(w[0].err);
  const std::vector<nlohmann::json> restore = ParseEvents(w[0].out, "restored");
  const long long restored = restore.empty() ? -1 : restore[0]["global_step"].get<long long>();
  CHECK(HasEvent(w[0].out, "restored", {{"path", files->front()}}));
  CHECK(restored >= static_cast<long long>(saved->global_step));
  for (int i = 0; i < 2; ++i) {
    INFO("worker:" << i << "\n" << w[i].err);
    CHECK(HasEvent(w[i].out, "resumed"));  // not from local step 0
    CHECK(w[i].done["local_step"] == 300 * 50);
    CHECK(w[i].done["global_step"].get<std::int64_t>() > restored);
  }
  CHECK(w[0].done["test_accuracy"].get<double>() >= 0.9);
}

TEST_CASE("a corrupted newest checkpoint is skipped with a warning; an optimizer change is refused (exit 2)",
          "[integration][checkpoint]") {
  TempDir dir;
  WriteSyntheticMnist(dir.path(), 2000, 200);
  const std::string ckpt_dir = dir / "ckpt";
  const std::string spec = R"({"dir": ")" + ckpt_dir + R"(", "every_steps": 50})";
  {
    LocalCluster first(InDir(dir, 1, 1));
    first.Run({"--job", WriteJob(dir, "2.json", 2, kAdam, spec)});
  }
  Result<std::vector<std::string>> files = ckpt::List(ckpt_dir);
  REQUIRE(files.ok());
  REQUIRE(files->size() >= 2);
  const std::string newest = files->at(0), previous = files->at(1);
  CHECK(newest == ckpt_dir + "/ckpt-000000000200.tfdckpt");
  Result<ckpt::Checkpoint> fallback = ckpt::Load(previous);
  REQUIRE(fallback.ok());
  {
    std::string bytes = ReadAll(newest);
    REQUIRE(bytes.size() > 1000);
    bytes[bytes.size() / 2] ^= 0x40;
    WriteFile(newest, bytes);
  }
  {
    LocalCluster second(InDir(dir, 1, 1));
    std::vector<TaskResult> w = second.Run({"--job", WriteJob(dir, "3.json", 3, kAdam, spec)});
    INFO(w[0].err);
    CHECK(w[0].err.find("warning skipping checkpoint " + newest + ": record ") != std::string::npos);
    CHECK(HasEvent(w[0].out, "restored", {{"path", previous}, {"global_step", fallback->global_step}}));
    CHECK(w[0].done["global_step"] == 300);
  }
  LocalCluster third(InDir(dir, 1, 1));
  third.StartPs(0);
  third.StartWorker(0, {"--job", WriteJob(dir, "lr.json", 4, R"({"type": "adam", "learning_rate": 0.02})", spec)});
  TaskResult w = third.Finish("worker", 0, 30s);
  CHECK(w.exit_code == 2);
  INFO(w.err);
  CHECK(w.err.find("optimizer: " + ckpt_dir + "/ckpt-000000000300.tfdckpt: saved with optimizer \"adam learning_rate=0.01 ") != std::string::npos);
  CHECK(w.err.find("refusing to restore its slots") != std::string::npos);
  third.process("ps", 0).Signal(SIGTERM);
  third.Finish("ps", 0, 10s);
}

TEST_CASE("a ps killed and restarted gets the latest checkpoint's Adam slots back", "[integration][checkpoint][fault]") {
  TempDir dir;
  WriteSyntheticMnist(dir.path(), 2000, 200);
  const std::string ckpt_dir = dir / "ckpt";
  // 1000 epochs (about 15 s here): long enough that the first checkpoint, written and fsynced
  // after step 500, comes mid-run even when the disk is slow under a loaded ctest (at 300 epochs
  // the chief once finished first).
  const std::string job = WriteJob(dir, "job.json", 1000, kAdam, R"({"dir": ")" + ckpt_dir + R"(", "every_steps": 500})");
  LocalCluster c(InDir(dir, 1, 2));
  c.StartAll({"--job", job});
  c.AwaitEvent("worker", 0, "checkpoint", {}, 30s, [&](const nlohmann::json& e) { return FieldHas(e, "path", ckpt_dir + "/"); });
  // The fault must come mid-run (a slow disk makes the first checkpoint event late).
  REQUIRE(c.Events("worker", 0, "done").empty());
  c.process("ps", 0).Signal(SIGKILL);
  c.Finish("ps", 0, 10s);
  std::this_thread::sleep_for(200ms);
  c.StartPs(0);
  std::vector<TaskResult> w = c.FinishAll();
  INFO(w[0].err);
  CHECK(w[0].err.find("restarted: initialised again from this chief's parameters at global_step ") != std::string::npos);
  CHECK(w[0].err.find(" with the latest checkpoint's optimizer slots (") != std::string::npos);
  const std::string ps = ReadAll(dir / "ps0.1.err");
  INFO(ps);
  CHECK(ps.find(", with optimizer slots (") != std::string::npos);
  // The updates the slots belong to: at least the first checkpoint's.
  const auto slots = ps.find("with optimizer slots (");
  REQUIRE(slots != std::string::npos);
  CHECK(NumberAfter(ps.substr(slots), "floats, ") >= 500);
  CHECK(w[0].done["test_accuracy"].get<double>() >= 0.9);
}

}  // namespace
}  // namespace tfd::testing::checkpoint_test
