#include "launcher/chaos.h"

#include <csignal>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/config/json_writer.h"
#include "launcher/runner.h"

namespace tfd::launcher {
namespace {

// "3" -> 3; false for anything else (sign, spaces, trailing text, > 1e9).
bool ParseCount(std::string_view s, int* out) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string_view::npos) return false;
  *out = std::atoi(std::string(s).c_str());
  return true;
}

bool ParseSeconds(const std::string& s, double* out) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !(v > 0 && v <= 100000)) return false;
  *out = v;
  return true;
}

std::string Ordinal(int n) {
  const char* suffix = (n % 100 >= 11 && n % 100 <= 13) ? "th" : n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
  return fmt::format("{}{}", n, suffix);
}

std::string EventList() {
  std::string s;
  for (std::string_view e : config::kEventNames) s += fmt::format("{}{}", s.empty() ? "" : ", ", e);
  return s;
}

}  // namespace

Result<ChaosArgs> ParseChaosArgs(const std::vector<std::string>& args) {
  ChaosArgs a;
  bool signal_given = false, stop_given = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    const bool has_value = i + 1 < args.size();
    auto value = [&]() -> const std::string& { return args[++i]; };
    if ((flag == "--kill" || flag == "--at" || flag == "--from" || flag == "--signal" || flag == "--stop" || flag == "--deadline" ||
         flag == "--run-dir" || flag == "--grace") &&
        !has_value)
      return Status::InvalidArgument(fmt::format("{} needs a value", flag));
    if (flag == "--kill") {
      a.kill = value();
    } else if (flag == "--at") {
      const std::string at = value();
      const auto colon = at.find(':');
      a.event = at.substr(0, colon);
      if (!config::IsEventName(a.event))
        return Status::InvalidArgument(fmt::format("--at {}: tfd emits no event \"{}\" (expected one of {})", at, a.event, EventList()));
      if (colon != std::string::npos && (!ParseCount(at.substr(colon + 1), &a.nth) || a.nth < 1))
        return Status::InvalidArgument(fmt::format("--at {}: N must be a whole number >= 1", at));
    } else if (flag == "--from") {
      a.from = value();
    } else if (flag == "--signal") {
      const std::string s = value();
      if (s == "kill") a.action = FaultAction::kKill;
      else if (s == "term") a.action = FaultAction::kTerm;
      else return Status::InvalidArgument(fmt::format("--signal {}: expected kill or term", s));
      signal_given = true;
    } else if (flag == "--stop") {
      if (!ParseSeconds(value(), &a.stop_secs)) return Status::InvalidArgument(fmt::format("--stop {}: expected seconds above 0", args[i]));
      a.action = FaultAction::kStop;
      stop_given = true;
    } else if (flag == "--deadline") {
      if (!ParseSeconds(value(), &a.deadline_secs))
        return Status::InvalidArgument(fmt::format("--deadline {}: expected seconds above 0", args[i]));
    } else if (flag == "--run-dir") {
      a.run_dir_override = value();
    } else if (flag == "--grace") {
      if (!ParseSeconds(value(), &a.grace_secs)) return Status::InvalidArgument(fmt::format("--grace {}: expected seconds above 0", args[i]));
    } else if (flag == "--accept-new-hostkeys") {
      a.accept_new_hostkeys = true;
    } else if (!flag.empty() && flag[0] == '-') {
      return Status::InvalidArgument(fmt::format("chaos: unknown option {}", flag));
    } else if (a.run_or_file.empty()) {
      a.run_or_file = flag;
    } else {
      return Status::InvalidArgument(fmt::format("chaos: one run folder or cluster file, not \"{}\" too", flag));
    }
  }
  if (a.run_or_file.empty()) return Status::InvalidArgument("chaos needs a run folder or a cluster file");
  if (a.kill.empty()) return Status::InvalidArgument("chaos needs --kill ROLE[:INDEX]");
  if (a.event.empty()) return Status::InvalidArgument("chaos needs --at EVENT[:N]");
  if (signal_given && stop_given) return Status::InvalidArgument("--stop and --signal: a stopped task gets SIGSTOP, no other signal");
  return a;
}

Result<config::TaskId> ResolveTask(const config::ClusterSpec& cluster, std::string_view flag, std::string_view spec) {
  const auto colon = spec.find(':');
  const std::string_view role = spec.substr(0, colon);
  int index = 0;
  if (colon != std::string_view::npos && !ParseCount(spec.substr(colon + 1), &index))
    return Status::InvalidArgument(fmt::format("{} {}: expected ROLE[:INDEX], INDEX a whole number", flag, spec));
  auto listed = [&](config::TaskType t, std::string_view noun) -> Result<config::TaskId> {
    const int n = static_cast<int>(cluster.Tasks(t).size());
    if (index < n) return config::TaskId{t, index};
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) names.push_back(config::TaskId{t, i}.ToString());
    if (n == 0) return Status::InvalidArgument(fmt::format("{} {}: the cluster has no {} tasks", flag, spec, noun));
    return Status::InvalidArgument(fmt::format("{} {}: the cluster has {} {}{} ({})", flag, spec, n, noun, n == 1 ? "" : "s",
                                               fmt::join(names, ", ")));
  };
  if (role == "ps") return listed(config::TaskType::kPs, "ps");
  if (role == "worker") return listed(config::TaskType::kWorker, "worker");
  if (role == "chief") {
    if (index != 0) return Status::InvalidArgument(fmt::format("{} {}: a cluster has one chief (chief, or chief:0)", flag, spec));
    if (cluster.num_workers() == 0) return Status::InvalidArgument(fmt::format("{} {}: the cluster has no chief", flag, spec));
    return cluster.WorkerTask(0);
  }
  return Status::InvalidArgument(fmt::format("{} {}: unknown role \"{}\" (expected ps, chief or worker, with :INDEX)", flag, spec, role));
}

int Fault::Signal() const { return action == FaultAction::kKill ? SIGKILL : action == FaultAction::kTerm ? SIGTERM : SIGSTOP; }

std::string Fault::ActionName() const { return action == FaultAction::kKill ? "kill" : action == FaultAction::kTerm ? "term" : "stop"; }

std::string Fault::Describe() const {
  const std::string what = action == FaultAction::kKill   ? "SIGKILL"
                           : action == FaultAction::kTerm ? "SIGTERM"
                                                          : fmt::format("SIGSTOP (SIGCONT {} s later)", stop_secs);
  const std::string whose = from == target ? "its" : from.ToString() + "'s";
  return fmt::format("{} to {} at {} {} {} event", what, target.ToString(), whose, Ordinal(nth), event);
}

Result<Fault> ResolveFault(const ChaosArgs& args, const config::ClusterFile& file) {
  Fault f;
  TFD_ASSIGN_OR_RETURN(f.target, ResolveTask(file.cluster, "--kill", args.kill));
  f.from = f.target;
  if (!args.from.empty()) {
    TFD_ASSIGN_OR_RETURN(f.from, ResolveTask(file.cluster, "--from", args.from));
  }
  f.event = args.event;
  f.nth = args.nth;
  f.action = args.action;
  f.stop_secs = args.stop_secs;
  const config::TaskTimeouts& t = file.launch.timeouts;
  if (args.deadline_secs > 0) {
    f.deadline_secs = args.deadline_secs;
    f.deadline_why = "--deadline";
  } else {
    // A loss is noticed within the peer timeout, waited for during the reconnect timeout, and a ps
    // that ends the run gives its workers one more peer timeout to hear why; a task still starting
    // waits for the startup timeout instead.
    const double lost = 2 * t.PeerOrDefault() + t.ReconnectOrDefault();
    const bool starting = t.StartupOrDefault() > lost;
    f.deadline_secs = (starting ? t.StartupOrDefault() : lost) + f.stop_secs + kChaosMarginSecs;
    f.deadline_why = starting ? fmt::format("startup timeout {} s", t.StartupOrDefault())
                              : fmt::format("2 x peer timeout {} s + reconnect timeout {} s", t.PeerOrDefault(), t.ReconnectOrDefault());
    f.deadline_why += fmt::format("{} + margin {} s", f.stop_secs > 0 ? fmt::format(" + stop {} s", f.stop_secs) : "", kChaosMarginSecs);
  }
  return f;
}

ChaosPromise PromiseFor(const config::ClusterFile& file, const Fault& fault, int target_max_restarts) {
  ChaosPromise p;
  p.target = fault.target.ToString();
  p.deadline_secs = fault.deadline_secs;
  const config::ClusterSpec& c = file.cluster;
  const config::UpdateSpec& u = file.train.update;
  const bool chief = fault.target.type == config::TaskType::kChief ||
                     (fault.target.type == config::TaskType::kWorker && fault.target.index == 0 && c.chief.empty());
  const bool worker = fault.target.type == config::TaskType::kWorker || fault.target.type == config::TaskType::kChief;
  const double reconnect = file.launch.timeouts.ReconnectOrDefault();
  const bool ring = u.mode == config::UpdateSpec::Mode::kAllreduce;
  const bool sync_fail = u.mode == config::UpdateSpec::Mode::kSync && u.on_worker_loss == config::UpdateSpec::OnWorkerLoss::kFail;
  // A stopped task never exits, so no restart policy brings it back: a stop is judged on its own.
  const bool stop = fault.action == FaultAction::kStop;
  // A stop is noticed once the silence (the stop, plus up to a heartbeat interval of at most 1 s,
  // plus scheduling) reaches the peer timeout: 1 s of margin.
  const bool unnoticed = stop && fault.stop_secs + 1 < file.launch.timeouts.PeerOrDefault();
  if (target_max_restarts > 0 && !stop && !ring && !(worker && sync_fail)) {
    p.survival = p.target_must_exit_zero = true;
    p.why = fmt::format("launch.restart starts {} tasks again (up to {} times)", config::TaskTypeName(fault.target.type), target_max_restarts);
  } else if (unnoticed) {
    p.survival = p.target_must_exit_zero = true;
    p.why = fmt::format("a stop of {} s is over 1 s shorter than the peer timeout ({} s): nobody notices", fault.stop_secs,
                        file.launch.timeouts.PeerOrDefault());
  } else if (stop && fault.stop_secs < reconnect && !ring && !(worker && sync_fail)) {
    p.survival = true;
    // Under shrink a lost worker is written off: the others may finish, and the ps end, before it
    // is back, and then it finds no ps.
    const bool shrink = u.mode == config::UpdateSpec::Mode::kSync && u.on_worker_loss == config::UpdateSpec::OnWorkerLoss::kShrink;
    p.target_must_exit_zero = !(worker && shrink);
    p.why = fmt::format("a stop of {} s is shorter than the reconnect timeout ({} s): the task is back before it is given up on",
                        fault.stop_secs, reconnect);
  } else if (worker && !chief && u.mode == config::UpdateSpec::Mode::kAsync) {
    p.survival = true;
    p.why = fmt::format("{} is a worker other than the chief, and updates are async", p.target);
  } else if (worker && !chief && u.mode == config::UpdateSpec::Mode::kSync && u.on_worker_loss == config::UpdateSpec::OnWorkerLoss::kShrink &&
             c.num_workers() - 1 >= u.min_replicas) {
    p.survival = true;
    p.why = fmt::format("{} is a worker other than the chief, and sync updates shrink to the {} workers left (min_replicas {})", p.target,
                        c.num_workers() - 1, u.min_replicas);
  } else {
    p.why = fmt::format("no rule promises the run survives losing {}{}: it is not restarted (launch.restart){}, {}", p.target,
                        chief ? " (the chief)" : "",
                        target_max_restarts == 0 ? ""
                        : ring                   ? " that a ring could take back"
                                                 : " in time for sync updates with on_worker_loss fail, which fail the step at once",
                        ring ? "and an allreduce ring has no spare: a lost or silent member fails the collective"
                        : fault.action == FaultAction::kStop
                            ? fmt::format("and the stop outlasts the peer timeout ({} s) where {}", file.launch.timeouts.PeerOrDefault(),
                                          fault.stop_secs >= reconnect ? fmt::format("the reconnect timeout ({} s) is shorter", reconnect)
                                                                       : "sync updates with on_worker_loss fail end the run")
                        : !worker ? "and it is a ps"
                                  : "and the update mode does not go on without it");
  }
  return p;
}

ChaosVerdict JudgeChaos(const ChaosPromise& promise, const std::string& not_sent, const std::vector<TaskOutcome>& tasks) {
  ChaosVerdict v;
  if (!not_sent.empty()) v.reasons.push_back("the fault was never sent: " + not_sent);
  for (const TaskOutcome& t : tasks) {
    const bool hit = t.task == promise.target;
    if (t.past_deadline) {
      v.reasons.push_back(fmt::format("(a) {} was still running {} s after the fault (the deadline); it was killed", t.task, promise.deadline_secs));
      continue;  // its exit code is the deadline's kill, not its own doing
    }
    if (!hit && t.exit_code != 0 && !config::MentionsTask(t.last_line, promise.target))
      v.reasons.push_back(fmt::format("(b) {} exited {} without naming {} in its last line", t.task, t.exit_code, promise.target));
    if (promise.survival && (!hit || promise.target_must_exit_zero) && t.exit_code != 0)
      v.reasons.push_back(fmt::format("(c) {} exited {}, though the run should survive ({})", t.task, t.exit_code, promise.why));
  }
  v.kept = v.reasons.empty();
  return v;
}

std::vector<std::string> ChaosReportLines(const ChaosPromise& promise, const std::vector<TaskOutcome>& tasks, const ChaosVerdict& verdict) {
  std::vector<std::string> lines;
  for (const TaskOutcome& t : tasks) {
    lines.push_back(fmt::format("chaos task={} exit_code={} restarts={} exit_after_secs={} past_deadline={} last_line={}", t.task, t.exit_code,
                                t.restarts, t.exit_after_secs < 0 ? "-" : fmt::format("{:.1f}", t.exit_after_secs), t.past_deadline,
                                config::CompactJson(nlohmann::json(t.last_line))));
  }
  if (verdict.kept)
    lines.push_back(fmt::format("chaos verdict=kept survival={}: {}", promise.survival ? "promised" : "not-promised", promise.why));
  else
    lines.push_back(fmt::format("chaos verdict=broken: {}", fmt::join(verdict.reasons, "; ")));
  return lines;
}

std::string ChaosJson(const Fault& fault, const std::string& not_sent, double sent_at, const ChaosPromise& promise,
                      const std::vector<TaskOutcome>& tasks, const ChaosVerdict& verdict) {
  nlohmann::json j;
  j["fault"] = {{"action", fault.ActionName()}, {"signal", fmt::format("SIG{}", SignalName(fault.Signal()))}, {"target", fault.target.ToString()},
                {"stop_secs", fault.stop_secs},  {"sent", not_sent.empty()},           {"sent_at", not_sent.empty() ? nlohmann::json(sent_at) : nullptr}};
  if (!not_sent.empty()) j["fault"]["not_sent"] = not_sent;
  j["trigger"] = {{"event", fault.event}, {"n", fault.nth}, {"from", fault.from.ToString()}};
  j["deadline_secs"] = fault.deadline_secs;
  j["deadline_from"] = fault.deadline_why;
  j["survival_promised"] = promise.survival;
  j["promise"] = promise.why;
  j["tasks"] = nlohmann::json::array();
  for (const TaskOutcome& t : tasks) {
    j["tasks"].push_back({{"task", t.task},
                          {"exit_code", t.exit_code},
                          {"restarts", t.restarts},
                          {"exit_after_secs", t.exit_after_secs < 0 ? nlohmann::json(nullptr) : nlohmann::json(t.exit_after_secs)},
                          {"last_line", t.last_line},
                          {"past_deadline", t.past_deadline},
                          {"test_accuracy", t.test_accuracy < 0 ? nlohmann::json(nullptr) : nlohmann::json(t.test_accuracy)}});
  }
  j["verdict"] = verdict.kept ? "kept" : "broken";
  j["reasons"] = verdict.reasons;
  return config::JsonText(j, config::kAllLevels) + "\n";
}

}  // namespace tfd::launcher
