#include "daemon/ps/worker_roster.h"

#include <utility>

#include <fmt/format.h>

#include "common/base/clock.h"
#include "common/config/cluster.h"

namespace tfd::ps {

WorkerRoster::WorkerRoster(int cluster_workers, Limits limits, Clock::time_point started, std::function<std::string(int)> name_of)
    : cluster_workers_(cluster_workers), limits_(limits), started_(started), name_of_(std::move(name_of)) {}

WorkerRoster::Arrival WorkerRoster::Connected(Link link, int rank, bool beyond_cluster, Clock::time_point now) {
  links_[link] = rank;
  if (!first_contact_) first_contact_ = now;
  Arrival a;
  a.was_given_up = given_up_.erase(rank) > 0;
  a.rejoined = gone_.erase(rank) > 0;
  a.newly_joined = beyond_cluster && joined_.insert(rank).second;
  return a;
}

WorkerRoster::Departure WorkerRoster::Closed(Link link, const std::string& name, std::uint64_t global_step, Clock::time_point now) {
  Departure d;
  d.rank = RankOf(link);
  d.done = done_.contains(d.rank);
  links_.erase(link);
  // The loss is recorded with the connection's removal, so a give-up check never finds the worker
  // neither connected nor lost and takes it for one that never connected.
  if (d.rank >= 0 && !d.done) gone_[d.rank] = Absence{name, global_step, now, false};
  return d;
}

bool WorkerRoster::MarkDone(int rank) { return done_.insert(rank).second; }

WorkerRoster::Progress WorkerRoster::progress() const {
  Progress p;
  p.done.assign(done_.begin(), done_.end());
  for (int r : given_up_)
    if (!done_.contains(r)) p.given_up.push_back(r);
  return p;
}

void WorkerRoster::Seed(const Progress& p, int rank_limit, std::uint64_t global_step, Clock::time_point now) {
  const auto admit = [&](int r) {
    if (r < 0 || r >= rank_limit) return false;
    if (r >= cluster_workers_) joined_.insert(r);
    return true;
  };
  for (int r : p.done)
    if (admit(r)) done_.insert(r);
  for (int r : p.given_up) {
    if (!admit(r) || done_.contains(r) || Live().contains(r)) continue;
    given_up_.insert(r);
    gone_[r] = Absence{name_of_(r), global_step, now, false, true};
  }
}

std::vector<WorkerRoster::Absence> WorkerRoster::GiveUpOverdue(Clock::time_point now, std::uint64_t global_step) {
  const std::set<int> live = Live();
  std::vector<Absence> gave_up;
  for (int r : Ranks()) {
    if (done_.contains(r) || live.contains(r) || given_up_.contains(r)) continue;
    auto it = gone_.find(r);
    // Never connected: given the startup timeout from the first worker's HELLO (or, with none
    // yet, from this ps's start), as a worker gives a ps it waits for.
    const Absence away = it != gone_.end() ? it->second : Absence{name_of_(r), global_step, first_contact_.value_or(started_), true};
    const std::chrono::milliseconds limit = away.never_connected ? limits_.startup_timeout : limits_.return_timeout;
    if (now - away.since < limit) continue;
    given_up_.insert(r);
    gone_[r] = away;
    gave_up.push_back(away);
  }
  return gave_up;
}

const WorkerRoster::Absence* WorkerRoster::ChiefGivenUp() const { return given_up_.contains(0) ? absence(0) : nullptr; }

std::optional<std::vector<std::string>> WorkerRoster::Finished(bool write_off_lost) const {
  if (!done_.contains(0)) return std::nullopt;  // the chief's DONE comes first
  std::vector<std::string> written_off;
  for (int r : Ranks()) {
    if (r == 0 || done_.contains(r) || given_up_.contains(r)) continue;
    if (write_off_lost && lost(r)) {
      written_off.push_back(gone_.at(r).name);
      continue;
    }
    return std::nullopt;
  }
  return written_off;
}

std::string WorkerRoster::AwayNote(std::string_view named) const {
  std::vector<std::string> gave_up, away;
  const std::set<int> live = Live();
  for (const auto& [r, a] : gone_) {
    if (config::MentionsTask(named, a.name) || live.contains(r) || done_.contains(r)) continue;
    const std::string what = a.before_restart    ? a.name + " (before this ps restarted)"
                             : a.never_connected ? a.name + " (never connected)"
                                                 : fmt::format("{} (lost at global_step {})", a.name, a.global_step);
    (given_up_.contains(r) ? gave_up : away).push_back(what);
  }
  std::string out;
  if (!gave_up.empty()) out += fmt::format("; gave up on {}", fmt::join(gave_up, ", "));
  if (!away.empty()) out += fmt::format("; also lost {}", fmt::join(away, ", "));  // the end came before their deadline
  return out;
}

double WorkerRoster::LimitSeconds(const Absence& a) const {
  return Seconds(a.never_connected ? limits_.startup_timeout : limits_.return_timeout);
}

std::string WorkerRoster::GaveUpBecause(const Absence& a) const {
  if (a.before_restart) return fmt::format("{} was given up on before this ps restarted", a.name);
  if (a.never_connected) return fmt::format("{} never connected within {:g} s", a.name, LimitSeconds(a));
  return fmt::format("{} was lost at global_step {} and did not come back within {:g} s", a.name, a.global_step, LimitSeconds(a));
}

int WorkerRoster::RankOf(Link link) const {
  auto it = links_.find(link);
  return it == links_.end() ? -1 : it->second;
}

WorkerState WorkerRoster::StateOf(int rank) const {
  if (done_.contains(rank)) return WorkerState::kDone;
  if (Live().contains(rank)) return WorkerState::kConnected;
  if (given_up_.contains(rank)) return WorkerState::kGivenUp;
  if (gone_.contains(rank)) return WorkerState::kLost;
  return WorkerState::kNone;
}

std::vector<int> WorkerRoster::Ranks() const {
  std::vector<int> ranks;
  for (int r = 0; r < cluster_workers_; ++r) ranks.push_back(r);
  for (int r : joined_)
    if (r >= cluster_workers_) ranks.push_back(r);
  return ranks;
}

std::set<int> WorkerRoster::Live() const {
  std::set<int> live;
  for (const auto& [link, r] : links_) live.insert(r);
  return live;
}

bool WorkerRoster::lost(int rank) const { return gone_.contains(rank) && !Live().contains(rank); }

const WorkerRoster::Absence* WorkerRoster::absence(int rank) const {
  auto it = gone_.find(rank);
  return it == gone_.end() ? nullptr : &it->second;
}

WorkerRoster::Place WorkerRoster::MemberPlace(int rank) const {
  Place p;
  for (int r : Ranks()) {
    if (given_up_.contains(r) || done_.contains(r)) continue;
    if (r == rank) p.index = p.count;
    ++p.count;
  }
  return p;
}

StepVerdict JudgeSyncStep(const WorkerRoster& roster, const std::vector<bool>& received, int to_aggregate,
                          config::UpdateSpec::OnWorkerLoss on_worker_loss, std::uint32_t min_replicas) {
  using OnWorkerLoss = config::UpdateSpec::OnWorkerLoss;
  StepVerdict v;
  const std::set<int> live = roster.Live();
  for (int r : roster.Ranks()) {
    const bool has = r < static_cast<int>(received.size()) && received[static_cast<std::size_t>(r)];
    v.held += has;
    if (has) continue;
    const WorkerRoster::Absence* away = roster.absence(r);
    if (roster.done(r)) {
      v.missing.push_back(fmt::format("{} has finished", roster.TaskName(r)));
    } else if (away != nullptr && !live.contains(r)) {
      v.lost = true;
      if (roster.given_up(r)) {
        v.for_good = true;
        v.missing.push_back(roster.GaveUpBecause(*away));
      } else {
        v.missing.push_back(fmt::format("{} was lost", away->name));
      }
    } else {
      ++v.can_send;  // connected, or not connected yet: it may still send its gradient
    }
  }
  using Action = StepVerdict::Action;
  if (v.held + v.can_send >= to_aggregate) return v;
  if (v.lost && !v.for_good && on_worker_loss == OnWorkerLoss::kWait) {
    v.action = Action::kWaitForLost;  // a restarted worker resumes at this step
  } else if (!v.lost || roster.done(0)) {
    // Only finished workers are missing (a backup worker's last steps, when the others are done),
    // or the chief is done and no step needs a lost worker any more: nothing more will be
    // aggregated, so the waiting ones finish on the final parameters.
    v.action = Action::kFinalParams;
  } else if (!(on_worker_loss == OnWorkerLoss::kShrink && v.held + v.can_send >= static_cast<int>(min_replicas))) {
    v.action = v.for_good ? Action::kEndRun : Action::kFailPulls;
  } else {
    v.action = Action::kShrink;
  }
  return v;
}

}  // namespace tfd::ps
