#include "common/data/inspect.h"

#include <algorithm>
#include <bitset>
#include <cstring>
#include <limits>
#include <string_view>
#include <unordered_map>

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

// Rows whose features and label both repeat an earlier row's.
std::int64_t DuplicateRows(const Dataset& d) {
  const std::size_t bytes = d.example_bytes();
  std::unordered_map<std::string_view, std::bitset<256>> seen;  // features -> the labels seen with them
  seen.reserve(static_cast<std::size_t>(d.size));
  std::int64_t duplicates = 0;
  for (std::int64_t i = 0; i < d.size; ++i) {
    const std::string_view example(reinterpret_cast<const char*>(d.features.data()) + static_cast<std::size_t>(i) * bytes, bytes);
    std::bitset<256>& labels = seen[example];
    const std::uint8_t y = d.labels[static_cast<std::size_t>(i)];
    if (labels.test(y)) ++duplicates;
    labels.set(y);
  }
  return duplicates;
}

}  // namespace

DataReport Inspect(const Dataset& d, const std::vector<std::string>& names) {
  DataReport r;
  r.rows = d.size;
  r.height = d.height, r.width = d.width, r.channels = d.channels;
  r.dtype = d.dtype;
  r.features = d.pixels();
  std::vector<std::int64_t> counts(static_cast<std::size_t>(std::max(d.num_classes, 0)), 0);
  for (std::uint8_t y : d.labels)
    if (y < counts.size()) ++counts[y];
  for (std::size_t c = 0; c < counts.size(); ++c)
    r.classes.push_back({c < d.class_names.size() ? d.class_names[c] : std::to_string(c), counts[c]});
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
  for (const DataReport::Class& c : r.classes)
    if (d.size > 0 && static_cast<double>(c.count) < 0.01 * static_cast<double>(d.size))
      r.warnings.push_back(fmt::format("class \"{}\" has {} of the {} rows (under 1%)", c.name, c.count, d.size));
  if (const std::int64_t dup = DuplicateRows(d); dup > 0)
    r.warnings.push_back(fmt::format("{} duplicate row{} (features and label repeat an earlier row)", dup, dup == 1 ? "" : "s"));
  return r;
}

std::string FormatReport(const std::string& title, const DataReport& r) {
  std::string out = fmt::format("{}: {} rows; each {}x{}x{} ({} {})\n", title, r.rows, r.height, r.width, r.channels, r.features,
                                r.dtype == DType::kU8 ? "bytes" : "float32 values");
  out += fmt::format("classes ({}):", r.classes.size());
  for (const DataReport::Class& c : r.classes)
    out += fmt::format(" {} {} ({:.1f}%)", c.name, c.count, r.rows > 0 ? 100.0 * static_cast<double>(c.count) / static_cast<double>(r.rows) : 0.0);
  out += "\n";
  std::size_t wide = 7;
  for (const DataReport::Feature& f : r.first) wide = std::max(wide, f.name.size());
  out += fmt::format("{:<{}} {:>12} {:>12} {:>12}\n", "feature", wide, "min", "mean", "max");
  for (const DataReport::Feature& f : r.first) out += fmt::format("{:<{}} {:>12.6g} {:>12.6g} {:>12.6g}\n", f.name, wide, f.min, f.mean, f.max);
  if (r.features > static_cast<std::int64_t>(r.first.size())) out += fmt::format("... and {} more features\n", r.features - static_cast<std::int64_t>(r.first.size()));
  if (r.warnings.empty()) out += "warnings: none\n";
  for (const std::string& w : r.warnings) out += "warning: " + w + "\n";
  return out;
}

}  // namespace tfd::data
