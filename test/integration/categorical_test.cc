// Categorical CSV columns end to end: a generated CSV (columns colour, x1, city, x2, label) whose
// class is (colour's index + city's index) mod 3, the numbers pure noise, trains an embedding
// network on an allreduce cluster of 2 workers past a floor (the workers alike) and exports it;
// `tfd predict` on raw strings (a city training never had among them) and ONNX Runtime on the ids
// the exported card's vocabulary gives those strings agree. The same data trains on a ps cluster
// (sync) and as a pipeline whose first stage holds the embedding. Exits 77 (skipped) at the ONNX
// step without node or onnxruntime-node.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "test/integration/cluster_util.h"
#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing::categorical_test {
namespace {

const std::vector<std::string> kColours = {"red", "green", "blue", "amber", "violet"};
const std::vector<std::string> kCities = {"oslo", "lima", "rome", "kyiv", "quito", "accra", "hanoi"};

// `rows` rows of colour,x1,city,x2,label; `unlabelled`: no label column, and every 5th city unseen.
std::string Rows(int rows, std::mt19937& gen, bool unlabelled = false) {
  std::normal_distribution<double> noise(0, 1);
  std::string text = unlabelled ? "colour,x1,city,x2\n" : "colour,x1,city,x2,label\n";
  for (int r = 0; r < rows; ++r) {
    const std::size_t c = gen() % kColours.size(), t = gen() % kCities.size();
    const std::string city = unlabelled && r % 5 == 0 ? "paris" : kCities[t];
    text += fmt::format("{},{:.3f},{},{:.3f}", kColours[c], noise(gen), city, noise(gen));
    text += unlabelled ? "\n" : fmt::format(",k{}\n", (c + t) % 3);
  }
  return text;
}

void WriteData(const TempDir& dir) {
  std::mt19937 gen(17);
  WriteFile(dir / "train.csv", Rows(1200, gen));
  WriteFile(dir / "test.csv", Rows(300, gen));
  WriteFile(dir / "new.csv", Rows(40, gen, /*unlabelled=*/true));
}

std::string Job(const TempDir& dir, const std::string& update, const std::string& extra = "") {
  return fmt::format(R"({{"model": {{"layers": [{{"type": "embedding", "output_dim": 4}}, {{"type": "dense", "units": 32, "activation": "relu"}},
                                               {{"type": "dense", "units": 3}}]}},
                          "data": {{"train": "{}", "test": "{}", "categorical": ["colour", "city"], "normalize": "standardize"}},
                          "epochs": 8, "batch_size": 32, "optimizer": {{"type": "adam", "learning_rate": 0.01}}, "update": {},
                          "seed": 3, "log_every_steps": 0{}}})",
                     dir / "train.csv", dir / "test.csv", update, extra);
}

std::vector<float> ReadFloats(const std::string& path) {
  const std::string bytes = ReadAll(path);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// The rows of new.csv as the exported model's input: each string through the card's vocabulary
// (id k + 1 for its k-th value, 0 for one it lacks), the numbers as they are.
std::vector<float> IdRows(const std::string& csv, const nlohmann::json& card) {
  std::vector<std::vector<std::string>> vocab(4);
  for (const auto& c : card["categorical"]) vocab[c["feature"].get<std::size_t>()] = c["vocabulary"].get<std::vector<std::string>>();
  std::vector<float> out;
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream cells(line);
    std::string cell;
    for (std::size_t j = 0; std::getline(cells, cell, ','); ++j) {
      if (vocab[j].empty()) {
        out.push_back(std::stof(cell));
        continue;
      }
      auto it = std::find(vocab[j].begin(), vocab[j].end(), cell);
      out.push_back(it == vocab[j].end() ? 0.0f : static_cast<float>(it - vocab[j].begin() + 1));
    }
  }
  return out;
}

TEST_CASE("categorical columns train an embedding on 2 allreduce workers; predict on strings and ONNX Runtime on ids agree",
          "[integration][cluster][categorical]") {
  TempDir dir;
  WriteData(dir);
  LocalCluster c({.num_ps = 0, .num_workers = 2, .job = Job(dir, R"({"mode": "allreduce"})", fmt::format(R"(, "export": {{"dir": "{}"}})", dir / "model"))});
  const auto done = RunToCompletion(c);
  REQUIRE(done.size() == 2);
  // The class is a function of the two columns alone (chance: 1/3); the first run reached 1.0.
  const double accuracy = done[0]["test_accuracy"].get<double>();
  CHECK(accuracy >= 0.95);
  CHECK(done[0]["params_sha256"] == done[1]["params_sha256"]);

  const CommandResult p = RunCommand(fmt::format("{} predict --model {} --data {} --out {}", kTfd, dir / "model", dir / "new.csv", dir / "p.npy"), dir);
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  const nlohmann::json card = nlohmann::json::parse(ReadAll(dir / "model/1/model.json"))["card"];
  REQUIRE(card["categorical"].size() == 2);
  CHECK(card["categorical"][1]["column"] == "city");
  CHECK(card["categorical"][1]["vocabulary"].size() == kCities.size());
  CHECK(card["categorical"][0]["vocabulary"][0] == "amber");  // sorted
  const std::vector<float> rows = IdRows(ReadAll(dir / "new.csv"), card);
  REQUIRE(rows.size() == 40 * 4);
  CHECK(rows[2] == 0);  // row 0's city is "paris": out of vocabulary
  {
    std::ofstream f(dir / "rows.f32", std::ios::binary);
    f.write(reinterpret_cast<const char*>(rows.data()), static_cast<std::streamsize>(rows.size() * sizeof(float)));
  }
  std::filesystem::create_directories(dir / "ort");
  const CommandResult ort = RunCommand(fmt::format("node {}/test/tools/ort_run.js run {}/model/1/model.onnx {} 40 4 {}", TFD_SOURCE_DIR, dir.path(),
                                                   dir / "rows.f32", dir / "ort"),
                                       dir);
  if (ort.exit_code == kSkipExitCode || ort.exit_code == 127) {  // no onnxruntime-node, or no node
    std::fprintf(stderr, "skipped: the ONNX check needs node and onnxruntime-node (scripts/fetch_onnxruntime.sh): %s\n", ort.err.c_str());
    std::exit(kSkipExitCode);
  }
  INFO(ort.err);
  REQUIRE(ort.exit_code == 0);
  const std::vector<float> onnx = ReadFloats(dir / "ort/probabilities.f32");
  const std::string npy = ReadAll(dir / "p.npy");
  std::vector<float> predicted((npy.size() - 128) / sizeof(float));  // a 2-D float32 .npy's header is 128 bytes
  std::memcpy(predicted.data(), npy.data() + npy.size() - predicted.size() * sizeof(float), predicted.size() * sizeof(float));
  REQUIRE(onnx.size() == 40 * 3);
  REQUIRE(predicted.size() == onnx.size());
  for (std::size_t i = 0; i < onnx.size(); ++i) {
    INFO("value " << i);
    CHECK(std::abs(onnx[i] - predicted[i]) <= 1e-5 * std::max(1.0f, std::abs(predicted[i])));
  }
}

TEST_CASE("categorical columns train on a sync ps cluster and as a 2-stage pipeline with the embedding in the first stage",
          "[integration][cluster][categorical]") {
  TempDir dir;
  WriteData(dir);
  {
    LocalCluster c({.num_ps = 1, .num_workers = 2, .job = Job(dir, R"({"mode": "sync"})")});
    const auto done = RunToCompletion(c);
    REQUIRE(done.size() == 2);
    CHECK(done[0]["test_accuracy"].get<double>() >= 0.95);
  }
  LocalCluster pipe({.num_ps = 0, .num_workers = 2,
                      .job = Job(dir, R"({"mode": "sync"})", R"(, "model_parallel": {"split": "layers", "stages": 2, "microbatches": 2})")});
  const auto done = RunToCompletion(pipe);
  REQUIRE(done.size() == 2);
  CHECK(done[0]["test_accuracy"].get<double>() >= 0.95);
}

TEST_CASE("a categorical column missing from the header, or an embedding without categorical data, is exit 2 naming the field",
          "[integration][categorical]") {
  TempDir dir;
  WriteData(dir);
  std::string job = Job(dir, R"({"mode": "async"})");
  const std::string town = std::string(job).replace(job.find(R"("city"])"), 7, R"("town"])");
  WriteFile(dir / "town.json", town);
  CommandResult r = RunCommand(kTfd + " --standalone --job " + dir / "town.json", dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("data.categorical[1]: no column \"town\"") != std::string::npos);
  const std::string none = std::string(job).replace(job.find(R"("categorical": ["colour", "city"], )"), 35, "");
  WriteFile(dir / "none.json", none);
  r = RunCommand(kTfd + " --standalone --job " + dir / "none.json", dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("expected a finite number, got \"") != std::string::npos);  // the strings are not numbers without data.categorical
}

}  // namespace
}  // namespace tfd::testing::categorical_test
