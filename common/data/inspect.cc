#include "common/data/inspect.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>

namespace tfd::data {
namespace {

double Value(const Dataset& d, std::int64_t row, std::int64_t j) {
  const std::int64_t at = row * d.pixels() + j;
  if (d.dtype == DType::kU8) return d.features[static_cast<std::size_t>(at)];
  float v = 0;
  std::memcpy(&v, d.features.data() + at * 4, sizeof v);
  return v;
}

// A row's features (a view of the dataset's bytes) and its label.
struct Row {
  std::string_view features;
  ClassId label = 0;
  bool operator==(const Row&) const = default;
};
struct RowHash {
  std::size_t operator()(const Row& r) const { return std::hash<std::string_view>()(r.features) ^ (std::size_t{0x9e3779b97f4a7c15u} * static_cast<std::size_t>(r.label)); }
};

// Rows whose features and label both repeat an earlier row's (a regression row's label counts as 0).
std::int64_t DuplicateRows(const Dataset& d) {
  const std::size_t bytes = d.example_bytes();
  std::unordered_set<Row, RowHash> seen;
  seen.reserve(static_cast<std::size_t>(d.size));
  std::int64_t duplicates = 0;
  for (std::int64_t i = 0; i < d.size; ++i) {
    const std::string_view example(reinterpret_cast<const char*>(d.features.data()) + static_cast<std::size_t>(i) * bytes, bytes);
    const ClassId y = d.labels.empty() ? 0 : d.labels[static_cast<std::size_t>(i)];
    duplicates += !seen.insert(Row{example, y}).second;
  }
  return duplicates;
}

// The rows under which a class is named as rare: 1% (the rule), or past 100 classes,
// where an even share is itself under 1%, a tenth of an even share.
double RareShare(std::size_t classes) { return classes <= 100 ? 0.01 : 0.1 / static_cast<double>(classes); }

// One warning per rare class, the first kMaxReported of them, then one saying how many more.
void WarnRare(const DataReport& r, std::int64_t rows, std::vector<std::string>* warnings) {
  const double share = RareShare(r.classes.size());
  std::size_t rare = 0;
  for (const DataReport::Class& c : r.classes) {
    if (rows == 0 || static_cast<double>(c.count) >= share * static_cast<double>(rows)) continue;
    if (++rare <= kMaxReported)
      warnings->push_back(fmt::format("class \"{}\" has {} of the {} rows (under {:g}%)", c.name, c.count, rows, 100 * share));
  }
  if (rare > kMaxReported) warnings->push_back(fmt::format("... and {} more classes under {:g}% of the rows", rare - kMaxReported, 100 * share));
}

}  // namespace

DataReport Inspect(const Dataset& d, const std::vector<std::string>& names) {
  DataReport r;
  r.rows = d.size;
  r.height = d.height, r.width = d.width, r.channels = d.channels;
  r.dtype = d.dtype;
  r.features = d.pixels();
  std::vector<std::int64_t> counts(static_cast<std::size_t>(std::max(d.num_classes, 0)), 0);
  for (ClassId y : d.labels)
    if (y >= 0 && static_cast<std::size_t>(y) < counts.size()) ++counts[static_cast<std::size_t>(y)];
  for (std::size_t c = 0; c < counts.size(); ++c)
    r.classes.push_back({c < d.class_names.size() ? d.class_names[c] : std::to_string(c), counts[c]});
  for (const CategoricalColumn& c : d.categorical) {
    DataReport::Categorical rc{c.name, static_cast<std::int64_t>(c.vocabulary.size()), 0};
    for (std::int64_t i = 0; i < d.size; ++i) rc.unseen += Value(d, i, c.feature) == 0;
    r.categorical.push_back(rc);
  }
  std::vector<std::string> constant;
  for (std::int64_t j = 0; j < r.features; ++j) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0;
    for (std::int64_t i = 0; i < d.size; ++i) {
      const double v = Value(d, i, j);
      lo = std::min(lo, v), hi = std::max(hi, v), sum += v;
    }
    const std::string name = static_cast<std::size_t>(j) < names.size() ? names[static_cast<std::size_t>(j)] : fmt::format("feature {}", j);
    if (static_cast<std::size_t>(j) < kMaxReported) r.first.push_back({name, lo, d.size > 0 ? sum / static_cast<double>(d.size) : 0, hi});
    // Image borders are often constant; name at most a few.
    if (d.size > 1 && lo == hi) constant.push_back(name);
  }
  if (!constant.empty())
    r.warnings.push_back(fmt::format("{} constant feature{} ({}{}): no use to the model", constant.size(), constant.size() == 1 ? "" : "s",
                                     fmt::join(constant.begin(), constant.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(constant.size(), 5)), ", "),
                                     constant.size() > 5 ? ", ..." : ""));
  WarnRare(r, d.size, &r.warnings);
  if (const std::int64_t dup = DuplicateRows(d); dup > 0)
    r.warnings.push_back(fmt::format("{} duplicate row{} (features and label repeat an earlier row)", dup, dup == 1 ? "" : "s"));
  return r;
}

std::string FormatReport(const std::string& title, const DataReport& r) {
  std::string out = fmt::format("{}: {} rows; each {}x{}x{} ({} {})\n", title, r.rows, r.height, r.width, r.channels, r.features,
                                r.dtype == DType::kU8 ? "bytes" : "float32 values");
  out += fmt::format("classes ({}):", r.classes.size());
  for (std::size_t i = 0; i < std::min(r.classes.size(), kMaxReportedClasses); ++i) {
    const DataReport::Class& c = r.classes[i];
    out += fmt::format(" {} {} ({:.1f}%)", c.name, c.count, r.rows > 0 ? 100.0 * static_cast<double>(c.count) / static_cast<double>(r.rows) : 0.0);
  }
  if (r.classes.size() > kMaxReportedClasses) out += fmt::format(" ... and {} more (--json lists every class)", r.classes.size() - kMaxReportedClasses);
  out += "\n";
  std::size_t wide = 7;
  for (const DataReport::Feature& f : r.first) wide = std::max(wide, f.name.size());
  out += fmt::format("{:<{}} {:>12} {:>12} {:>12}\n", "feature", wide, "min", "mean", "max");
  for (const DataReport::Feature& f : r.first) out += fmt::format("{:<{}} {:>12.6g} {:>12.6g} {:>12.6g}\n", f.name, wide, f.min, f.mean, f.max);
  if (r.features > static_cast<std::int64_t>(r.first.size())) out += fmt::format("... and {} more features\n", r.features - static_cast<std::int64_t>(r.first.size()));
  for (const DataReport::Categorical& c : r.categorical)  // their rows above show ids, not quantities
    out += fmt::format("categorical {}: {} values in the training vocabulary; {} rows here out of vocabulary\n", c.name, c.vocabulary, c.unseen);
  if (r.warnings.empty()) out += "warnings: none\n";
  for (const std::string& w : r.warnings) out += "warning: " + w + "\n";
  return out;
}

}  // namespace tfd::data
