// Categorical CSV columns (data.categorical) and the layers that read them (embedding, one_hot):
// the training vocabulary (sorted, out-of-vocabulary id 0, fitted to the training split after a
// hold-out), its errors, its trip through the model card and a version folder, the layers'
// shapes and values, and embedding gradients against finite differences.
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/config/job.h"
#include "common/data/inspect.h"
#include "common/data/source.h"
#include "common/export/model_dir.h"
#include "common/model/model.h"
#include "common/tensor/layers.h"
#include "daemon/serve/request.h"
#include "test/test_util.h"

namespace tfd::data {
namespace {

using Catch::Matchers::Contains;
using config::DataSpec;
using tfd::testing::TempDir;
using tfd::testing::WriteFile;

Result<config::JobSpec> CategoricalJob(const std::string& data, const std::string& model = R"({"layers": [{"type": "embedding", "output_dim": 2}, {"type": "dense", "units": 2}]})") {
  return config::ParseJobSpec(R"({"model": )" + model + R"(, "epochs": 1, "batch_size": 2, "optimizer": {"type": "sgd", "learning_rate": 0.1}, "data": )" +
                                  data + "}",
                              "job.json");
}

// Feature `j` of example `i` as stored (a categorical one: its id).
float IdAt(const Dataset& d, std::int64_t i, int j) {
  float v = 0;
  std::memcpy(&v, d.features.data() + (i * d.pixels() + j) * sizeof(float), sizeof v);
  return v;
}

constexpr const char* kColoursCsv =
    "colour,size,city,y\n"
    "red,1.5,oslo,a\n"
    "blue,2,lima,b\n"
    "red,3,\"rome, it\",a\n"
    "green,4,lima,b\n";

TEST_CASE("categorical: the vocabulary is the training file's values sorted; an unseen test value is id 0", "[unit][data][categorical]") {
  TempDir dir;
  WriteFile(dir / "train.csv", kColoursCsv);
  WriteFile(dir / "test.csv", "colour,size,city,y\nblue,1,paris,a\nred,2,oslo,b\n");
  Result<config::JobSpec> job = CategoricalJob(R"({"train": ")" + dir / "train.csv" + R"(", "test": ")" + dir / "test.csv" +
                                    R"(", "label": "y", "categorical": ["city", "colour"], "normalize": "standardize"})");
  REQUIRE(job.ok());
  Result<DataSplits> d = LoadData(job->data, 1);
  INFO(d.status().ToString());
  REQUIRE(d.ok());
  const Dataset& train = d->train;
  REQUIRE(train.categorical.size() == 2);
  // Row order, whatever order data.categorical names them in.
  CHECK(train.categorical[0].name == "colour");
  CHECK(train.categorical[0].feature == 0);
  CHECK(train.categorical[0].vocabulary == std::vector<std::string>{"blue", "green", "red"});
  CHECK(train.categorical[1].name == "city");
  CHECK(train.categorical[1].feature == 2);
  CHECK(train.categorical[1].vocabulary == std::vector<std::string>{"lima", "oslo", "rome, it"});
  CHECK(IdAt(train, 0, 0) == 3);  // red
  CHECK(IdAt(train, 1, 0) == 1);  // blue
  CHECK(IdAt(train, 2, 2) == 3);  // rome, it
  CHECK(IdAt(train, 1, 1) == 2);  // a number stays a number
  CHECK(d->test.categorical == train.categorical);
  CHECK(IdAt(d->test, 0, 2) == 0);  // paris: out of vocabulary
  CHECK(IdAt(d->test, 1, 2) == 2);  // oslo
  // Standardize leaves the ids alone and scales the numbers.
  CHECK(train.normalizer.mean[0] == 0);
  CHECK(train.normalizer.inv_std[2] == 1);
  CHECK(train.normalizer.mean[1] == Approx(2.625));
  // Ids are the same on another load (every task, every run).
  Result<DataSplits> again = LoadData(job->data, 7);
  REQUIRE(again.ok());
  CHECK(again->train.categorical == train.categorical);
  CHECK(Fingerprint(again->train) == Fingerprint(train));
  // inspect reports the columns and their vocabularies.
  const DataReport r = Inspect(d->test, d->test.feature_names);
  REQUIRE(r.categorical.size() == 2);
  CHECK(r.categorical[1].name == "city");
  CHECK(r.categorical[1].vocabulary == 3);
  CHECK(r.categorical[1].unseen == 1);
  CHECK_THAT(FormatReport("t", r), Contains("categorical city: 3 values"));
}

TEST_CASE("categorical: after a test or validation hold-out the vocabulary is what the training examples left have", "[unit][data][categorical]") {
  TempDir dir;
  std::string text = "c,x,y\n";
  for (int i = 0; i < 40; ++i) text += fmt::format("v{},{},{}\n", i % 4, i, i % 2);
  text += "only_last,1,0\n";
  WriteFile(dir / "t.csv", text);
  Result<config::JobSpec> job = CategoricalJob(R"({"train": ")" + dir / "t.csv" + R"(", "test": ")" + dir / "t.csv" + R"(", "categorical": [0]})");
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  Result<DataSplits> d = LoadData(job->data, 1);
  REQUIRE(d.ok());
  CHECK(d->train.categorical[0].vocabulary == std::vector<std::string>{"only_last", "v0", "v1", "v2", "v3"});
  HoldOut(&*d, 1);  // the validation split: the last row, the one "only_last"
  CHECK(d->train.categorical[0].vocabulary == std::vector<std::string>{"v0", "v1", "v2", "v3"});
  CHECK(d->validation.categorical == d->train.categorical);
  CHECK(IdAt(d->validation, 0, 0) == 0);
  CHECK(IdAt(d->train, 0, 0) == 1);  // v0, renumbered
  CHECK(IdAt(d->train, 3, 0) == 4);  // v3

  // A test_split likewise: every held-out row's value is either in the vocabulary or id 0.
  Result<config::JobSpec> split = CategoricalJob(R"({"train": ")" + dir / "t.csv" + R"(", "categorical": ["c"], "test_split": 0.5})");
  REQUIRE(split.ok());
  Result<DataSplits> s = LoadData(split->data, 3);
  REQUIRE(s.ok());
  std::set<float> seen;
  for (std::int64_t i = 0; i < s->train.size; ++i) seen.insert(IdAt(s->train, i, 0));
  CHECK(std::ssize(seen) == std::ssize(s->train.categorical[0].vocabulary));
  CHECK(seen.count(0.0f) == 0);
}

TEST_CASE("categorical: a column that is not in the header, the label or not a feature is refused naming data.categorical[i]",
          "[unit][data][categorical]") {
  TempDir dir;
  WriteFile(dir / "t.csv", kColoursCsv);
  auto error = [&](const std::string& fields) {
    Result<config::JobSpec> job = CategoricalJob(R"({"train": ")" + dir / "t.csv" + R"(", "test_split": 1)" + fields + "}");
    if (!job.ok()) return job.status().message();
    Result<DataSplits> d = LoadData(job->data, 1);
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().code() == Code::kInvalidArgument);
    return d.status().message();
  };
  CHECK_THAT(error(R"(, "categorical": ["colour", "town"])"), Contains("data.categorical[1]: no column \"town\""));
  CHECK_THAT(error(R"(, "categorical": [9])"), Contains("data.categorical[0]: column 9 does not exist (4 columns)"));
  CHECK_THAT(error(R"(, "categorical": ["y"])"), Contains("data.categorical[0]: \"y\" is the label column"));
  CHECK_THAT(error(R"(, "categorical": ["city"], "features": ["colour", "size"])"), Contains("data.categorical[0]: \"city\" is not one of data.features"));
  CHECK_THAT(error(R"(, "categorical": ["colour", 1])"), Contains("data.categorical[1]: expected a column name or index"));
  // Without data.categorical a string cell is still not a number.
  CHECK_THAT(error(""), Contains("column 1 (\"colour\"): expected a finite number, got \"red\""));
}

TEST_CASE("categorical: the model refuses an embedding without categorical data, an unknown column, a column left out, a plain first layer",
          "[unit][data][categorical][model]") {
  std::vector<CategoricalColumn> cats = {{.feature = 0, .name = "colour", .vocabulary = {"b", "r"}}, {.feature = 2, .name = "city", .vocabulary = {"x"}}};
  auto build_error = [&](const std::string& model, const std::vector<CategoricalColumn>& c) {
    Result<config::JobSpec> job = CategoricalJob(R"("d.csv")", model);
    REQUIRE(job.ok());
    auto m = model::Model::Build(job->model, {1, 3, 1}, model::Outputs(2), 4, {}, c);
    REQUIRE_FALSE(m.ok());
    CHECK(m.status().code() == Code::kInvalidArgument);
    return m.status().message();
  };
  const std::string dense = R"({"type": "dense", "units": 2})";
  CHECK_THAT(build_error(R"({"layers": [{"type": "embedding", "output_dim": 2}, )" + dense + "]}", {}),
             Contains("model.layers[0]: embedding needs categorical columns"));
  CHECK_THAT(build_error(R"({"layers": [{"type": "one_hot", "columns": ["colour", "size"]}, )" + dense + "]}", cats),
             Contains("model.layers[0].columns[1]: \"size\" is not a categorical column"));
  CHECK_THAT(build_error(R"({"layers": [{"type": "embedding", "output_dim": 2, "columns": ["city"]}, )" + dense + "]}", cats),
             Contains("model.layers[0].columns: leaves out the categorical column \"colour\""));
  CHECK_THAT(build_error(R"({"layers": [)" + dense + "]}", cats), Contains("model.layers[0]: the data has categorical columns"));
  CHECK_THAT(build_error(R"("dnn")", cats), Contains("model: the data has categorical columns"));
  CHECK_THAT(build_error(R"({"layers": [{"type": "dense", "units": 3}, {"type": "one_hot"}, )" + dense + "]}", {}),
             Contains("model.layers[1]: one_hot must be the model's first layer"));
  Result<config::JobSpec> bad = CategoricalJob(R"("d.csv")", R"({"layers": [{"type": "embedding"}, {"type": "dense", "units": 2}]})");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Contains("model.layers[0].output_dim"));
}

TEST_CASE("one_hot and embedding: the numeric features, then each column's one-hot vector or table row", "[unit][categorical][tensor]") {
  // Rows of [colour id, size, city id]; colour has 3 ids (2 values + unseen), city 2.
  const std::vector<float> x = {2, 0.5f, 1, 0, -1.5f, 0, 7, 3, 0.5f};  // 7 and 0.5: not ids, taken as 0
  auto hot = tensor::MakeOneHot({1, 3, 1}, {{0, 3}, {2, 2}});
  CHECK(hot->output_shape().size() == 1 + 3 + 2);
  CHECK(hot->Params().empty());
  std::vector<float> out(18);
  hot->Forward(x.data(), out.data(), 3);
  CHECK(out == std::vector<float>{0.5f, 0, 0, 1, 0, 1, -1.5f, 1, 0, 0, 1, 0, 3, 1, 0, 0, 1, 0});

  auto emb = tensor::MakeEmbedding({1, 3, 1}, {{0, 3}, {2, 2}}, 2, {});
  const std::vector<tensor::ParamSpec> p = emb->Params();
  REQUIRE(p.size() == 2);
  CHECK(p[0].name == "embeddings");
  CHECK(p[0].shape == std::vector<std::int64_t>{3, 2});
  CHECK(p[1].name == "embeddings_1");
  CHECK(p[1].shape == std::vector<std::int64_t>{2, 2});
  std::vector<float> colour = {0, 0.1f, 1, 1.1f, 2, 2.1f}, city = {5, 5.5f, 6, 6.5f};
  std::vector<float> dcolour(6), dcity(4);
  std::vector<std::span<float>> ps = {colour, city}, gs = {dcolour, dcity};
  emb->Bind(ps, gs);
  CHECK(emb->output_shape().size() == 5);
  std::vector<float> y(15);
  emb->Forward(x.data(), y.data(), 3);
  CHECK(y == std::vector<float>{0.5f, 2, 2.1f, 6, 6.5f, -1.5f, 0, 0.1f, 5, 5.5f, 3, 0, 0.1f, 5, 5.5f});
}

TEST_CASE("embedding gradients match finite differences; the numeric features pass theirs through, the ids get none",
          "[unit][categorical][gradient]") {
  const int batch = 5, ids0 = 4, ids1 = 3, dim = 3;
  auto layer = tensor::MakeEmbedding({1, 4, 1}, {{1, ids0}, {3, ids1}}, dim, {});
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> t0(ids0 * dim), t1(ids1 * dim), g0(t0.size()), g1(t1.size());
  for (float& v : t0) v = u(gen);
  for (float& v : t1) v = u(gen);
  std::vector<std::span<float>> ps = {t0, t1}, gs = {g0, g1};
  layer->Bind(ps, gs);
  // Ids repeat across the batch, so a row's gradient sums several examples'.
  std::vector<float> x = {0.3f, 1, -0.2f, 2, 0.7f, 3, 0.1f, 2, -0.5f, 1, 0.9f, 0, 0.2f, 0, 0.4f, 1, 0.6f, 3, -0.8f, 2};
  const std::int64_t out_n = layer->output_shape().size() * batch;
  std::vector<float> r(static_cast<std::size_t>(out_n));
  for (float& v : r) v = u(gen);
  auto loss = [&]() {
    std::vector<float> o(static_cast<std::size_t>(out_n));
    layer->Forward(x.data(), o.data(), batch);
    double s = 0;
    for (std::int64_t i = 0; i < out_n; ++i) s += double{o[i]} * r[i];
    return s;
  };
  std::vector<float> out(static_cast<std::size_t>(out_n)), dout(r), din(x.size());
  layer->Forward(x.data(), out.data(), batch);
  layer->Backward(x.data(), out.data(), dout.data(), din.data(), batch);
  const std::vector<float> a0 = g0, a1 = g1;
  auto numeric = [&](float* v) {
    const float saved = *v;
    *v = saved + 1e-2f;
    const double up = loss();
    *v = saved - 1e-2f;
    const double down = loss();
    *v = saved;
    return (up - down) / 2e-2;
  };
  for (std::size_t i = 0; i < t0.size(); ++i) CHECK(a0[i] == Approx(numeric(&t0[i])).margin(1e-3));
  for (std::size_t i = 0; i < t1.size(); ++i) CHECK(a1[i] == Approx(numeric(&t1[i])).margin(1e-3));
  CHECK(a0[2 * dim] == 0);  // id 2 of column 0 is in no example: its row gets nothing
  for (int n = 0; n < batch; ++n) {
    for (int f : {0, 2}) CHECK(din[static_cast<std::size_t>(n * 4 + f)] == Approx(numeric(&x[static_cast<std::size_t>(n * 4 + f)])).margin(1e-3));
    for (int f : {1, 3}) CHECK(din[static_cast<std::size_t>(n * 4 + f)] == 0);
  }
}

TEST_CASE("categorical: a CSV with string columns round-trips through the card and a version folder; predict's strings take the training ids",
          "[unit][data][categorical][export]") {
  TempDir dir;
  WriteFile(dir / "train.csv", kColoursCsv);
  Result<config::JobSpec> job = CategoricalJob(R"({"train": ")" + dir / "train.csv" + R"(", "test": ")" + dir / "train.csv" +
                                        R"(", "label": "y", "categorical": ["colour", "city"]})",
                                    R"({"layers": [{"type": "embedding", "output_dim": 2}, {"type": "dense", "units": 2}]})");
  REQUIRE(job.ok());
  Result<DataSplits> d = LoadData(job->data, 1);
  REQUIRE(d.ok());
  auto m = model::Model::Build(job->model, {1, 3, 1}, model::Outputs(2), 4, {}, d->train.categorical);
  INFO(m.status().ToString());
  REQUIRE(m.ok());
  (*m)->Initialize(1);
  CHECK((*m)->variables()[0].name == "embedding/embeddings");
  CHECK((*m)->variables()[1].name == "embedding/embeddings_1");
  const exporting::ModelCard card = exporting::CardFor(*job, d->train);
  Result<exporting::ModelCard> back = exporting::ParseCard(nlohmann::json::parse(exporting::CardText(card)), "card");
  REQUIRE(back.ok());
  CHECK(back->categorical == d->train.categorical);
  CHECK(exporting::CardText(*back) == exporting::CardText(card));
  // The fingerprint covers the vocabulary: the same ids under another vocabulary are other data.
  Dataset renamed = d->train;
  renamed.categorical[1].vocabulary[2] = "roma";
  CHECK(Fingerprint(renamed) != Fingerprint(d->train));

  Result<std::string> v = exporting::WriteVersion(dir / "m", card, **m, {});
  REQUIRE(v.ok());
  Result<exporting::LoadedModel> loaded = exporting::LoadVersion(*v, 4);
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  // A new file's strings, read as tfd predict reads them, become the training ids.
  WriteFile(dir / "new.csv", "colour,size,city\ngreen,4,lima\npurple,3,\"rome, it\"\n");
  DataSpec spec = loaded->card.data;
  spec.train = {.paths = {dir / "new.csv"}, .x = "", .y = ""};
  spec.unlabeled_width = 3;
  Result<Examples> e = ReadExamples(spec, spec.train, "--data");
  REQUIRE(e.ok());
  REQUIRE(EncodeCategories(loaded->card.categorical, &*e, "new.csv").ok());
  Dataset rows = loaded->card.Shell();
  rows.size = e->size, rows.features = e->features;
  CHECK(IdAt(rows, 0, 0) == 2);  // green
  CHECK(IdAt(rows, 0, 2) == 1);  // lima
  CHECK(IdAt(rows, 1, 0) == 0);  // purple: unseen
  // The same rows from the training split give the same outputs through the loaded model.
  Dataset first = d->train.Shell();
  first.size = 1;
  first.features = std::vector<std::uint8_t>(rows.features.begin(), rows.features.begin() + 3 * sizeof(float));
  CHECK(model::PredictProbabilities(*loaded->model, rows)[0] == model::PredictProbabilities(**m, first)[0]);
  Examples other = *e;
  other.categorical[0].name = "hue";
  CHECK_THAT(EncodeCategories(loaded->card.categorical, &other, "x.csv").message(), Contains("x.csv: categorical columns"));
}

TEST_CASE("categorical: tfd serve takes a string in a categorical feature's place, its id as a number, and no string elsewhere",
          "[unit][categorical][serve]") {
  serve::Signature sig{.height = 1, .width = 3, .channels = 1, .outputs = 2};
  sig.categorical.push_back({.feature = 0, .ids = {{"blue", 1.0f}, {"red", 2.0f}}});
  Result<serve::PredictRequest> r = serve::ParsePredict(R"({"instances": [["red", 1.5, 7], ["mauve", 2, 7], [1, 3, 7]]})", sig);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->values == std::vector<float>{2, 1.5f, 7, 0, 2, 7, 1, 3, 7});
  Result<serve::PredictRequest> bad = serve::ParsePredict(R"({"instances": [["red", "big", 7]]})", sig);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Contains("instance 0: value 1 is a string, expected a number"));
}

}  // namespace
}  // namespace tfd::data
