// SweepScheduler::Restore: a sweep's state rebuilt from its trials.jsonl after the coordinator
// ended (docs/sweeps.md, "Resuming a sweep"). Beside the scheduler, not in it, so that file keeps to
// the live decisions.
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "daemon/coordinator/sweep_scheduler.h"

namespace tfd::coordinator {
namespace {

using nlohmann::ordered_json;

// A `metrics` object back into (name, value) pairs, in the order written; null (a NaN or infinite
// value, which JSON cannot hold) reads as NaN.
Metrics MetricsOf(const ordered_json& line) {
  Metrics out;
  if (!line.contains("metrics") || !line["metrics"].is_object()) return out;
  for (const auto& [name, value] : line["metrics"].items())
    out.emplace_back(name, value.is_number() ? value.get<double>() : std::numeric_limits<double>::quiet_NaN());
  return out;
}

std::optional<TrialStatus> StatusNamed(const std::string& name) {
  for (TrialStatus s : {TrialStatus::kPaused, TrialStatus::kRunning, TrialStatus::kStopped, TrialStatus::kDone, TrialStatus::kFailed})
    if (TrialStatusName(s) == name) return s;
  return std::nullopt;
}

}  // namespace

Status SweepScheduler::Replay(const ordered_json& line, std::vector<bool>* pruned) {
  const std::string event = line.value("event", "");
  if (event == "ensemble") return Status::InvalidArgument("an ensemble's line: an ensemble is not resumed");
  if (!line.contains("trial") || !line["trial"].is_number_integer()) return Status::InvalidArgument("expected an integer \"trial\"");
  const int id = line["trial"].get<int>();
  if (id < 0 || id >= static_cast<int>(trials_.size()))
    return Status::InvalidArgument(fmt::format("trial {} is not in the sweep (it has {} trials)", id, trials_.size()));
  TrialState& t = trials_[static_cast<std::size_t>(id)];
  if (event == "placed") {
    t.status = TrialStatus::kRunning;
    t.attempt = line.value("attempt", t.attempt);
    t.worker = line.value("worker", t.worker);
    t.reason.clear();
  } else if (event == "epoch") {
    const int epoch = line.value("epoch", 0);
    if (epoch > t.epoch) (*pruned)[static_cast<std::size_t>(id)] = ApplyEpoch(t, epoch, MetricsOf(line));
  } else if (event == "end") {
    const std::optional<TrialStatus> s = StatusNamed(line.value("status", ""));
    if (!s || *s == TrialStatus::kPaused || *s == TrialStatus::kRunning)
      return Status::InvalidArgument(fmt::format("an end with status {}, expected DONE, STOPPED or FAILED", line.value("status", "none")));
    t.status = *s;
    t.reason = line.value("reason", "");
    ApplyEndMetrics(t, MetricsOf(line));
    if (line.value("resumable", false)) t.status = TrialStatus::kPaused;
  } else if (event == "worker_lost") {
    t.status = TrialStatus::kPaused;
  } else {
    return Status::InvalidArgument(fmt::format("event \"{}\", expected placed, epoch, end or worker_lost", event));
  }
  return Status::Ok();
}

Result<SweepScheduler::Restored> SweepScheduler::Restore(const std::vector<ordered_json>& lines,
                                                          const std::function<int(int trial, int epoch)>& checkpoint_epoch, double now) {
  std::vector<bool> pruned(trials_.size(), false);
  for (std::size_t n = 0; n < lines.size(); ++n) {
    Status s;
    try {
      s = Replay(lines[n], &pruned);
    } catch (const nlohmann::json::exception& e) {  // a field of another type than written
      s = Status::InvalidArgument(e.what());
    }
    if (!s.ok()) return Status::InvalidArgument(fmt::format("line {}: {}", n + 1, s.message()));
  }
  queue_.clear();
  Restored r;
  for (TrialState& t : trials_) {
    const bool ended = t.status == TrialStatus::kDone || t.status == TrialStatus::kFailed || t.status == TrialStatus::kStopped;
    if (!ended && pruned[static_cast<std::size_t>(t.trial.id)]) {
      // ASHA's stop was recorded, the trial's end was not: it ends as its worker would have ended it.
      t.status = TrialStatus::kStopped;
      Record(now, t, "end");
    }
    if (ended || t.status == TrialStatus::kStopped) {
      ++r.done;
      continue;
    }
    t.status = TrialStatus::kPaused;
    t.reason.clear();
    t.pending_checkpoint = 0;
    t.checkpoint_epoch = t.epoch > 0 ? checkpoint_epoch(t.trial.id, t.epoch) : 0;
    queue_.push_back(t.trial.id);
    ++(t.attempt > 0 ? r.resumed : r.pending);
    r.from_checkpoint += t.checkpoint_epoch > 0;
  }
  return r;
}

}  // namespace tfd::coordinator
