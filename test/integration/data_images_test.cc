// Image folders through the tfd binary: configs/jobs/mnist-png-dnn.json as it is, run in a folder
// whose data/mnist-png holds a synthetic MNIST-like set as PNG files, and a job of three named
// classes in RGB, resized, with a held-out test split. Each must train to a high test accuracy.
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/image_files.h"
#include "test/test_util.h"

namespace tfd::testing::data_images_test {
namespace {

// The done event's test accuracy of `tfd --standalone --job JOB` run in `dir`.
double TestAccuracy(const TempDir& dir, const std::string& job) {
  CommandResult r = RunCommand("cd " + dir.path() + " && " + TFD_BINARY + " --standalone --log-format json --job " + job, dir);
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  std::vector<nlohmann::json> done = ParseEvents(r.out, "done");
  REQUIRE(done.size() == 1);
  return done[0]["test_accuracy"].get<double>();
}

TEST_CASE("the ready job for MNIST as PNG folders trains on a synthetic set written as PNGs", "[images]") {
  TempDir dir;
  WriteSyntheticImageFolders(dir / "data/mnist-png", 2000, 400, {"0", "1", "2", "3"}, 8);
  const double acc = TestAccuracy(dir, std::string(TFD_SOURCE_DIR) + "/configs/jobs/mnist-png-dnn.json");
  INFO("test accuracy " << acc);
  CHECK(acc >= 0.95);
}

TEST_CASE("three named classes in RGB, resized, with a held-out test split", "[images]") {
  TempDir dir;
  WriteSyntheticImageFolders(dir / "pets", 1500, 0, {"frog", "cat", "dog"}, 9);
  WriteFile(dir / "job.json", R"({"model": "dnn", "epochs": 3, "batch_size": 50, "seed": 2,
    "optimizer": {"type": "momentum", "learning_rate": 0.01, "momentum": 0.95},
    "data": {"format": "images", "train": "pets/train", "test_split": 0.2, "image_size": [6, 6], "color": "rgb"}})");
  const double acc = TestAccuracy(dir, dir / "job.json");
  INFO("test accuracy " << acc);
  CHECK(acc >= 0.95);
}

}  // namespace
}  // namespace tfd::testing::data_images_test
