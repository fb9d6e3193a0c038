#include "daemon/evaluator/evaluator.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/base/service.h"
#include "common/ckpt/file.h"
#include "daemon/train/job_data.h"
#include "daemon/task/lifecycle.h"

namespace tfd::evaluator {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double UnixNow() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

double Secs(std::chrono::milliseconds d) { return std::chrono::duration<double>(d).count(); }

// A checkpoint file as the folder listing shows it; a rewrite (the final mark) changes its time.
struct Seen {
  std::uint64_t step = 0;
  std::string path;
  fs::file_time_type written{};
};

// The checkpoint files of `dir`, oldest first; a missing folder is an empty one (the chief has
// not saved yet).
std::vector<Seen> ListFolder(const std::string& dir) {
  std::vector<Seen> out;
  Result<std::vector<std::string>> paths = ckpt::List(dir);
  if (!paths.ok()) return out;
  for (const std::string& p : *paths) {
    Seen s;
    s.path = p;
    std::error_code ec;
    s.written = fs::last_write_time(p, ec);
    if (ec || !ckpt::StepOfFileName(fs::path(p).filename().string(), &s.step)) continue;  // deleted since the listing
    out.push_back(std::move(s));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// Evaluates the model, its parameters already loaded, on the job's test set and validation split.
EvalResult Evaluate(model::Model& model, const data::DataSplits& data) {
  EvalResult r;
  r.regression = model.regression();
  const model::EvalResult test = model::EvaluateLoss(model, data.test);
  r.test_loss = test.loss;
  r.test_accuracy = test.accuracy;
  r.test_mae = test.mae;
  r.test_rmse = test.rmse;
  if (data.validation.size > 0) {
    const model::EvalResult val = model::EvaluateLoss(model, data.validation);
    r.val_loss = val.loss;
    if (r.regression) r.val_mae = val.mae, r.val_rmse = val.rmse;
    else r.val_accuracy = val.accuracy;
  }
  r.wall_time = UnixNow();
  return r;
}

void Report(const EvalResult& r, EventWriter& events, const std::vector<EvalSink*>& sinks) {
  std::string line;
  std::vector<EventField> fields = {{"global_step", r.global_step}};
  for (const auto& [name, value] : Scores(r)) {
    line += fmt::format(" {}={:.4f}", name, value);
    fields.push_back({name, value});
  }
  fields.push_back({"checkpoint", r.checkpoint});
  fields.push_back({"final", r.final});
  spdlog::info("eval global_step={}{} checkpoint={}{}", r.global_step, line, r.checkpoint, r.final ? " final" : "");
  events.Emit("eval", fields);
  NotifyStatus(r.regression ? fmt::format("evaluated global step {}: test_mae={:.4f}", r.global_step, r.test_mae)
                            : fmt::format("evaluated global step {}: test_accuracy={:.4f}", r.global_step, r.test_accuracy));
  for (EvalSink* s : sinks) s->OnEval(r);
}

// The polling loop: returns Ok after the final checkpoint, or why it gave up.
Status Watch(const config::JobSpec& job, model::Model& model, const data::DataSplits& data, EventWriter& events,
             const EvaluatorOptions& options) {
  const std::string& dir = job.checkpoint.dir;
  const std::chrono::milliseconds idle = options.idle_timeout.count() > 0 ? options.idle_timeout : IdleTimeoutFor(job.checkpoint);
  const Clock::time_point start = Clock::now();
  Clock::time_point last_new = start;
  std::optional<Seen> last;  // the last checkpoint evaluated
  std::map<std::string, fs::file_time_type> rejected;  // files that did not load, warned about once
  auto where = [&] {
    return last ? fmt::format("the last global step evaluated is {}, from {}", last->step, last->path)
                : std::string("no checkpoint evaluated yet");
  };
  for (;;) {
    if (options.stop != nullptr && options.stop->load()) return Status::FailedPrecondition(fmt::format("stopped by a signal ({})", where()));
    for (const Seen& f : ListFolder(dir)) {
      const bool rewritten = last && f.step == last->step && f.written != last->written;  // the final mark on the last one
      if (last && f.step <= last->step && !rewritten) continue;
      if (auto it = rejected.find(f.path); it != rejected.end() && it->second == f.written) continue;
      Result<ckpt::Checkpoint> ck = ckpt::Load(f.path);
      if (!ck.ok()) {
        if (ck.status().code() == Code::kNotFound) continue;  // the chief deleted it (keep) since the listing
        spdlog::warn("cannot evaluate checkpoint {}; going on with the next", ck.status().message());
        rejected[f.path] = f.written;
        continue;
      }
      if (rewritten && !ck->final) {
        last->written = f.written;
        continue;
      }
      // A final mark on the step evaluated last is evaluated again, so the last eval is the final one.
      TFD_RETURN_IF_ERROR(LoadParams(*ck, model, f.path));
      EvalResult r = Evaluate(model, data);
      r.global_step = static_cast<std::int64_t>(ck->global_step);
      r.checkpoint = f.path;
      r.final = ck->final;
      Report(r, events, options.sinks);
      last = f;
      last_new = Clock::now();
      if (r.final) return Status::Ok();
    }
    const Clock::time_point now = Clock::now();
    if (!last && now - start > options.startup_timeout)
      return Status::DeadlineExceeded(fmt::format("no checkpoint in {} within {:.0f} s (--startup-timeout) of the start: waited for the "
                                                  "chief's first checkpoint; {}",
                                                  dir, Secs(options.startup_timeout), where()));
    if (last && now - last_new > idle)
      return Status::DeadlineExceeded(fmt::format("no new checkpoint in {} for {:.0f} s (--idle-timeout): waited for the chief's next "
                                                  "or final checkpoint; {}",
                                                  dir, Secs(idle), where()));
    std::this_thread::sleep_for(options.poll_interval);
  }
}

}  // namespace

std::vector<std::pair<std::string, double>> Scores(const EvalResult& r) {
  std::vector<std::pair<std::string, double>> out = {{"test_loss", r.test_loss}};
  if (r.regression) out.insert(out.end(), {{"test_mae", r.test_mae}, {"test_rmse", r.test_rmse}});
  else out.emplace_back("test_accuracy", r.test_accuracy);
  if (r.val_loss) out.emplace_back("val_loss", *r.val_loss);
  if (r.val_accuracy) out.emplace_back("val_accuracy", *r.val_accuracy);
  if (r.val_mae) out.insert(out.end(), {{"val_mae", *r.val_mae}, {"val_rmse", r.val_rmse.value_or(0)}});
  return out;
}

std::chrono::milliseconds IdleTimeoutFor(const config::CheckpointSpec& spec) {
  using std::chrono::milliseconds;
  if (spec.every_secs > 0) return std::max(milliseconds(60000), milliseconds(static_cast<std::int64_t>(spec.every_secs * 3000)));
  return milliseconds(600000);
}

Status LoadParams(const ckpt::Checkpoint& checkpoint, model::Model& model, std::string_view source) {
  std::map<std::string_view, const ckpt::NamedTensor*> by_name;
  for (const ckpt::NamedTensor& t : checkpoint.tensors) by_name[t.name] = &t;
  std::span<float> params = model.params();
  for (const model::Variable& v : model.variables()) {
    auto it = by_name.find(v.name);
    if (it == by_name.end())
      return Status::InvalidArgument(fmt::format("{}: holds no tensor {} of the job's model (is it the chief's checkpoint of this job?)",
                                                 source, v.name));
    const ckpt::NamedTensor& t = *it->second;
    if (t.shape != v.shape || static_cast<std::int64_t>(t.values.size()) != v.size)
      return Status::InvalidArgument(fmt::format("{}: tensor {} has shape [{}], the job's model has [{}]", source, v.name,
                                                 fmt::join(t.shape, ", "), fmt::join(v.shape, ", ")));
    std::copy(t.values.begin(), t.values.end(), params.begin() + static_cast<std::ptrdiff_t>(v.offset));
  }
  if (checkpoint.tensors.size() != model.variables().size())
    return Status::InvalidArgument(fmt::format("{}: holds {} tensors, the job's model has {} variables", source, checkpoint.tensors.size(),
                                               model.variables().size()));
  return Status::Ok();
}

Status RunEvaluator(const config::TfConfig& config, const config::JobSpec& job, EventWriter& events, const EvaluatorOptions& options) {
  Status s = [&]() -> Status {
    if (job.checkpoint.dir.empty())
      return Status::InvalidArgument("checkpoint: missing: the evaluator task evaluates the chief's checkpoints (set checkpoint.dir)");
    TFD_ASSIGN_OR_RETURN(train::LoadedJob loaded, train::LoadJobData(job, config.cluster.num_workers(), /*trains=*/false));
    const std::chrono::milliseconds idle = options.idle_timeout.count() > 0 ? options.idle_timeout : IdleTimeoutFor(job.checkpoint);
    spdlog::info("{}; model: {}; watching {} every {} ms (first checkpoint within {:.0f} s, each next within {:.0f} s)",
                 config.task.ToString(), loaded.model->Summary(), job.checkpoint.dir, options.poll_interval.count(),
                 Secs(options.startup_timeout), Secs(idle));
    task::EmitStart(events, {.role = "evaluator", .rank = config.task.index});
    NotifyReady(fmt::format("{} watching {}", config.task.ToString(), job.checkpoint.dir));
    return Watch(job, *loaded.model, loaded.data, events, options);
  }();
  if (s.ok()) spdlog::info("done: evaluated the chief's final checkpoint");
  for (EvalSink* sink : options.sinks) sink->OnEnd(s.ok());
  return s;
}

}  // namespace tfd::evaluator
