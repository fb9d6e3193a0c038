#include "daemon/coordinator/sweep_scheduler.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/config/json_writer.h"

namespace tfd::coordinator {
namespace {

using nlohmann::ordered_json;

// A parameter's value is JSON text (config::Trial): parsed back into the object, or kept as a
// string should it not parse.
ordered_json ParamsObject(const std::vector<std::pair<std::string, std::string>>& params) {
  ordered_json out = ordered_json::object();
  for (const auto& [name, text] : params) {
    ordered_json value = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    out[name] = value.is_discarded() ? ordered_json(text) : std::move(value);
  }
  return out;
}

ordered_json MetricsObject(const Metrics& metrics) {
  ordered_json out = ordered_json::object();
  for (const auto& [name, value] : metrics) out[name] = value;
  return out;
}

double Millis(double secs) { return std::round(secs * 1000) / 1000; }

// One trials.jsonl line about trial `t`; the caller adds the event's own fields.
ordered_json TrialLine(double now, const TrialState& t, std::string_view event, const std::string& metric) {
  ordered_json line = {{"ts", Millis(now)}, {"event", event}, {"trial", t.trial.id}, {"status", TrialStatusName(t.status)},
                       {"worker", t.worker}, {"attempt", t.attempt}, {"epoch", t.epoch}, {"params", ParamsObject(t.trial.params)}};
  if (t.metric) line[metric] = *t.metric;
  if (!t.reason.empty()) line["reason"] = t.reason;
  return line;
}

}  // namespace

std::string_view TrialStatusName(TrialStatus s) {
  switch (s) {
    case TrialStatus::kPaused: return "PAUSED";
    case TrialStatus::kRunning: return "RUNNING";
    case TrialStatus::kStopped: return "STOPPED";
    case TrialStatus::kDone: return "DONE";
    case TrialStatus::kFailed: return "FAILED";
  }
  return "?";
}

std::string ParamsJson(const std::vector<std::pair<std::string, std::string>>& params) { return config::JsonText(ParamsObject(params)); }

std::string MetricsJson(const Metrics& metrics) { return config::JsonText(MetricsObject(metrics)); }

SweepScheduler::SweepScheduler(const config::SweepSpec& sweep, std::vector<config::Trial> trials, int parallel)
    : metric_(sweep.metric), maximize_(sweep.maximize), parallel_(std::max(parallel, 1)), ensemble_(sweep.ensemble.members > 0) {
  if (sweep.asha)
    asha_.emplace(sweep.scheduler.grace_epochs, sweep.scheduler.reduction_factor, sweep.scheduler.max_epochs, sweep.maximize);
  for (config::Trial& t : trials) {
    queue_.push_back(static_cast<int>(trials_.size()));
    trials_.push_back(TrialState{.trial = std::move(t)});
  }
}

void SweepScheduler::Record(double now, const TrialState& t, std::string_view event) {
  lines_.push_back(config::JsonText(TrialLine(now, t, event, metric_)));
}

void SweepScheduler::RecordResumableEnd(double now, const TrialState& t) {
  ordered_json line = TrialLine(now, t, "end", metric_);
  line["resumable"] = true;
  lines_.push_back(config::JsonText(line));
}

int SweepScheduler::running() const {
  return static_cast<int>(std::count_if(trials_.begin(), trials_.end(), [](const TrialState& t) { return t.status == TrialStatus::kRunning; }));
}

SweepScheduler::Next SweepScheduler::NextFor(int worker, double now, Assignment* out) {
  if (finished()) return Next::kFinished;
  if (stopping_ || queue_.empty() || running() >= parallel_) return Next::kWait;
  TrialState& t = trials_[static_cast<std::size_t>(queue_.front())];
  queue_.erase(queue_.begin());
  t.status = TrialStatus::kRunning;
  t.worker = worker;
  t.pending_checkpoint = 0;
  out->trial = t.trial.id;
  out->attempt = t.attempt++;
  out->job = t.trial.job_text;
  out->predictions = ensemble_;
  out->resume_epoch = t.checkpoint_epoch;
  ordered_json line = TrialLine(now, t, "placed", metric_);
  if (t.checkpoint_epoch > 0) line["resume_epoch"] = t.checkpoint_epoch;
  lines_.push_back(config::JsonText(line));
  return Next::kAssigned;
}

bool SweepScheduler::OnEpoch(int worker, int trial, int epoch, const Metrics& metrics, double now) {
  if (trial < 0 || trial >= static_cast<int>(trials_.size())) return true;
  TrialState& t = trials_[static_cast<std::size_t>(trial)];
  if (t.status != TrialStatus::kRunning || t.worker != worker) return true;
  if (epoch <= t.epoch) return stopping_;  // reported by an earlier attempt already
  if (t.pending_checkpoint == epoch) t.checkpoint_epoch = epoch;
  t.pending_checkpoint = 0;
  const bool stop = ApplyEpoch(t, epoch, metrics) || stopping_;
  ordered_json line = TrialLine(now, t, "epoch", metric_);
  line["metrics"] = MetricsObject(metrics);
  if (stop) line["stop"] = true;
  lines_.push_back(config::JsonText(line));
  return stop;
}

bool SweepScheduler::ApplyEpoch(TrialState& t, int epoch, const Metrics& metrics) {
  t.epoch = epoch;
  for (const auto& [name, value] : metrics)
    if (name == metric_) {
      t.metric = value;
      if (!t.best || Better(value, *t.best)) {
        t.best = value;
        t.best_metrics = metrics;
        t.best_epoch = epoch;
      }
    }
  // Not while the sweep is stopping: a trial told to stop by Ctrl-C was not ranked at the rung.
  if (stopping_ || !asha_ || !t.metric || asha_->OnEpoch(t.trial.id, epoch, *t.metric) == Asha::Decision::kContinue) return false;
  t.reason = fmt::format("pruned by ASHA at rung epoch {}", epoch);
  return true;
}

void SweepScheduler::ApplyEndMetrics(TrialState& t, const Metrics& metrics) {
  for (const auto& [name, value] : metrics)
    if (name == metric_ && !t.best) {
      t.best = value;
      t.best_metrics = metrics;
    }
}

bool SweepScheduler::OnCheckpoint(int worker, int trial, int epoch) {
  if (trial < 0 || trial >= static_cast<int>(trials_.size())) return false;
  TrialState& t = trials_[static_cast<std::size_t>(trial)];
  if (t.status != TrialStatus::kRunning || t.worker != worker || epoch <= t.epoch) return false;
  t.pending_checkpoint = epoch;
  return true;
}

void SweepScheduler::OnEnd(int worker, int trial, bool ok, bool stopped, const std::string& reason, const Metrics& metrics, double now) {
  if (trial < 0 || trial >= static_cast<int>(trials_.size())) return;
  TrialState& t = trials_[static_cast<std::size_t>(trial)];
  if (t.status != TrialStatus::kRunning || t.worker != worker) return;
  // Stopped by the sweep (Ctrl-C), not by ASHA: a resumed sweep runs it on.
  bool resumable = false;
  if (ok) {
    t.status = TrialStatus::kDone;
  } else if (stopped) {
    t.status = TrialStatus::kStopped;
    resumable = t.reason.empty();
    if (resumable) t.reason = "stopped by Ctrl-C";
  } else {
    t.status = TrialStatus::kFailed;
    t.reason = reason;
  }
  ApplyEndMetrics(t, metrics);
  ordered_json line = TrialLine(now, t, "end", metric_);
  line["metrics"] = MetricsObject(metrics);
  if (resumable) line["resumable"] = true;
  lines_.push_back(config::JsonText(line));
  if (ensemble_) MaybeCompleteEnsemble(now);
}

bool SweepScheduler::OnPredictions(int worker, int trial, int epoch, int classes, const std::vector<ClassId>& labels,
                                   const std::vector<float>& outputs, const std::vector<float>& targets, double now) {
  if (!ensemble_ || trial < 0 || trial >= static_cast<int>(trials_.size())) return false;
  const TrialState& t = trials_[static_cast<std::size_t>(trial)];
  const std::size_t values = labels.size() * static_cast<std::size_t>(std::max(classes, 0));
  if (t.status != TrialStatus::kRunning || t.worker != worker || classes <= 0 || outputs.size() != values ||
      (!targets.empty() && targets.size() != values))
    return false;
  Predictions& p = pending_epochs_[epoch];
  if (p.members.empty()) {
    p.epoch = epoch;
    p.classes = classes;
    p.labels = labels;
    p.targets = targets;
  } else if (p.classes != classes || p.labels != labels || p.targets != targets) {
    return false;
  }
  if (p.members.contains(trial)) return true;  // a re-placed member's repeat
  p.members.emplace(trial, outputs);
  MaybeCompleteEnsemble(now);
  return true;
}

namespace {

SweepScheduler::Score ScoreOutputs(const SweepScheduler::Predictions& p, const std::vector<float>& outputs) {
  SweepScheduler::Score s;
  const std::size_t classes = static_cast<std::size_t>(p.classes), rows = p.labels.size();
  if (rows == 0) return s;
  if (p.regression()) {
    double abs_sum = 0, sq_sum = 0;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      const double d = static_cast<double>(outputs[i]) - p.targets[i];
      abs_sum += std::abs(d);
      sq_sum += d * d;
    }
    s.mae = abs_sum / static_cast<double>(outputs.size());
    s.rmse = std::sqrt(sq_sum / static_cast<double>(outputs.size()));
    return s;
  }
  std::size_t hits = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const float* row = outputs.data() + r * classes;
    hits += std::max_element(row, row + classes) - row == p.labels[r];
  }
  s.accuracy = static_cast<double>(hits) / static_cast<double>(rows);
  return s;
}

// Averages the members' outputs into p->mean and scores it and each member.
SweepScheduler::EnsembleEpoch CompleteEpoch(SweepScheduler::Predictions* p) {
  SweepScheduler::EnsembleEpoch e{.epoch = p->epoch, .members = static_cast<int>(p->members.size()), .regression = p->regression()};
  std::vector<double> sum(p->labels.size() * static_cast<std::size_t>(p->classes), 0.0);
  for (const auto& [trial, outputs] : p->members) {
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += outputs[i];
    const SweepScheduler::Score s = ScoreOutputs(*p, outputs);
    e.by_member[trial] = s;
    e.mean_member_mae += s.mae / e.members;
    const bool first = e.by_member.size() == 1;
    if (e.regression) e.best_member = first ? s.mae : std::min(e.best_member, s.mae);
    else e.best_member = std::max(e.best_member, s.accuracy);
  }
  p->mean.resize(sum.size());
  for (std::size_t i = 0; i < sum.size(); ++i) p->mean[i] = static_cast<float>(sum[i] / e.members);
  e.ensemble = ScoreOutputs(*p, p->mean);
  return e;
}

ordered_json ByMember(const SweepScheduler::EnsembleEpoch& e, double SweepScheduler::Score::*field) {
  ordered_json out = ordered_json::object();
  for (const auto& [trial, s] : e.by_member) out[std::to_string(trial)] = s.*field;
  return out;
}

}  // namespace

ordered_json EnsembleFields(const SweepScheduler::EnsembleEpoch& e) {
  using Score = SweepScheduler::Score;
  if (!e.regression)
    return {{"members", e.members}, {"ensemble_test_accuracy", e.ensemble.accuracy}, {"best_member_test_accuracy", e.best_member},
            {"member_test_accuracy", ByMember(e, &Score::accuracy)}};
  return {{"members", e.members},
          {"ensemble_test_mae", e.ensemble.mae},
          {"ensemble_test_rmse", e.ensemble.rmse},
          {"best_member_test_mae", e.best_member},
          {"mean_member_test_mae", e.mean_member_mae},
          {"member_test_mae", ByMember(e, &Score::mae)},
          {"member_test_rmse", ByMember(e, &Score::rmse)}};
}

bool SweepScheduler::InEnsemble(int trial) const {
  const TrialStatus s = trials_[static_cast<std::size_t>(trial)].status;
  return s != TrialStatus::kFailed && s != TrialStatus::kStopped;
}

void SweepScheduler::MaybeCompleteEnsemble(double now) {
  int in = 0;  // members still in the ensemble
  for (std::size_t t = 0; t < trials_.size(); ++t) in += InEnsemble(static_cast<int>(t));
  for (auto it = pending_epochs_.begin(); it != pending_epochs_.end();) {
    Predictions& p = it->second;
    std::erase_if(p.members, [&](const auto& kv) { return !InEnsemble(kv.first); });
    const int counted = static_cast<int>(p.members.size());
    if (counted < in || counted == 0) {
      ++it;
      continue;
    }
    EnsembleEpoch e = CompleteEpoch(&p);
    ordered_json line = {{"ts", Millis(now)}, {"event", "ensemble"}, {"epoch", e.epoch}};
    line.update(EnsembleFields(e));
    lines_.push_back(config::JsonText(line));
    ensemble_epochs_.push_back(std::move(e));
    if (p.epoch >= last_.epoch) last_ = std::move(p);
    it = pending_epochs_.erase(it);
  }
}

void SweepScheduler::OnWorkerLost(int worker, const std::string& why, double now) {
  for (TrialState& t : trials_) {
    if (t.status != TrialStatus::kRunning || t.worker != worker) continue;
    t.status = TrialStatus::kPaused;
    t.pending_checkpoint = 0;
    t.reason = t.checkpoint_epoch > 0
                   ? fmt::format("worker {} lost ({}); placed again, to resume after epoch {}", worker, why, t.checkpoint_epoch)
                   : fmt::format("worker {} lost ({}); placed again, from epoch 1", worker, why);
    Record(now, t, "worker_lost");
    t.reason.clear();
    if (stopping_) {
      t.status = TrialStatus::kStopped;
      t.reason = "stopped by Ctrl-C";
    } else {
      queue_.insert(queue_.begin(), t.trial.id);
    }
  }
}

void SweepScheduler::StopAll(double now) {
  if (stopping_) return;
  stopping_ = true;
  for (int i : queue_) {
    TrialState& t = trials_[static_cast<std::size_t>(i)];
    t.status = TrialStatus::kStopped;
    t.reason = "not started: the sweep was stopped";
    RecordResumableEnd(now, t);
  }
  queue_.clear();
}

void SweepScheduler::FailQueued(const std::string& why, double now) {
  for (int i : queue_) {
    TrialState& t = trials_[static_cast<std::size_t>(i)];
    t.status = TrialStatus::kFailed;
    t.reason = why;
    RecordResumableEnd(now, t);
  }
  queue_.clear();
}

bool SweepScheduler::finished() const { return queue_.empty() && running() == 0; }

int SweepScheduler::best() const {
  int best = -1;
  for (std::size_t i = 0; i < trials_.size(); ++i) {
    const TrialState& t = trials_[i];
    if (!t.best || t.status == TrialStatus::kFailed) continue;
    if (best < 0 || Better(*t.best, *trials_[static_cast<std::size_t>(best)].best)) best = static_cast<int>(i);
  }
  return best;
}

std::vector<std::string> SweepScheduler::TakeLines() { return std::exchange(lines_, {}); }

}  // namespace tfd::coordinator
