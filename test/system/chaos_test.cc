// The chaos matrix (ctest `chaos`, label chaos): real clusters under `tfctl chaos`, one fault each,
// injected at a phase named by a task's own JSON event (so the case is the same on a loaded
// machine, give or take the few milliseconds between the event and the signal), for every update
// mode, role, phase and fault. Each case checks the promise of
// docs/reliability.md from the run folder itself, not only from tfctl's verdict:
// - every task ended within its deadline (tfctl kills what outlives it and says so), and no
//   process of the run is left;
// - every task other than the one hit that exited non-zero names the lost task and a step in its
//   last line;
// - where the mode promises survival (a restart policy, a stop shorter than the reconnect
//   timeout, a non-chief worker lost under async or sync shrink) the chief and the ps exit 0 and
//   the final accuracy is within 2 points of the same job undisturbed.
// - a restart case (RestartCases) resumes as the undisturbed run would: every task exits 0, a DONE
//   a live worker had heard of is not waited for, and early stopping stops after the same epoch.
// By default a short set of cases runs (about two minutes); TFD_CHAOS=full runs the whole matrix,
// TFD_CHAOS=restart the restart cases alone, TFD_CHAOS=elastic the elastic ring's, TFD_CHAOS=sweep
// the sweep's (its coordinator, tfctl sweep itself, killed mid-sweep and resumed: the resumed sweep's
// leaderboard must be the undisturbed one's, every epoch reported once).
// With TFD_CHAOS_TABLE=FILE each case appends a row of the fault table to FILE, the sweep's to
// FILE.sweep (scripts/chaos_table puts them into docs/reliability.md).
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <tuple>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/config/cluster.h"
#include "test/sweep_util.h"
#include "test/system/tfctl_util.h"
#include "test/test_util.h"

namespace tfd::testing::chaos_test {
namespace {

using namespace std::chrono_literals;

// A peer timeout long enough that a loaded machine does not lose healthy peers, a reconnect timeout
// long enough for a restarted worker to load its data and come back.
constexpr double kPeerTimeout = 2, kReconnectTimeout = 6, kStartupTimeout = 10;
constexpr int kEpochs = 8, kBatch = 20, kTrain = 4000, kTest = 2000;
constexpr int kHeldOut = 200, kPatience = 3;  // early stopping's cases

struct Case {
  std::string mode;    // async | sync | sync-wait | sync-shrink | allreduce | allreduce-elastic
  std::string target;  // --kill: ps, chief, worker:1
  std::string phase;   // for the table: what the run was doing
  std::string at;      // --at EVENT[:N]
  std::string from;    // --from TASK ("" = the target)
  std::string fault;   // kill | term | stop
  bool restart = false;  // launch.restart covers the target's role
  // The job stops early (val_accuracy cannot improve by 1, patience 3: after epoch 4 of 8); the
  // disturbed run must stop after the same epoch as the undisturbed one.
  bool early_stop = false;
  int workers = 2;        // at the start
  std::string then_kill;  // --then-kill: a second worker killed 50 ms after the first
  int grow = 0;           // --grow N in place of --kill (target and fault unused)
};

// An elastic ring keeps going down to this many workers, and grows up to kMaxWorkers.
constexpr int kMinWorkers = 2, kMaxWorkers = 4;

std::string CaseName(const Case& c) {
  const std::string what = c.grow > 0 ? fmt::format("grow {} -> {}", c.workers, c.grow)
                                      : fmt::format("{} {}{}", c.fault, c.target, c.then_kill.empty() ? "" : " then " + c.then_kill);
  return fmt::format("{} {} at {}{}{}{}{}", c.mode, what, c.at, c.from.empty() ? "" : " from " + c.from,
                     c.restart ? ", restarted" : "", c.early_stop ? ", early stopping" : "",
                     c.workers != 2 && c.grow == 0 ? fmt::format(", {} workers", c.workers) : "");
}

bool IsAllreduce(const Case& c) { return c.mode.starts_with("allreduce"); }
bool IsElastic(const Case& c) { return c.mode == "allreduce-elastic"; }

nlohmann::json Update(const std::string& mode) {
  if (mode == "async") return {{"mode", "async"}};
  if (mode == "sync") return {{"mode", "sync"}};
  if (mode == "sync-wait") return {{"mode", "sync"}, {"on_worker_loss", "wait"}};
  if (mode == "sync-shrink") return {{"mode", "sync"}, {"on_worker_loss", "shrink"}};
  return {{"mode", "allreduce"}};
}

// 1 ps + 2 workers (2 workers without a ps for allreduce) on synthetic data in `dir` (10 classes,
// two of them alike, so accuracy sits near 0.8 and damage shows), with checkpoints.
std::string WriteCluster(const TempDir& dir, const Case& c, bool with_restart) {
  if (!std::filesystem::exists(dir / "train-images-idx3-ubyte")) WriteSyntheticMnist(dir / "", kTrain, kTest, 8, 10);
  static int serial = 0;  // names this run's files apart from the others in `dir`
  const std::string n = std::to_string(++serial);
  const std::vector<int> ports = FreePorts(kMaxWorkers + 1);
  nlohmann::json cluster;
  if (!IsAllreduce(c)) cluster["ps"] = {"127.0.0.1:" + std::to_string(ports[kMaxWorkers])};
  cluster["worker"] = nlohmann::json::array();  // a grown run's next workers are tfctl's to place
  for (int i = 0; i < c.workers; ++i) cluster["worker"].push_back("127.0.0.1:" + std::to_string(ports[i]));
  nlohmann::json train = {{"model", {{"name", "mlp"}, {"init", "glorot_uniform"}}},
                          {"data", dir.path()},
                          {"epochs", kEpochs},
                          {"batch_size", kBatch},
                          {"seed", 3},
                          {"log_every_steps", 5},
                          {"optimizer", {{"type", "adam"}, {"learning_rate", 0.005}}},
                          {"update", Update(c.mode)}};
  if (!IsAllreduce(c)) train["checkpoint"] = {{"dir", dir / ("ckpt-" + n)}, {"every_steps", 60}};
  if (IsElastic(c)) train["elastic"] = {{"min_workers", kMinWorkers}, {"max_workers", kMaxWorkers}, {"commit_every_steps", 10}};
  if (c.early_stop) {
    train["validation_split"] = kHeldOut;
    train["early_stopping"] = {{"monitor", "val_accuracy"}, {"patience", kPatience}, {"min_delta", 1.0}};
  }
  nlohmann::json launch = {{"tfd", kTfd},
                           {"run_dir", dir / "runs"},
                           {"timeouts", {{"peer", kPeerTimeout}, {"reconnect", kReconnectTimeout}, {"startup", kStartupTimeout}}}};
  if (with_restart) {
    const std::string role = c.target == "ps" ? "ps" : "worker";
    launch["restart"] = {{role, "on-failure"}};
    launch["max_restarts"] = 2;
  }
  const std::string path = dir / ("cluster-" + n + ".json");
  WriteFile(path, nlohmann::json{{"name", "chaos"}, {"cluster", cluster}, {"train", train}, {"launch", launch}}.dump(2));
  return path;
}

// The newest run folder under dir/runs.
std::string NewestRun(const TempDir& dir) {
  std::string newest;
  std::filesystem::file_time_type when{};
  for (const auto& e : std::filesystem::directory_iterator(dir / "runs"))
    if (newest.empty() || e.last_write_time() > when) newest = e.path().string(), when = e.last_write_time();
  return newest;
}

std::string LastLine(const std::string& path) {
  std::string text = ReadAll(path), last;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) last = line;
  return last;
}

// A task's final `field` (test_accuracy, global_step) in a run folder's summary.json, or -1.
double Result(const nlohmann::json& summary, const std::string& task, const std::string& field) {
  for (const auto& t : summary["tasks"])
    if (t["task"] == task && t.contains(field)) return t[field].get<double>();
  return -1;
}
double ChiefResult(const nlohmann::json& summary) { return Result(summary, "worker:0", "test_accuracy"); }
// The run's last global step: the ps's (which outlives every worker), else the chief's.
double FinalStep(const nlohmann::json& summary) {
  const double ps = Result(summary, "ps:0", "global_step");
  return ps >= 0 ? ps : Result(summary, "worker:0", "global_step");
}

// The global steps the undisturbed job takes: each worker's steps per epoch, times the workers in
// async mode (each push is a step), once in sync and allreduce.
int PlannedSteps(const Case& c) {
  const int per_worker = kEpochs * (kTrain / c.workers / kBatch);
  return c.mode == "async" ? 2 * per_worker : per_worker;
}

// Seconds from the fault to the first event of another task that shows the loss (a peer lost,
// given up on, a quorum change, the run ended, a task's error), or -1.
double DetectedAfter(const std::string& run, double sent_at, const std::string& hit) {
  std::istringstream in(ReadAll(run + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_discarded() || !e.contains("ts") || e.value("task", "") == hit) continue;
    const std::string event = e.value("event", "");
    if (e["ts"].get<double>() >= sent_at &&
        (event == "peer_lost" || event == "gave_up" || event == "quorum" || event == "run_ended" || event == "error" ||
         event == "membership"))
      return e["ts"].get<double>() - sent_at;
  }
  return -1;
}

// Every event named `event` in the run folder's metrics.jsonl, in order.
std::vector<nlohmann::json> RunEvents(const std::string& run, const std::string& event) {
  std::vector<nlohmann::json> found;
  std::istringstream in(ReadAll(run + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (!e.is_discarded() && e.value("event", "") == event) found.push_back(std::move(e));
  }
  return found;
}

// The epoch after which the chief stopped early (its last early_stopping event: a restarted
// chief's, if it was restarted), or -1.
int StopEpoch(const std::string& run) {
  int epoch = -1;
  for (const nlohmann::json& e : RunEvents(run, "early_stopping"))
    if (e.value("task", "") == "worker:0") epoch = e.value("epoch", -1);
  return epoch;
}

struct Undisturbed {
  double accuracy = -1;
  double final_step = -1;
  int stop_epoch = -1;  // early stopping's cases
};

// The undisturbed run of each mode's job (with or without early stopping), once per test binary.
Undisturbed Baseline(const TempDir& dir, const Case& disturbed) {
  static std::map<std::string, Undisturbed> baselines;
  const std::string key = disturbed.mode + (disturbed.early_stop ? " early stopping" : "") + fmt::format(" {} workers", disturbed.workers);
  if (auto it = baselines.find(key); it != baselines.end()) return it->second;
  Case c{disturbed.mode, "worker:1", "", "", "", "kill"};
  c.early_stop = disturbed.early_stop;
  c.workers = disturbed.workers;
  const std::string file = WriteCluster(dir, c, false);
  Process p({kTfctl, "up", file}, {}, dir / ("baseline-" + key + ".out"), dir / ("baseline-" + key + ".err"));
  auto code = p.Wait(180s);
  INFO("baseline " << key << ":\n" << p.out() << p.err());
  REQUIRE(code.has_value());
  REQUIRE(*code == 0);
  const std::string run = NewestRun(dir);
  const nlohmann::json summary = nlohmann::json::parse(ReadAll(run + "/summary.json"));
  Undisturbed u{ChiefResult(summary), FinalStep(summary), StopEpoch(run)};
  REQUIRE(u.accuracy > 0.5);  // the job learns: a disturbed run has something to lose
  if (c.early_stop) REQUIRE(u.stop_epoch == kPatience + 1);  // the rule ends the job before its last epoch
  return baselines[key] = u;
}

// Whether the mode promises that the run finishes despite the fault (docs/reliability.md).
bool Survives(const Case& c) {
  if (c.grow > 0) return true;  // an elastic run takes a new worker in
  // An elastic ring re-forms without what it lost, down to min_workers.
  if (IsElastic(c)) return c.workers - (c.then_kill.empty() ? 1 : 2) >= kMinWorkers;
  if (IsAllreduce(c)) return false;  // a ring has no spare, and takes no restarted member back
  // Restarted, a worker is back at once; sync with on_worker_loss fail fails the step before it is.
  if (c.restart) return !(c.mode == "sync" && c.target != "ps");
  // A stop outlasts the peer timeout but not the reconnect timeout: the task is lost, then back
  // before it is given up on, which only a sync step under on_worker_loss fail cannot wait for.
  if (c.fault == "stop") return !(c.mode == "sync" && c.target != "ps");
  const bool other_worker = c.target == "worker:1";
  return other_worker && (c.mode == "async" || c.mode == "sync-shrink");
}

std::string TargetTask(const Case& c) {
  if (c.target == "ps") return "ps:0";
  if (c.target == "chief") return "worker:0";
  return c.target;
}

// `suffix`: the sweep's table goes to the file named with ".sweep" added.
void AppendRow(const std::string& row, const std::string& suffix = "") {
  const char* table = std::getenv("TFD_CHAOS_TABLE");
  if (table == nullptr || *table == '\0') return;
  std::ofstream(table + suffix, std::ios::app) << row << "\n";
}

void RunCase(const TempDir& dir, const Case& c) {
  INFO("case: " << CaseName(c));
  const Undisturbed baseline = Survives(c) ? Baseline(dir, c) : Undisturbed{};
  const std::string file = WriteCluster(dir, c, c.restart);
  std::vector<std::string> argv = {kTfctl, "chaos", file, "--at", c.at};
  if (c.grow > 0) argv.insert(argv.end(), {"--grow", std::to_string(c.grow)});
  else argv.insert(argv.end(), {"--kill", c.target});
  if (!c.then_kill.empty()) argv.insert(argv.end(), {"--then-kill", c.then_kill});
  if (!c.from.empty()) argv.insert(argv.end(), {"--from", c.from});
  if (c.fault == "term") argv.insert(argv.end(), {"--signal", "term"});
  if (c.fault == "stop") argv.insert(argv.end(), {"--stop", fmt::format("{}", kPeerTimeout + 1)});
  const std::string out = dir / "chaos.out", err = dir / "chaos.err";
  Process p(argv, {}, out, err);
  // tfctl's own deadline is max(startup, 2 x peer + reconnect) + stop + 30 s after the fault; this
  // one only keeps a broken tfctl from hanging the suite.
  auto code = p.Wait(240s);
  INFO("tfctl chaos:\n" << p.out() << "\n" << p.err());
  REQUIRE(code.has_value());
  const std::string run = NewestRun(dir);
  REQUIRE(std::filesystem::exists(run + "/chaos.json"));
  const nlohmann::json chaos = nlohmann::json::parse(ReadAll(run + "/chaos.json"));
  const nlohmann::json summary = nlohmann::json::parse(ReadAll(run + "/summary.json"));
  INFO("chaos.json: " << chaos.dump(2));
  REQUIRE(chaos["fault"]["sent"].get<bool>());  // the trigger came: the case ran at its phase
  CHECK(chaos["survival_promised"].get<bool>() == Survives(c));
  CHECK(WaitUntilNoneLeft(run, 10s));        // no process of the run is left

  const std::string hit = c.grow > 0 ? "" : TargetTask(c);
  std::map<std::string, int> exits;
  std::vector<std::string> outcome;
  // Every task of the cluster has its outcome, and a grown run's new workers too.
  REQUIRE(chaos["tasks"].size() == static_cast<std::size_t>(std::max(c.workers, c.grow) + (IsAllreduce(c) ? 0 : 1)));
  if (!c.then_kill.empty()) CHECK(chaos["fault"]["then_kill"]["sent_at"].is_number());
  for (const auto& t : chaos["tasks"]) {
    const std::string task = t["task"];
    const int exit_code = t["exit_code"];
    exits[task] = exit_code;
    CHECK_FALSE(t.value("past_deadline", false));
    const std::string last = LastLine(run + "/" + task + ".log");
    if (c.grow > 0) CHECK(exit_code == 0);  // the joiner too
    if (task != hit && task != c.then_kill && exit_code != 0) {
      INFO(task << " exited " << exit_code << "; its last line: " << last);
      CHECK((config::MentionsTask(last, hit) || (!c.then_kill.empty() && config::MentionsTask(last, c.then_kill))));
      CHECK(last.find("step") != std::string::npos);
    }
    outcome.push_back(fmt::format("{} {}{}", task, exit_code, t.value("restarts", 0) > 0 ? fmt::format(" ({} restart)", t["restarts"].get<int>()) : ""));
  }
  CHECK(*code == (chaos["verdict"] == "kept" ? 0 : 1));
  CHECK(chaos["verdict"] == "kept");
  // An elastic ring that lost its chief ends with worker:1 as its rank 0.
  const bool chief_lost = IsElastic(c) && hit == "worker:0";
  double accuracy = chief_lost ? Result(summary, "worker:1", "test_accuracy") : ChiefResult(summary);
  if (Survives(c)) {
    CHECK(exits[chief_lost ? "worker:1" : "worker:0"] == 0);
    if (!IsAllreduce(c)) CHECK(exits["ps:0"] == 0);
    INFO("accuracy " << accuracy << " against undisturbed " << baseline.accuracy);
    CHECK(std::abs(accuracy - baseline.accuracy) <= 0.02 + 1e-9);  // within 2 points, inclusive
  }
  if (Survives(c) && c.restart && c.target == "ps") {
    // A restarted ps ends the run as an undisturbed one would, whenever it was hit: every worker
    // finishes, and none is waited for and given up on. A worker's DONE that a live worker had heard
    // of before the kill comes back in that worker's INIT; one nobody had heard of yet is still
    // unanswered, so its sender tells the restarted ps again (docs/reliability.md).
    for (const auto& [task, exit_code] : exits) CHECK(exit_code == 0);
    CHECK(RunEvents(run, "gave_up").empty());
  }
  if (IsElastic(c) && Survives(c)) {
    // The ring ended with the workers it re-formed (or grew) to, each of them told so.
    const int last_size = c.grow > 0 ? c.grow : c.workers - (c.then_kill.empty() ? 1 : 2);
    const std::vector<nlohmann::json> changes = RunEvents(run, "membership");
    REQUIRE_FALSE(changes.empty());
    CHECK(changes.back().value("workers", 0) == last_size);
    if (c.grow > 0) CHECK(RunEvents(run, "joined").size() == static_cast<std::size_t>(c.grow - c.workers));
  }
  if (c.early_stop && Survives(c)) {
    INFO("the disturbed run stopped after epoch " << StopEpoch(run) << ", the undisturbed one after " << baseline.stop_epoch);
    CHECK(StopEpoch(run) == baseline.stop_epoch);
  }
  const double detected = DetectedAfter(run, chaos["fault"]["sent_at"].get<double>(), hit);
  const double final_step = chief_lost ? (exits["worker:1"] == 0 ? Result(summary, "worker:1", "global_step") : -1)
                                        : (exits["worker:0"] == 0 ? FinalStep(summary) : -1);
  // An early-stopping job's undisturbed steps are the undisturbed run's, not the planned epochs'.
  const double planned = c.early_stop && baseline.final_step >= 0 ? baseline.final_step : PlannedSteps(c);
  // An elastic ring's steps per epoch change with its size: what it lost is not a count of steps.
  const std::string steps_lost = final_step < 0 ? "run ended" : IsElastic(c) ? "re-sharded" : fmt::format("{:.0f}", planned - final_step);
  const std::string hit_column = c.grow > 0 ? fmt::format("{} workers", c.workers)
                                            : c.target + (c.then_kill.empty() ? "" : ", then " + c.then_kill) + (c.restart ? " (restarted)" : "");
  const std::string fault_column = c.grow > 0          ? fmt::format("grow to {}", c.grow)
                                   : c.fault == "stop" ? fmt::format("SIGSTOP {:.0f} s", kPeerTimeout + 1)
                                   : c.fault == "term" ? "SIGTERM"
                                                       : (c.then_kill.empty() ? "kill -9" : "kill -9, 50 ms apart");
  AppendRow(fmt::format("| {} | {} | {} (`{}`{}) | {} | {} | {} | {} | {} |", c.mode, hit_column, c.phase,
                           c.at, c.from.empty() ? "" : " from " + c.from, fault_column,
                           fmt::format("{}", fmt::join(outcome, ", ")), detected >= 0 ? fmt::format("{:.2f} s", detected) : "–",
                           steps_lost, accuracy >= 0 ? fmt::format("{:.4f}", accuracy) : "–"));
}

std::vector<Case> ElasticCases(bool full);

// The short set: each role, each phase, each fault and each mode at least once.
std::vector<Case> ShortSet() {
  std::vector<Case> cases = {
      {"async", "worker:1", "mid-epoch", "step:20", "", "kill"},
      {"async", "chief", "mid-epoch", "step:20", "", "kill"},
      {"async", "ps", "mid-epoch", "step:20", "worker:0", "kill"},
      {"async", "ps", "mid-epoch", "step:20", "worker:0", "kill", true},
      {"async", "chief", "before the ps is initialised", "start", "", "kill"},
      {"async", "worker:1", "during the first pull", "ready", "ps:0", "kill"},
      {"async", "worker:1", "mid-epoch", "step:20", "", "stop"},
      {"async", "worker:1", "mid-epoch", "step:20", "", "term"},
      {"sync", "worker:1", "mid-epoch", "step:20", "", "kill"},
      {"sync-wait", "worker:1", "mid-epoch", "step:20", "", "kill"},
      {"sync-shrink", "worker:1", "mid-epoch", "step:20", "", "kill"},
      {"sync-wait", "chief", "during a checkpoint write", "checkpoint_start:2", "", "kill", true},
      {"async", "ps", "after DONE was sent", "worker_done:1", "ps:0", "kill"},
      {"allreduce", "worker:1", "mid-epoch", "step:20", "", "kill"},
      // Restarts that resume (issue 30): the ps lost during a checkpoint write, and while early
      // stopping counts its patience.
      {"async", "ps", "during a checkpoint write", "checkpoint_start:2", "worker:0", "kill", true},
      {"async", "ps", "after DONE was sent", "worker_done:1", "ps:0", "kill", true},
      {"sync", "ps", "while early stopping waits", "epoch:2", "worker:0", "kill", true, true},
      {"async", "chief", "while early stopping waits", "epoch:2", "", "kill", true, true},
  };
  for (const Case& c : ElasticCases(false)) cases.push_back(c);
  return cases;
}

// The restarts that resume the run where the undisturbed one would go: a ps hit during the chief's
// checkpoint write, right after it counted the first worker's DONE (whichever worker's it was: the
// order varies from run to run), and while early stopping counts its patience (each in the modes
// whose promise covers it), and the chief restarted alone while it counts (async: it resumes its
// count from the record of its last judgement, written before its `epoch` event).
std::vector<Case> RestartCases() {
  return {
      {"async", "ps", "during a checkpoint write", "checkpoint_start:2", "worker:0", "kill", true},
      {"sync", "ps", "during a checkpoint write", "checkpoint_start:2", "worker:0", "kill", true},
      {"async", "ps", "after DONE was sent", "worker_done:1", "ps:0", "kill", true},
      {"sync", "ps", "after DONE was sent", "worker_done:1", "ps:0", "kill", true},
      {"async", "ps", "while early stopping waits", "epoch:2", "worker:0", "kill", true, true},
      {"sync", "ps", "while early stopping waits", "epoch:2", "worker:0", "kill", true, true},
      {"async", "chief", "while early stopping waits", "epoch:2", "", "kill", true, true},
  };
}

// The elastic ring (issue 30): a worker lost, a second one lost while the ring re-forms without the
// first, a worker joining at a commit, and the chief lost (its next rank takes rank 0).
std::vector<Case> ElasticCases(bool full) {
  Case lost{"allreduce-elastic", "worker:1", "mid-epoch", "step:20", "", "kill"};
  lost.workers = 3;
  Case second{"allreduce-elastic", "worker:3", "mid-epoch, then while the ring re-forms", "step:20", "", "kill"};
  second.workers = 4;
  second.then_kill = "worker:2";
  Case grow{"allreduce-elastic", "", "mid-epoch", "step:20", "worker:0", ""};
  grow.grow = 3;
  std::vector<Case> cases = {lost, second, grow};
  if (full) {
    Case chief = lost;
    chief.target = "chief";
    cases.push_back(chief);
  }
  return cases;
}

// Every mode x role x phase x fault (restarts once per role and mode).
std::vector<Case> FullMatrix() {
  std::vector<Case> cases;
  for (const std::string mode : {"async", "sync", "sync-wait", "sync-shrink", "allreduce"}) {
    const bool ar = mode == "allreduce";
    std::vector<std::string> targets = {"chief", "worker:1"};
    if (!ar) targets.push_back("ps");
    for (const std::string& target : targets) {
      const std::string self = target == "ps" ? "ps:0" : target == "chief" ? "worker:0" : target;
      std::vector<std::tuple<std::string, std::string, std::string>> phases = {
          {"before the ps is initialised", "start", ""},
          {"during the first pull", "ready", ar ? "worker:0" : "ps:0"},
          {"mid-epoch", "step:20", target == "ps" ? "worker:0" : ""},
      };
      if (!ar) phases.push_back({"during a checkpoint write", "checkpoint_start:2", "worker:0"});
      if (!ar) phases.push_back({"after DONE was sent", "worker_done:1", "ps:0"});
      for (const auto& [phase, at, from] : phases)
        for (const std::string fault : {"kill", "stop", "term"}) cases.push_back({mode, target, phase, at, from == self ? "" : from, fault});
      cases.push_back({mode, target, "mid-epoch", "step:20", target == "ps" ? "worker:0" : "", "kill", true});
    }
  }
  for (const Case& c : RestartCases()) cases.push_back(c);
  for (const Case& c : ElasticCases(true)) cases.push_back(c);
  return cases;
}

TEST_CASE("chaos: every task ends or recovers within its deadline, whatever is lost", "[chaos]") {
  const char* which = std::getenv("TFD_CHAOS");
  const std::string set = which == nullptr ? "" : which;
  if (set == "sweep") return;  // the sweep's case alone (below)
  TempDir dir;
  // TFD_CHAOS=restart: only the restart cases (to run them again and again).
  // TFD_CHAOS=elastic: only the elastic ring's cases.
  for (const Case& c : set == "full"      ? FullMatrix()
                       : set == "restart" ? RestartCases()
                       : set == "elastic" ? ElasticCases(true)
                                          : ShortSet()) {
    DYNAMIC_SECTION(CaseName(c)) { RunCase(dir, c); }
  }
}

// The sweep's case (issue 30): `tfctl sweep` (its own process is the coordinator, with one worker,
// so trials run in the same order every time) killed with SIGKILL once trials.jsonl holds an epoch
// after which its trial goes on and the trial's checkpoint is committed; its worker must end within
// the deadline (tfctl's death sends it SIGTERM) saying why, and `tfctl sweep --resume RUN` must
// end with the undisturbed sweep's leaderboard, ends and best trial, each epoch reported once, the
// trial killed mid-run resumed from its checkpoint.
constexpr int kSweepEpochs = 4;
constexpr auto kSweepWorkerDeadline = 30s;  // for the worker to find its coordinator gone and end

std::string OnlyFolderUnder(const std::string& root) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(root)) found.push_back(e.path().string());
  REQUIRE(found.size() == 1);
  return found[0];
}

double NowUnix() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::unique_ptr<Process> StartSweep(const TempDir& dir, std::vector<std::string> args, const std::string& tag) {
  args.insert(args.begin(), {kTfctl, "sweep"});
  auto p = std::make_unique<Process>(args, std::vector<std::string>{}, dir / ("sweep-" + tag + ".out"), dir / ("sweep-" + tag + ".err"));
  REQUIRE(p->started());
  return p;
}

void ExpectSweepExit0(Process& p, const std::string& what) {
  const std::optional<int> code = p.Wait(300s);
  INFO(what << ":\n" << p.out() << "\n" << p.err());
  REQUIRE(code.has_value());
  REQUIRE(*code == 0);
}

void RunSweepCase(const TempDir& dir) {
  // About 4,800 steps an epoch: the kill lands while the chosen trial still has epochs to run.
  const std::string data = dir / "sweep-data";
  std::filesystem::create_directories(data);
  WriteSyntheticMnist(data + "/", 48000, 200, /*side=*/16);
  const std::string file = dir / "sweep.json";
  WriteFile(file, AshaSweepFile(data, kSweepEpochs).dump(2));

  auto ref = StartSweep(dir, {file, "--workers", "1", "--run-dir", dir / "sweep-ref"}, "ref");
  ExpectSweepExit0(*ref, "the undisturbed sweep");
  const std::string ref_run = OnlyFolderUnder(dir / "sweep-ref");
  const auto ref_epochs = SweepEpochsOnce(ref_run + "/trials.jsonl");
  const auto ref_ends = SweepEnds(ref_run + "/trials.jsonl");
  REQUIRE(ref_ends.size() == 5);
  const auto [kill_trial, kill_epoch] = SweepKillPoint(ref_run + "/trials.jsonl", kSweepEpochs);
  REQUIRE(kill_trial >= 1);

  auto hit = StartSweep(dir, {file, "--workers", "1", "--run-dir", dir / "sweep-hit"}, "hit");
  std::string run;
  auto due = [&] {
    if (run.empty()) {
      std::error_code ec;
      if (std::filesystem::is_empty(dir / "sweep-hit", ec) || ec) return false;
      run = OnlyFolderUnder(dir / "sweep-hit");
    }
    bool seen = false;
    for (const nlohmann::json& l : ReadJsonLines(run + "/trials.jsonl"))
      seen |= l["event"] == "epoch" && l["trial"] == kill_trial && l["epoch"] == kill_epoch;
    std::error_code ec;
    bool committed = false;
    for (const auto& e : std::filesystem::directory_iterator(run + "/trials/" + std::to_string(kill_trial) + "/ckpt", ec))
      committed |= e.path().extension() == ".tfdckpt";
    return seen && committed;
  };
  bool ready = false;
  for (auto until = std::chrono::steady_clock::now() + 300s; !(ready = due()) && std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(10ms);
  INFO("tfctl sweep:\n" << hit->out() << "\n" << hit->err());
  REQUIRE(ready);
  // The worker's pid, from the run folder (tfctl writes workers.txt as it starts them).
  int index = -1, worker_pid = -1;
  std::istringstream(ReadAll(run + "/workers.txt")) >> index >> worker_pid;
  REQUIRE(worker_pid > 0);
  hit->Signal(SIGKILL);
  const double sent_at = NowUnix();
  REQUIRE(hit->Wait(30s) == std::optional<int>(128 + SIGKILL));
  // Its worker (no longer tfctl's child, so its code is not ours to read) ends by itself.
  double worker_gone_after = -1;
  for (auto until = std::chrono::steady_clock::now() + kSweepWorkerDeadline; std::chrono::steady_clock::now() < until;) {
    if (::kill(worker_pid, 0) != 0) {
      worker_gone_after = NowUnix() - sent_at;
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  const std::string worker_last = LastLine(run + "/worker-0.log");
  INFO("worker:0's last line: " << worker_last);
  REQUIRE(worker_gone_after >= 0);
  // It says why: tfctl's workers get SIGTERM when tfctl dies (PR_SET_PDEATHSIG), or, had that been
  // missed, they find their coordinator gone.
  const nlohmann::json last_event = nlohmann::json::parse(worker_last, nullptr, false);
  REQUIRE(last_event.is_object());
  const std::string why = last_event.value("message", "");
  CHECK((why == "stopped by a signal" || why.find("coordinator") != std::string::npos));
  CHECK(WaitUntilNoneLeft(run, 10s));
  REQUIRE(SweepEnds(run + "/trials.jsonl").size() < 5);  // the kill came before the sweep's end

  auto resumed = StartSweep(dir, {"--resume", run}, "resumed");
  ExpectSweepExit0(*resumed, "tfctl sweep --resume");
  std::smatch counts;
  const std::string out = resumed->out();
  REQUIRE(std::regex_search(out, counts, std::regex(R"((\d+) trials ended, (\d+) resumed \((\d+) from a checkpoint\), (\d+) not started yet)")));
  const int done = std::stoi(counts[1]), again = std::stoi(counts[2]), from_checkpoint = std::stoi(counts[3]), pending = std::stoi(counts[4]);
  CHECK(done + again + pending == 5);
  CHECK(from_checkpoint >= 1);
  CHECK(WaitUntilNoneLeft(run, 10s));

  // The promise: every epoch once, with the undisturbed metrics; the same ends, leaderboard, winner.
  CHECK(SweepEpochsOnce(run + "/trials.jsonl") == ref_epochs);
  const auto ends = SweepEnds(run + "/trials.jsonl");
  REQUIRE(ends.size() == 5);
  bool same_ends = true;
  for (const auto& [id, end] : ends) {
    INFO("trial " << id << ": " << end.dump() << " vs " << ref_ends.at(id).dump());
    CHECK(end["status"] == ref_ends.at(id)["status"]);
    CHECK(end["epoch"] == ref_ends.at(id)["epoch"]);
    CHECK(end["params"] == ref_ends.at(id)["params"]);
    same_ends &= end["status"] == ref_ends.at(id)["status"] && end["epoch"] == ref_ends.at(id)["epoch"];
  }
  const bool same_board = LeaderboardRowsButAttempts(ReadAll(run + "/leaderboard.csv")) == LeaderboardRowsButAttempts(ReadAll(ref_run + "/leaderboard.csv"));
  INFO("leaderboard.csv resumed:\n" << ReadAll(run + "/leaderboard.csv") << "undisturbed:\n" << ReadAll(ref_run + "/leaderboard.csv"));
  CHECK(same_board);
  CHECK(nlohmann::json::parse(ReadAll(run + "/best_trial.json")) == nlohmann::json::parse(ReadAll(ref_run + "/best_trial.json")));
  int resume_epoch = -1;
  for (const nlohmann::json& l : ReadJsonLines(run + "/trials.jsonl"))
    if (l["event"] == "placed" && l["trial"] == kill_trial && l.value("resume_epoch", 0) >= 1) resume_epoch = l["resume_epoch"].get<int>();
  CHECK(resume_epoch >= 1);  // the trial killed mid-run went on after a committed epoch

  AppendRow(fmt::format("| ASHA, 5 trials, 1 worker | coordinator (tfctl sweep) | trial {}'s epoch {} committed (`trials.jsonl`) | kill -9, "
                        "then `tfctl sweep --resume` | tfctl 137, resumed tfctl 0 | worker:0 ended {:.2f} s after (\"{}\") | trial {} from epoch {}; "
                        "{} ended, {} resumed ({} from a checkpoint), {} not started | {} |",
                        kill_trial, kill_epoch, worker_gone_after, why, kill_trial, resume_epoch, done, again, from_checkpoint, pending,
                        same_board && same_ends ? "the undisturbed one's" : "differs"),
            ".sweep");
}

TEST_CASE("chaos: a sweep whose coordinator (tfctl sweep) is killed mid-sweep resumes to the undisturbed leaderboard", "[chaos]") {
  const char* which = std::getenv("TFD_CHAOS");
  const std::string set = which == nullptr ? "" : which;
  if (set == "restart" || set == "elastic") return;  // the sets that name other cases only
  TempDir dir;
  RunSweepCase(dir);
}

}  // namespace
}  // namespace tfd::testing::chaos_test
