// The metrics registry and its Prometheus text format, the list of tfd's metrics, and the training
// observer that feeds them.
#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/metrics/registry.h"
#include "common/metrics/task_metrics.h"
#include "daemon/train/metrics_observer.h"

namespace tfd::metrics {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The value of the first sample line starting with `prefix` (name and labels), or -1.
double SampleValue(const std::string& text, const std::string& prefix) {
  for (const std::string& line : Lines(text))
    if (line.rfind(prefix + " ", 0) == 0) return std::stod(line.substr(prefix.size() + 1));
  return -1;
}

TEST_CASE("a rendering has HELP and TYPE once per metric, its samples together, constant labels first, and a final newline",
          "[unit][metrics]") {
  Registry r({{"job", "worker"}, {"task", "1"}, {"run", "r1"}});
  Counter* a = r.AddCounter("tfd_a_total", "Things.", {{"kind", "x"}});
  Gauge* g = r.AddGauge("tfd_g", "A gauge.");
  Counter* b = r.AddCounter("tfd_a_total", "Things.", {{"kind", "y"}});
  a->Increment(2);
  b->Increment();
  g->Set(-1.5);
  CHECK(r.AddCounter("tfd_a_total", "Things.", {{"kind", "x"}}) == a);  // the same name and labels: the same counter
  const std::string text = r.Render();
  CHECK(text ==
        "# HELP tfd_a_total Things.\n"
        "# TYPE tfd_a_total counter\n"
        "tfd_a_total{job=\"worker\",task=\"1\",run=\"r1\",kind=\"x\"} 2\n"
        "tfd_a_total{job=\"worker\",task=\"1\",run=\"r1\",kind=\"y\"} 1\n"
        "# HELP tfd_g A gauge.\n"
        "# TYPE tfd_g gauge\n"
        "tfd_g{job=\"worker\",task=\"1\",run=\"r1\"} -1.5\n");
  CHECK(Registry().Render().empty());
}

TEST_CASE("label values escape backslash, quote and newline; help escapes backslash and newline", "[unit][metrics]") {
  CHECK(EscapeLabelValue("a\\b\"c\nd") == "a\\\\b\\\"c\\nd");
  CHECK(EscapeHelp("a\\b\"c\nd") == "a\\\\b\"c\\nd");
  Registry r(Labels{{"run", "we\"ird\\run\n"}});
  r.AddGauge("tfd_x", "line one\nline \\two")->Set(1);
  const std::string text = r.Render();
  CHECK(text == "# HELP tfd_x line one\\nline \\\\two\n# TYPE tfd_x gauge\ntfd_x{run=\"we\\\"ird\\\\run\\n\"} 1\n");
}

TEST_CASE("values are written as Prometheus reads them: shortest decimals, +Inf, -Inf, NaN", "[unit][metrics]") {
  CHECK(FormatValue(3) == "3");
  CHECK(FormatValue(0.25) == "0.25");
  CHECK(FormatValue(1e21) == "1e+21");
  CHECK(FormatValue(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(FormatValue(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(FormatValue(std::nan("")) == "NaN");
}

TEST_CASE("names and labels are checked against Prometheus's grammar", "[unit][metrics]") {
  CHECK(ValidMetricName("tfd_steps_total"));
  CHECK(ValidMetricName("a:b"));
  CHECK_FALSE(ValidMetricName("tfd-steps"));
  CHECK_FALSE(ValidMetricName("1x"));
  CHECK_FALSE(ValidMetricName(""));
  CHECK(ValidLabelName("job"));
  CHECK_FALSE(ValidLabelName("__name"));
  CHECK_FALSE(ValidLabelName("le"));
  CHECK_FALSE(ValidLabelName("a:b"));
}

TEST_CASE("a histogram's buckets are cumulative, a value on a bound counts in it, and +Inf equals the count", "[unit][metrics]") {
  Registry r(Labels{{"job", "ps"}});
  Histogram* h = r.AddHistogram("tfd_h_seconds", "Times.", {0.25, 1, 10});
  for (double v : {0.125, 0.25, 0.5, 1.0, 20.0}) h->Observe(v);
  const std::string text = r.Render();
  CHECK(text ==
        "# HELP tfd_h_seconds Times.\n"
        "# TYPE tfd_h_seconds histogram\n"
        "tfd_h_seconds_bucket{job=\"ps\",le=\"0.25\"} 2\n"
        "tfd_h_seconds_bucket{job=\"ps\",le=\"1\"} 4\n"
        "tfd_h_seconds_bucket{job=\"ps\",le=\"10\"} 4\n"
        "tfd_h_seconds_bucket{job=\"ps\",le=\"+Inf\"} 5\n"
        "tfd_h_seconds_sum{job=\"ps\"} 21.875\n"
        "tfd_h_seconds_count{job=\"ps\"} 5\n");
  const std::vector<double> b = ExponentialBuckets(0.001, 2, 4);
  CHECK(b == std::vector<double>{0.001, 0.002, 0.004, 0.008});
}

TEST_CASE("a callback metric is read at each rendering and left out while it has no value", "[unit][metrics]") {
  Registry r;
  std::optional<double> value;
  r.AddCallback("tfd_cb", "Read late.", Type::kGauge, {}, [&] { return value; });
  CHECK(r.Render() == "# HELP tfd_cb Read late.\n# TYPE tfd_cb gauge\n");
  value = 7;
  CHECK(r.Render() == "# HELP tfd_cb Read late.\n# TYPE tfd_cb gauge\ntfd_cb 7\n");
}

TEST_CASE("concurrent updates lose nothing, and every rendering meanwhile has a consistent histogram", "[unit][metrics]") {
  Registry r(Labels{{"job", "worker"}});
  Counter* c = r.AddCounter("tfd_c_total", "C.");
  Gauge* g = r.AddGauge("tfd_g", "G.");
  Histogram* h = r.AddHistogram("tfd_h", "H.", {1, 2, 3});
  constexpr int kThreads = 4, kEach = 50000;
  std::atomic<bool> done{false};
  int renderings = 0;
  bool consistent = true;
  std::thread renderer([&] {
    while (!done.load()) {
      const std::string text = r.Render();
      ++renderings;
      const double inf = SampleValue(text, "tfd_h_bucket{job=\"worker\",le=\"+Inf\"}");
      const double count = SampleValue(text, "tfd_h_count{job=\"worker\"}");
      const double le3 = SampleValue(text, "tfd_h_bucket{job=\"worker\",le=\"3\"}");
      consistent = consistent && inf == count && le3 <= inf && text.back() == '\n';
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        c->Increment();
        g->Add(1);
        h->Observe(static_cast<double>((i + t) % 5));  // 0..4: one in five lands past the last bound
      }
    });
  }
  for (auto& w : writers) w.join();
  done = true;
  renderer.join();
  CHECK(renderings > 0);
  CHECK(consistent);
  CHECK(c->value() == kThreads * kEach);
  CHECK(g->value() == kThreads * kEach);
  const Histogram::Snapshot s = h->snapshot();
  CHECK(s.count == static_cast<std::uint64_t>(kThreads * kEach));
  CHECK(s.cumulative.back() == s.count);
  CHECK(s.cumulative[0] == static_cast<std::uint64_t>(2 * kThreads * kEach / 5));  // 0 and 1
  CHECK(s.sum == Approx(2.0 * kThreads * kEach));                                   // the mean of 0..4
}

TEST_CASE("every metric of a task follows Prometheus's naming, and each role adds its own", "[unit][metrics]") {
  Registry r({{"job", "worker"}, {"task", "0"}, {"run", ""}});
  TaskMetrics m(r);
  m.AddTrainingMetrics();
  m.AddPsClientMetrics();
  m.AddAllreduceMetrics();
  m.AddPsMetrics();
  m.AddCheckpointMetrics();
  m.AddRefusals([](std::size_t reason) { return reason == 3 ? 4u : 0u; });
  m.EvalAccuracy("test")->Set(0.9);
  const std::string text = r.Render();
  for (const std::string& line : Lines(text)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    std::istringstream words(line.substr(7));
    std::string name, type;
    words >> name >> type;
    INFO(line);
    CHECK(name.rfind("tfd_", 0) == 0);
    CHECK(ValidMetricName(name));
    CHECK((type == "counter") == (name.size() > 6 && name.substr(name.size() - 6) == "_total"));
  }
  CHECK(SampleValue(text, "tfd_refused_connections_total{job=\"worker\",task=\"0\",run=\"\",reason=\"busy\"}") == 4);
  CHECK(SampleValue(text, "tfd_eval_accuracy{job=\"worker\",task=\"0\",run=\"\",split=\"test\"}") == Approx(0.9));
  // No checkpoint yet: an age would be a lie.
  CHECK(text.find("tfd_checkpoint_age_seconds{") == std::string::npos);
  m.CheckpointWritten(1e9);
  CHECK(SampleValue(r.Render(), "tfd_checkpoint_age_seconds{job=\"worker\",task=\"0\",run=\"\"}") > 1e8);
}

TEST_CASE("the training observer counts steps and examples, times steps, and keeps the last loss and epoch", "[unit][metrics]") {
  Registry r;
  TaskMetrics m(r);
  m.AddTrainingMetrics();
  train::MetricsObserver o(m);
  o.OnStep({.epoch = 1, .global_step = 5, .local_step = 1, .examples = 32, .loss = 2.5, .accuracy = 0.25, .learning_rate = 0.1,
            .compute_seconds = 0.02, .update_seconds = 0.01});
  o.OnStep({.epoch = 1, .global_step = 7, .local_step = 2, .examples = 32, .loss = 2.0, .accuracy = 0.5, .learning_rate = 0.1,
            .compute_seconds = 0.02, .update_seconds = 0.5});
  o.OnEpoch({.epoch = 1, .global_step = 7, .local_step = 2, .test_accuracy = 0.75});
  CHECK(m.steps->value() == 2);
  CHECK(m.examples->value() == 64);
  CHECK(m.loss->value() == 2.0);
  CHECK(m.accuracy->value() == 0.5);
  CHECK(m.global_step->value() == 7);
  CHECK(m.epoch->value() == 1);
  CHECK(m.update_seconds->value() == Approx(0.51));
  const Histogram::Snapshot s = m.step_seconds->snapshot();
  CHECK(s.count == 2);
  CHECK(s.sum == Approx(0.55));
  CHECK(m.EvalAccuracy("test")->value() == 0.75);
}

}  // namespace
}  // namespace tfd::metrics
