// The exported model's folder and card: a version written and read back gives the same outputs,
// the card survives JSON, a changed file or missing one is refused naming it, versions count up,
// and a checkpoint's card catches a resume on other data.
#include <catch2/catch.hpp>

#include <filesystem>
#include <cstring>
#include <fstream>

#include "common/config/spec_json.h"
#include "common/export/model_dir.h"
#include "test/test_util.h"

namespace tfd::exporting {
namespace {

using Catch::Matchers::Contains;
namespace fs = std::filesystem;

// A small standardized table classifier (4 features, 3 named classes) with its card.
struct Table {
  config::JobSpec job;
  data::Dataset train;
  std::unique_ptr<model::Model> model;
};

Table MakeTable(std::uint64_t seed) {
  Table t;
  auto job = config::ParseJobSpec(R"({"model": {"layers": [{"type": "dense", "units": 5, "activation": "tanh"},
                                                           {"type": "dropout", "rate": 0.5}, {"type": "dense", "units": 3}]},
                                      "data": {"train": "t.csv", "test_split": 0.2, "label": "kind", "normalize": "standardize"},
                                      "epochs": 1, "batch_size": 4, "optimizer": {"type": "sgd", "learning_rate": 0.1}})",
                                  "job");
  REQUIRE(job.ok());
  t.job = *job;
  t.train.size = 6, t.train.height = 1, t.train.width = 4, t.train.channels = 1, t.train.dtype = data::DType::kF32;
  t.train.num_classes = 3, t.train.class_names = {"a", "b", "c"};
  std::vector<float> x = {1, 2, 3, 4, 2, 3, 4, 5, 0, 1, 0, 1, 5, 5, 5, 5, 1, 0, 1, 0, 3, 3, 2, 2};
  std::vector<std::uint8_t> bytes(x.size() * 4);
  std::memcpy(bytes.data(), x.data(), bytes.size());
  t.train.features = std::move(bytes);
  t.train.labels = {0, 1, 2, 0, 1, 2};
  t.train.normalizer = {.scale = 1.0f, .mean = {2, 2.3f, 2.5f, 2.8f}, .inv_std = {0.5f, 0.6f, 0.7f, 0.8f}};
  auto built = model::Model::Build(t.job.model, {1, 4, 1}, model::Outputs(3), 8);
  REQUIRE(built.ok());
  t.model = std::move(*built);
  t.model->Initialize(seed);
  return t;
}

std::vector<float> Outputs(model::Model& m, const data::Dataset& d) { return model::PredictProbabilities(m, d); }

TEST_CASE("export: a version folder read back predicts what the model predicted", "[unit][export]") {
  testing::TempDir dir;
  Table t = MakeTable(3);
  const ModelCard card = CardFor(t.job, t.train);
  CHECK(card.class_names == std::vector<std::string>{"a", "b", "c"});
  CHECK(card.data_fingerprint == data::Fingerprint(t.train));
  Result<std::string> v1 = WriteVersion(dir / "m", card, *t.model, {.global_step = 7, .trained_by = "standalone"});
  REQUIRE(v1.ok());
  CHECK(fs::path(*v1).filename() == "1");
  for (const char* f : {kModelJson, kWeightsFile, kOnnxFile}) CHECK(fs::exists(fs::path(*v1) / f));
  Result<LoadedModel> back = LoadVersion(*v1, 8);
  REQUIRE(back.ok());
  CHECK(back->card.data_fingerprint == card.data_fingerprint);
  CHECK(back->card.normalizer.mean == card.normalizer.mean);
  CHECK(back->info["global_step"] == 7);
  data::Dataset rows = back->card.Shell();
  rows.size = t.train.size, rows.features = t.train.features;
  CHECK(Outputs(*back->model, rows) == Outputs(*t.model, t.train));
  // The next export is version 2, and the base resolves to it.
  Result<std::string> v2 = WriteVersion(dir / "m", card, *t.model, {});
  REQUIRE(v2.ok());
  CHECK(Versions(dir / "m") == std::vector<std::uint64_t>{1, 2});
  CHECK(*ResolveVersionDir(dir / "m") == *v2);
}

TEST_CASE("export: a version folder with a changed or missing file is refused naming it", "[unit][export]") {
  testing::TempDir dir;
  Table t = MakeTable(4);
  Result<std::string> v = WriteVersion(dir / "m", CardFor(t.job, t.train), *t.model, {});
  REQUIRE(v.ok());
  {
    std::ofstream onnx(fs::path(*v) / kOnnxFile, std::ios::app | std::ios::binary);
    onnx << "x";
  }
  Result<LoadedModel> changed = LoadVersion(*v, 8);
  REQUIRE_FALSE(changed.ok());
  CHECK_THAT(changed.status().message(), Contains("model.onnx") && Contains("SHA-256"));
  fs::remove(fs::path(*v) / kWeightsFile);
  Result<LoadedModel> missing = LoadVersion(*v, 8);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(), Contains(kWeightsFile));
  CHECK_FALSE(ResolveVersionDir(dir / "none").ok());
}

TEST_CASE("export: the card survives its JSON; a checkpoint's card refuses other data", "[unit][export]") {
  Table t = MakeTable(5);
  const ModelCard card = CardFor(t.job, t.train);
  Result<ModelCard> back = ParseCard(nlohmann::json::parse(CardText(card)), "card");
  REQUIRE(back.ok());
  CHECK(CardText(*back) == CardText(card));
  CHECK(CheckSameData(CardText(card), card, "ck").ok());
  CHECK(CheckSameData("", card, "ck").ok());  // a file from before cards
  Table other = MakeTable(5);
  other.train.labels[0] = 2;
  const Status s = CheckSameData(CardText(card), CardFor(other.job, other.train), "ckpt-1.tfdckpt");
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.message(), Contains("ckpt-1.tfdckpt") && Contains("other data") && Contains(card.data_fingerprint.substr(0, 12)));
  CHECK_FALSE(ParseCard(nlohmann::json::parse(R"({"model": "dnn"})"), "c").ok());
}

TEST_CASE("config: the model and data specs written as JSON read back equal", "[unit][config]") {
  auto job = config::ParseJobSpec(R"({"model": {"name": "dnn", "init": {"type": "normal", "stddev": 0.5}},
      "data": {"train": ["a.csv", "b.csv"], "test": "t.csv", "label": 3, "features": ["x", "y"], "delimiter": "tab",
               "skip_rows": 2, "header": true, "classes": ["no", "yes"], "normalize": "standardize"}, "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 0.1}})",
                                  "job");
  REQUIRE(job.ok());
  Result<config::ModelSpec> m = config::ParseModelSpec(config::ModelSpecJson(job->model), "m");
  REQUIRE(m.ok());
  CHECK(m->name == "dnn");
  CHECK(m->init.stddev == 0.5);
  Result<config::DataSpec> d = config::ParseDataSpec(config::DataSpecJson(job->data), "d");
  REQUIRE(d.ok());
  CHECK(d->train.paths == job->data.train.paths);
  CHECK(d->label_index == 3);
  CHECK(d->feature_names == job->data.feature_names);
  CHECK(d->delimiter == '\t');
  CHECK(d->skip_rows == 2);
  CHECK(d->classes == job->data.classes);
  CHECK(d->normalize == config::DataSpec::Normalize::kStandardize);
  CHECK(config::DataSpecJson(*d) == config::DataSpecJson(job->data));
}

}  // namespace
}  // namespace tfd::exporting
