// The data spec (common/config/data_spec), the CSV reader and the steps every source goes through
// (common/data/source): classes numbered, a test set held out, normalisation.
#include <zlib.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/base/sha256.h"
#include "common/config/job.h"
#include "common/data/inspect.h"
#include "common/data/readers.h"
#include "common/data/source.h"
#include "test/test_util.h"

namespace tfd::data {
namespace {

using config::DataSpec;
using tfd::testing::TempDir;
using tfd::testing::WriteFile;

// The job's data spec from the JSON of its "data" field, or the error.
Result<DataSpec> Spec(const std::string& data) {
  Result<config::JobSpec> job = config::ParseJobSpec(
      R"({"model": "dnn", "epochs": 1, "batch_size": 2, "optimizer": {"type": "sgd", "learning_rate": 0.1}, "data": )" + data + "}",
      "job.json");
  if (!job.ok()) return job.status();
  return job->data;
}

std::string ErrorOf(const std::string& data) {
  Result<DataSpec> s = Spec(data);
  return s.ok() ? "" : s.status().message();
}

std::vector<float> Row(const Dataset& d, std::uint32_t i) {
  std::vector<float> x(static_cast<std::size_t>(d.pixels()));
  ClassId y = 0;
  FillBatch(d, std::span(&i, 1), x.data(), &y);
  return x;
}

TEST_CASE("the data spec: a folder stays the MNIST folder; an object names files, format and task", "[unit][data]") {
  Result<DataSpec> mnist = Spec(R"("data/mnist")");
  REQUIRE(mnist.ok());
  CHECK(mnist->is_mnist_folder());
  CHECK(mnist->folder == "data/mnist");

  Result<DataSpec> csv = Spec(R"({"train": ["a.csv", "b/*.csv.gz"], "test_split": 0.25, "label": "species", "delimiter": ";"})");
  REQUIRE(csv.ok());
  CHECK(csv->format == DataSpec::Format::kCsv);
  CHECK(csv->train.paths == std::vector<std::string>{"a.csv", "b/*.csv.gz"});
  CHECK(csv->test_fraction == 0.25);
  CHECK(csv->label == "species");
  CHECK(csv->delimiter == ';');
  CHECK(csv->NamedPaths() == std::vector<std::pair<std::string, std::string>>{{"data.train[0]", "a.csv"}});

  Result<DataSpec> npy = Spec(R"({"train": {"x": "x.npy", "y": "y.npy"}, "test_split": 100, "task": "regression"})");
  REQUIRE(npy.ok());
  CHECK(npy->format == DataSpec::Format::kNpy);
  CHECK(npy->test_count == 100);
  CHECK(npy->task == DataSpec::Task::kRegression);
}

TEST_CASE("a data spec that does not fit is refused naming the field", "[unit][data]") {
  CHECK(ErrorOf(R"({"train": "a.csv"})") ==
        "job.json: data.test: missing: name the test files, or hold some out with \"test_split\" (e.g. 0.2)");
  CHECK(ErrorOf(R"({"train": "a.dat", "test_split": 0.2})") ==
        "job.json: data.format: missing, and \"a.dat\" does not say it (expected csv, npy, npz, images, tfrecord or idx)");
  CHECK(ErrorOf(R"({"train": "a.csv", "test_split": 1.5})") ==
        "job.json: data.test_split: expected a fraction in (0, 1) or a count of examples >= 1, got 1.5");
  CHECK(ErrorOf(R"({"train": "a.csv", "test": "b.csv", "test_split": 0.1})") ==
        "job.json: data.test_split: holds out a test set, but \"test\" names one: keep one of the two");
  CHECK(ErrorOf(R"({"train": {"x": "x.npy", "y": "y.npy"}, "test_split": 0.1, "delimiter": ";"})") ==
        "job.json: data.delimiter: is a csv field; this data's format is npy");
  CHECK(ErrorOf(R"({"train": "x.npy", "test_split": 0.1})") ==
        "job.json: data.train: npy keeps features and labels apart: expected {\"x\": PATH, \"y\": PATH}");
  CHECK(ErrorOf(R"({"train": "a.csv", "test_split": 0.1, "colour": "red"})").find("data.colour") != std::string::npos);
  CHECK(ErrorOf(R"({"train": "a.csv", "test_split": 0.1, "task": "clustering"})") ==
        "job.json: data.task: unknown task \"clustering\" (expected classification or regression)");
  CHECK(ErrorOf(R"({"train": "a.csv", "test_split": 0.1, "classes": ["a", "a"]})") == "job.json: data.classes[1]: \"a\" is named twice");
  CHECK(ErrorOf("5") == "job.json: data: expected a folder with the MNIST IDX files, or an object naming your data's files, got 5");
}

TEST_CASE("CSV: quotes, embedded delimiters and newlines, CRLF; text labels numbered in sorted order", "[unit][data][csv]") {
  TempDir dir;
  WriteFile(dir / "train.csv",
            "a,\"b, the second\",species\r\n"
            "1.5,2,\"setosa\"\r\n"
            "3,-4e1,versicolor\r\n"
            "\"5\",6,\"set\nosa\"\r\n"
            " 7 ,8,setosa\r\n");
  Result<DataSpec> spec = Spec(R"({"train": ")" + dir / "train.csv" + R"(", "test_split": 1})");
  REQUIRE(spec.ok());
  Result<Examples> e = ReadCsv(*spec, {dir / "train.csv"});
  INFO(e.status().ToString());
  REQUIRE(e.ok());
  CHECK(e->size == 4);
  CHECK(e->width == 2);
  CHECK(e->feature_names == std::vector<std::string>{"a", "b, the second"});
  CHECK(e->label_text == std::vector<std::string>{"setosa", "versicolor", "set\nosa", "setosa"});

  Result<DataSplits> d = LoadData(*spec, 1);
  REQUIRE(d.ok());
  CHECK(d->train.size + d->test.size == 4);
  CHECK(d->test.size == 1);
  CHECK(d->train.num_classes == 3);
  CHECK(d->train.class_names == std::vector<std::string>{"set\nosa", "setosa", "versicolor"});
  CHECK(d->train.dtype == DType::kF32);
}

TEST_CASE("CSV errors name the file, line and column and the text found", "[unit][data][csv]") {
  TempDir dir;
  auto error = [&](const std::string& text, const std::string& fields = "") {
    WriteFile(dir / "t.csv", text);
    Result<DataSpec> spec = Spec(R"({"train": ")" + dir / "t.csv" + R"(", "test_split": 1)" + fields + "}");
    REQUIRE(spec.ok());
    Result<DataSplits> d = LoadData(*spec, 1);
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().code() == Code::kInvalidArgument);
    return d.status().message();
  };
  const std::string f = dir / "t.csv";
  CHECK(error("x,y\n1,0\n2\n") == f + ":3: 1 fields, but the header has 2");
  CHECK(error("x,y\n1,0\nabc,1\n") == f + ":3: column 1 (\"x\"): expected a finite number, got \"abc\"");
  CHECK(error("x,y\n1,0\n,1\n") == f + ":3: column 1 (\"x\"): expected a finite number, got \"\"");
  CHECK(error("x,y\n1,0\nnan,1\n") == f + ":3: column 1 (\"x\"): expected a finite number, got \"nan\"");
  CHECK(error("x,y\n1,0\ninf,1\n") == f + ":3: column 1 (\"x\"): expected a finite number, got \"inf\"");
  CHECK(error("x,y\n\"1,0\n") .find(f + ":") == 0);  // an unterminated quote
  CHECK(error("x,y\n") == f + ": no data rows");
  CHECK(error("") == f + ": no data rows");
  CHECK(error("x,y\n1,0\n", R"(, "label": "z")") == f + ": data.label: no column \"z\" (columns: x, y)");
  CHECK(error("x,y\n1,0\n2,0\n") == f + ": every example has the one label \"0\"; classification needs at least 2 classes");
}

TEST_CASE("CSV: a .gz file, several files with one header, label and features by index, no header", "[unit][data][csv]") {
  TempDir dir;
  const std::string text = "9,1,2\n8,3,4\n7,5,6\n";
  gzFile gz = gzopen((dir / "a.csv.gz").c_str(), "wb");
  REQUIRE(gz != nullptr);
  gzwrite(gz, text.data(), static_cast<unsigned>(text.size()));
  gzclose(gz);
  WriteFile(dir / "b.csv", "6,7,8\n");
  Result<DataSpec> spec =
      Spec(R"({"train": [")" + dir / "a.csv.gz" + R"(", ")" + dir / "b.csv" + R"("], "test_split": 1, "header": false, "label": 0, "features": [2]})");
  REQUIRE(spec.ok());
  Result<Examples> e = ReadCsv(*spec, {dir / "a.csv.gz", dir / "b.csv"});
  INFO(e.status().ToString());
  REQUIRE(e.ok());
  CHECK(e->size == 4);
  CHECK(e->width == 1);
  CHECK(e->label_text == std::vector<std::string>{"9", "8", "7", "6"});
  const float* x = reinterpret_cast<const float*>(e->features.data());
  CHECK(std::vector<float>(x, x + 4) == std::vector<float>{2, 4, 6, 8});

  WriteFile(dir / "h1.csv", "p,q\n1,0\n");
  WriteFile(dir / "h2.csv", "p,r\n1,1\n");
  Result<DataSpec> two = Spec(R"({"train": [")" + dir / "h1.csv" + R"(", ")" + dir / "h2.csv" + R"("], "test_split": 1})");
  REQUIRE(two.ok());
  Result<Examples> bad = ReadCsv(*two, {dir / "h1.csv", dir / "h2.csv"});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == dir / "h2.csv" + ":1: its header (2 columns) differs from the first file's (2 columns)");
}

TEST_CASE("CSV header: a first row of numbers is data unless \"header\" says otherwise", "[unit][data][csv]") {
  TempDir dir;
  WriteFile(dir / "n.csv", "1,2,0\n3,4,1\n");
  WriteFile(dir / "h.csv", "a,b,y\n3,4,1\n");
  auto rows = [&](const std::string& file, const std::string& fields) {
    Result<DataSpec> spec = Spec(R"({"train": ")" + dir / file + R"(", "test_split": 1)" + fields + "}");
    REQUIRE(spec.ok());
    Result<Examples> e = ReadCsv(*spec, {dir / file});
    REQUIRE(e.ok());
    return e->size;
  };
  CHECK(rows("n.csv", "") == 2);
  CHECK(rows("h.csv", "") == 1);
  CHECK(rows("n.csv", R"(, "header": true)") == 1);
  CHECK(rows("h.csv", R"(, "columns": ["p", "q", "r"], "label": "r", "skip_rows": 1)") == 1);
}

TEST_CASE("integer labels are class ids; declared classes name them; a test label outside is refused", "[unit][data]") {
  TempDir dir;
  WriteFile(dir / "train.csv", "x,y\n1,0\n2,2\n3,1\n4,2\n");
  WriteFile(dir / "test.csv", "x,y\n5,3\n");
  Result<DataSpec> spec = Spec(R"({"train": ")" + dir / "train.csv" + R"(", "test": ")" + dir / "test.csv" + R"("})");
  REQUIRE(spec.ok());
  Result<DataSplits> d = LoadData(*spec, 1);
  REQUIRE_FALSE(d.ok());
  CHECK(d.status().message() == dir / "test.csv" + ": label 3 of example 0 is outside [0, 3)");

  WriteFile(dir / "test.csv", "x,y\n5,2\n");
  d = LoadData(*spec, 1);
  REQUIRE(d.ok());
  CHECK(d->train.num_classes == 3);
  CHECK(d->train.labels == std::vector<ClassId>{0, 2, 1, 2});
  CHECK(d->test.labels == std::vector<ClassId>{2});

  Result<DataSpec> named = Spec(R"({"train": ")" + dir / "train.csv" + R"(", "test": ")" + dir / "test.csv" + R"(", "classes": ["b", "c"]})");
  REQUIRE(named.ok());
  d = LoadData(*named, 1);
  REQUIRE_FALSE(d.ok());
  CHECK(d.status().message().find("example 0 has label \"0\", which is not one of the 2 classes (b, c)") != std::string::npos);
}

TEST_CASE("the held-out test set is the same for a seed, differs for another, and keeps every example once", "[unit][data]") {
  TempDir dir;
  std::string text = "x,y\n";
  for (int i = 0; i < 50; ++i) text += std::to_string(i) + "," + std::to_string(i % 2) + "\n";
  WriteFile(dir / "t.csv", text);
  Result<DataSpec> spec = Spec(R"({"train": ")" + dir / "t.csv" + R"(", "test_split": 0.2})");
  REQUIRE(spec.ok());
  auto firsts = [](const Dataset& d) {
    std::vector<float> v;
    for (std::uint32_t i = 0; i < d.size; ++i) v.push_back(Row(d, i)[0]);
    return v;
  };
  Result<DataSplits> a = LoadData(*spec, 7), b = LoadData(*spec, 7), c = LoadData(*spec, 8);
  REQUIRE((a.ok() && b.ok() && c.ok()));
  CHECK(a->test.size == 10);
  CHECK(a->train.size == 40);
  CHECK(firsts(a->test) == firsts(b->test));
  CHECK(firsts(a->test) != firsts(c->test));
  std::vector<float> all = firsts(a->train), test = firsts(a->test);
  all.insert(all.end(), test.begin(), test.end());
  std::sort(all.begin(), all.end());
  for (int i = 0; i < 50; ++i) CHECK(all[static_cast<std::size_t>(i)] == static_cast<float>(i));
  CHECK(std::is_sorted(test.begin(), test.end()));  // the held-out examples keep the file's order
}

TEST_CASE("standardize: every feature of the training split gets mean 0 and std 1; the test split uses the same", "[unit][data]") {
  TempDir dir;
  WriteFile(dir / "train.csv", "a,b,c,y\n1,10,5,0\n2,20,5,1\n3,30,5,0\n4,40,5,1\n");
  WriteFile(dir / "test.csv", "a,b,c,y\n2.5,25,6,1\n");
  Result<DataSpec> spec = Spec(R"({"train": ")" + dir / "train.csv" + R"(", "test": ")" + dir / "test.csv" + R"(", "normalize": "standardize"})");
  REQUIRE(spec.ok());
  Result<DataSplits> d = LoadData(*spec, 1);
  REQUIRE(d.ok());
  double sum[3] = {}, sq[3] = {};
  for (std::uint32_t i = 0; i < 4; ++i) {
    std::vector<float> r = Row(d->train, i);
    for (int j = 0; j < 3; ++j) sum[j] += r[static_cast<std::size_t>(j)], sq[j] += r[static_cast<std::size_t>(j)] * r[static_cast<std::size_t>(j)];
  }
  for (int j = 0; j < 2; ++j) {
    CHECK(sum[j] / 4 == Approx(0).margin(1e-6));
    CHECK(sq[j] / 4 == Approx(1).epsilon(1e-5));
  }
  CHECK(sum[2] == 0);  // a constant feature is centred, not divided by 0
  std::vector<float> t = Row(d->test, 0);
  CHECK(t[0] == Approx(0).margin(1e-6));  // 2.5 is the training mean of a
  CHECK(t[2] == Approx(1));               // (6 - 5) * 1 for the constant feature
}

TEST_CASE("standardize on a regression table: the statistics pass reads no targets, and the targets stay as in the file", "[unit][data]") {
  TempDir dir;  // (the statistics pass once wrote the targets through a null pointer)
  WriteFile(dir / "train.csv", "a,b,y\n1,10,0.5\n3,30,1.5\n");
  WriteFile(dir / "test.csv", "a,b,y\n2,20,1\n");
  Result<DataSpec> spec = Spec(R"({"train": ")" + dir / "train.csv" + R"(", "test": ")" + dir / "test.csv" +
                               R"(", "task": "regression", "normalize": "standardize"})");
  INFO(spec.status().ToString());
  REQUIRE(spec.ok());
  Result<DataSplits> d = LoadData(*spec, 1);
  REQUIRE(d.ok());
  CHECK(Row(d->train, 0)[0] == Approx(-1));
  CHECK(d->train.targets == std::vector<float>{0.5f, 1.5f});
}

TEST_CASE("an IDX pair of any shape: a table, images with channels; bad ranks refused", "[unit][data][idx]") {
  TempDir dir;
  WriteFile(dir / "x2", tfd::testing::IdxBytes({3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  WriteFile(dir / "x4", tfd::testing::IdxBytes({3, 2, 1, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  WriteFile(dir / "y", tfd::testing::IdxBytes({3}, {0, 1, 4}));
  WriteFile(dir / "y2", tfd::testing::IdxBytes({2}, {0, 1}));
  Result<Examples> table = ReadIdxExamples(dir / "x2", dir / "y");
  REQUIRE(table.ok());
  CHECK((table->height == 1 && table->width == 4 && table->channels == 1));
  CHECK(table->label_ids == std::vector<std::int64_t>{0, 1, 4});
  Result<Examples> images = ReadIdxExamples(dir / "x4", dir / "y");
  REQUIRE(images.ok());
  CHECK((images->height == 2 && images->width == 1 && images->channels == 2));
  Result<Examples> bad = ReadIdxExamples(dir / "x2", dir / "y2");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == dir / "y2" + ": 2 labels, but " + dir / "x2" + " has 3 examples");
  bad = ReadIdxExamples(dir / "y", dir / "y");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("features of 1 dimension") != std::string::npos);
}

TEST_CASE("globs expand sorted; a path or glob that finds nothing is named", "[unit][data]") {
  TempDir dir;
  WriteFile(dir / "b.csv", "");
  WriteFile(dir / "a.csv", "");
  Result<std::vector<std::string>> got = ExpandPaths({dir / "*.csv"}, "data.train");
  REQUIRE(got.ok());
  CHECK(*got == std::vector<std::string>{dir / "a.csv", dir / "b.csv"});
  got = ExpandPaths({dir / "*.npy"}, "data.train");
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().message() == "data.train: \"" + dir / "*.npy" + "\" matches no file");
  got = ExpandPaths({dir / "c.csv"}, "data.test");
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().message() == "data.test: \"" + dir / "c.csv" + "\": no such file");
}

TEST_CASE("inspect: classes with counts, feature ranges, constant features, rare classes and duplicate rows", "[unit][data]") {
  TempDir dir;
  std::string text = "a,b,y\n";
  for (int i = 0; i < 200; ++i) text += std::to_string(i % 50) + ",7," + (i == 0 ? "rare" : i % 2 ? "odd" : "even") + "\n";
  WriteFile(dir / "t.csv", text);
  Result<DataSpec> spec = Spec(R"({"train": ")" + dir / "t.csv" + R"(", "test_split": 0.5})");
  REQUIRE(spec.ok());
  spec->test_fraction = 0;  // every row in train, as `tfd data inspect FILE` reads a bare file
  Result<DataSplits> d = LoadData(*spec, 1);
  REQUIRE(d.ok());
  REQUIRE(d->test.size == 0);
  const DataReport r = Inspect(d->train, d->train.feature_names);
  CHECK(r.rows == 200);
  CHECK(r.features == 2);
  REQUIRE(r.classes.size() == 3);
  CHECK(r.classes[0].name == "even");
  CHECK(r.classes[0].count == 99);
  CHECK(r.classes[2].name == "rare");
  CHECK(r.classes[2].count == 1);
  REQUIRE(r.first.size() == 2);
  CHECK(r.first[0].name == "a");
  CHECK(r.first[0].min == 0);
  CHECK(r.first[0].max == 49);
  CHECK(r.first[0].mean == Approx(24.5));
  // Rows i, i + 50, i + 100 and i + 150 have the same features and parity: 3 duplicates for each of the
  // 50 values of a, but for a = 0 row 0 is "rare" and only rows 100 and 150 repeat row 50: 149.
  CHECK(r.warnings == std::vector<std::string>{"1 constant feature (b): no use to the model", "class \"rare\" has 1 of the 200 rows (under 1%)",
                                              "149 duplicate rows (features and label repeat an earlier row)"});
  const std::string text_report = FormatReport("t.csv", r);
  CHECK(text_report.rfind("t.csv: 200 rows; each 1x2x1 (2 float32 values)\nclasses (3): even 99 (49.5%) odd 100 (50.0%) rare 1 (0.5%)\n", 0) == 0);
}

// A CSV of `classes` text classes "k0" .. "k<classes-1>" (names whose sorted order is not their
// numeric order: "k10" sorts before "k2"), `per_class` rows each, its one feature the class's number.
std::string ManyClassCsv(int classes, int per_class) {
  std::string text = "x,y\n";
  for (int r = 0; r < per_class; ++r)
    for (int c = classes - 1; c >= 0; --c) text += std::to_string(c) + ",k" + std::to_string(c) + "\n";
  return text;
}

TEST_CASE("300 and 1000 text classes are numbered in sorted name order, every label its class", "[unit][data][csv]") {
  for (const int classes : {300, 1000}) {
    TempDir dir;
    WriteFile(dir / "many.csv", ManyClassCsv(classes, 2));
    Result<DataSpec> spec = Spec(R"({"train": ")" + dir / "many.csv" + R"(", "test_split": 0.25})");
    REQUIRE(spec.ok());
    Result<DataSplits> d = LoadData(*spec, 1);
    REQUIRE(d.ok());
    REQUIRE(d->train.num_classes == classes);
    std::vector<std::string> sorted;
    for (int c = 0; c < classes; ++c) sorted.push_back("k" + std::to_string(c));
    std::sort(sorted.begin(), sorted.end());
    CHECK(d->train.class_names == sorted);
    CHECK(d->test.class_names == sorted);
    CHECK(d->train.class_names[2] == "k10");  // k0, k1, k10, ...
    for (const Dataset* split : {&d->train, &d->test}) {
      REQUIRE(split->labels.size() == static_cast<std::size_t>(split->size));
      for (std::uint32_t i = 0; i < static_cast<std::uint32_t>(split->size); ++i) {
        std::vector<float> x(1);
        ClassId y = -1;
        FillBatch(*split, std::span(&i, 1), x.data(), &y);
        REQUIRE((y >= 0 && y < classes));
        REQUIRE(split->class_names[static_cast<std::size_t>(y)] == "k" + std::to_string(static_cast<int>(x[0])));
      }
    }
    const auto top = std::max_element(d->train.labels.begin(), d->train.labels.end());
    CHECK(*top == classes - 1);
  }
}

TEST_CASE("more classes than kMaxClasses are refused naming the file and the count", "[unit][data][csv]") {
  TempDir dir;
  WriteFile(dir / "text.csv", ManyClassCsv(kMaxClasses + 1, 1));
  Result<DataSpec> spec = Spec(R"({"train": ")" + dir / "text.csv" + R"(", "test_split": 0.25})");
  REQUIRE(spec.ok());
  Result<DataSplits> d = LoadData(*spec, 1);
  REQUIRE_FALSE(d.ok());
  CHECK(d.status().code() == Code::kInvalidArgument);
  CHECK(d.status().message() == dir / "text.csv" + ": 65537 classes; at most 65536 are supported");
  WriteFile(dir / "ids.csv", "x,y\n1,0\n2,65536\n3,1\n");
  spec = Spec(R"({"train": ")" + dir / "ids.csv" + R"(", "test_split": 1})");
  REQUIRE(spec.ok());
  d = LoadData(*spec, 1);
  REQUIRE_FALSE(d.ok());
  CHECK(d.status().message() == dir / "ids.csv" + ": label 65536 means 65537 classes; at most 65536 are supported");
  WriteFile(dir / "ids.csv", "x,y\n1,0\n2,65535\n3,1\n");  // the largest id allowed
  d = LoadData(*spec, 1);
  REQUIRE(d.ok());
  CHECK(d->train.num_classes == kMaxClasses);
}

// An IDX file of rank 1: `type` 0x0B (16-bit) or 0x0C (32-bit) big-endian signed integers.
std::string WideIdx(std::uint8_t type, const std::vector<std::int32_t>& values, std::uint32_t declared) {
  std::string out = {0, 0, static_cast<char>(type), 1};
  for (int b = 3; b >= 0; --b) out += static_cast<char>(declared >> (8 * b));
  for (std::int32_t v : values)
    for (int b = type == 0x0C ? 3 : 1; b >= 0; --b) out += static_cast<char>(static_cast<std::uint32_t>(v) >> (8 * b));
  return out;
}

TEST_CASE("IDX labels of 16 and 32 bits are read; a negative label or a wrong length is named", "[unit][data][idx]") {
  TempDir dir;
  WriteFile(dir / "x", tfd::testing::IdxBytes({3, 2}, {1, 2, 3, 4, 5, 6}));
  for (const std::uint8_t type : {std::uint8_t{0x0B}, std::uint8_t{0x0C}}) {
    WriteFile(dir / "y", WideIdx(type, {0, 299, 5}, 3));
    Result<Examples> e = ReadIdxExamples(dir / "x", dir / "y");
    REQUIRE(e.ok());
    CHECK(e->label_ids == std::vector<std::int64_t>{0, 299, 5});
    WriteFile(dir / "y", WideIdx(type, {0, -2, 5}, 3));
    e = ReadIdxExamples(dir / "x", dir / "y");
    REQUIRE_FALSE(e.ok());
    CHECK(e.status().message() == dir / "y" + ": label -2 at index 1 is negative");
    WriteFile(dir / "y", WideIdx(type, {0, 1}, 3));
    e = ReadIdxExamples(dir / "x", dir / "y");
    REQUIRE_FALSE(e.ok());
    CHECK(e.status().message().rfind(dir / "y" + ": wrong length: the header says 3 labels of " + (type == 0x0C ? "4" : "2"), 0) == 0);
  }
  WriteFile(dir / "y", WideIdx(0x0C, {0, 70000, 1}, 3));  // read; the class limit is the numbering's (above)
  CHECK(ReadIdxExamples(dir / "x", dir / "y")->label_ids[1] == 70000);
}

TEST_CASE("the fingerprint hashes labels as a byte each up to 256 classes, as before labels were wider", "[unit][data]") {
  Dataset d;
  d.size = 2, d.height = 1, d.width = 1, d.num_classes = 256;
  d.features = std::vector<std::uint8_t>{9, 8};
  d.labels = {255, 3};
  Sha256 h;
  const std::string head = "tfd-data-1 2 1 1 1 u8 256 0 ";
  h.Update(std::as_bytes(std::span(head)));
  const std::uint8_t bytes[] = {9, 8, 255, 3};  // the features, then the labels
  h.Update(std::as_bytes(std::span(bytes)));
  CHECK(Fingerprint(d) == h.HexDigest());
  Dataset wide = d;
  wide.num_classes = 300;
  wide.labels = {255, 259};  // 259 and 3 differ only past the first byte
  Dataset other = wide;
  other.labels = {255, 3};
  CHECK(Fingerprint(wide) != Fingerprint(other));
}

TEST_CASE("inspect on 300 balanced classes: no rare-class warnings, the text lists the first 100", "[unit][data]") {
  TempDir dir;
  WriteFile(dir / "many.csv", ManyClassCsv(300, 3));
  Result<DataSpec> spec = Spec(R"({"train": ")" + dir / "many.csv" + R"(", "test_split": 0.5})");
  REQUIRE(spec.ok());
  spec->test_fraction = 0;
  Result<DataSplits> d = LoadData(*spec, 1);
  REQUIRE(d.ok());
  DataReport r = Inspect(d->train);
  REQUIRE(r.classes.size() == 300);
  CHECK(r.classes[299].count == 3);
  // Each row repeats twice: features and label alike.
  CHECK(r.warnings == std::vector<std::string>{"600 duplicate rows (features and label repeat an earlier row)"});
  CHECK(FormatReport("many.csv", r).find(" ... and 200 more (--json lists every class)\n") != std::string::npos);
  const auto k99 = static_cast<ClassId>(std::find(d->train.class_names.begin(), d->train.class_names.end(), "k99") - d->train.class_names.begin());
  std::replace(d->train.labels.begin(), d->train.labels.end(), k99, ClassId{0});  // k99's rows become k0's: a class with none
  r = Inspect(d->train);
  CHECK(r.warnings.front() == "class \"k99\" has 0 of the 900 rows (under 0.0333333%)");
}

}  // namespace
}  // namespace tfd::data
