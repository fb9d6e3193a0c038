// TensorBoard summaries read by a reader we did not write: real runs (standalone, and a ps cluster
// started by tfctl up) on synthetic data, their event files parsed by protobuf's own Python
// library from protoc-compiled event.proto/summary.proto (test/system/read_tfevents.py). Exits 77
// (skipped) where protoc or python3-protobuf is missing.
#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/catch/subjects.h"
#include "test/system/tfctl_util.h"

namespace tfd::testing::summaries_test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string kReader = READ_TFEVENTS;

// read_tfevents.py's JSON for `paths` (files or folders); fails the test when it finds the files broken.
nlohmann::json ReadWithProtobuf(const TempDir& dir, const std::string& paths) {
  CommandResult r = RunCommand("python3 " + kReader + " " + dir / "protos" + " " + paths, dir);
  INFO("read_tfevents.py stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out);
}

// The one event file of a task's folder, as read_tfevents.py read it.
const nlohmann::json& TaskFile(const nlohmann::json& read, const std::string& folder) {
  std::vector<std::string> found;
  for (const auto& [path, file] : read.items())
    if (fs::path(path).parent_path() == fs::path(folder)) found.push_back(path);
  INFO("files: " << read.dump().substr(0, 2000));
  REQUIRE(found.size() == 1);
  return read.at(found[0]);
}

std::vector<std::int64_t> Steps(const nlohmann::json& file, const std::string& tag) {
  std::vector<std::int64_t> steps;
  if (file["scalars"].contains(tag))
    for (const auto& p : file["scalars"][tag]) steps.push_back(p[0].get<std::int64_t>());
  return steps;
}

TEST_CASE("a standalone run's event file: file_version first, every tag, steps, values; a cut-off copy", "[system][summary]") {
  TempDir dir;
  WriteSyntheticMnist(dir.path(), 600, 100, 28, 10);
  WriteFile(dir / "job.json", R"({"model": "mlp", "data": ")" + dir.path() + R"(", "epochs": 2, "batch_size": 50, "seed": 2,
      "optimizer": {"type": "sgd", "learning_rate": 0.1}, "validation_split": 100,
      "summaries": {"every_steps": 2, "histograms_every_epochs": 1}})");
  CommandResult run = RunCommand(kTfd + " --standalone --job " + dir / "job.json" + " --summaries-dir " + dir / "tb", dir);
  INFO("tfd stderr: " << run.err);
  REQUIRE(run.exit_code == 0);
  const nlohmann::json read = ReadWithProtobuf(dir, dir / "tb");
  const nlohmann::json& f = TaskFile(read, dir / "tb/standalone");
  CHECK(f["file_version"] == "brain.Event:2");
  CHECK_FALSE(f["truncated"].get<bool>());
  // 500 examples / 50 = 10 steps an epoch: a point every 2 steps, 10 in all.
  const std::vector<std::int64_t> every_two = {2, 4, 6, 8, 10, 12, 14, 16, 18, 20};
  for (const char* tag : {"loss", "accuracy", "samples_per_sec", "learning_rate", "time/compute_seconds", "time/update_seconds"}) {
    INFO(tag);
    CHECK(Steps(f, tag) == every_two);
  }
  for (const char* tag : {"epoch/loss", "epoch/accuracy", "epoch/samples_per_sec", "test_accuracy", "val_accuracy", "val_loss"}) {
    INFO(tag);
    CHECK(Steps(f, tag) == std::vector<std::int64_t>{10, 20});
  }
  for (const auto& p : f["scalars"]["accuracy"]) CHECK((p[1] >= 0.0 && p[1] <= 1.0));
  for (const auto& p : f["scalars"]["learning_rate"]) CHECK(p[1].get<double>() == Approx(0.1));
  // The synthetic classes separate well: the last epoch's test accuracy is far above chance (0.1).
  CHECK(f["scalars"]["test_accuracy"].back()[1].get<double>() > 0.5);
  CHECK(f["scalars"]["loss"].back()[1].get<double>() < f["scalars"]["loss"].front()[1].get<double>());
  REQUIRE(f["histograms"].contains("weights/dense/kernel"));
  CHECK(f["histograms"]["weights/dense/kernel"].size() == 2);  // every epoch
  CHECK(f["histograms"]["weights/dense/kernel"][0][1].get<double>() == 784 * 100);

  // A task killed mid-write leaves a cut-off last record: every complete one still reads.
  const std::string original = fs::directory_iterator(dir / "tb/standalone")->path().string();
  const std::string bytes = ReadAll(original);
  WriteFile(dir / "cut.tfevents", bytes.substr(0, bytes.size() - 3));
  const nlohmann::json cut = ReadWithProtobuf(dir, dir / "cut.tfevents").at(dir / "cut.tfevents");
  CHECK(cut["truncated"].get<bool>());
  CHECK(cut["records"].get<int>() == f["records"].get<int>() - 1);
  CHECK(cut["file_version"] == "brain.Event:2");
}

TEST_CASE("tfctl up: a folder per task in the run folder, on the global step, the ps's staleness too", "[system][summary]") {
  TempDir dir;
  nlohmann::json cluster = nlohmann::json::parse(ReadAll(ClusterFile(dir, 2)));
  cluster["train"]["summaries"] = {{"every_steps", 5}};
  WriteFile(dir / "cluster.json", cluster.dump(2));
  Process p({kTfctl, "up", dir / "cluster.json"}, {}, dir / "out", dir / "err");
  const auto code = p.Wait(180s);
  INFO("tfctl stdout:\n" << p.out() << "\nstderr:\n" << p.err());
  REQUIRE(code.has_value());
  REQUIRE(*code == 0);
  const std::string run = RunFolder(dir);
  const nlohmann::json read = ReadWithProtobuf(dir, run);
  // 800 examples / 2 workers / 20 = 20 local steps an epoch, 40 in all: a point every 5.
  for (const char* task : {"worker:0", "worker:1"}) {
    INFO(task);
    const nlohmann::json& f = TaskFile(read, run + "/" + task);
    const std::vector<std::int64_t> steps = Steps(f, "loss");
    CHECK(steps.size() == 8);
    // Async: the global step counts both workers' updates, so it runs ahead of this worker's steps.
    REQUIRE_FALSE(steps.empty());
    CHECK(steps.back() >= 40);
    CHECK(steps.back() <= 80);
    CHECK(Steps(f, "epoch/loss").size() == 2);
  }
  CHECK(Steps(TaskFile(read, run + "/worker:0"), "test_accuracy").size() == 2);  // the chief evaluates
  CHECK(Steps(TaskFile(read, run + "/worker:1"), "test_accuracy").empty());
  const nlohmann::json& ps = TaskFile(read, run + "/ps:0");
  const std::vector<std::int64_t> ps_steps = Steps(ps, "staleness/mean");
  REQUIRE_FALSE(ps_steps.empty());
  CHECK(ps_steps.back() == 80);  // the last point: every update applied
  for (const auto& v : ps["scalars"]["staleness/mean"]) CHECK((v[1] >= 0.0 && v[1] < 80.0));
  CHECK(Steps(ps, "stale_gradients_dropped").size() == ps_steps.size());
}

// Why this subject cannot run here ("" when it can): tfd_process_tests then skips it (exit 77).
std::string CannotRunHere(const std::string&) {
  TempDir dir;
  const CommandResult check = RunCommand("python3 " + kReader + " --check " + dir / "protos", dir);
  if (check.exit_code == kSkipExitCode) return check.err.substr(0, check.err.find('\n'));
  if (check.exit_code != 0) {  // not a skip: the reader itself is broken
    std::fprintf(stderr, "read_tfevents.py --check failed (exit %d): %s", check.exit_code, check.err.c_str());
    std::exit(1);
  }
  return "";
}
const SubjectNeeds kNeeds(__FILE__, &CannotRunHere);

}  // namespace
}  // namespace tfd::testing::summaries_test
