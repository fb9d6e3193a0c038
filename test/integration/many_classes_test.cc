// More classes than a byte holds: a generated 300-class CSV (class c's features are its own ±1
// code over 24 features, plus Gaussian noise of 0.3; names "k0" .. "k299", whose sorted order is
// not their numeric order) trains standalone and on an allreduce cluster of 2 workers past a floor,
// `tfd predict` names the classes past the 256th right, and a label past the class limit is exit 2
// naming the file and the count. The codes are at least 3 flips apart, 5 noise deviations from
// the midway point, so the classes are separable: the dnn classified every test row right in the
// first runs (standalone and allreduce, 12 epochs). Labels cut to a byte would fold the 44 classes
// past the 256th into others and fall below the floors.
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "test/integration/cluster_util.h"
#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing::many_classes_test {
namespace {

constexpr int kClasses = 300, kFeatures = 24, kTrainPerClass = 12, kTestPerClass = 4;

std::string ClassName(int c) { return "k" + std::to_string(c); }

// Each class's ±1 code: drawn at random, redrawn while it is within 2 flips of an earlier one.
std::vector<std::vector<int>> Codes(std::mt19937& gen) {
  std::vector<std::vector<int>> codes;
  while (static_cast<int>(codes.size()) < kClasses) {
    std::vector<int> code(kFeatures);
    for (int& v : code) v = gen() % 2 ? 1 : -1;
    bool near = false;
    for (const auto& other : codes) {
      int flips = 0;
      for (int j = 0; j < kFeatures; ++j) flips += code[j] != other[j];
      near = near || flips < 3;
    }
    if (!near) codes.push_back(code);
  }
  return codes;
}

// Writes DIR/train.csv and DIR/test.csv (header f0..f23,label; the classes interleaved) and
// DIR/test_labels.txt (each test row's class name, in order).
void WriteManyClasses(const TempDir& dir) {
  std::mt19937 gen(11);
  const std::vector<std::vector<int>> codes = Codes(gen);
  std::normal_distribution<double> noise(0.0, 0.3);
  std::string header;
  for (int j = 0; j < kFeatures; ++j) header += fmt::format("f{},", j);
  header += "label\n";
  auto rows = [&](int per_class, std::string* labels) {
    std::string text = header;
    for (int r = 0; r < per_class; ++r)
      for (int c = 0; c < kClasses; ++c) {
        for (int j = 0; j < kFeatures; ++j) text += fmt::format("{:.4f},", codes[c][j] + noise(gen));
        text += ClassName(c) + "\n";
        if (labels != nullptr) *labels += ClassName(c) + "\n";
      }
    return text;
  };
  std::string test_labels;
  WriteFile(dir / "train.csv", rows(kTrainPerClass, nullptr));
  WriteFile(dir / "test.csv", rows(kTestPerClass, &test_labels));
  WriteFile(dir / "test_labels.txt", test_labels);
}

std::string ManyClassJob(const TempDir& dir, const std::string& update, int epochs) {
  return fmt::format(R"({{"model": "dnn", "data": {{"train": "{}", "test": "{}"}}, "epochs": {}, "batch_size": 32,
                          "optimizer": {{"type": "adam", "learning_rate": 0.002}}, "update": {}, "seed": 5, "log_every_steps": 0}})",
                     dir / "train.csv", dir / "test.csv", epochs, update);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST_CASE("a 300-class CSV trains standalone past its floor, and tfd predict names classes past the 256th", "[integration][data][predict]") {
  TempDir dir;
  WriteManyClasses(dir);
  WriteFile(dir / "job.json", ManyClassJob(dir, R"({"mode": "async"})", 12));
  const CommandResult r = RunCommand(fmt::format("{} --standalone --log-format json --job {} --export-dir {}", kTfd, dir / "job.json", dir / "model"), dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::vector<nlohmann::json> done = ParseEvents(r.out, "done");
  REQUIRE(done.size() == 1);
  // Chance is 1/300; the first run reached 1.0.
  const double accuracy = done[0]["test_accuracy"].get<double>();
  CHECK(accuracy >= 0.9);

  const CommandResult p = RunCommand(fmt::format("{} predict --model {} --data {} --out {}", kTfd, dir / "model", dir / "test.csv", dir / "p.csv"), dir);
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  CHECK(p.out.find(fmt::format("accuracy={:.4f}", accuracy)) != std::string::npos);  // what training reported
  const std::vector<std::string> rows = Lines(ReadAll(dir / "p.csv")), truth = Lines(ReadAll(dir / "test_labels.txt"));
  REQUIRE(rows.size() == truth.size() + 1);
  CHECK(rows[0] == "class,probability");
  int right = 0, right_past_256 = 0, past_256 = 0;
  std::set<std::string> named;
  for (std::size_t i = 0; i < truth.size(); ++i) {
    const std::string predicted = rows[i + 1].substr(0, rows[i + 1].find(','));
    named.insert(predicted);
    right += predicted == truth[i];
    if (std::stoi(truth[i].substr(1)) >= 256) past_256 += 1, right_past_256 += predicted == truth[i];
  }
  CHECK(right == static_cast<int>(std::lround(accuracy * static_cast<double>(truth.size()))));
  CHECK(right_past_256 >= 0.9 * past_256);  // k256 .. k299: ids past a byte's range (sorted by name, these are spread out)
  CHECK(named.size() >= 270);
}

TEST_CASE("a 300-class CSV trains on an allreduce cluster of 2 workers past its floor, the workers alike", "[integration][cluster][data]") {
  TempDir dir;
  WriteManyClasses(dir);
  LocalCluster c({.num_ps = 0, .num_workers = 2, .job = ManyClassJob(dir, R"({"mode": "allreduce"})", 12)});
  const auto done = RunToCompletion(c);
  REQUIRE(done.size() == 2);
  // A global batch of 64; the first run reached 1.0.
  CHECK(done[0]["test_accuracy"].get<double>() >= 0.9);
  CHECK(done[0]["params_sha256"] == done[1]["params_sha256"]);
}

TEST_CASE("a label past the class limit is exit 2 naming the file and the count", "[integration][data]") {
  TempDir dir;
  WriteFile(dir / "ids.csv", "x,y\n1,0\n2,70000\n3,1\n4,0\n");
  WriteFile(dir / "job.json", R"({"model": "dnn", "data": {"train": ")" + dir / "ids.csv" +
                                  R"(", "test_split": 1}, "epochs": 1, "batch_size": 2, "optimizer": {"type": "sgd", "learning_rate": 0.1}})");
  const CommandResult r = RunCommand(kTfd + " --standalone --job " + dir / "job.json", dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find(dir / "ids.csv" + ": label 70000 means 70001 classes; at most 65536 are supported") != std::string::npos);
}

}  // namespace
}  // namespace tfd::testing::many_classes_test
