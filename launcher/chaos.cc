#include "launcher/chaos.h"

#include <csignal>
#include <cstdint>
#include <limits>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/config/json_writer.h"
#include "launcher/child_process.h"
#include "launcher/cli.h"
#include "launcher/commands.h"
#include "launcher/runner.h"
#include "launcher/scale.h"

namespace tfd::launcher {
namespace {

// A whole number in [min, INT_MAX] (launcher/cli.h's strict parse), else nullopt.
std::optional<int> ParseCount(std::string_view s, int min) {
  const std::optional<std::int64_t> n = ParseInteger(s);
  if (!n || *n < min || *n > std::numeric_limits<int>::max()) return std::nullopt;
  return static_cast<int>(*n);
}

// chaos's SECS: a plain number above 0, at most 100000. A test and scripts know its words for a bad
// value ("--stop 0: expected seconds above 0"), older than the "--flag: expected ..., got" of the
// other flags (launcher/cli.h): kept so.
Status ParseFaultSeconds(std::string_view flag, const std::string& text, double* out) {
  const std::optional<double> v = ParseNumber(text);
  if (v && *v > 100000) return Status::InvalidArgument(fmt::format("{} {}: expected seconds above 0, at most 100000", flag, text));
  if (!v || !(*v > 0)) return Status::InvalidArgument(fmt::format("{} {}: expected seconds above 0", flag, text));
  *out = *v;
  return Status::Ok();
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
  std::string at, signal, stop, deadline;
  CommandLine line("chaos");
  line.Positional(&a.run_or_file, "run folder or cluster file");
  line.Text("kill", &a.kill);
  line.Integer("grow", &a.grow, 1, 4096, "a number of workers");
  line.Text("then-kill", &a.then_kill);
  line.Seconds("then-after", &a.then_after_secs, 0, 3600);
  line.Text("at", &at);
  line.Text("from", &a.from);
  line.Text("signal", &signal);
  line.Text("stop", &stop);
  line.Text("deadline", &deadline);
  line.Text("run-dir", &a.run_dir_override);  // as up's
  line.Seconds("grace", &a.grace_secs, 0, kMaxGraceSecs);
  line.Switch("accept-new-hostkeys", &a.accept_new_hostkeys);
  TFD_RETURN_IF_ERROR(line.Parse(args));
  if (line.Given("at")) {
    const auto colon = at.find(':');
    a.event = at.substr(0, colon);
    if (!config::IsEventName(a.event))
      return Status::InvalidArgument(fmt::format("--at {}: tfd emits no event \"{}\" (expected one of {})", at, a.event, EventList()));
    if (colon != std::string::npos) {
      const std::optional<int> nth = ParseCount(std::string_view(at).substr(colon + 1), 1);
      if (!nth) return Status::InvalidArgument(fmt::format("--at {}: N must be a whole number >= 1", at));
      a.nth = *nth;
    }
  }
  if (line.Given("signal")) {
    if (signal == "kill") a.action = FaultAction::kKill;
    else if (signal == "term") a.action = FaultAction::kTerm;
    else return Status::InvalidArgument(fmt::format("--signal {}: expected kill or term", signal));
  }
  if (line.Given("stop")) {
    TFD_RETURN_IF_ERROR(ParseFaultSeconds("--stop", stop, &a.stop_secs));
    a.action = FaultAction::kStop;
  }
  if (line.Given("deadline")) TFD_RETURN_IF_ERROR(ParseFaultSeconds("--deadline", deadline, &a.deadline_secs));
  if (a.run_or_file.empty()) return Status::InvalidArgument("chaos needs a run folder or a cluster file");
  if (line.Given("kill") && line.Given("grow")) return Status::InvalidArgument("--kill and --grow: one fault per run (--then-kill adds a second kill)");
  if (a.kill.empty() && !line.Given("grow")) return Status::InvalidArgument("chaos needs --kill ROLE[:INDEX] or --grow N");
  if (a.event.empty()) return Status::InvalidArgument("chaos needs --at EVENT[:N]");
  if (line.Given("signal") && line.Given("stop")) return Status::InvalidArgument("--stop and --signal: a stopped task gets SIGSTOP, no other signal");
  if (line.Given("grow")) {
    if (line.Given("signal") || line.Given("stop")) return Status::InvalidArgument("--grow sends no signal: not with --signal or --stop");
    a.action = FaultAction::kGrow;
  }
  if (line.Given("then-kill") && (a.kill.empty() || a.action == FaultAction::kStop))
    return Status::InvalidArgument("--then-kill follows a first kill or SIGTERM (--kill, without --stop)");
  if (line.Given("then-after") && !line.Given("then-kill")) return Status::InvalidArgument("--then-after needs --then-kill");
  return a;
}

Result<config::TaskId> ResolveTask(const config::ClusterSpec& cluster, std::string_view flag, std::string_view spec) {
  const auto colon = spec.find(':');
  const std::string_view role = spec.substr(0, colon);
  int index = 0;
  if (colon != std::string_view::npos) {
    const std::optional<int> n = ParseCount(spec.substr(colon + 1), 0);
    if (!n) return Status::InvalidArgument(fmt::format("{} {}: expected ROLE[:INDEX], INDEX a whole number", flag, spec));
    index = *n;
  }
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

int Fault::Signal() const {
  switch (action) {
    case FaultAction::kKill: return SIGKILL;
    case FaultAction::kTerm: return SIGTERM;
    case FaultAction::kStop: return SIGSTOP;
    case FaultAction::kGrow: return 0;
  }
  return 0;
}

std::string Fault::ActionName() const {
  switch (action) {
    case FaultAction::kKill: return "kill";
    case FaultAction::kTerm: return "term";
    case FaultAction::kStop: return "stop";
    case FaultAction::kGrow: return "grow";
  }
  return "";
}

std::string Fault::Describe() const {
  const std::string then = then_kill ? fmt::format(", then SIGKILL to {} {} s later", then_kill->ToString(), then_after_secs) : "";
  if (action == FaultAction::kGrow)
    return fmt::format("the run scaled to {} workers at {}'s {} {} event", grow_to, from.ToString(), Ordinal(nth), event);
  const std::string what = action == FaultAction::kKill   ? "SIGKILL"
                           : action == FaultAction::kTerm ? "SIGTERM"
                                                          : fmt::format("SIGSTOP (SIGCONT {} s later)", stop_secs);
  const std::string whose = from == target ? "its" : from.ToString() + "'s";
  return fmt::format("{} to {} at {} {} {} event{}", what, target.ToString(), whose, Ordinal(nth), event, then);
}

Result<Fault> ResolveFault(const ChaosArgs& args, const config::ClusterFile& file) {
  Fault f;
  if (args.action == FaultAction::kGrow) {
    TFD_RETURN_IF_ERROR(CheckScale(file.train, args.grow, "--grow"));
    if (args.grow <= file.cluster.num_workers())
      return Status::InvalidArgument(fmt::format("--grow {}: the cluster starts {} workers; --grow takes more", args.grow, file.cluster.num_workers()));
    f.grow_to = args.grow;
    TFD_ASSIGN_OR_RETURN(f.target, ResolveTask(file.cluster, "--grow", "chief"));
  } else {
    TFD_ASSIGN_OR_RETURN(f.target, ResolveTask(file.cluster, "--kill", args.kill));
  }
  if (!args.then_kill.empty()) {
    TFD_ASSIGN_OR_RETURN(f.then_kill, ResolveTask(file.cluster, "--then-kill", args.then_kill));
    if (*f.then_kill == f.target)
      return Status::InvalidArgument(fmt::format("--then-kill {}: the task --kill hits already; name another", args.then_kill));
    f.then_after_secs = args.then_after_secs;
  }
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
  p.deadline_secs = fault.deadline_secs;
  const config::ClusterSpec& c = file.cluster;
  const config::UpdateSpec& u = file.train.update;
  const config::ElasticSpec& elastic = file.train.elastic;
  if (fault.action == FaultAction::kGrow) {
    p.survival = p.target_must_exit_zero = true;
    p.why = fmt::format("the job is elastic (min_workers {}, max_workers {}): a worker that joins leaves the run as it was, one worker more",
                        elastic.min_workers, elastic.max_workers);
    return p;
  }
  p.target = fault.target.ToString();
  if (fault.then_kill) p.second_target = fault.then_kill->ToString();
  const int lost = fault.then_kill ? 2 : 1;
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
  if (ring && elastic.enabled() && worker && (fault.then_kill || !unnoticed) && c.num_workers() - lost >= elastic.min_workers) {
    p.survival = true;
    p.why = fmt::format("an elastic allreduce ring re-forms without {} with the {} workers left (min_workers {})",
                        fault.then_kill ? p.target + " and " + p.second_target : p.target, c.num_workers() - lost, elastic.min_workers);
  } else if (fault.then_kill) {
    p.why = fmt::format("no rule promises the run survives losing two tasks, {} and {}, but an elastic allreduce ring that keeps "
                        "min_workers", p.target, p.second_target);
  } else if (target_max_restarts > 0 && !stop && !ring && !(worker && sync_fail)) {
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
                        ring ? (elastic.enabled() ? fmt::format("and an elastic allreduce ring keeps at least min_workers ({}) of its {}",
                                                                elastic.min_workers, c.num_workers())
                                                  : "and an allreduce ring has no spare: a lost or silent member fails the collective")
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
  const auto names_a_target = [&](const std::string& line) {
    return config::MentionsTask(line, promise.target) || (!promise.second_target.empty() && config::MentionsTask(line, promise.second_target));
  };
  const std::string targets = promise.target + (promise.second_target.empty() ? "" : " or " + promise.second_target);
  for (const TaskOutcome& t : tasks) {
    const bool hit = !promise.target.empty() && (t.task == promise.target || t.task == promise.second_target);
    if (t.past_deadline) {
      v.reasons.push_back(fmt::format("(a) {} was still running {} s after the fault (the deadline); it was killed", t.task, promise.deadline_secs));
      continue;  // its exit code is the deadline's kill, not its own doing
    }
    // (A grown run hits no task: (c) judges every exit.)
    if (!hit && !promise.target.empty() && t.exit_code != 0 && !names_a_target(t.last_line))
      v.reasons.push_back(fmt::format("(b) {} exited {} without naming {} in its last line", t.task, t.exit_code, targets));
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

std::string ChaosJson(const Fault& fault, const std::string& not_sent, double sent_at, double then_sent_at, const ChaosPromise& promise,
                      const std::vector<TaskOutcome>& tasks, const ChaosVerdict& verdict) {
  nlohmann::json j;
  const bool grow = fault.action == FaultAction::kGrow;
  j["fault"] = {{"action", fault.ActionName()},
                {"signal", grow ? nlohmann::json(nullptr) : nlohmann::json(fmt::format("SIG{}", SignalName(fault.Signal())))},
                {"target", grow ? nlohmann::json(nullptr) : nlohmann::json(fault.target.ToString())},
                {"stop_secs", fault.stop_secs},
                {"sent", not_sent.empty()},
                {"sent_at", not_sent.empty() ? nlohmann::json(sent_at) : nullptr}};
  if (grow) j["fault"]["grow_to"] = fault.grow_to;
  if (fault.then_kill)
    j["fault"]["then_kill"] = {{"target", fault.then_kill->ToString()},
                               {"after_secs", fault.then_after_secs},
                               {"sent_at", then_sent_at > 0 ? nlohmann::json(then_sent_at) : nullptr}};
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
