// `tfd predict` through the tfd binary on models a standalone run exported (--export-dir): the
// metric it prints equals the one the run's `done` event reported on the same test file (to the 4
// decimals it prints), its rows (CSV with the top K, .npy of probabilities or outputs) agree with
// each other, a file without the label column gives the same predictions, and every bad input is
// one line on stderr naming the flag or file, exit 2. Data: scikit-learn's breast_cancer.csv
// (Debian python3-sklearn), a generated regression CSV, and MNIST's t10k pair when TFD_MNIST_DIR
// holds it.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "test/test_util.h"

namespace tfd::testing::predict_test {
namespace {

namespace fs = std::filesystem;
const std::string kBreastCancer = "/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv";
constexpr int kBcTrain = 455, kBcTest = 114;  // scikit-learn's 569 rows, the first 80% train

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string Joined(const std::vector<std::string>& lines, std::size_t from, std::size_t to) {
  std::string s;
  for (std::size_t i = from; i < to && i < lines.size(); ++i) s += lines[i] + "\n";
  return s;
}

// Trains `job` standalone with --export-dir DIR/model; returns the run's `done` event.
nlohmann::json TrainAndExport(const TempDir& dir, const std::string& name, const std::string& job) {
  WriteFile(dir / (name + ".json"), job);
  const CommandResult r = RunCommand(fmt::format("{} --standalone --log-format json --job {} --export-dir {}", TFD_BINARY, dir / (name + ".json"),
                                                 dir / (name + "-model")),
                                     dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  REQUIRE(ParseEvents(r.out, "exported").size() == 1);
  const std::vector<nlohmann::json> done = ParseEvents(r.out, "done");
  REQUIRE(done.size() == 1);
  return done[0];
}

CommandResult Predict(const TempDir& dir, const std::string& args) { return RunCommand(fmt::format("{} predict {}", TFD_BINARY, args), dir); }

// The value of `key=` in the summary line tfd predict prints ("...; accuracy=0.9649; ..."); NaN without one.
double Printed(const std::string& text, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(key + "=([0-9.]+)"))) return NAN;
  return std::stod(m[1]);
}

std::string Decimals4(double v) { return fmt::format("{:.4f}", v); }

// An .npy file of float32 as numpy.save writes it: its shape and values.
struct Npy {
  std::vector<std::uint64_t> shape;
  std::vector<float> values;
};
Npy ReadNpy(const std::string& path) {
  const std::string bytes = ReadAll(path);
  REQUIRE(bytes.size() > 10);
  REQUIRE(bytes.compare(0, 6, "\x93NUMPY") == 0);
  const std::size_t header = 10 + static_cast<std::uint8_t>(bytes[8]) + 256u * static_cast<std::uint8_t>(bytes[9]);
  const std::string dict = bytes.substr(10, header - 10);
  CHECK(dict.find("'descr': '<f4'") != std::string::npos);
  std::smatch m;
  REQUIRE(std::regex_search(dict, m, std::regex(R"('shape': \(([0-9, ]*)\))")));
  Npy out;
  std::istringstream dims(m[1].str());
  for (std::string d; std::getline(dims, d, ',');)
    if (d.find_first_not_of(' ') != std::string::npos) out.shape.push_back(std::stoull(d));
  out.values.resize((bytes.size() - header) / sizeof(float));
  std::memcpy(out.values.data(), bytes.data() + header, out.values.size() * sizeof(float));
  return out;
}

// An .npy file as numpy.save writes one: `descr` ('<f4', '<i8'), a 1-D or 2-D shape, the raw bytes.
void WriteNpy(const std::string& path, const std::string& descr, const std::string& shape, const void* data, std::size_t bytes) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(dict.size() & 0xff) + static_cast<char>(dict.size() >> 8) + dict;
  out.append(static_cast<const char*>(data), bytes);
  WriteFile(path, out);
}

// Column `k` of a CSV's rows after its header.
std::vector<std::string> Column(const std::string& csv, std::size_t k) {
  std::vector<std::string> out;
  const std::vector<std::string> lines = Lines(csv);
  for (std::size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> cells;
    std::istringstream in(lines[i]);
    for (std::string c; std::getline(in, c, ',');) cells.push_back(c);
    out.push_back(k < cells.size() ? cells[k] : "");
  }
  return out;
}

// Without its last column.
std::string DropLastColumn(const std::string& csv) {
  std::string out;
  for (const std::string& line : Lines(csv)) out += line.substr(0, line.rfind(',')) + "\n";
  return out;
}

// breast_cancer.csv split by row order, each part keeping the file's first line (scikit-learn's
// "569,30,malignant,benign"), which the job skips with skip_rows 1; a copy of the test rows
// without that line, and one without the label column either.
struct BreastCancerFiles {
  std::string train, test, test_bare, test_unlabelled;
};
BreastCancerFiles WriteBreastCancer(const TempDir& dir) {
  INFO(kBreastCancer << ": missing (scripts/setup installs python3-sklearn)");
  REQUIRE(fs::exists(kBreastCancer));
  const std::vector<std::string> lines = Lines(ReadAll(kBreastCancer));
  REQUIRE(lines.size() == 1 + kBcTrain + kBcTest);
  BreastCancerFiles f{dir / "bc_train.csv", dir / "bc_test.csv", dir / "bc_test_bare.csv", dir / "bc_test_unlabelled.csv"};
  WriteFile(f.train, Joined(lines, 0, 1) + Joined(lines, 1, 1 + kBcTrain));
  WriteFile(f.test, Joined(lines, 0, 1) + Joined(lines, 1 + kBcTrain, lines.size()));
  WriteFile(f.test_bare, Joined(lines, 1 + kBcTrain, lines.size()));
  WriteFile(f.test_unlabelled, DropLastColumn(Joined(lines, 1 + kBcTrain, lines.size())));
  return f;
}

std::string BreastCancerJob(const BreastCancerFiles& f) {
  return R"({"model": "dnn", "data": {"train": ")" + f.train + R"(", "test": ")" + f.test +
         R"(", "skip_rows": 1, "header": false, "normalize": "standardize"}, "epochs": 4, "batch_size": 32,
         "optimizer": {"type": "adam", "learning_rate": 0.001}, "seed": 3, "log_every_steps": 0})";
}

TEST_CASE("tfd predict on breast cancer: the accuracy training reported, CSV and .npy rows that agree, the label column optional",
          "[integration][predict]") {
  TempDir dir;
  const BreastCancerFiles f = WriteBreastCancer(dir);
  const nlohmann::json done = TrainAndExport(dir, "bc", BreastCancerJob(f));
  const std::string model = dir / "bc-model";

  const CommandResult csv = Predict(dir, fmt::format("--model {} --data {} --out {} --top 2", model, f.test, dir / "p.csv"));
  INFO(csv.err);
  REQUIRE(csv.exit_code == 0);
  CHECK(Decimals4(Printed(csv.out, "accuracy")) == Decimals4(done["test_accuracy"].get<double>()));
  CHECK(csv.out.find(fmt::format("{} examples", kBcTest)) != std::string::npos);
  const std::string rows = ReadAll(dir / "p.csv");
  const std::vector<std::string> lines = Lines(rows);
  REQUIRE(lines.size() == 1 + kBcTest);
  CHECK(lines[0] == "class,probability,class_2,probability_2");
  const std::vector<std::string> classes = Column(rows, 0), second = Column(rows, 2);
  for (std::size_t i = 0; i < classes.size(); ++i) {
    CHECK((classes[i] == "0" || classes[i] == "1"));
    CHECK(second[i] != classes[i]);
    CHECK(std::stod(Column(rows, 1)[i]) >= std::stod(Column(rows, 3)[i]));
  }

  const CommandResult npy = Predict(dir, fmt::format("--model {}/1 --data {} --out {}", model, f.test, dir / "p.npy"));
  REQUIRE(npy.exit_code == 0);
  const Npy p = ReadNpy(dir / "p.npy");
  REQUIRE(p.shape == std::vector<std::uint64_t>{kBcTest, 2});
  REQUIRE(p.values.size() == 2u * kBcTest);
  for (int i = 0; i < kBcTest; ++i) {
    const float a = p.values[2 * i], b = p.values[2 * i + 1];
    CHECK(a + b == Approx(1).epsilon(1e-5));
    CHECK(classes[static_cast<std::size_t>(i)] == (b > a ? "1" : "0"));
  }

  SECTION("without the label column: the same classes, no accuracy") {
    // A file written without scikit-learn's first line is read with --skip-rows 0.
    const CommandResult bare = Predict(dir, fmt::format("--model {} --data {} --skip-rows 0 --out {}", model, f.test_unlabelled, dir / "q.csv"));
    INFO(bare.err);
    REQUIRE(bare.exit_code == 0);
    CHECK(Column(ReadAll(dir / "q.csv"), 0) == classes);
    CHECK(std::isnan(Printed(bare.out, "accuracy")));
  }
  SECTION("an .npy of the same rows: the same classes without --labels, the accuracy with them") {
    std::vector<float> x;
    std::vector<std::int64_t> y;
    for (const std::string& line : Lines(ReadAll(f.test_bare))) {
      std::istringstream in(line);
      std::vector<double> cells;
      for (std::string c; std::getline(in, c, ',');) cells.push_back(std::stod(c));
      REQUIRE(cells.size() == 31);
      for (int j = 0; j < 30; ++j) x.push_back(static_cast<float>(cells[static_cast<std::size_t>(j)]));
      y.push_back(static_cast<std::int64_t>(cells[30]));
    }
    WriteNpy(dir / "x.npy", "<f4", fmt::format("({}, 30)", kBcTest), x.data(), x.size() * sizeof(float));
    WriteNpy(dir / "y.npy", "<i8", fmt::format("({},)", kBcTest), y.data(), y.size() * sizeof(std::int64_t));
    const CommandResult bare = Predict(dir, fmt::format("--model {} --data {} --out {}", model, dir / "x.npy", dir / "x.csv"));
    INFO(bare.err);
    REQUIRE(bare.exit_code == 0);
    CHECK(Column(ReadAll(dir / "x.csv"), 0) == classes);
    CHECK(std::isnan(Printed(bare.out, "accuracy")));
    const CommandResult labelled = Predict(dir, fmt::format("--model {} --data {} --labels {} --out {}", model, dir / "x.npy", dir / "y.npy", dir / "x.csv"));
    REQUIRE(labelled.exit_code == 0);
    CHECK(Decimals4(Printed(labelled.out, "accuracy")) == Decimals4(done["test_accuracy"].get<double>()));
  }
  SECTION("the job's skip_rows applies unless --skip-rows says otherwise, and the summary says so") {
    const CommandResult kept = Predict(dir, fmt::format("--model {} --data {} --skip-rows 0", model, f.test_bare));
    REQUIRE(kept.exit_code == 0);
    CHECK(Decimals4(Printed(kept.err, "accuracy")) == Decimals4(done["test_accuracy"].get<double>()));
    CHECK(Lines(kept.out).size() == 1 + kBcTest);  // the rows on stdout, the summary on stderr
    const CommandResult skipped = Predict(dir, fmt::format("--model {} --data {}", model, f.test_bare));
    REQUIRE(skipped.exit_code == 0);
    CHECK(Lines(skipped.out).size() == kBcTest);
    CHECK(skipped.err.find("first 1 rows skipped") != std::string::npos);
  }
}

// y = sin(2 x0) + x1 x2 - 0.5 x3 + noise, x normal with means far from 0 (so standardize matters).
void WriteRegressionCsv(const std::string& path, const std::string& unlabelled, int rows, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0, 1);
  std::string csv = "x0,x1,x2,x3,y\n", bare = "x0,x1,x2,x3\n";
  for (int i = 0; i < rows; ++i) {
    const double x0 = normal(gen), x1 = 5 + normal(gen), x2 = normal(gen), x3 = 100 + 10 * normal(gen);
    const double y = std::sin(2 * x0) + 0.2 * x1 * x2 - 0.05 * (x3 - 100) + 0.1 * normal(gen);
    const std::string x = fmt::format("{:.5f},{:.5f},{:.5f},{:.5f}", x0, x1, x2, x3);
    csv += fmt::format("{},{:.5f}\n", x, y);
    bare += x + "\n";
  }
  WriteFile(path, csv);
  WriteFile(unlabelled, bare);
}

TEST_CASE("tfd predict on a regression model prints the MAE and RMSE training reported; .npy holds the outputs", "[integration][predict]") {
  TempDir dir;
  WriteRegressionCsv(dir / "r_train.csv", dir / "unused.csv", 400, 5);
  WriteRegressionCsv(dir / "r_test.csv", dir / "r_test_unlabelled.csv", 100, 6);
  const nlohmann::json done = TrainAndExport(dir, "reg", R"({"model": "mlp", "data": {"train": ")" + dir / "r_train.csv" + R"(", "test": ")" +
                                                             dir / "r_test.csv" + R"(", "task": "regression", "label": "y", "normalize": "standardize"},
      "epochs": 5, "batch_size": 20, "optimizer": {"type": "adam", "learning_rate": 0.01}, "seed": 3, "log_every_steps": 0})");
  const std::string model = dir / "reg-model";
  const CommandResult r = Predict(dir, fmt::format("--model {} --data {} --out {}", model, dir / "r_test.csv", dir / "r.csv"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(Decimals4(Printed(r.out, "mae")) == Decimals4(done["test_mae"].get<double>()));
  CHECK(Decimals4(Printed(r.out, "rmse")) == Decimals4(done["test_rmse"].get<double>()));
  const std::string rows = ReadAll(dir / "r.csv");
  REQUIRE(Lines(rows).size() == 101);
  CHECK(Lines(rows)[0] == "prediction");

  const CommandResult bare = Predict(dir, fmt::format("--model {} --data {} --out {}", model, dir / "r_test_unlabelled.csv", dir / "r2.csv"));
  REQUIRE(bare.exit_code == 0);
  CHECK(ReadAll(dir / "r2.csv") == rows);
  CHECK(std::isnan(Printed(bare.out, "mae")));

  REQUIRE(Predict(dir, fmt::format("--model {} --data {} --out {}", model, dir / "r_test.csv", dir / "r.npy")).exit_code == 0);
  const Npy p = ReadNpy(dir / "r.npy");
  REQUIRE(p.shape == std::vector<std::uint64_t>{100, 1});
  const std::vector<std::string> printed = Column(rows, 0);
  REQUIRE(p.values.size() == printed.size());
  for (std::size_t i = 0; i < printed.size(); ++i) CHECK(std::stof(printed[i]) == p.values[i]);  // fmt's shortest form reads back exactly
}

TEST_CASE("tfd predict on the MNIST folder reads its t10k pair and prints the run's test accuracy", "[integration][predict][mnist]") {
  std::string mnist;
  if (!FindMnist(&mnist)) {
    WARN("no MNIST in TFD_MNIST_DIR: the MNIST prediction was not run");
    return;
  }
  TempDir dir;
  const nlohmann::json done = TrainAndExport(dir, "mnist", R"({"model": "softmax", "data": ")" + mnist + R"(", "epochs": 1, "batch_size": 100,
      "optimizer": {"type": "sgd", "learning_rate": 0.5}, "seed": 1, "log_every_steps": 0})");
  const CommandResult r = Predict(dir, fmt::format("--model {} --data {} --out {}", dir / "mnist-model", mnist, dir / "m.npy"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(Decimals4(Printed(r.out, "accuracy")) == Decimals4(done["test_accuracy"].get<double>()));
  CHECK(ReadNpy(dir / "m.npy").shape == std::vector<std::uint64_t>{10000, 10});
}

TEST_CASE("tfd predict refuses bad input with one line naming the flag or file, exit 2", "[integration][predict]") {
  TempDir dir;
  const BreastCancerFiles f = WriteBreastCancer(dir);
  TrainAndExport(dir, "bc", BreastCancerJob(f));
  const std::string model = dir / "bc-model";
  fs::copy(model, dir / "no-onnx", fs::copy_options::recursive);
  fs::remove(dir / "no-onnx/1/model.onnx");
  fs::copy(model, dir / "changed", fs::copy_options::recursive);
  WriteFile(dir / "changed/1/weights.tfdckpt", ReadAll(model + "/1/weights.tfdckpt") + "x");
  fs::create_directories(dir / "empty");
  WriteFile(dir / "narrow.csv", DropLastColumn(DropLastColumn(ReadAll(f.test_bare))));
  std::string bad_label = ReadAll(f.test_bare);
  bad_label.replace(bad_label.rfind(",0\n"), 3, ",7\n");
  WriteFile(dir / "bad_label.csv", bad_label);
  WriteFile(dir / "x.npy", "not read: its --labels is missing");
  const std::string data = " --data " + f.test;
  const struct {
    std::string args, names;
  } cases[] = {
      {"--model " + dir / "nope" + data, "--model " + dir / "nope"},
      {"--model " + dir / "empty" + data, dir / "empty"},
      {"--model " + dir / "no-onnx" + data, "model.onnx"},
      {"--model " + dir / "changed" + data, "weights.tfdckpt"},
      {"--model " + model + " --data " + dir / "nope.csv", "--data"},
      {"--model " + model + " --skip-rows 0 --data " + dir / "narrow.csv", "the model takes 30"},
      {"--model " + model + " --skip-rows 0 --data " + dir / "bad_label.csv", "label \"7\""},
      {"--model " + model + data + " --top 3", "--top 3"},
      {"--model " + model + data + " --out " + dir / "no/such/folder.csv", "--out"},
      {"--model " + model + data + " --out " + dir / "p.txt", "--out"},
      {"--model " + model + " --data " + dir / "x.npy" + " --labels " + dir / "nope.npy", "--labels"},
      {"--model " + model + data + " --labels " + dir / "x.npy", "--labels"},
      {"--model " + model + " --data " + dir.path(), "name a file"},
      {"--model " + model + data + " --header maybe", "--header"},
      {"--model " + model + data + " --device cuda:63", "--device cuda:63"},
      {"--model " + model + data + " --device gpu", "--device"},
  };
  for (const auto& c : cases) {
    const CommandResult r = Predict(dir, c.args);
    INFO("tfd predict " << c.args << "\nstderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(Lines(r.err).size() == 1);
    CHECK(r.err.rfind("tfd: predict: ", 0) == 0);
    CHECK(r.err.find(c.names) != std::string::npos);
    CHECK(r.out.empty());
  }
  // A bad flag: the one-line reason, then the usage.
  const CommandResult flag = Predict(dir, "--model " + model + data + " --bogus");
  CHECK(flag.exit_code == 2);
  CHECK(Lines(flag.err).at(0) == "tfd: predict: unrecognised option '--bogus'");
}

}  // namespace
}  // namespace tfd::testing::predict_test
