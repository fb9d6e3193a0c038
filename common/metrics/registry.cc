#include "common/metrics/registry.h"

#include <algorithm>
#include <cmath>
#include <variant>

#include <fmt/format.h>

#include "common/base/check.h"

namespace tfd::metrics {

struct Registry::Series {
  Labels labels;
  std::variant<std::unique_ptr<Counter>, std::unique_ptr<Gauge>, std::unique_ptr<Histogram>,
               std::function<std::optional<double>()>>
      metric;
};

struct Registry::Family {
  std::string name, help;
  Type type = Type::kCounter;
  std::vector<std::unique_ptr<Series>> series;
};

namespace {

bool NameChar(char c, bool first, bool colon) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
  return alpha || (!first && c >= '0' && c <= '9');
}

const char* TypeName(Type t) {
  switch (t) {
    case Type::kCounter: return "counter";
    case Type::kGauge: return "gauge";
    case Type::kHistogram: return "histogram";
  }
  return "untyped";
}

// `{a="1",b="2"}` of the constant labels, the series' own and `extra` (le), or "" when there are none.
std::string LabelText(const Labels& constant, const Labels& own, const std::pair<std::string, std::string>* extra) {
  std::string out;
  auto add = [&](const std::string& k, const std::string& v) {
    out += out.empty() ? "{" : ",";
    out += k;
    out += "=\"";
    out += EscapeLabelValue(v);
    out += '"';
  };
  for (const auto& [k, v] : constant) add(k, v);
  for (const auto& [k, v] : own) add(k, v);
  if (extra != nullptr) add(extra->first, extra->second);
  if (!out.empty()) out += '}';
  return out;
}

// Backslash and newline escaped, and with `quote` the double quote too.
std::string Escape(std::string_view v, bool quote) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (quote && c == '"') out += "\\\"";
    else out.push_back(c);
  }
  return out;
}

}  // namespace

std::string EscapeLabelValue(std::string_view v) { return Escape(v, /*quote=*/true); }
std::string EscapeHelp(std::string_view v) { return Escape(v, /*quote=*/false); }

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

bool ValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i)
    if (!NameChar(name[i], i == 0, /*colon=*/true)) return false;
  return true;
}

bool ValidLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__") || name == "le") return false;
  for (std::size_t i = 0; i < name.size(); ++i)
    if (!NameChar(name[i], i == 0, /*colon=*/false)) return false;
  return true;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(std::make_unique<std::atomic<std::uint64_t>[]>(bounds_.size() + 1)) {
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    TFD_CHECK(std::isfinite(bounds_[i]));
    TFD_CHECK(i == 0 || bounds_[i] > bounds_[i - 1]);
  }
  for (std::size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  // The first bucket whose bound is >= v; past the last bound, the +Inf bucket (NaN lands there too).
  const std::size_t i = static_cast<std::size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  s.cumulative.resize(bounds_.size() + 1);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = total;
  }
  s.count = total;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> ExponentialBuckets(double start, double factor, int n) {
  TFD_CHECK(start > 0 && factor > 1 && n > 0);
  std::vector<double> out;
  for (double b = start; static_cast<int>(out.size()) < n; b *= factor) out.push_back(b);
  return out;
}

Registry::Registry(Labels constant_labels) : constant_labels_(std::move(constant_labels)) {
  for (const auto& [k, v] : constant_labels_) TFD_CHECK(ValidLabelName(k));
}

Registry::~Registry() = default;

Registry::Series* Registry::FindOrAddLocked(std::string_view name, std::string_view help, Type type, const Labels& labels,
                                            bool* created) {
  TFD_CHECK(ValidMetricName(name));
  for (const auto& [k, v] : labels) {
    TFD_CHECK(ValidLabelName(k));
    for (const auto& c : constant_labels_) TFD_CHECK(c.first != k);
  }
  Family* family = nullptr;
  for (const auto& f : families_)
    if (f->name == name) family = f.get();
  if (family == nullptr) {
    families_.push_back(std::make_unique<Family>());
    family = families_.back().get();
    family->name = std::string(name);
    family->help = std::string(help);
    family->type = type;
  }
  TFD_CHECK(family->type == type && family->help == help);
  for (const auto& s : family->series) {
    if (s->labels == labels) {
      *created = false;
      return s.get();
    }
  }
  family->series.push_back(std::make_unique<Series>());
  family->series.back()->labels = labels;
  *created = true;
  return family->series.back().get();
}

// The metric of type T with `name` and `labels`, made from `args` when new.
template <class T, class... Args>
T* Registry::FindOrMakeLocked(std::string_view name, std::string_view help, Type type, const Labels& labels, Args&&... args) {
  bool created = false;
  Series* s = FindOrAddLocked(name, help, type, labels, &created);
  if (created) s->metric = std::make_unique<T>(std::forward<Args>(args)...);
  TFD_CHECK(std::holds_alternative<std::unique_ptr<T>>(s->metric));
  return std::get<std::unique_ptr<T>>(s->metric).get();
}

Counter* Registry::AddCounter(std::string_view name, std::string_view help, const Labels& labels) {
  MutexLock lock(&mu_);
  return FindOrMakeLocked<Counter>(name, help, Type::kCounter, labels);
}

Gauge* Registry::AddGauge(std::string_view name, std::string_view help, const Labels& labels) {
  MutexLock lock(&mu_);
  return FindOrMakeLocked<Gauge>(name, help, Type::kGauge, labels);
}

Histogram* Registry::AddHistogram(std::string_view name, std::string_view help, std::vector<double> bounds, const Labels& labels) {
  MutexLock lock(&mu_);
  return FindOrMakeLocked<Histogram>(name, help, Type::kHistogram, labels, std::move(bounds));
}

void Registry::AddCallback(std::string_view name, std::string_view help, Type type, const Labels& labels,
                           std::function<std::optional<double>()> read) {
  TFD_CHECK(type != Type::kHistogram);
  MutexLock lock(&mu_);
  bool created = false;
  Series* s = FindOrAddLocked(name, help, type, labels, &created);
  TFD_CHECK(created);  // one reader per series
  s->metric = std::move(read);
}

std::string Registry::Render() const {
  MutexLock lock(&mu_);
  std::string out;
  for (const auto& f : families_) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f->name, EscapeHelp(f->help), f->name, TypeName(f->type));
    for (const auto& s : f->series) {
      if (const auto* c = std::get_if<std::unique_ptr<Counter>>(&s->metric)) {
        out += fmt::format("{}{} {}\n", f->name, LabelText(constant_labels_, s->labels, nullptr), FormatValue((*c)->value()));
      } else if (const auto* g = std::get_if<std::unique_ptr<Gauge>>(&s->metric)) {
        out += fmt::format("{}{} {}\n", f->name, LabelText(constant_labels_, s->labels, nullptr), FormatValue((*g)->value()));
      } else if (const auto* read = std::get_if<std::function<std::optional<double>()>>(&s->metric)) {
        if (std::optional<double> v = (*read)())
          out += fmt::format("{}{} {}\n", f->name, LabelText(constant_labels_, s->labels, nullptr), FormatValue(*v));
      } else {
        const Histogram::Snapshot h = std::get<std::unique_ptr<Histogram>>(s->metric)->snapshot();
        for (std::size_t i = 0; i <= h.bounds.size(); ++i) {
          const std::pair<std::string, std::string> le{"le", i < h.bounds.size() ? FormatValue(h.bounds[i]) : "+Inf"};
          out += fmt::format("{}_bucket{} {}\n", f->name, LabelText(constant_labels_, s->labels, &le), h.cumulative[i]);
        }
        const std::string labels = LabelText(constant_labels_, s->labels, nullptr);
        out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", f->name, labels, FormatValue(h.sum), f->name, labels, h.count);
      }
    }
  }
  return out;
}

}  // namespace tfd::metrics
