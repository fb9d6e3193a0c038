// tfd predict --device cuda:0 beside the CPU on the same exported models (a dnn and a cnn trained
// a little on synthetic images): the same outputs within 1e-5 (relative) and the same accuracy.
// Exits 77 (skipped) where no CUDA device is visible.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "test/cuda_session.h"
#include "test/test_util.h"

namespace tfd::testing {
namespace {

// The float32 values of an .npy file tfd predict wrote (format 1.0, '<f4').
std::vector<float> NpyValues(const std::string& path) {
  const std::string bytes = ReadAll(path);
  REQUIRE(bytes.size() > 10);
  const std::size_t header = static_cast<unsigned char>(bytes[8]) | static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8;
  std::vector<float> v((bytes.size() - 10 - header) / 4);
  std::memcpy(v.data(), bytes.data() + 10 + header, v.size() * 4);
  return v;
}

TEST_CASE("tfd predict on the GPU gives the CPU's outputs and accuracy", "[cuda][predict]") {
  TempDir dir;
  WriteSyntheticMnist(dir.path(), 600, 200, 12);
  const char* conv = R"({"layers": [{"type": "conv2d", "filters": 8, "kernel_size": 3, "activation": "relu"},
                                    {"type": "max_pool2d", "pool_size": 2}, {"type": "dropout", "rate": 0.2},
                                    {"type": "dense", "units": 10}]})";
  for (const char* model : {R"("dnn")", conv}) {
    WriteFile(dir / "job.json", fmt::format(R"({{"model": {}, "data": "{}", "epochs": 2, "batch_size": 20,
        "optimizer": {{"type": "adam", "learning_rate": 0.01}}, "seed": 1}})", model, dir.path()));
    const std::string base = dir / "model";
    std::filesystem::remove_all(base);
    const CommandResult trained = RunCommand(fmt::format("{} --standalone --job {} --export-dir {}", TFD_BINARY, dir / "job.json", base), dir);
    INFO(trained.err);
    REQUIRE(trained.exit_code == 0);
    const CommandResult cpu = RunCommand(fmt::format("{} predict --model {} --data {} --out {}", TFD_BINARY, base, dir.path(), dir / "cpu.npy"), dir);
    const CommandResult gpu =
        RunCommand(fmt::format("{} predict --model {} --data {} --out {} --device cuda:0", TFD_BINARY, base, dir.path(), dir / "gpu.npy"), dir);
    INFO(cpu.err << gpu.err);
    REQUIRE(cpu.exit_code == 0);
    REQUIRE(gpu.exit_code == 0);
    const std::vector<float> a = NpyValues(dir / "cpu.npy"), b = NpyValues(dir / "gpu.npy");
    REQUIRE(a.size() == b.size());
    REQUIRE(a.size() == 200u * 10u);  // MNIST's files: 10 classes, one output each
    for (std::size_t i = 0; i < a.size(); ++i) {
      INFO("value " << i);
      CHECK(std::abs(a[i] - b[i]) <= 1e-5 * std::max(1.0f, std::abs(a[i])));
    }
    // The summary's accuracy, the same to 4 decimals (argmaxes of outputs this close agree).
    const auto accuracy = [](const std::string& s) {
      const std::size_t at = s.find("accuracy=");
      return at == std::string::npos ? s : s.substr(at, s.find(';', at) - at);
    };
    CHECK(accuracy(cpu.out) == accuracy(gpu.out));
  }
}

}  // namespace
}  // namespace tfd::testing

int main(int argc, char** argv) { return tfd::testing::RunCatchSessionOnCudaDevice(argc, argv); }
