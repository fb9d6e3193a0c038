// Accuracy on the real MNIST files (fetched by scripts/test) with fixed seeds, through the tfd
// binary. Thresholds sit below what these configurations reach, with margin for run-to-run noise
// in nothing but the machine: the runs themselves are deterministic.
#include <sstream>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/catch/subjects.h"
#include "test/test_util.h"

namespace tfd::testing::mnist_test {
namespace {

std::string g_mnist;

double FinalTestAccuracy(const std::string& model, const std::string& optimizer, int epochs, int batch) {
  TempDir dir;
  WriteFile(dir / "job.json", R"({"model": )" + model + R"(, "data": ")" + g_mnist + R"(", "epochs": )" +
                                  std::to_string(epochs) + R"(, "batch_size": )" + std::to_string(batch) +
                                  R"(, "optimizer": )" + optimizer + R"(, "seed": 1})");
  CommandResult r = RunCommand(std::string(TFD_BINARY) + " --standalone --log-format json --job " + dir / "job.json", dir);
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  std::istringstream in(r.out);
  nlohmann::json last;
  int epoch_events = 0;
  for (std::string line; std::getline(in, line);) {
    last = nlohmann::json::parse(line);
    epoch_events += last["event"] == "epoch";
  }
  CHECK(epoch_events == epochs);
  REQUIRE(last["event"] == "done");
  return last["test_accuracy"].get<double>();
}

TEST_CASE("softmax, sgd 0.5, batch 100: at least 91% after one epoch", "[mnist]") {
  double acc = FinalTestAccuracy(R"("softmax")", R"({"type": "sgd", "learning_rate": 0.5})", 1, 100);
  INFO("test accuracy " << acc);
  CHECK(acc >= 0.91);
}

TEST_CASE("mlp, adam 1e-3, batch 100: at least 94.5% after five epochs", "[mnist]") {
  double acc = FinalTestAccuracy(R"({"name": "mlp", "init": "glorot_uniform"})",
                                 R"({"type": "adam", "learning_rate": 0.001})", 5, 100);
  INFO("test accuracy " << acc);
  CHECK(acc >= 0.945);
}

TEST_CASE("dnn in the seed's configuration: at least 97% after four epochs", "[mnist]") {
  double acc = FinalTestAccuracy(R"("dnn")", R"({"type": "momentum", "learning_rate": 0.01, "momentum": 0.95})", 4, 50);
  INFO("test accuracy " << acc);
  CHECK(acc >= 0.97);
}

// Why this subject cannot run here ("" when it can): tfd_process_tests then skips it (exit 77).
std::string CannotRunHere(const std::string&) { return MissingMnist(&g_mnist); }
const SubjectNeeds kNeeds(__FILE__, &CannotRunHere);

}  // namespace
}  // namespace tfd::testing::mnist_test
