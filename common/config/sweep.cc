#include "common/config/sweep.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "common/base/random.h"
#include "common/config/json_reader.h"

namespace tfd::config {
namespace {

using nlohmann::json;

constexpr int kMaxTrials = 100000;
// Every metric an epoch event carries. The test_* ones are known so that naming one as the
// objective gets the reason it is refused, not "unknown metric".
constexpr std::string_view kMetrics[] = {"test_accuracy", "val_accuracy", "val_loss", "loss", "accuracy", "val_mae", "val_rmse", "mae", "rmse",
                                         "test_mae", "test_rmse"};

constexpr std::string_view kClassificationList = "val_accuracy, val_loss, accuracy or loss";
constexpr std::string_view kRegressionList = "val_mae, val_rmse, val_loss, mae, rmse or loss";

std::string MetricList() { return fmt::format("{} (regression: {})", kClassificationList, kRegressionList); }

// A regression run reports these in place of the accuracies (docs/data.md, "Regression").
bool IsRegressionMetric(std::string_view m) {
  return m == "mae" || m == "rmse" || m == "val_mae" || m == "val_rmse" || m == "test_mae" || m == "test_rmse";
}

bool IsAccuracyMetric(std::string_view m) { return m == "accuracy" || m == "val_accuracy" || m == "test_accuracy"; }

// The objective's checks against the base job. A classifier has no MAE, a regression no accuracy;
// and model selection never sees the test set (docs/sweeps.md, "The test set"): a sweep ranks on its
// validation set, so it needs validation_split whatever the metric, and a test_* objective is
// refused. The test metrics are shown beside the winner instead (SweepSpec::shown).
void CheckObjectiveFitsData(ObjectReader& r, const SweepSpec& s) {
  if (!r.status().ok()) return;
  const bool regression = s.job.data.regression();
  const std::string_view expected = regression ? kRegressionList : kClassificationList;
  if (!regression && IsRegressionMetric(s.metric))
    return r.Fail("objective.metric", fmt::format("\"{}\": the data's task is classification, which reports no MAE or RMSE (expected {})", s.metric, expected));
  if (regression && IsAccuracyMetric(s.metric))
    return r.Fail("objective.metric", fmt::format("\"{}\": the data's task is regression, which has no accuracy (expected {})", s.metric, expected));
  if (s.metric.starts_with("test_"))
    return r.Fail("objective.metric", fmt::format("\"{}\": a sweep never chooses on the test set, which is reported, not tuned on: set "
                                                  "validation_split and rank on {} (expected {})",
                                                  s.metric, regression ? "val_mae or val_loss" : "val_accuracy or val_loss", expected));
  if (!s.job.validates())
    return r.Fail("job.validation_split", fmt::format("missing: a sweep ranks its trials by {} on a validation set, never the test set: set "
                                                      "validation_split (a fraction or a count of training examples, e.g. 5000 for MNIST)",
                                                      s.metric));
  if (s.metric.starts_with("val_") && s.job.evaluation != Evaluation::kChief)
    r.Fail("objective.metric", fmt::format("no trial reports {} each epoch: the job's evaluation is not \"chief\"", s.metric));
}

// "PATH": {"choice": [...]} | {"uniform": [lo, hi]} | {"log_uniform": [lo, hi]} | [...] (a choice)
void ReadParam(ObjectReader& space, const std::string& key, const json& v, SweepParam* p) {
  p->path = key;
  const std::string path = space.PathOf(key);
  if (key.empty() || key.front() == '.' || key.back() == '.' || key.find("..") != std::string::npos)
    return space.Fail(path, "expected a dotted path into the job spec (\"optimizer.learning_rate\")");
  const json* values = &v;
  std::string kind = "choice";
  static const json kNoObject = json::object();
  ObjectReader r = space.Child(v.is_object() ? v : kNoObject, path);
  if (v.is_object()) {
    int given = 0;
    for (const char* k : {"choice", "uniform", "log_uniform"})
      if (r.Has(k)) {
        kind = k;
        ++given;
      }
    if (given != 1)
      return space.Fail(path, fmt::format("expected one of {{\"choice\": [...]}}, {{\"uniform\": [lo, hi]}} or {{\"log_uniform\": [lo, hi]}}, got {}",
                                          v.empty() ? "an empty object" : fmt::format("\"{}\"", v.begin().key())));
    values = r.Get(kind);
    r.Bool("integer", &p->integer);
  } else if (!v.is_array()) {
    return space.Fail(path, "expected a distribution object or an array of choices, got " + Describe(v));
  }
  const std::string vpath = v.is_object() ? r.PathOf(kind) : path;
  if (kind == "choice") {
    p->kind = SweepParam::Kind::kChoice;
    if (!values->is_array() || values->empty()) return space.Fail(vpath, "expected a non-empty array of values, got " + Describe(*values));
    for (const json& x : *values) p->choices.push_back(x.dump());
  } else {
    p->kind = kind == "uniform" ? SweepParam::Kind::kUniform : SweepParam::Kind::kLogUniform;
    if (!values->is_array() || values->size() != 2 || !(*values)[0].is_number() || !(*values)[1].is_number())
      return space.Fail(vpath, "expected [low, high] (two numbers), got " + Describe(*values));
    p->low = (*values)[0].get<double>();
    p->high = (*values)[1].get<double>();
    if (!(p->low < p->high) || !std::isfinite(p->low) || !std::isfinite(p->high))
      return space.Fail(vpath, fmt::format("expected low < high, got [{}, {}]", p->low, p->high));
    if (p->kind == SweepParam::Kind::kLogUniform && p->low <= 0)
      return space.Fail(vpath + "[0]", fmt::format("log_uniform needs bounds above 0, got {}", p->low));
  }
  if (v.is_object()) (void)r.Finish();
}

void ReadScheduler(ObjectReader& root, SweepSpec* s) {
  const json* v = root.Get("scheduler");
  if (v == nullptr) return;
  const std::string path = root.PathOf("scheduler");
  if (v->is_string() && v->get<std::string>() == "none") return;
  if (v->is_string() && v->get<std::string>() == "asha") {
    s->asha = true;
    return;
  }
  if (!v->is_object()) return root.Fail(path, "expected \"none\", \"asha\" or {\"type\": \"asha\", ...}, got " + Describe(*v));
  ObjectReader r = root.Child(*v, path);
  std::string type;
  r.String("type", &type, /*required=*/true);
  if (type == "asha") {
    s->asha = true;
    r.Int("grace_epochs", 1, 100000, &s->scheduler.grace_epochs);
    r.Int("reduction_factor", 2, 1000, &s->scheduler.reduction_factor);
    r.Int("max_epochs", 1, 100000, &s->scheduler.max_epochs);
  } else if (r.status().ok() && type != "none") {
    r.Fail(r.PathOf("type"), fmt::format("unknown scheduler \"{}\" (expected asha or none)", type));
  }
  (void)r.Finish();
}

// A uniform draw of `p`, as JSON text.
std::string Draw(const SweepParam& p, Rng& rng) {
  if (p.kind == SweepParam::Kind::kChoice) return p.choices[rng.Below(p.choices.size())];
  double x = p.kind == SweepParam::Kind::kUniform ? p.low + (p.high - p.low) * rng.Uniform()
                                                  : std::exp(std::log(p.low) + (std::log(p.high) - std::log(p.low)) * rng.Uniform());
  if (p.integer) return fmt::format("{}", static_cast<std::int64_t>(std::llround(x)));
  return json(x).dump();
}

}  // namespace

bool LowerIsBetter(std::string_view metric) { return metric == "loss" || metric == "val_loss" || IsRegressionMetric(metric); }

bool IsSweepMetric(std::string_view metric) {
  for (std::string_view m : kMetrics)
    if (m == metric) return true;
  return false;
}

Result<std::string> ApplyParams(std::string_view job_text, const std::vector<std::pair<std::string, std::string>>& params) {
  json doc = json::parse(job_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return Status::InvalidArgument("the job spec is not a JSON object");
  for (const auto& [path, text] : params) {
    json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) return Status::InvalidArgument(fmt::format("{}: not a JSON value: {}", path, text));
    json* at = &doc;
    std::size_t start = 0;
    while (true) {
      const std::size_t dot = path.find('.', start);
      const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (!at->is_object())
        return Status::InvalidArgument(fmt::format("{}: \"{}\" is {} in the job spec, not an object", path, path.substr(0, start - 1), Describe(*at)));
      if (dot == std::string::npos) {
        (*at)[key] = value;
        break;
      }
      at = &(*at)[key];  // a missing parent becomes an object
      if (at->is_null()) *at = json::object();
      start = dot + 1;
    }
  }
  return doc.dump(2);
}

std::vector<Trial> GenerateTrials(const SweepSpec& sweep) {
  std::vector<std::vector<std::pair<std::string, std::string>>> sets;
  if (sweep.ensemble.members > 0) {
    for (int k = 0; k < sweep.ensemble.members; ++k) {
      std::vector<std::pair<std::string, std::string>> set = {{"seed", std::to_string(sweep.job.seed + static_cast<std::uint64_t>(k))}};
      for (const auto& vary : sweep.ensemble.vary) {
        const std::string& path = vary.first;
        std::erase_if(set, [&](const auto& p) { return p.first == path; });
        set.emplace_back(path, vary.second[static_cast<std::size_t>(k)]);
      }
      sets.push_back(std::move(set));
    }
  } else if (sweep.search == SweepSpec::Search::kGrid) {
    std::int64_t total = 1;
    for (const SweepParam& p : sweep.space) total *= static_cast<std::int64_t>(p.choices.size());
    if (sweep.max_trials > 0) total = std::min<std::int64_t>(total, sweep.max_trials);
    for (std::int64_t i = 0; i < total; ++i) {
      std::vector<std::pair<std::string, std::string>> set(sweep.space.size());
      std::int64_t rest = i;
      for (std::size_t d = sweep.space.size(); d-- > 0;) {
        const SweepParam& p = sweep.space[d];
        set[d] = {p.path, p.choices[static_cast<std::size_t>(rest % static_cast<std::int64_t>(p.choices.size()))]};
        rest /= static_cast<std::int64_t>(p.choices.size());
      }
      sets.push_back(std::move(set));
    }
  } else {
    Rng rng(sweep.seed, /*stream=*/0x5733);
    for (int i = 0; i < sweep.max_trials; ++i) {
      std::vector<std::pair<std::string, std::string>> set;
      for (const SweepParam& p : sweep.space) set.emplace_back(p.path, Draw(p, rng));
      sets.push_back(std::move(set));
    }
  }
  std::vector<Trial> trials;
  for (std::size_t i = 0; i < sets.size(); ++i) {
    Trial t;
    t.id = static_cast<int>(i);
    t.params = sets[i];
    std::vector<std::pair<std::string, std::string>> applied = sets[i];
    if (sweep.asha) applied.emplace_back("epochs", std::to_string(sweep.scheduler.max_epochs));
    Result<std::string> text = ApplyParams(sweep.job_text, applied);
    t.job_text = text.ok() ? *text : sweep.job_text;  // checked at parse: cannot fail here
    trials.push_back(std::move(t));
  }
  return trials;
}

Result<SweepSpec> ParseSweepSpec(std::string_view text, std::string_view source_view, const std::string& base_dir) {
  const std::string source(source_view);
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::InvalidArgument(fmt::format("{}: not valid JSON", source));
  Status status;
  ObjectReader r(doc, source, "", &status);
  SweepSpec s;

  // The base job: inline, or a path relative to the sweep file.
  std::string job_source = source + " (job)";
  if (const json* j = r.Get("job"); j == nullptr) {
    r.Fail("job", "missing (expected a job spec object or the path of a job file)");
  } else if (j->is_string()) {
    std::filesystem::path p = j->get<std::string>();
    if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
    Result<std::string> read = ReadTextFile(p.string(), "the sweep's job file");
    if (!read.ok()) return Status::InvalidArgument(fmt::format("{}: job: {}", source, read.status().message()));
    s.job_text = *read;
    job_source = p.string();
  } else if (j->is_object()) {
    s.job_text = j->dump(2);
  } else {
    r.Fail("job", "expected a job spec object or the path of a job file, got " + Describe(*j));
  }
  TFD_RETURN_IF_ERROR(status);
  Result<JobSpec> job = ParseJobSpec(s.job_text, job_source);
  if (!job.ok()) return job.status();
  s.job = *job;
  if (s.job.data.regression()) {
    s.metric = "val_mae";
    s.shown = {"test_mae", "test_rmse"};
  } else {
    s.shown = {"test_accuracy"};
  }

  std::string search = "grid";
  r.String("search", &search);
  if (search == "random") s.search = SweepSpec::Search::kRandom;
  else if (search != "grid" && status.ok()) r.Fail("search", fmt::format("unknown search \"{}\" (expected grid or random)", search));
  std::int64_t seed = 1;
  r.Int("seed", std::int64_t{0}, INT64_MAX, &seed);
  s.seed = static_cast<std::uint64_t>(seed);

  const json* space = r.Get("space");
  if (space == nullptr || !space->is_object() || space->empty()) {
    r.Fail("space", "expected a non-empty object of {\"job.field\": distribution}, got " + (space ? Describe(*space) : std::string("nothing")));
  } else {
    ObjectReader sr = r.Child(*space, "space");
    for (auto it = space->begin(); it != space->end() && status.ok(); ++it) {
      SweepParam p;
      (void)sr.Get(it.key());
      ReadParam(sr, it.key(), it.value(), &p);
      if (status.ok() && s.search == SweepSpec::Search::kGrid && p.kind != SweepParam::Kind::kChoice)
        sr.Fail(sr.PathOf(it.key()), "grid search takes only choices (an array of values): use \"search\": \"random\" for a distribution");
      s.space.push_back(std::move(p));
    }
  }

  s.maximize = !LowerIsBetter(s.metric);
  if (const json* o = r.Get("objective"); o != nullptr) {
    ObjectReader orr = r.Child(*o, "objective");
    orr.String("metric", &s.metric, /*required=*/true);
    if (status.ok() && !IsSweepMetric(s.metric))
      orr.Fail("objective.metric", fmt::format("unknown metric \"{}\" (expected {})", s.metric, MetricList()));
    s.maximize = !LowerIsBetter(s.metric);
    std::string mode = s.maximize ? "max" : "min";
    orr.String("mode", &mode);
    if (mode == "max") s.maximize = true;
    else if (mode == "min") s.maximize = false;
    else if (status.ok()) orr.Fail("objective.mode", fmt::format("unknown mode \"{}\" (expected max or min)", mode));
    (void)orr.Finish();
  }
  CheckObjectiveFitsData(r, s);

  r.Int("max_trials", 0, kMaxTrials, &s.max_trials, /*required=*/s.search == SweepSpec::Search::kRandom);
  if (status.ok() && s.search == SweepSpec::Search::kRandom && s.max_trials < 1) r.Fail("max_trials", "a random search needs at least 1 trial");
  r.Int("parallel", 0, 4096, &s.parallel);
  r.Int("workers", 1, kMaxSweepWorkers, &s.workers);
  ReadScheduler(r, &s);
  if (s.asha) {
    if (s.scheduler.max_epochs == 0) s.scheduler.max_epochs = s.job.epochs;
    if (status.ok() && s.scheduler.grace_epochs > s.scheduler.max_epochs)
      r.Fail("scheduler.grace_epochs", fmt::format("{} is beyond max_epochs {}", s.scheduler.grace_epochs, s.scheduler.max_epochs));
  }
  (void)r.Finish();
  TFD_RETURN_IF_ERROR(status);

  // Every trial's job must be a valid job spec.
  for (const Trial& t : GenerateTrials(s)) {
    std::vector<std::pair<std::string, std::string>> applied = t.params;
    Result<std::string> text = ApplyParams(s.job_text, applied);
    if (!text.ok()) return Status::InvalidArgument(fmt::format("{}: space.{}", source, text.status().message()));
    Result<JobSpec> tj = ParseJobSpec(*text, fmt::format("{}: trial {}'s job", source, t.id));
    if (!tj.ok()) return tj.status();
    // The objective was checked against the base job's task: a trial of the other task would
    // report none of it.
    if (tj->data.regression() != s.job.data.regression())
      return Status::InvalidArgument(fmt::format("{}: trial {}'s job: data.task: {}, where the base job's is {} (every trial must have the "
                                                 "base job's task, which the objective {} is for)", source, t.id,
                                                 tj->data.regression() ? "regression" : "classification",
                                                 s.job.data.regression() ? "regression" : "classification", s.metric));
  }
  return s;
}

Result<SweepSpec> ParseEnsembleSpec(std::string_view text, std::string_view source_view) {
  const std::string source(source_view);
  TFD_ASSIGN_OR_RETURN(JobSpec job, ParseJobSpec(text, source));
  if (job.ensemble.members == 0) return Status::InvalidArgument(fmt::format("{}: ensemble: missing (expected {{\"members\": N, \"vary\": {{...}}}})", source));
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  doc.erase("ensemble");
  // The members' seeds differ (seed + k): a held-out test set is shuffled out with the ensemble's own,
  // so every member is scored on the same examples and trains on none of them.
  if (job.data.held_out_test() && !job.data.split_seed) doc["data"]["split_seed"] = job.seed;
  SweepSpec s;
  s.job_text = doc.dump(2);
  s.job = job;
  s.ensemble = job.ensemble;
  s.job.ensemble = {};
  // Members are ranked as the ensemble is scored: by test accuracy, or a regression's test MAE (lower is better).
  s.metric = job.data.regression() ? "test_mae" : "test_accuracy";
  s.maximize = !job.data.regression();
  if (job.data.regression()) s.shown = {"test_rmse"};
  s.workers = std::min(job.ensemble.members, 2);
  for (const Trial& t : GenerateTrials(s)) {
    Result<std::string> member = ApplyParams(s.job_text, t.params);
    if (!member.ok()) return Status::InvalidArgument(fmt::format("{}: ensemble.vary.{}", source, member.status().message()));
    Result<JobSpec> mj = ParseJobSpec(*member, fmt::format("{}: member {}'s job", source, t.id));
    if (!mj.ok()) return mj.status();
  }
  return s;
}

Result<SweepSpec> LoadEnsembleSpec(const std::string& path) {
  TFD_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, "the job file"));
  return ParseEnsembleSpec(text, path);
}

Result<SweepSpec> LoadSweepSpec(const std::string& path) {
  TFD_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, "the sweep file"));
  return ParseSweepSpec(text, path, std::filesystem::path(path).parent_path().string());
}

}  // namespace tfd::config
