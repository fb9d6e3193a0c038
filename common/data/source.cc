#include "common/data/source.h"

#include <glob.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <unordered_map>
#include <numeric>

#include <fmt/format.h>

#include "common/base/check.h"
#include "common/base/random.h"
#include "common/data/readers.h"

namespace tfd::data {
namespace {

using config::DataSpec;

bool IsGlob(const std::string& p) { return p.find_first_of("*?[") != std::string::npos; }

// A non-negative integer written plainly ("7", not "7.0" or "+7"), as integer class labels are.
bool PlainInteger(const std::string& s, std::int64_t* out) {
  if (s.empty()) return false;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, *out);
  return ec == std::errc() && ptr == end && *out >= 0;
}

// Class ids for labels given as integers: the spec's names when declared (ids index them), else
// 0 .. max, as PyTorch's CrossEntropyLoss and Keras' sparse labels take them.
Status CheckIds(const std::vector<std::int64_t>& ids, int classes, const std::string& source) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= classes)
      return Status::InvalidArgument(fmt::format("{}: label {} of example {} is outside [0, {})", source, ids[i], i, classes));
  return Status::Ok();
}

// The names of text labels in id order: declared, else sorted (numerically when all are numbers).
std::vector<std::string> NamesOf(const std::vector<std::string>& text) {
  std::vector<std::string> names(text.begin(), text.end());
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  auto number = [](const std::string& s, double* v) {
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
    return ec == std::errc() && ptr == s.data() + s.size();
  };
  double a = 0, b = 0;
  if (std::all_of(names.begin(), names.end(), [&](const std::string& s) { return number(s, &a); }))
    std::sort(names.begin(), names.end(), [&](const std::string& x, const std::string& y) { return number(x, &a) && number(y, &b) && a < b; });
  return names;
}

// Text labels that are all plain integers are ids (a CSV's 0/1 column), as an .npy's would be.
void TextToIds(Examples* e) {
  if (e->label_text.empty()) return;
  std::vector<std::int64_t> ids(e->label_text.size());
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (!PlainInteger(e->label_text[i], &ids[i])) return;
  e->label_ids = std::move(ids);
  e->label_text.clear();
}

Result<std::vector<ClassId>> ClassIds(const Examples& e, const std::vector<std::string>& names, const std::string& source) {
  std::vector<ClassId> out(static_cast<std::size_t>(e.size));
  if (!e.label_ids.empty()) {
    TFD_RETURN_IF_ERROR(CheckIds(e.label_ids, static_cast<int>(names.size()), source));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<ClassId>(e.label_ids[i]);
    return out;
  }
  std::unordered_map<std::string_view, ClassId> id;  // views of `names`, which outlives it
  id.reserve(names.size());
  for (std::size_t c = 0; c < names.size(); ++c) id.emplace(names[c], static_cast<ClassId>(c));
  for (std::size_t i = 0; i < out.size(); ++i) {
    auto it = id.find(e.label_text[i]);
    if (it == id.end())
      return Status::InvalidArgument(fmt::format("{}: example {} has label \"{}\", which is not one of the {} classes ({}{})", source, i,
                                                 e.label_text[i], names.size(), fmt::join(names.begin(), names.begin() + std::min<std::size_t>(names.size(), 8), ", "),
                                                 names.size() > 8 ? ", ..." : ""));
    out[i] = it->second;
  }
  return out;
}

Dataset ToDataset(Examples&& e, std::vector<ClassId> labels, const std::vector<std::string>& names) {
  Dataset d;
  d.size = e.size;
  d.height = e.height;
  d.width = e.width;
  d.channels = e.channels;
  d.dtype = e.dtype;
  d.num_classes = static_cast<int>(names.size());
  d.features = std::move(e.features);
  d.labels = std::move(labels);
  d.class_names = names;
  d.feature_names = std::move(e.feature_names);
  d.categorical = std::move(e.categorical);
  return d;
}

// A regression split: the reader's targets as they are, no classes.
Dataset ToRegression(Examples&& e) {
  Dataset d = ToDataset(std::move(e), {}, {});
  d.targets = std::move(e.targets);
  d.num_targets = e.num_targets;
  return d;
}

std::string ColumnNames(const std::vector<CategoricalColumn>& columns) {
  std::string s = "[";
  for (const CategoricalColumn& c : columns) s += (s.size() > 1 ? ", \"" : "\"") + c.name + "\"";
  return s + "]";
}
std::string ColumnPlaces(const std::vector<CategoricalColumn>& columns) {
  std::vector<int> at;
  for (const CategoricalColumn& c : columns) at.push_back(c.feature);
  return fmt::format("[{}]", fmt::join(at, ", "));
}

Status CheckTargets(const Examples& e, const std::string& source) {
  if (e.num_targets < 1 || e.targets.size() != static_cast<std::size_t>(e.size) * static_cast<std::size_t>(e.num_targets))
    return Status::InvalidArgument(fmt::format("{}: no regression targets were read (\"task\": \"regression\" needs a numeric target column)", source));
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::string>> ExpandPaths(const std::vector<std::string>& paths, const std::string& field) {
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    if (!IsGlob(p)) {
      std::error_code ec;
      if (!std::filesystem::exists(p, ec)) return Status::NotFound(fmt::format("{}: \"{}\": no such file", field, p));
      out.push_back(p);
      continue;
    }
    glob_t g{};
    const int rc = glob(p.c_str(), GLOB_ERR, nullptr, &g);
    std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + g.gl_pathc);
    globfree(&g);
    if (rc != 0 || matches.empty()) return Status::NotFound(fmt::format("{}: \"{}\" matches no file", field, p));
    std::sort(matches.begin(), matches.end());
    out.insert(out.end(), matches.begin(), matches.end());
  }
  return out;
}

Result<Examples> ReadExamples(const DataSpec& spec, const config::DataFiles& files, const std::string& field) {
  using F = DataSpec::Format;
  if (!files.x.empty()) {
    TFD_ASSIGN_OR_RETURN(std::vector<std::string> x, ExpandPaths({files.x}, field + ".x"));
    if (files.y.empty() && spec.unlabeled_width > 0 && spec.format == F::kNpy) return ReadNpyPair(spec, x[0], "");  // predicting: no labels
    TFD_ASSIGN_OR_RETURN(std::vector<std::string> y, ExpandPaths({files.y}, field + ".y"));
    if (x.size() != 1 || y.size() != 1)
      return Status::InvalidArgument(fmt::format("{}: \"x\" and \"y\" must each name one file ({} and {} match)", field, x.size(), y.size()));
    if (spec.format == F::kNpy) return ReadNpyPair(spec, x[0], y[0]);
    return ReadIdxExamples(x[0], y[0]);
  }
  TFD_ASSIGN_OR_RETURN(std::vector<std::string> paths, ExpandPaths(files.paths, field));
  if (spec.has_categorical() && spec.format != F::kCsv)
    return Status::InvalidArgument(fmt::format("data.categorical: only a csv source has categorical columns (this data is {})",
                                               config::FormatName(spec.format)));
  switch (spec.format) {
    case F::kCsv: return ReadCsv(spec, paths);
    case F::kNpz: return ReadNpz(spec, paths);
    case F::kImages: return ReadImageFolders(spec, paths);
    case F::kTfrecord: return ReadTfrecords(spec, paths);
    case F::kMnistFolder:
    case F::kNpy:
    case F::kIdx: break;  // an x/y pair, or the MNIST folder: not here
  }
  return Status::InvalidArgument(fmt::format("{}: {} data needs {{\"x\": PATH, \"y\": PATH}}", field, config::FormatName(spec.format)));
}

std::vector<CategoricalColumn> BuildVocabulary(const Examples& train) {
  std::vector<CategoricalColumn> out = train.categorical;
  for (CategoricalColumn& c : out) std::sort(c.vocabulary.begin(), c.vocabulary.end());
  return out;
}

Status EncodeCategories(const std::vector<CategoricalColumn>& vocabulary, Examples* e, const std::string& source) {
  const auto same_column = [](const CategoricalColumn& a, const CategoricalColumn& b) { return a.feature == b.feature && a.name == b.name; };
  if (!std::equal(vocabulary.begin(), vocabulary.end(), e->categorical.begin(), e->categorical.end(), same_column))
    return Status::InvalidArgument(fmt::format("{}: categorical columns {} at features {}, but the model's are {} at {}", source,
                                               ColumnNames(e->categorical), ColumnPlaces(e->categorical), ColumnNames(vocabulary),
                                               ColumnPlaces(vocabulary)));
  std::vector<std::vector<float>> id_of(vocabulary.size());  // per column: the id of each value read
  for (std::size_t c = 0; c < vocabulary.size(); ++c) {
    std::unordered_map<std::string_view, float> id;  // views of `vocabulary`, which outlives it
    id.reserve(vocabulary[c].vocabulary.size());
    for (std::size_t k = 0; k < vocabulary[c].vocabulary.size(); ++k) id.emplace(vocabulary[c].vocabulary[k], static_cast<float>(k + 1));
    for (const std::string& value : e->categorical[c].vocabulary) {
      auto it = id.find(value);
      id_of[c].push_back(it == id.end() ? 0.0f : it->second);
    }
  }
  e->features = RenumberCategories(e->features, e->size, e->values(), vocabulary, id_of);
  e->categorical = vocabulary;
  return Status::Ok();
}

Result<DataSplits> RegressionSplits(Examples train, Examples test, const std::string& train_source, const std::string& test_source) {
  TFD_RETURN_IF_ERROR(CheckTargets(train, train_source));
  if (test.size > 0) {
    TFD_RETURN_IF_ERROR(CheckTargets(test, test_source));
    if (test.num_targets != train.num_targets)
      return Status::InvalidArgument(fmt::format("{}: {} targets per example, but the training files ({}) have {}", test_source, test.num_targets,
                                                 train_source, train.num_targets));
  }
  test.num_targets = train.num_targets;
  DataSplits out;
  out.train = ToRegression(std::move(train));
  out.test = ToRegression(std::move(test));
  return out;
}

Result<DataSplits> NumberClasses(const DataSpec& spec, Examples train, Examples test, const std::string& train_source,
                                 const std::string& test_source) {
  std::vector<std::string> names = spec.classes;
  const bool declared = !names.empty();
  if (!declared) {  // integer labels are ids unless names are declared for them as text
    TextToIds(&train);
    TextToIds(&test);
  }
  if (!train.label_ids.empty() && !test.label_text.empty()) TextToIds(&test);
  if (!declared) {
    if (!train.label_ids.empty()) {
      const std::int64_t top = train.label_ids.empty() ? 0 : *std::max_element(train.label_ids.begin(), train.label_ids.end());
      if (top >= kMaxClasses)
        return Status::InvalidArgument(fmt::format("{}: label {} means {} classes; at most {} are supported", train_source, top, top + 1, kMaxClasses));
      for (std::int64_t c = 0; c <= top; ++c) names.push_back(std::to_string(c));
    } else {
      names = NamesOf(train.label_text);
    }
  }
  if (names.size() > static_cast<std::size_t>(kMaxClasses))
    return Status::InvalidArgument(fmt::format("{}: {} classes; at most {} are supported", train_source, names.size(), kMaxClasses));
  if (names.size() < 2)
    return Status::InvalidArgument(fmt::format("{}: every example has the one label \"{}\"; classification needs at least 2 classes",
                                               train_source, names.empty() ? "" : names[0]));
  // Declared names with integer labels: the ids index the names.
  TFD_ASSIGN_OR_RETURN(std::vector<ClassId> train_labels, ClassIds(train, names, train_source));
  TFD_ASSIGN_OR_RETURN(std::vector<ClassId> test_labels, ClassIds(test, names, test_source));
  DataSplits out;
  out.train = ToDataset(std::move(train), std::move(train_labels), names);
  out.test = ToDataset(std::move(test), std::move(test_labels), names);
  return out;
}

void HoldOutTest(DataSplits* data, std::int64_t count, std::uint64_t seed) {
  Dataset& train = data->train;
  TFD_CHECK(count > 0 && count < train.size);
  std::vector<std::uint32_t> order(static_cast<std::size_t>(train.size));
  std::iota(order.begin(), order.end(), 0u);
  Rng rng(seed, 0x54455354ULL);  // "TEST": a stream of its own, apart from the epochs' shuffles
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.Below(i)]);
  std::vector<bool> held(order.size(), false);
  for (std::int64_t i = 0; i < count; ++i) held[order[static_cast<std::size_t>(i)]] = true;
  const std::size_t bytes = train.example_bytes();
  Dataset kept = train.Shell(), test = train.Shell();
  std::vector<std::uint8_t> kept_bytes, test_bytes;
  kept_bytes.reserve(static_cast<std::size_t>(train.size - count) * bytes);
  test_bytes.reserve(static_cast<std::size_t>(count) * bytes);
  const auto width = static_cast<std::size_t>(train.num_targets);
  for (std::size_t i = 0; i < order.size(); ++i) {
    const std::uint8_t* src = train.features.data() + i * bytes;
    (held[i] ? test_bytes : kept_bytes).insert((held[i] ? test_bytes : kept_bytes).end(), src, src + bytes);
    if (train.regression()) {
      const float* t = train.targets.data() + i * width;
      (held[i] ? test.targets : kept.targets).insert((held[i] ? test.targets : kept.targets).end(), t, t + width);
    } else {
      (held[i] ? test.labels : kept.labels).push_back(train.labels[i]);
    }
  }
  kept.features = std::move(kept_bytes);
  kept.size = train.size - count;
  test.features = std::move(test_bytes);
  test.size = count;
  data->train = std::move(kept);
  data->test = std::move(test);
}

void Normalize(const DataSpec& spec, DataSplits* data) {
  Dataset& train = data->train;
  Normalizer norm;
  switch (spec.normalize) {
    case DataSpec::Normalize::kDefault: break;  // bytes scaled to [0, 1], floats as they are
    case DataSpec::Normalize::kScale: norm.scale = train.dtype == DType::kU8 ? 1.0f / 255.0f : 1.0f; break;
    case DataSpec::Normalize::kNone: norm.scale = 1.0f; break;
    case DataSpec::Normalize::kStandardize: {
      norm.scale = 1.0f;
      const auto n = static_cast<std::size_t>(train.pixels());
      std::vector<double> sum(n, 0.0), sq(n, 0.0);
      std::vector<float> row(n);
      const Normalizer kept = train.normalizer;
      train.normalizer = Normalizer{.scale = 1.0f};  // the values as stored
      for (std::int64_t i = 0; i < train.size; ++i) {
        const auto index = static_cast<std::uint32_t>(i);
        ClassId label = 0;
        FillBatch(train, std::span(&index, 1), row.data(), &label);
        for (std::size_t j = 0; j < n; ++j) sum[j] += row[j], sq[j] += double{row[j]} * row[j];
      }
      train.normalizer = kept;
      norm.mean.resize(n);
      norm.inv_std.resize(n);
      const auto count = static_cast<double>(std::max<std::int64_t>(train.size, 1));
      for (std::size_t j = 0; j < n; ++j) {
        const double mean = sum[j] / count, var = std::max(0.0, sq[j] / count - mean * mean);
        norm.mean[j] = static_cast<float>(mean);
        norm.inv_std[j] = var > 1e-12 ? static_cast<float>(1.0 / std::sqrt(var)) : 1.0f;  // a constant feature stays centred
      }
      for (const CategoricalColumn& c : train.categorical) {  // an id is a name, not a quantity
        norm.mean[static_cast<std::size_t>(c.feature)] = 0.0f;
        norm.inv_std[static_cast<std::size_t>(c.feature)] = 1.0f;
      }
      break;
    }
  }
  for (Dataset* d : {&data->train, &data->test, &data->validation}) d->normalizer = norm;
}

Result<DataSplits> LoadData(const DataSpec& spec, std::uint64_t seed) {
  if (spec.is_mnist_folder()) return LoadMnist(spec.folder);
  TFD_ASSIGN_OR_RETURN(Examples train, ReadExamples(spec, spec.train, "data.train"));
  Examples test;
  const std::string train_source = spec.Describe();
  std::string test_source = train_source;
  if (!spec.test.empty()) {
    TFD_ASSIGN_OR_RETURN(test, ReadExamples(spec, spec.test, "data.test"));
    test_source = spec.test.paths.empty() ? spec.test.x : spec.test.paths.front();
    if (test.values() != train.values() || test.channels != train.channels)
      return Status::InvalidArgument(fmt::format("{}: examples are {}x{}x{}, but the training examples ({}) are {}x{}x{}", test_source,
                                                 test.height, test.width, test.channels, train_source, train.height, train.width,
                                                 train.channels));
    if (test.dtype != train.dtype)
      return Status::InvalidArgument(fmt::format("{}: features are {}, the training files' are {}", test_source,
                                                 test.dtype == DType::kU8 ? "bytes" : "floats", train.dtype == DType::kU8 ? "bytes" : "floats"));
  } else {
    test.height = train.height, test.width = train.width, test.channels = train.channels, test.dtype = train.dtype;
  }
  if (!train.categorical.empty()) {  // ids by the training files' values; the test files' others are out of vocabulary
    const std::vector<CategoricalColumn> vocabulary = BuildVocabulary(train);
    TFD_RETURN_IF_ERROR(EncodeCategories(vocabulary, &train, train_source));
    if (!spec.test.empty()) TFD_RETURN_IF_ERROR(EncodeCategories(vocabulary, &test, test_source));
    else test.categorical = vocabulary;
  }
  TFD_ASSIGN_OR_RETURN(DataSplits out, spec.task == DataSpec::Task::kRegression
                                            ? RegressionSplits(std::move(train), std::move(test), train_source, test_source)
                                            : NumberClasses(spec, std::move(train), std::move(test), train_source, test_source));
  if (spec.held_out_test()) {
    const std::int64_t n = out.train.size;
    const std::int64_t held = HeldOutCount(n, spec.test_count, spec.test_fraction);
    if (held <= 0 || held >= n)
      return Status::InvalidArgument(fmt::format("data.test_split: holds out {} of the {} examples in {}; leave some of each", held, n, train_source));
    HoldOutTest(&out, held, spec.split_seed.value_or(seed));
    FitVocabulary(&out);
  }
  Normalize(spec, &out);
  return out;
}

}  // namespace tfd::data
