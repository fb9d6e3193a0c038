#include "common/config/data_spec.h"

#include <unordered_set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/config/json_reader.h"

namespace tfd::config {
namespace {

using json = nlohmann::json;
using Format = DataSpec::Format;

bool EndsWith(std::string_view s, std::string_view tail) { return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail; }

// "train"/"test": a path, a list of paths and globs, or {"x": PATH, "y": PATH}.
void ReadFiles(ObjectReader& r, std::string_view key, DataFiles* out) {
  const json* v = r.Get(key);
  if (v == nullptr) return;
  const std::string path = r.PathOf(key);
  if (v->is_string() && !v->get<std::string>().empty()) {
    out->paths.push_back(v->get<std::string>());
  } else if (v->is_array() && !v->empty()) {
    for (std::size_t i = 0; i < v->size(); ++i) {
      const json& p = (*v)[i];
      if (!p.is_string() || p.get<std::string>().empty())
        return r.Fail(r.PathOf(key, i), "expected a path or a glob, got " + config::Describe(p));
      out->paths.push_back(p.get<std::string>());
    }
  } else if (v->is_object()) {
    ObjectReader files = r.Child(*v, path);
    files.String("x", &out->x, /*required=*/true);
    files.String("y", &out->y, /*required=*/true);
    if (r.status().ok() && (out->x.empty() || out->y.empty())) r.Fail(path, "\"x\" and \"y\" must name files");
    (void)files.Finish();
  } else {
    r.Fail(path, "expected a path, a list of paths and globs, or {\"x\": PATH, \"y\": PATH}, got " + config::Describe(*v));
  }
}

void ReadFormat(ObjectReader& r, DataSpec* d) {
  std::string name;
  r.String("format", &name);
  if (!name.empty()) {
    static constexpr Format kAll[] = {Format::kCsv, Format::kNpy, Format::kNpz, Format::kImages, Format::kTfrecord, Format::kIdx};
    for (Format f : kAll)
      if (name == FormatName(f)) return void(d->format = f);
    return r.Fail(r.PathOf("format"), fmt::format("unknown format \"{}\" (expected csv, npy, npz, images, tfrecord or idx)", name));
  }
  const std::string& first = d->train.paths.empty() ? d->train.x : d->train.paths.front();
  if (!FormatFromName(first, &d->format))
    r.Fail(r.PathOf("format"), fmt::format("missing, and \"{}\" does not say it (expected csv, npy, npz, images, tfrecord or idx)", first));
}

// "label": a column name or index; "features": a list of names or of indices.
void ReadColumns(ObjectReader& r, DataSpec* d) {
  if (const json* v = r.Get("label"); v != nullptr) {
    if (v->is_string() && !v->get<std::string>().empty()) d->label = v->get<std::string>();
    else if (v->is_number_integer() && v->get<std::int64_t>() >= 0 && v->get<std::int64_t>() < (1 << 20)) d->label_index = v->get<int>();
    else r.Fail(r.PathOf("label"), "expected a column name or a column index >= 0, got " + config::Describe(*v));
  }
  if (const json* v = r.Get("features"); v != nullptr) {
    if (!v->is_array() || v->empty()) return r.Fail(r.PathOf("features"), "expected a non-empty list of column names or indices, got " + config::Describe(*v));
    for (std::size_t i = 0; i < v->size(); ++i) {
      const json& f = (*v)[i];
      const bool names = !d->feature_names.empty(), indices = !d->feature_indices.empty();
      if (f.is_string() && !f.get<std::string>().empty() && !indices) d->feature_names.push_back(f.get<std::string>());
      else if (f.is_number_integer() && f.get<std::int64_t>() >= 0 && f.get<std::int64_t>() < (1 << 20) && !names) d->feature_indices.push_back(f.get<int>());
      else return r.Fail(r.PathOf("features", i), "expected a column name or index (all of one kind), got " + config::Describe(f));
    }
  }
  if (const json* v = r.Get("categorical"); v != nullptr) {
    if (!v->is_array() || v->empty()) return r.Fail(r.PathOf("categorical"), "expected a non-empty list of column names or indices, got " + config::Describe(*v));
    for (std::size_t i = 0; i < v->size(); ++i) {
      const json& f = (*v)[i];
      const bool names = !d->categorical_names.empty(), indices = !d->categorical_indices.empty();
      if (f.is_string() && !f.get<std::string>().empty() && !indices) d->categorical_names.push_back(f.get<std::string>());
      else if (f.is_number_integer() && f.get<std::int64_t>() >= 0 && f.get<std::int64_t>() < (1 << 20) && !names) d->categorical_indices.push_back(f.get<int>());
      else return r.Fail(r.PathOf("categorical", i), "expected a column name or index (all of one kind), got " + config::Describe(f));
    }
  }
  if (const json* v = r.Get("columns"); v != nullptr) {
    if (!v->is_array() || v->empty()) return r.Fail(r.PathOf("columns"), "expected a non-empty list of column names, got " + config::Describe(*v));
    for (std::size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) return r.Fail(r.PathOf("columns", i), "expected a column name, got " + config::Describe((*v)[i]));
      d->columns.push_back((*v)[i].get<std::string>());
    }
  }
}

void ReadCsvFields(ObjectReader& r, DataSpec* d) {
  if (r.Has("header")) {
    bool header = true;
    r.Bool("header", &header);
    d->header = header;
  }
  r.Int("skip_rows", 0, 1 << 20, &d->skip_rows);
  std::string delimiter = ",";
  r.String("delimiter", &delimiter);
  const bool tab = delimiter == "\\t" || delimiter == "tab";
  if (!tab && (delimiter.size() != 1 || delimiter[0] == '"' || delimiter[0] == '\n' || delimiter[0] == '\r'))
    r.Fail(r.PathOf("delimiter"), fmt::format("expected one character other than a quote or a newline, got \"{}\"", delimiter));
  else
    d->delimiter = tab ? '\t' : delimiter[0];
  if (d->header.value_or(false) && !d->columns.empty() && r.status().ok())
    r.Fail(r.PathOf("columns"), "names the columns of a file without a header row, but \"header\" is true");
  if (!d->columns.empty()) d->header = false;
}

void ReadImageFields(ObjectReader& r, DataSpec* d) {
  if (const json* v = r.Get("image_size"); v != nullptr) {
    if (!v->is_array() || v->size() != 2 || !(*v)[0].is_number_integer() || !(*v)[1].is_number_integer() ||
        (*v)[0].get<std::int64_t>() < 1 || (*v)[1].get<std::int64_t>() < 1 || (*v)[0].get<std::int64_t>() > 4096 ||
        (*v)[1].get<std::int64_t>() > 4096)
      return r.Fail(r.PathOf("image_size"), "expected [height, width], each in [1, 4096], got " + config::Describe(*v));
    d->image_height = (*v)[0].get<int>();
    d->image_width = (*v)[1].get<int>();
  }
  std::string color;
  r.String("color", &color);
  if (color == "grayscale") d->channels = 1;
  else if (color == "rgb") d->channels = 3;
  else if (!color.empty()) r.Fail(r.PathOf("color"), fmt::format("unknown color \"{}\" (expected grayscale or rgb)", color));
}

void ReadTask(ObjectReader& r, DataSpec* d) {
  std::string task = "classification";
  r.String("task", &task);
  if (task == "classification") d->task = DataSpec::Task::kClassification;
  else if (task == "regression") d->task = DataSpec::Task::kRegression;
  else r.Fail(r.PathOf("task"), fmt::format("unknown task \"{}\" (expected classification or regression)", task));
  std::string loss;
  r.String("loss", &loss);
  if (loss == "mae") d->loss = DataSpec::Loss::kMae;
  else if (!loss.empty() && loss != "mse") r.Fail(r.PathOf("loss"), fmt::format("unknown loss \"{}\" (expected mse or mae)", loss));
  if (!loss.empty() && d->task != DataSpec::Task::kRegression && r.status().ok())
    r.Fail(r.PathOf("loss"), "is a regression field (set \"task\": \"regression\"); classification trains on softmax cross-entropy");
  if (const json* v = r.Get("classes"); v != nullptr) {
    if (!v->is_array() || v->size() < 2) return r.Fail(r.PathOf("classes"), "expected a list of at least 2 class names, got " + config::Describe(*v));
    std::unordered_set<std::string> seen;  // a list of thousands of classes is checked in one pass
    for (std::size_t i = 0; i < v->size(); ++i) {
      const json& c = (*v)[i];
      std::string name = c.is_string() ? c.get<std::string>() : c.is_number_integer() ? c.dump() : std::string();
      if (name.empty()) return r.Fail(r.PathOf("classes", i), "expected a class name, got " + config::Describe(c));
      if (!seen.insert(name).second) return r.Fail(r.PathOf("classes", i), fmt::format("\"{}\" is named twice", name));
      d->classes.push_back(std::move(name));
    }
    if (d->task == DataSpec::Task::kRegression) r.Fail(r.PathOf("classes"), "names classes, but the task is regression");
  }
}

void ReadNormalize(ObjectReader& r, DataSpec* d) {
  std::string name;
  r.String("normalize", &name);
  if (name.empty()) return;
  static constexpr DataSpec::Normalize kAll[] = {DataSpec::Normalize::kScale, DataSpec::Normalize::kStandardize, DataSpec::Normalize::kNone};
  for (DataSpec::Normalize n : kAll)
    if (name == NormalizeName(n)) return void(d->normalize = n);
  r.Fail(r.PathOf("normalize"), fmt::format("unknown normalize \"{}\" (expected scale, standardize or none)", name));
}

// The fields that only one format reads are refused on another, so a misplaced one is not ignored.
void CheckFieldsFit(ObjectReader& r, const DataSpec& d) {
  const bool csv = d.format == Format::kCsv, pairs = d.format == Format::kNpy || d.format == Format::kIdx;
  if (!csv)
    for (const char* key : {"header", "skip_rows", "delimiter", "columns", "categorical"})
      if (r.Has(key)) return r.Fail(r.PathOf(key), fmt::format("is a csv field; this data's format is {}", FormatName(d.format)));
  if (d.format != Format::kImages && d.format != Format::kTfrecord)
    for (const char* key : {"image_size", "color"})
      if (r.Has(key)) return r.Fail(r.PathOf(key), fmt::format("is an images/tfrecord field; this data's format is {}", FormatName(d.format)));
  if (d.format != Format::kNpz && r.Has("arrays"))
    return r.Fail(r.PathOf("arrays"), fmt::format("is an npz field; this data's format is {}", FormatName(d.format)));
  if (!csv && d.format != Format::kTfrecord && (r.Has("label") || r.Has("features")))
    return r.Fail(r.PathOf(r.Has("label") ? "label" : "features"), fmt::format("is a csv/tfrecord field; this data's format is {}", FormatName(d.format)));
  for (const auto& [key, files] : {std::pair{"train", &d.train}, std::pair{"test", &d.test}}) {
    if (files->empty()) continue;
    if (pairs && files->x.empty())
      return r.Fail(r.PathOf(key), fmt::format("{} keeps features and labels apart: expected {{\"x\": PATH, \"y\": PATH}}", FormatName(d.format)));
    if (!pairs && !files->x.empty())
      return r.Fail(r.PathOf(key), fmt::format("{} files hold features and labels together: expected a path or a list of them", FormatName(d.format)));
  }
}

}  // namespace

std::string_view FormatName(Format f) {
  switch (f) {
    case Format::kMnistFolder: return "mnist";
    case Format::kCsv: return "csv";
    case Format::kNpy: return "npy";
    case Format::kNpz: return "npz";
    case Format::kImages: return "images";
    case Format::kTfrecord: return "tfrecord";
    case Format::kIdx: return "idx";
  }
  return "?";
}

std::string_view NormalizeName(DataSpec::Normalize n) {
  switch (n) {
    case DataSpec::Normalize::kDefault: return "default";
    case DataSpec::Normalize::kScale: return "scale";
    case DataSpec::Normalize::kStandardize: return "standardize";
    case DataSpec::Normalize::kNone: return "none";
  }
  return "?";
}

std::string_view LossName(DataSpec::Loss l) { return l == DataSpec::Loss::kMae ? "mae" : "mse"; }

bool FormatFromName(std::string_view path, Format* out) {
  struct Tail {
    std::string_view tail;
    Format format;
  };
  static constexpr Tail kTails[] = {{".csv", Format::kCsv},           {".csv.gz", Format::kCsv},           {".tsv", Format::kCsv},
                                    {".tsv.gz", Format::kCsv},        {".npy", Format::kNpy},              {".npz", Format::kNpz},
                                    {".tfrecord", Format::kTfrecord}, {".tfrecords", Format::kTfrecord},   {".idx", Format::kIdx},
                                    {"-ubyte", Format::kIdx},         {".tfrecord.gz", Format::kTfrecord}};
  for (const Tail& t : kTails)
    if (EndsWith(path, t.tail)) return *out = t.format, true;
  return false;
}

std::string DataSpec::Describe() const {
  if (format == Format::kMnistFolder) return folder;
  return train.paths.empty() ? train.x : train.paths.front();
}

std::vector<std::pair<std::string, std::string>> DataSpec::NamedPaths() const {
  std::vector<std::pair<std::string, std::string>> out;
  if (format == Format::kMnistFolder) return {{"data", folder}};
  for (const auto& [key, files] : {std::pair{"train", &train}, std::pair{"test", &test}}) {
    for (std::size_t i = 0; i < files->paths.size(); ++i)
      if (files->paths[i].find_first_of("*?[") == std::string::npos) out.emplace_back(fmt::format("data.{}[{}]", key, i), files->paths[i]);
    if (!files->x.empty()) out.emplace_back(fmt::format("data.{}.x", key), files->x);
    if (!files->y.empty()) out.emplace_back(fmt::format("data.{}.y", key), files->y);
  }
  return out;
}

void ReadDataSpec(ObjectReader& root, DataSpec* d) {
  const json* v = root.Get("data");
  if (v == nullptr) return root.Fail(root.PathOf("data"), "missing (expected a folder with the MNIST IDX files, or an object naming your data's files)");
  if (v->is_string()) {
    d->format = Format::kMnistFolder;
    d->folder = v->get<std::string>();
    if (d->folder.empty()) root.Fail(root.PathOf("data"), "must name a folder with the MNIST IDX files");
    return;
  }
  if (!v->is_object())
    return root.Fail(root.PathOf("data"), "expected a folder with the MNIST IDX files, or an object naming your data's files, got " + config::Describe(*v));
  ObjectReader r = root.Child(*v, root.PathOf("data"));
  ReadFiles(r, "train", &d->train);
  ReadFiles(r, "test", &d->test);
  if (r.status().ok() && d->train.empty()) return r.Fail(r.PathOf("train"), "missing (expected the training files)");
  if (const json* split = r.Get("test_split"); split != nullptr) {
    if (split->is_number_integer() && split->get<std::int64_t>() >= 1) d->test_count = split->get<std::int64_t>();
    else if (split->is_number() && split->get<double>() > 0 && split->get<double>() < 1) d->test_fraction = split->get<double>();
    else return r.Fail(r.PathOf("test_split"), "expected a fraction in (0, 1) or a count of examples >= 1, got " + config::Describe(*split));
    if (!d->test.empty()) return r.Fail(r.PathOf("test_split"), "holds out a test set, but \"test\" names one: keep one of the two");
  }
  if (r.status().ok() && d->test.empty() && d->test_count == 0 && d->test_fraction == 0)
    return r.Fail(r.PathOf("test"), "missing: name the test files, or hold some out with \"test_split\" (e.g. 0.2)");
  if (r.Get("split_seed") != nullptr) {
    std::int64_t split_seed = 0;
    r.Int("split_seed", std::int64_t{0}, INT64_MAX, &split_seed);
    if (r.status().ok() && d->test_count == 0 && d->test_fraction == 0)
      return r.Fail(r.PathOf("split_seed"), "seeds the test_split's shuffle, but no test_split holds a test set out");
    d->split_seed = static_cast<std::uint64_t>(split_seed);
  }
  ReadFormat(r, d);
  ReadTask(r, d);
  ReadColumns(r, d);
  if (!r.status().ok()) return;
  if (d->format == Format::kCsv) ReadCsvFields(r, d);
  if (d->format == Format::kImages || d->format == Format::kTfrecord) ReadImageFields(r, d);
  if (d->format == Format::kNpz) {
    if (const json* arrays = r.Get("arrays"); arrays != nullptr) {
      ObjectReader a = r.Child(*arrays, r.PathOf("arrays"));
      a.String("x", &d->npz_x);
      a.String("y", &d->npz_y);
      (void)a.Finish();
    }
  }
  ReadNormalize(r, d);
  if (r.status().ok()) CheckFieldsFit(r, *d);
  (void)r.Finish();
}

}  // namespace tfd::config
