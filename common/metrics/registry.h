#pragma once

// Counters, gauges and histograms with labels, and their rendering in the Prometheus text format
// 0.0.4 (what tfd serves on /metrics). Ours, not Debian's prometheus-cpp-dev: its counters and
// histograms lock a mutex on every update, and these are updated on every training step and frame.
//
// Threads: a metric is updated from any thread with a relaxed atomic operation (a counter's or
// gauge's add is one compare-and-swap loop, a histogram's observe a bucket search and two atomic
// adds); nothing on the update path takes a lock. Registering and rendering take the registry's
// mutex, which no update ever waits for. A rendering taken while updates go on shows every metric
// at some moment of its own, not all at one moment; a histogram's count is always the sum of its
// buckets.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/base/mutex.h"

namespace tfd::metrics {

// Label names and values, in the order they are rendered.
using Labels = std::vector<std::pair<std::string, std::string>>;

enum class Type { kCounter, kGauge, kHistogram };

// Only goes up (it restarts at 0 with the process, as Prometheus expects).
class Counter {
 public:
  void Increment(double by = 1) { value_.fetch_add(by, std::memory_order_relaxed); }  // by >= 0
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double by) { value_.fetch_add(by, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Counts observations into buckets with the given upper bounds (le: a value equal to a bound falls
// in that bucket), plus the implicit +Inf bucket, and keeps their sum.
class Histogram {
 public:
  // `bounds`: finite, strictly increasing (checked: a bad list is our bug).
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<std::uint64_t> cumulative;  // bounds.size() + 1 entries, the last (+Inf) == count
    std::uint64_t count = 0;
    double sum = 0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> counts_;  // bounds_.size() + 1, not cumulative
  std::atomic<double> sum_{0};
};

// `n` bounds from `start`, each `factor` times the one before.
std::vector<double> ExponentialBuckets(double start, double factor, int n);

// The metrics of one process. Every sample carries the constant labels first, then its own.
// Registration is idempotent: the same name and labels give the same metric back; a name used with
// another type, an invalid name or label, or a name that has other labels' help or buckets is our
// bug (TFD_CHECK). Returned pointers live as long as the registry.
class Registry {
 public:
  explicit Registry(Labels constant_labels = {});
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Counter* AddCounter(std::string_view name, std::string_view help, const Labels& labels = {}) TFD_EXCLUDES(mu_);
  Gauge* AddGauge(std::string_view name, std::string_view help, const Labels& labels = {}) TFD_EXCLUDES(mu_);
  Histogram* AddHistogram(std::string_view name, std::string_view help, std::vector<double> bounds, const Labels& labels = {})
      TFD_EXCLUDES(mu_);
  // A counter or gauge whose value `read` gives at each rendering (nullopt: no sample this time).
  // `read` runs on the rendering thread under the registry's mutex: it must be quick, must not
  // touch the registry, and what it reads must outlive the registry.
  void AddCallback(std::string_view name, std::string_view help, Type type, const Labels& labels,
                   std::function<std::optional<double>()> read) TFD_EXCLUDES(mu_);

  // The text format 0.0.4: families in registration order, each with one HELP and one TYPE line
  // and its samples together; ends with a newline.
  std::string Render() const TFD_EXCLUDES(mu_);

 private:
  struct Series;
  struct Family;
  // The family `name` (made if new) and its series with `labels` (null if new; the caller fills it).
  Series* FindOrAddLocked(std::string_view name, std::string_view help, Type type, const Labels& labels, bool* created)
      TFD_REQUIRES(mu_);
  template <class T, class... Args>
  T* FindOrMakeLocked(std::string_view name, std::string_view help, Type type, const Labels& labels, Args&&... args)
      TFD_REQUIRES(mu_);

  const Labels constant_labels_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Family>> families_ TFD_GUARDED_BY(mu_);
};

// Text-format pieces, exposed for tests.
std::string EscapeLabelValue(std::string_view v);  // \\, \" and \n
std::string EscapeHelp(std::string_view v);        // \\ and \n
std::string FormatValue(double v);                 // shortest round-trip; +Inf, -Inf, NaN
bool ValidMetricName(std::string_view name);       // [a-zA-Z_:][a-zA-Z0-9_:]*
bool ValidLabelName(std::string_view name);        // [a-zA-Z_][a-zA-Z0-9_]*, not __reserved, not le

inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace tfd::metrics
