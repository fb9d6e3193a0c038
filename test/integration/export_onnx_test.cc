// Every kind of exported model.onnx run by ONNX Runtime (npm onnxruntime-node through
// test/tools/ort_run.js) against tfd's own forward pass on the same raw rows: the version folder
// read back with LoadVersion, the rows normalised by data::FillBatch under the card's normalizer,
// then Model::Forward (probabilities: their softmax). Each output within |a - b| <= 1e-5 max(1, |b|).
// The `tfd predict` binary on the same raw rows (an .npy file; --out .npy) against ONNX Runtime too.
// Also the graph itself (names, no Dropout, the classes metadata) and python3-onnx's full checker.
// Exits 77 (skipped) without node or onnxruntime-node (scripts/fetch_onnxruntime.sh).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <onnx/onnx_pb.h>

#include "common/data/npy.h"
#include "common/data/readers.h"
#include "common/export/model_dir.h"
#include "common/export/onnx.h"
#include "test/catch/subjects.h"
#include "test/export_models.h"
#include "test/test_util.h"

namespace tfd::testing::export_onnx_test {
namespace {

namespace fs = std::filesystem;
constexpr int kRows = 37;  // a batch no layer's blocking divides
constexpr double kTolerance = 1e-5;

void WriteFloats(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  REQUIRE(out.good());
}

std::vector<float> ReadFloats(const std::string& path) {
  const std::string bytes = ReadAll(path);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// The largest |a - b| / max(1, |b|) over two outputs of equal size (infinity when they differ in size).
double MaxRelativeError(const std::vector<float>& a, const std::vector<float>& b, std::size_t* where) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(double{a[i]} - b[i]) / std::max(1.0, std::abs(double{b[i]}));
    if (!(e <= worst)) worst = e, *where = i;
  }
  return worst;
}

// tfd's outputs (logits or regression outputs) and, for a classifier, probabilities on the raw
// rows of `raw`, from the version folder `dir` as `tfd predict` reads it.
std::map<std::string, std::vector<float>> TfdOutputs(const std::string& dir, const data::Dataset& raw) {
  Result<exporting::LoadedModel> loaded = exporting::LoadVersion(dir, kRows);
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  data::Dataset rows = loaded->card.Shell();
  rows.size = raw.size, rows.features = raw.features, rows.labels = raw.labels, rows.targets = raw.targets;
  model::Model& m = *loaded->model;
  std::vector<float> x(static_cast<std::size_t>(kRows * m.input_size()));
  std::vector<std::uint32_t> idx(kRows);
  std::iota(idx.begin(), idx.end(), 0u);
  std::vector<ClassId> y(kRows);
  std::vector<float> targets(static_cast<std::size_t>(kRows) * std::max(1, rows.num_targets));
  data::FillBatch(rows, idx, x.data(), y.data(), targets.data());
  const float* out = m.Forward(x.data(), kRows);
  std::vector<float> first(out, out + static_cast<std::ptrdiff_t>(kRows) * m.classes());
  if (m.regression()) return {{exporting::kOnnxOutputs, first}};
  return {{exporting::kOnnxLogits, first}, {exporting::kOnnxProbabilities, model::PredictProbabilities(m, rows)}};
}

// `tfd predict` (the binary) on `rows` raw rows written as an .npy file: its --out .npy, the
// probabilities of a classifier or a regression model's outputs, as floats.
std::vector<float> PredictBinary(const std::string& dir, const std::vector<float>& rows, std::int64_t features, const TempDir& tmp) {
  const std::string in = dir + "-rows.npy", out = dir + "-predicted.npy";
  const auto n = static_cast<std::uint64_t>(rows.size()) / static_cast<std::uint64_t>(features);
  WriteFile(in, data::NpyFloat32(rows, {n, static_cast<std::uint64_t>(features)}));
  const CommandResult r = RunCommand(fmt::format("{} predict --model {} --data {} --out {}", TFD_BINARY, dir, in, out), tmp);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::string bytes = ReadAll(out);
  data::Examples e;
  const Status read = data::NpyFeatures(std::vector<std::uint8_t>(bytes.begin(), bytes.end()), out, &e);
  INFO(read.ToString());
  REQUIRE(read.ok());
  REQUIRE(e.dtype == data::DType::kF32);
  REQUIRE(static_cast<std::uint64_t>(e.size) == n);
  std::vector<float> v(e.features.size() / sizeof(float));
  std::memcpy(v.data(), e.features.data(), v.size() * sizeof(float));
  return v;
}

onnx::ModelProto ReadOnnx(const std::string& path) {
  onnx::ModelProto proto;
  REQUIRE(proto.ParseFromString(ReadAll(path)));
  return proto;
}

// Exports `c` (a few training steps in) into `base`; returns the version folder.
std::string Export(const ExportCase& c, const std::string& base) {
  std::unique_ptr<model::Model> m = TrainedModel(c, 16, 5, 3);
  Result<std::string> dir = exporting::WriteVersion(base, exporting::CardFor(c.job, c.data), *m, {});
  INFO(dir.status().ToString());
  REQUIRE(dir.ok());
  return *dir;
}

TEST_CASE("ONNX Runtime gives tfd's outputs on every exported model kind, in this process and from the tfd predict binary", "[integration][export]") {
  TempDir tmp;
  for (const ExportCase& c : ExportCases(kRows, 11)) {
    INFO("model " << c.name);
    const std::string dir = Export(c, tmp / c.name);
    const std::string input = tmp / (c.name + ".f32"), out_dir = tmp / (c.name + "-ort");
    fs::create_directories(out_dir);
    WriteFloats(input, RawRows(c.data));
    const CommandResult ort = RunCommand(fmt::format("node {}/test/tools/ort_run.js run {}/model.onnx {} {} {} {}", TFD_SOURCE_DIR, dir,
                                                     input, kRows, c.data.pixels(), out_dir),
                                         tmp);
    INFO(ort.err);
    REQUIRE(ort.exit_code == 0);
    const nlohmann::json names = nlohmann::json::parse(ort.out);
    CHECK(names["inputs"] == nlohmann::json::array({exporting::kOnnxInput}));
    const auto want = TfdOutputs(dir, c.data);
    nlohmann::json want_names = nlohmann::json::array();
    for (const auto& [name, values] : want) want_names.push_back(name);
    CHECK(names["outputs"].size() == want.size());
    for (const auto& [name, values] : want) {
      INFO("output " << name);
      CHECK(std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); }));
      CHECK(std::find(names["outputs"].begin(), names["outputs"].end(), name) != names["outputs"].end());
      const std::vector<float> got = ReadFloats(out_dir + "/" + name + ".f32");
      std::size_t at = 0;
      const double err = MaxRelativeError(got, values, &at);
      INFO(fmt::format("worst at {}: onnxruntime {} tfd {}", at, at < got.size() ? got[at] : NAN, at < values.size() ? values[at] : NAN));
      CHECK(err <= kTolerance);
    }
    // The binary users run, on the same rows: what it writes is the probabilities (or outputs).
    const std::string compared = c.data.regression() ? exporting::kOnnxOutputs : exporting::kOnnxProbabilities;
    const std::vector<float> predicted = PredictBinary(dir, RawRows(c.data), c.data.pixels(), tmp);
    const std::vector<float> ort_values = ReadFloats(out_dir + "/" + compared + ".f32");
    std::size_t at = 0;
    const double err = MaxRelativeError(predicted, ort_values, &at);
    INFO(fmt::format("tfd predict against onnxruntime's {}: worst at {}: tfd predict {} onnxruntime {}", compared, at,
                     at < predicted.size() ? predicted[at] : NAN, at < ort_values.size() ? ort_values[at] : NAN));
    CHECK(err <= kTolerance);
  }
}

TEST_CASE("the exported graph names its input and outputs, holds no Dropout and carries the class names", "[integration][export]") {
  TempDir tmp;
  for (const ExportCase& c : ExportCases(kRows, 12)) {
    INFO("model " << c.name);
    const onnx::ModelProto proto = ReadOnnx(Export(c, tmp / c.name) + "/model.onnx");
    REQUIRE(proto.graph().input_size() == 1);
    CHECK(proto.graph().input(0).name() == exporting::kOnnxInput);
    std::vector<std::string> outputs;
    for (const auto& o : proto.graph().output()) outputs.push_back(o.name());
    std::map<std::string, std::string> meta;
    for (const auto& p : proto.metadata_props()) meta[p.key()] = p.value();
    for (const auto& n : proto.graph().node()) CHECK(n.op_type() != "Dropout");
    if (c.data.regression()) {
      CHECK(outputs == std::vector<std::string>{exporting::kOnnxOutputs});
      CHECK(meta["task"] == "regression");
      CHECK(meta.count("classes") == 0);
    } else {
      CHECK(outputs == std::vector<std::string>{exporting::kOnnxLogits, exporting::kOnnxProbabilities});
      CHECK(meta["task"] == "classification");
      const std::vector<std::string> want = exporting::CardFor(c.job, c.data).class_names;
      REQUIRE(want.size() == static_cast<std::size_t>(c.data.num_classes));
      CHECK(nlohmann::json::parse(meta["classes"]) == nlohmann::json(want));
    }
  }
}

TEST_CASE("python3-onnx's full checker accepts every exported model", "[integration][export]") {
  TempDir tmp;
  if (RunCommand("/usr/bin/python3 -c 'import onnx'", tmp).exit_code != 0) {
    WARN("python3-onnx is not installed (scripts/setup): its checker was not run");
    return;
  }
  std::string paths;
  for (const ExportCase& c : ExportCases(kRows, 13)) paths += " " + Export(c, tmp / c.name) + "/model.onnx";
  const CommandResult r = RunCommand(
      "/usr/bin/python3 -c 'import onnx, sys\n"
      "for p in sys.argv[1:]:\n"
      "    onnx.checker.check_model(onnx.load(p), full_check=True)\n"
      "    print(\"ok\", p)'" + paths, tmp);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(static_cast<std::size_t>(std::count(r.out.begin(), r.out.end(), '\n')) == ExportCases(1, 1).size());
}

// Why this subject cannot run here ("" when it can): tfd_process_tests then skips it (exit 77).
std::string CannotRunHere(const std::string&) {
  const char* env = std::getenv("ORT_NODE_MODULES");
  const std::string modules = env != nullptr ? env : std::string(TFD_SOURCE_DIR) + "/third_party/onnxruntime-node/node_modules";
  if (std::system("command -v node >/dev/null") != 0) return "node is not installed (scripts/setup)";
  if (!std::filesystem::exists(modules + "/onnxruntime-node/package.json"))
    return "no onnxruntime-node in " + modules + " (run scripts/fetch_onnxruntime.sh)";
  return "";
}
const SubjectNeeds kNeeds(__FILE__, &CannotRunHere);

}  // namespace
}  // namespace tfd::testing::export_onnx_test
