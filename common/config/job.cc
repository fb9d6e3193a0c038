#include "common/config/job.h"

#include <charconv>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "common/config/json_reader.h"

namespace tfd::config {
namespace {

using nlohmann::json;

// "learning_rate": 0.1 | {"schedule": "exponential_decay" | "piecewise_constant" | "cosine_decay", ...}
void ReadLearningRate(ObjectReader& r, bool required, OptimizerSpec* opt) {
  const json* v = r.Get("learning_rate");
  if (v == nullptr || !v->is_object()) {
    r.Double("learning_rate", 0, 1e6, /*min_exclusive=*/true, &opt->learning_rate, required);
    return;
  }
  ObjectReader o = r.Child(*v, r.PathOf("learning_rate"));
  LrSchedule& s = opt->schedule;
  std::string kind;
  o.String("schedule", &kind, /*required=*/true);
  constexpr std::int64_t kMaxSteps = std::int64_t{1} << 40;
  if (kind == "constant") {
    o.Double("initial", 0, 1e6, true, &opt->learning_rate, /*required=*/true);
  } else if (kind == "exponential_decay") {
    s.kind = LrSchedule::Kind::kExponentialDecay;
    o.Double("initial", 0, 1e6, true, &opt->learning_rate, /*required=*/true);
    o.Int("decay_steps", std::int64_t{1}, kMaxSteps, &s.decay_steps, /*required=*/true);
    o.Double("decay_rate", 0, 1e6, true, &s.decay_rate, /*required=*/true);
    o.Bool("staircase", &s.staircase);
  } else if (kind == "piecewise_constant") {
    s.kind = LrSchedule::Kind::kPiecewiseConstant;
    const json* b = o.Get("boundaries");
    const json* vals = o.Get("values");
    if (b == nullptr || !b->is_array() || b->empty()) {
      o.Fail(o.PathOf("boundaries"), "expected a non-empty array of increasing integer steps, got " + (b ? Describe(*b) : std::string("nothing")));
    } else if (vals == nullptr || !vals->is_array() || vals->size() != b->size() + 1) {
      o.Fail(o.PathOf("values"), fmt::format("expected an array of {} learning rates (one more than the boundaries), got {}", b->size() + 1,
                                             vals ? (vals->is_array() ? fmt::format("{} of them", vals->size()) : Describe(*vals)) : "nothing"));
    } else {
      for (std::size_t i = 0; i < b->size() && o.status().ok(); ++i) {
        const json& x = (*b)[i];
        const std::int64_t prev = i == 0 ? -1 : s.boundaries.back();
        if (!x.is_number_integer() || x.get<std::int64_t>() <= prev || x.get<std::int64_t>() > kMaxSteps)
          o.Fail(o.PathOf("boundaries", i), fmt::format("expected an integer step in [{}, {}] (boundaries increase), got {}", prev + 1, kMaxSteps, Describe(x)));
        else
          s.boundaries.push_back(x.get<std::int64_t>());
      }
      for (std::size_t i = 0; i < vals->size() && o.status().ok(); ++i) {
        const json& x = (*vals)[i];
        if (!x.is_number() || !(x.get<double>() > 0) || x.get<double>() > 1e6)
          o.Fail(o.PathOf("values", i), "expected a number in (0, 1000000], got " + Describe(x));
        else
          s.values.push_back(x.get<double>());
      }
      if (o.status().ok()) opt->learning_rate = s.values[0];
    }
  } else if (kind == "cosine_decay") {
    s.kind = LrSchedule::Kind::kCosineDecay;
    o.Double("initial", 0, 1e6, true, &opt->learning_rate, /*required=*/true);
    o.Int("decay_steps", std::int64_t{1}, kMaxSteps, &s.decay_steps, /*required=*/true);
    o.Double("alpha", 0, 1, false, &s.alpha);
  } else if (o.status().ok()) {
    o.Fail(o.PathOf("schedule"), fmt::format("unknown schedule \"{}\" (expected constant, exponential_decay, piecewise_constant or cosine_decay)", kind));
  }
  o.Int("warmup_steps", std::int64_t{0}, kMaxSteps, &s.warmup_steps);
  (void)o.Finish();
}

void ReadOptimizer(ObjectReader& root, OptimizerSpec* opt) {
  const json* v = root.Get("optimizer");
  if (v == nullptr) return root.Fail(root.PathOf("optimizer"), "missing (expected {\"type\": \"sgd\"|\"momentum\"|\"adam\", \"learning_rate\": ...})");
  ObjectReader r = root.Child(*v, root.PathOf("optimizer"));
  std::string type;
  r.String("type", &type, /*required=*/true);
  if (type == "sgd") {
    opt->type = OptimizerSpec::Type::kSgd;
  } else if (type == "momentum") {
    opt->type = OptimizerSpec::Type::kMomentum;
    r.Double("momentum", 0, 1, false, &opt->momentum, /*required=*/true);
    r.Bool("use_nesterov", &opt->use_nesterov);
  } else if (type == "adam") {
    opt->type = OptimizerSpec::Type::kAdam;
    opt->learning_rate = 0.001;
    r.Double("beta1", 0, 1, false, &opt->beta1);
    r.Double("beta2", 0, 1, false, &opt->beta2);
    r.Double("epsilon", 0, 1, true, &opt->epsilon);
    if (opt->beta1 >= 1) r.Fail(r.PathOf("beta1"), "must be below 1");
    if (opt->beta2 >= 1) r.Fail(r.PathOf("beta2"), "must be below 1");
  } else if (r.status().ok()) {
    r.Fail(r.PathOf("type"), fmt::format("unknown optimizer \"{}\" (expected sgd, momentum or adam)", type));
  }
  ReadLearningRate(r, /*required=*/type != "adam", opt);
  r.Double("weight_decay", 0, 1e3, /*min_exclusive=*/false, &opt->weight_decay);
  (void)r.Finish();
}

// "auto", true or false: a string or a bool, so the reader's typed getters do not fit.
void ReadHierarchical(ObjectReader& r, UpdateSpec::Hierarchical* out) {
  const json* v = r.Get("hierarchical");
  if (v == nullptr) return;
  if (v->is_boolean()) *out = v->get<bool>() ? UpdateSpec::Hierarchical::kOn : UpdateSpec::Hierarchical::kOff;
  else if (v->is_string() && v->get<std::string>() == "auto") *out = UpdateSpec::Hierarchical::kAuto;
  else r.Fail(r.PathOf("hierarchical"), fmt::format("expected \"auto\", true or false, got {}", v->dump()));
}

void ReadUpdate(ObjectReader& root, UpdateSpec* update) {
  const json* v = root.Get("update");
  if (v == nullptr) return;
  ObjectReader r = root.Child(*v, root.PathOf("update"));
  std::string mode;
  r.String("mode", &mode, /*required=*/true);
  if (mode == "async") update->mode = UpdateSpec::Mode::kAsync;
  else if (mode == "sync") update->mode = UpdateSpec::Mode::kSync;
  else if (mode == "allreduce") update->mode = UpdateSpec::Mode::kAllreduce;
  else if (r.status().ok()) r.Fail(r.PathOf("mode"), fmt::format("unknown mode \"{}\" (expected async, sync or allreduce)", mode));
  if (update->mode == UpdateSpec::Mode::kAsync) {
    std::string staleness = "scale";
    r.String("staleness", &staleness);
    if (staleness == "scale") update->scale_stale = true;
    else if (staleness == "none") update->scale_stale = false;
    else if (r.status().ok()) r.Fail(r.PathOf("staleness"), fmt::format("unknown staleness rule \"{}\" (expected scale or none)", staleness));
    r.Bool("overlap", &update->overlap);
  }
  if (update->mode == UpdateSpec::Mode::kAllreduce) {
    r.Int("bucket_kb", 0, 1 << 20, &update->bucket_kb);
    ReadHierarchical(r, &update->hierarchical);
  }
  if (r.status().ok()) ReadCompression(r, update->mode == UpdateSpec::Mode::kAllreduce, &update->compression);
  if (r.status().ok() && update->compression.enabled() && update->hierarchical == UpdateSpec::Hierarchical::kOn)
    r.Fail(r.PathOf("hierarchical"), "true with update.compression: compression runs on the flat ring only in this version");
  if (update->mode == UpdateSpec::Mode::kSync) {
    r.Int("replicas_to_aggregate", 1, 1 << 16, &update->replicas_to_aggregate);
    r.Int("total_num_replicas", 1, 1 << 16, &update->total_num_replicas);
    if (update->replicas_to_aggregate > 0 && update->total_num_replicas > 0 &&
        update->replicas_to_aggregate > update->total_num_replicas)
      r.Fail(r.PathOf("replicas_to_aggregate"),
             fmt::format("{} is more than total_num_replicas {}", update->replicas_to_aggregate, update->total_num_replicas));
    std::string policy = "fail";
    r.String("on_worker_loss", &policy);
    if (policy == "fail") update->on_worker_loss = UpdateSpec::OnWorkerLoss::kFail;
    else if (policy == "wait") update->on_worker_loss = UpdateSpec::OnWorkerLoss::kWait;
    else if (policy == "shrink") update->on_worker_loss = UpdateSpec::OnWorkerLoss::kShrink;
    else if (r.status().ok()) r.Fail(r.PathOf("on_worker_loss"), fmt::format("unknown policy \"{}\" (expected fail, wait or shrink)", policy));
    r.Int("min_replicas", 1, 1 << 16, &update->min_replicas);
    if (r.status().ok() && update->replicas_to_aggregate > 0 && update->min_replicas > update->replicas_to_aggregate)
      r.Fail(r.PathOf("min_replicas"),
             fmt::format("{} is more than replicas_to_aggregate {}", update->min_replicas, update->replicas_to_aggregate));
  }
  (void)r.Finish();
}

void ReadCheckpoint(ObjectReader& root, CheckpointSpec* ckpt) {
  const json* v = root.Get("checkpoint");
  if (v == nullptr) return;
  ObjectReader r = root.Child(*v, root.PathOf("checkpoint"));
  r.String("dir", &ckpt->dir, /*required=*/true);
  if (r.status().ok() && ckpt->dir.empty()) r.Fail(r.PathOf("dir"), "must not be empty");
  r.Int("every_steps", std::int64_t{0}, std::int64_t{1} << 40, &ckpt->every_steps);
  r.Double("every_secs", 0, 1e9, false, &ckpt->every_secs);
  r.Int("keep", 1, 1000, &ckpt->keep);
  (void)r.Finish();
}

void ReadSummaries(ObjectReader& root, SummarySpec* summaries) {
  const json* v = root.Get("summaries");
  if (v == nullptr) return;
  ObjectReader r = root.Child(*v, root.PathOf("summaries"));
  r.String("dir", &summaries->dir);
  if (r.status().ok() && r.Has("dir") && summaries->dir.empty())
    r.Fail(r.PathOf("dir"), "must not be empty (leave it out for no summaries, or let tfd's --summaries-dir set it)");
  r.Int("every_steps", 1, 1 << 30, &summaries->every_steps);
  r.Int("histograms_every_epochs", 0, 100000, &summaries->histograms_every_epochs);
  (void)r.Finish();
}

void ReadExport(ObjectReader& root, ExportSpec* out) {
  const json* v = root.Get("export");
  if (v == nullptr) return;
  ObjectReader r = root.Child(*v, root.PathOf("export"));
  r.String("dir", &out->dir);
  if (r.status().ok() && r.Has("dir") && out->dir.empty())
    r.Fail(r.PathOf("dir"), "must not be empty (leave it out for no export, or let tfd's --export-dir set it)");
  r.Int("every_epochs", 0, 1 << 20, &out->every_epochs);
  (void)r.Finish();
}

void ReadElastic(ObjectReader& root, ElasticSpec* elastic) {
  const json* v = root.Get("elastic");
  if (v == nullptr) return;
  ObjectReader r = root.Child(*v, root.PathOf("elastic"));
  r.Int("min_workers", 1, 1 << 16, &elastic->min_workers, /*required=*/true);
  r.Int("max_workers", 1, 1 << 16, &elastic->max_workers, /*required=*/true);
  r.Int("commit_every_steps", 1, 1 << 30, &elastic->commit_every_steps);
  if (r.status().ok() && elastic->min_workers > elastic->max_workers)
    r.Fail(r.PathOf("max_workers"), fmt::format("{} is less than min_workers {}", elastic->max_workers, elastic->min_workers));
  (void)r.Finish();
}

// The metrics early stopping may watch, for a classifier or a regression.
std::string_view MonitorList(bool regression) { return regression ? "val_mae, val_loss or loss" : "val_accuracy, val_loss or loss"; }

void ReadEarlyStopping(ObjectReader& root, JobSpec* job) {
  const json* v = root.Get("early_stopping");
  if (v == nullptr) return;
  ObjectReader r = root.Child(*v, root.PathOf("early_stopping"));
  EarlyStoppingSpec& es = job->early_stopping;
  std::string monitor;
  r.String("monitor", &monitor, /*required=*/true);
  using M = EarlyStoppingSpec::Monitor;
  const bool regression = job->data.regression();
  if (monitor == "val_accuracy") es.monitor = M::kValAccuracy;
  else if (monitor == "val_loss") es.monitor = M::kValLoss;
  else if (monitor == "loss") es.monitor = M::kLoss;
  else if (monitor == "val_mae") es.monitor = M::kValMae;
  else if (r.status().ok() && monitor.starts_with("test_"))
    // Stopping on the test set would tune the epoch count on it (docs/config.md, "The test set").
    r.Fail(r.PathOf("monitor"), fmt::format("\"{}\": early stopping never watches the test set, which is reported, not tuned on: set "
                                            "validation_split and monitor {}", monitor, regression ? "val_mae or val_loss" : "val_accuracy or val_loss"));
  else if (r.status().ok())
    r.Fail(r.PathOf("monitor"), fmt::format("unknown metric \"{}\" (expected {})", monitor, MonitorList(regression)));
  if (r.status().ok() && regression && es.monitor == M::kValAccuracy)
    r.Fail(r.PathOf("monitor"), fmt::format("{}: the data's task is regression, which has no accuracy (expected {})", monitor, MonitorList(regression)));
  if (r.status().ok() && !regression && es.monitor == M::kValMae)
    r.Fail(r.PathOf("monitor"), fmt::format("{}: the data's task is classification (expected {})", monitor, MonitorList(regression)));
  if (r.status().ok() && (es.monitor == M::kValAccuracy || es.monitor == M::kValLoss || es.monitor == M::kValMae) && !job->validates())
    r.Fail(r.PathOf("monitor"), fmt::format("{} needs a validation set: set validation_split", monitor));
  r.Int("patience", 0, 100000, &es.patience);
  r.Double("min_delta", 0, 1e6, false, &es.min_delta);
  (void)r.Finish();
}

void ReadModelParallel(ObjectReader& root, JobSpec* job) {
  const json* v = root.Get("model_parallel");
  if (v == nullptr) return;
  ObjectReader r = root.Child(*v, root.PathOf("model_parallel"));
  ModelParallelSpec& mp = job->model_parallel;
  std::string split;
  r.String("split", &split, /*required=*/true);
  if (split == "layers") mp.split = ModelParallelSpec::Split::kLayers;
  else if (split == "units") mp.split = ModelParallelSpec::Split::kUnits;
  else if (r.status().ok()) r.Fail(r.PathOf("split"), fmt::format("unknown split \"{}\" (expected layers or units)", split));
  r.Int("stages", 2, 1 << 12, &mp.stages, /*required=*/true);
  r.Int("microbatches", 1, 1 << 16, &mp.microbatches);
  if (r.status().ok() && job->batch_size % mp.microbatches != 0)
    r.Fail(r.PathOf("microbatches"), fmt::format("expected a divisor of batch_size {}, got {}", job->batch_size, mp.microbatches));
  std::string schedule = "gpipe";
  r.String("schedule", &schedule);
  if (schedule == "gpipe") mp.schedule = ModelParallelSpec::Schedule::kGpipe;
  else if (schedule == "1f1b") mp.schedule = ModelParallelSpec::Schedule::kOneFOneB;
  else if (r.status().ok()) r.Fail(r.PathOf("schedule"), fmt::format("unknown schedule \"{}\" (expected gpipe or 1f1b)", schedule));
  if (const json* b = r.Get("boundaries"); b != nullptr && r.status().ok()) {
    const std::string path = r.PathOf("boundaries");
    if (mp.split != ModelParallelSpec::Split::kLayers) {
      r.Fail(path, "only with \"split\": \"layers\" (units are divided evenly)");
    } else if (!b->is_array() || b->size() != static_cast<std::size_t>(mp.stages - 1)) {
      r.Fail(path, fmt::format("expected an array of {} layer indices (where stages 1 .. {} start), got {}", mp.stages - 1,
                               mp.stages - 1, Describe(*b)));
    } else {
      for (std::size_t i = 0; i < b->size() && r.status().ok(); ++i) {
        const json& e = (*b)[i];
        const int prev = i == 0 ? 0 : mp.boundaries.back();
        if (!e.is_number_integer() || e.get<std::int64_t>() <= prev || e.get<std::int64_t>() > (1 << 20))
          r.Fail(fmt::format("{}[{}]", path, i), fmt::format("expected a layer index above {} (indices increase, stage 0 starts at "
                                                             "layer 0), got {}", prev, Describe(e)));
        else mp.boundaries.push_back(static_cast<int>(e.get<std::int64_t>()));
      }
    }
  }
  (void)r.Finish();
}

// "ensemble": {"members": N, "vary": {"PATH": [N values], ...}}
void ReadEnsemble(ObjectReader& root, JobSpec* job) {
  const json* v = root.Get("ensemble");
  if (v == nullptr) return;
  ObjectReader r = root.Child(*v, root.PathOf("ensemble"));
  EnsembleSpec& e = job->ensemble;
  r.Int("members", 2, 1024, &e.members, /*required=*/true);
  if (const json* vary = r.Get("vary"); vary != nullptr && r.status().ok()) {
    if (!vary->is_object()) return r.Fail(r.PathOf("vary"), "expected an object of {\"job.field\": [one value per member]}, got " + Describe(*vary));
    for (auto it = vary->begin(); it != vary->end(); ++it) {
      const std::string path = r.PathOf("vary") + "." + it.key();
      if (it.key() == "ensemble" || it.key().starts_with("ensemble."))
        return r.Fail(path, "an ensemble's members cannot vary the ensemble");
      if (!it.value().is_array() || it.value().size() != static_cast<std::size_t>(e.members))
        return r.Fail(path, fmt::format("expected an array of {} values (one per member), got {}", e.members, Describe(it.value())));
      std::vector<std::string> values;
      for (const json& x : it.value()) values.push_back(x.dump());
      e.vary.emplace_back(it.key(), std::move(values));
    }
  }
  if (r.status().ok() && job->evaluation != Evaluation::kChief)
    r.Fail(r.PathOf("members"), "an ensemble is evaluated on the test set each epoch: it needs \"evaluation\": \"chief\"");
  (void)r.Finish();
}

}  // namespace

std::string_view SplitName(ModelParallelSpec::Split s) {
  switch (s) {
    case ModelParallelSpec::Split::kNone: return "none";
    case ModelParallelSpec::Split::kLayers: return "layers";
    case ModelParallelSpec::Split::kUnits: return "units";
  }
  return "?";
}

std::string_view ScheduleName(ModelParallelSpec::Schedule s) {
  return s == ModelParallelSpec::Schedule::kGpipe ? "gpipe" : "1f1b";
}

std::string_view MonitorName(EarlyStoppingSpec::Monitor m) {
  switch (m) {
    case EarlyStoppingSpec::Monitor::kNone: return "none";
    case EarlyStoppingSpec::Monitor::kValAccuracy: return "val_accuracy";
    case EarlyStoppingSpec::Monitor::kValLoss: return "val_loss";
    case EarlyStoppingSpec::Monitor::kLoss: return "loss";
    case EarlyStoppingSpec::Monitor::kValMae: return "val_mae";
  }
  return "?";
}

std::string_view EvaluationName(Evaluation e) {
  switch (e) {
    case Evaluation::kChief: return "chief";
    case Evaluation::kEvaluator: return "evaluator";
    case Evaluation::kNone: return "none";
  }
  return "?";
}

JobSpec ReadJobSpec(ObjectReader& r) {
  JobSpec job;
  ReadModel(r, &job.model);
  ReadDataSpec(r, &job.data);
  r.Int("epochs", 1, 100000, &job.epochs, /*required=*/true);
  r.Int("batch_size", 1, 1 << 16, &job.batch_size, /*required=*/true);
  ReadOptimizer(r, &job.optimizer);
  ReadUpdate(r, &job.update);
  std::string placement = "balanced";
  r.String("placement", &placement);
  if (placement == "balanced") job.placement = Placement::kBalanced;
  else if (placement == "round_robin") job.placement = Placement::kRoundRobin;
  else if (placement == "greedy") job.placement = Placement::kGreedy;
  else if (placement == "by_host") job.placement = Placement::kByHost;
  else r.Fail(r.PathOf("placement"), fmt::format("unknown placement \"{}\" (expected balanced, round_robin, greedy or by_host)", placement));
  std::int64_t seed = static_cast<std::int64_t>(job.seed);
  r.Int("seed", std::int64_t{0}, INT64_MAX, &seed);
  job.seed = static_cast<std::uint64_t>(seed);
  r.Int("log_every_steps", 0, 1 << 30, &job.log_every_steps);
  r.String("device", &job.device);
  if (r.status().ok()) {
    Result<int> device = ParseDevice(job.device);
    if (device.ok()) job.cuda_device = *device;
    else r.Fail(r.PathOf("device"), device.status().message());
  }
  r.Double("gpu_memory_fraction", 0, 1, /*min_exclusive=*/true, &job.gpu_memory_fraction);
  r.Int("threads", 1, 256, &job.threads);
  r.Bool("shuffle", &job.shuffle);
  if (r.Has("prefetch")) {
    bool prefetch = false;
    r.Bool("prefetch", &prefetch);
    job.prefetch = prefetch;
  }
  ReadCheckpoint(r, &job.checkpoint);
  ReadSummaries(r, &job.summaries);
  ReadExport(r, &job.export_model);
  if (const json* v = r.Get("validation_split"); v != nullptr) {
    if (v->is_number_integer() && v->get<std::int64_t>() >= 1)
      job.validation_count = v->get<std::int64_t>();
    else if (v->is_number() && v->get<double>() > 0 && v->get<double>() < 1)
      job.validation_fraction = v->get<double>();
    else
      r.Fail(r.PathOf("validation_split"), "expected a fraction in (0, 1) or a count of examples >= 1, got " + Describe(*v));
  }
  ReadEarlyStopping(r, &job);
  r.Double("stop_at_accuracy", 0, 1, /*min_exclusive=*/true, &job.stop_at_accuracy);
  if (r.status().ok() && job.stop_at_accuracy > 0 && job.data.regression())
    r.Fail(r.PathOf("stop_at_accuracy"), "the data's task is regression, which has no accuracy: stop with \"early_stopping\" "
                                         "(monitor val_mae, val_loss or loss)");
  // It stops on val_accuracy; on the test set it would tune the epoch count on the data it reports.
  if (r.status().ok() && job.stop_at_accuracy > 0 && !job.validates())
    r.Fail(r.PathOf("stop_at_accuracy"), "needs a validation set: it stops on val_accuracy, never on the test set, which is reported, "
                                         "not tuned on: set validation_split (a fraction or a count of training examples, e.g. 5000 for MNIST)");
  std::string evaluation = "chief";
  r.String("evaluation", &evaluation);
  if (evaluation == "chief") job.evaluation = Evaluation::kChief;
  else if (evaluation == "evaluator") job.evaluation = Evaluation::kEvaluator;
  else if (evaluation == "none") job.evaluation = Evaluation::kNone;
  else if (r.status().ok()) r.Fail(r.PathOf("evaluation"), fmt::format("unknown evaluation \"{}\" (expected chief, evaluator or none)", evaluation));
  if (r.status().ok() && job.evaluation != Evaluation::kChief && job.can_stop_early())
    r.Fail(r.PathOf("evaluation"), fmt::format("\"{}\" with {}: the chief decides to stop on its own per-epoch metrics, so "
                                                "early stopping needs \"evaluation\": \"chief\"",
                                                EvaluationName(job.evaluation),
                                                job.early_stopping.monitor != EarlyStoppingSpec::Monitor::kNone ? "early_stopping" : "stop_at_accuracy"));
  if (r.status().ok() && job.evaluation == Evaluation::kEvaluator && job.checkpoint.dir.empty())
    r.Fail(r.PathOf("evaluation"), "\"evaluator\" needs checkpoints (the evaluator reads the chief's): set checkpoint.dir");
  ReadElastic(r, &job.elastic);
  if (r.status().ok()) ReadModelParallel(r, &job);
  // Error feedback is per worker state that elastic commits and the model-parallel replicas' ring do not carry.
  if (r.status().ok() && job.update.compression.enabled() && (job.elastic.enabled() || job.model_parallel.enabled()))
    r.Fail(r.PathOf("update") + ".compression", fmt::format("\"{}\" is not available with {} in this version (leave update.compression out)",
                                             CompressionName(job.update.compression.method), job.elastic.enabled() ? "elastic" : "model_parallel"));
  ReadEnsemble(r, &job);
  (void)r.Finish();
  return job;
}

Result<JobSpec> ParseJobSpec(std::string_view text, std::string_view source) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::InvalidArgument(fmt::format("{}: not valid JSON", source));
  Status status;
  ObjectReader r(doc, std::string(source), "", &status);
  JobSpec job = ReadJobSpec(r);
  TFD_RETURN_IF_ERROR(status);
  return job;
}

Result<int> ParseDevice(std::string_view text) {
  if (text == "cpu") return -1;
  int n = -1;
  bool ok = text.starts_with("cuda:") && text.size() > 5;
  if (ok) {
    auto [p, ec] = std::from_chars(text.data() + 5, text.data() + text.size(), n);
    ok = ec == std::errc() && p == text.data() + text.size() && n >= 0 && n < 64;
  }
  if (!ok) return Status::InvalidArgument(fmt::format("expected \"cpu\" or \"cuda:N\", got \"{}\"", text));
  return n;
}

Result<JobSpec> LoadJobSpec(const std::string& path) {
  TFD_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, "the job file"));
  return ParseJobSpec(text, path);
}

}  // namespace tfd::config
