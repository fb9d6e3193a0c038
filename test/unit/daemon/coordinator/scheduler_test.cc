#include <cmath>
#include <limits>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/config/sweep.h"
#include "daemon/coordinator/leaderboard.h"
#include "daemon/coordinator/sweep_scheduler.h"

namespace tfd::coordinator {
namespace {

config::SweepSpec Spec(bool asha) {
  Result<config::SweepSpec> s = config::ParseSweepSpec(
      std::string(R"({"job": {"model": "softmax", "data": "d", "epochs": 9, "batch_size": 10, "validation_split": 100, "optimizer": {"type": "sgd", "learning_rate": 0.1}},
                      "space": {"optimizer.learning_rate": [0.1, 0.2, 0.3, 0.4]}, "objective": {"metric": "val_accuracy"})") +
          (asha ? R"(, "scheduler": "asha"})" : "}"),
      "s.json");
  REQUIRE(s.ok());
  return *s;
}

using Next = SweepScheduler::Next;

TEST_CASE("the scheduler places trials in order, at most `parallel` at once, and finishes when all ended", "[unit][sweep]") {
  config::SweepSpec spec = Spec(false);
  SweepScheduler s(spec, config::GenerateTrials(spec), 2);
  SweepScheduler::Assignment a, b, c;
  REQUIRE(s.NextFor(0, 0, &a) == Next::kAssigned);
  REQUIRE(s.NextFor(1, 0, &b) == Next::kAssigned);
  CHECK(a.trial == 0);
  CHECK(b.trial == 1);
  CHECK(s.NextFor(2, 0, &c) == Next::kWait);  // two run already
  CHECK_FALSE(s.OnEpoch(0, 0, 1, {{"val_accuracy", 0.5}}, 0));
  s.OnEnd(0, 0, true, false, "", {{"val_accuracy", 0.6}}, 0);
  s.OnEnd(1, 1, false, false, "no data", {}, 0);
  CHECK(s.trials()[1].status == TrialStatus::kFailed);
  CHECK(s.trials()[1].reason == "no data");
  REQUIRE(s.NextFor(2, 0, &c) == Next::kAssigned);
  CHECK(c.trial == 2);
  CHECK(s.best() == 0);
  CHECK(s.trials()[0].best == 0.5);  // the epoch's value: the end's only counts without one
  s.OnEnd(2, 2, true, false, "", {}, 0);
  REQUIRE(s.NextFor(0, 0, &c) == Next::kAssigned);
  CHECK_FALSE(s.finished());
  s.OnEnd(0, 3, true, false, "", {}, 0);
  CHECK(s.finished());
  CHECK(s.NextFor(0, 0, &c) == Next::kFinished);
  CHECK_FALSE(s.TakeLines().empty());
  CHECK(s.TakeLines().empty());
}

TEST_CASE("a lost worker's trial goes first to the next idle worker; the old worker's late reports change nothing", "[unit][sweep]") {
  config::SweepSpec spec = Spec(false);
  SweepScheduler s(spec, config::GenerateTrials(spec), 2);
  SweepScheduler::Assignment a, b, c;
  REQUIRE(s.NextFor(0, 0, &a) == Next::kAssigned);
  REQUIRE(s.NextFor(1, 0, &b) == Next::kAssigned);
  s.OnWorkerLost(0, "killed", 0);
  CHECK(s.trials()[0].status == TrialStatus::kPaused);
  s.OnEnd(1, 1, true, false, "", {}, 0);
  REQUIRE(s.NextFor(1, 0, &c) == Next::kAssigned);
  CHECK(c.trial == 0);    // before trials 2 and 3
  CHECK(c.attempt == 1);  // the second placement
  CHECK(s.OnEpoch(0, 0, 1, {{"val_accuracy", 0.9}}, 0));  // worker 0 no longer runs it: stop, ignored
  CHECK_FALSE(s.trials()[0].metric.has_value());
  CHECK_FALSE(s.OnEpoch(1, 0, 1, {{"val_accuracy", 0.4}}, 0));
  CHECK(s.trials()[0].metric == 0.4);
}

TEST_CASE("ASHA stops a trial below the rung's top third; StopAll stops the rest; FailQueued fails the waiting", "[unit][sweep]") {
  config::SweepSpec spec = Spec(true);  // grace 1, eta 3, max 9: rungs 1 and 3
  SweepScheduler s(spec, config::GenerateTrials(spec), 4);
  SweepScheduler::Assignment x;
  for (int w = 0; w < 3; ++w) REQUIRE(s.NextFor(w, 0, &x) == Next::kAssigned);
  CHECK_FALSE(s.OnEpoch(0, 0, 1, {{"val_accuracy", 0.8}}, 0));
  CHECK(s.OnEpoch(1, 1, 1, {{"val_accuracy", 0.5}}, 0));  // n=2, keep 1
  CHECK(s.trials()[1].reason == "pruned by ASHA at rung epoch 1");
  s.OnEnd(1, 1, false, true, "stopped", {}, 0);
  CHECK(s.trials()[1].status == TrialStatus::kStopped);
  s.StopAll(0);
  CHECK(s.trials()[3].status == TrialStatus::kStopped);  // never started
  CHECK(s.OnEpoch(0, 0, 2, {{"val_accuracy", 0.9}}, 0));  // told to stop at its next epoch
  CHECK(s.NextFor(1, 0, &x) == Next::kWait);
  s.OnEnd(0, 0, false, true, "", {}, 0);
  s.OnWorkerLost(2, "gone", 0);
  CHECK(s.trials()[2].status == TrialStatus::kStopped);
  CHECK(s.finished());

  SweepScheduler f(spec, config::GenerateTrials(spec), 4);
  f.FailQueued("no worker left to run it", 0);
  CHECK(f.finished());
  CHECK(f.trials()[0].status == TrialStatus::kFailed);
  CHECK(f.best() == -1);
}

TEST_CASE("a re-placed trial resumes after its last reported epoch whose checkpoint came first; no epoch is recorded twice",
          "[unit][sweep]") {
  config::SweepSpec spec = Spec(false);
  SweepScheduler s(spec, config::GenerateTrials(spec), 2);
  SweepScheduler::Assignment a, b;
  REQUIRE(s.NextFor(0, 0, &a) == Next::kAssigned);
  CHECK(a.resume_epoch == 0);
  // Epochs 1 and 2: each checkpoint arrives before its report, which commits it.
  CHECK(s.OnCheckpoint(0, 0, 1));
  CHECK(s.trials()[0].checkpoint_epoch == 0);  // pending until epoch 1 is reported
  CHECK_FALSE(s.OnEpoch(0, 0, 1, {{"val_accuracy", 0.5}}, 0));
  CHECK(s.trials()[0].checkpoint_epoch == 1);
  CHECK(s.OnCheckpoint(0, 0, 2));
  CHECK_FALSE(s.OnEpoch(0, 0, 2, {{"val_accuracy", 0.6}}, 0));
  CHECK(s.trials()[0].checkpoint_epoch == 2);
  CHECK_FALSE(s.OnCheckpoint(1, 0, 3));  // not worker 1's trial
  CHECK_FALSE(s.OnCheckpoint(0, 0, 2));  // epoch 2 is reported already
  CHECK_FALSE(s.OnCheckpoint(0, 7, 1));  // no such trial
  // Epoch 3's checkpoint arrives, then the worker is lost before it reports epoch 3.
  CHECK(s.OnCheckpoint(0, 0, 3));
  CHECK(s.trials()[0].pending_checkpoint == 3);
  s.TakeLines();
  s.OnWorkerLost(0, "killed", 0);
  CHECK(s.trials()[0].pending_checkpoint == 0);  // never committed
  CHECK(s.trials()[0].checkpoint_epoch == 2);
  CHECK(s.trials()[0].epoch == 2);
  REQUIRE(s.NextFor(1, 0, &b) == Next::kAssigned);
  CHECK(b.trial == 0);
  CHECK(b.attempt == 1);
  CHECK(b.resume_epoch == 2);  // epoch 3 runs again: it was never reported
  std::vector<std::string> lines = s.TakeLines();
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].find("\"worker_lost\"") != std::string::npos);
  CHECK(lines[0].find("to resume after epoch 2") != std::string::npos);
  CHECK(lines[1].find("\"placed\"") != std::string::npos);
  CHECK(lines[1].find("\"resume_epoch\": 2") != std::string::npos);
  // The lost worker's late report of epoch 3 changes nothing; the new worker's report counts once.
  CHECK(s.OnEpoch(0, 0, 3, {{"val_accuracy", 0.99}}, 0));
  CHECK(s.trials()[0].metric == 0.6);
  CHECK(s.OnCheckpoint(1, 0, 3));
  CHECK_FALSE(s.OnEpoch(1, 0, 3, {{"val_accuracy", 0.7}}, 0));
  CHECK(s.trials()[0].epoch == 3);
  CHECK(s.trials()[0].checkpoint_epoch == 3);
  CHECK(s.trials()[0].metric == 0.7);
  CHECK(s.TakeLines().size() == 1);  // one epoch line
  CHECK_FALSE(s.OnEpoch(1, 0, 3, {{"val_accuracy", 0.1}}, 0));  // a repeat: ignored
  CHECK(s.trials()[0].metric == 0.7);
  CHECK(s.TakeLines().empty());
  s.OnEnd(1, 0, true, false, "", {}, 0);
  CHECK(s.trials()[0].status == TrialStatus::kDone);
}

TEST_CASE("a trial lost before any checkpoint starts again at epoch 1; the epochs it reported are not recorded again", "[unit][sweep]") {
  config::SweepSpec spec = Spec(false);
  SweepScheduler s(spec, config::GenerateTrials(spec), 1);
  SweepScheduler::Assignment a, b;
  REQUIRE(s.NextFor(0, 0, &a) == Next::kAssigned);
  CHECK_FALSE(s.OnEpoch(0, 0, 1, {{"val_accuracy", 0.5}}, 0));  // no checkpoint came first
  s.OnWorkerLost(0, "killed", 0);
  REQUIRE(s.NextFor(1, 0, &b) == Next::kAssigned);
  CHECK(b.resume_epoch == 0);
  s.TakeLines();
  CHECK_FALSE(s.OnEpoch(1, 0, 1, {{"val_accuracy", 0.4}}, 0));
  CHECK(s.TakeLines().empty());
  CHECK(s.trials()[0].metric == 0.5);
  CHECK_FALSE(s.OnEpoch(1, 0, 2, {{"val_accuracy", 0.8}}, 0));
  CHECK(s.TakeLines().size() == 1);
  CHECK(s.trials()[0].epoch == 2);
}

TEST_CASE("a NaN or infinite metric gives trials.jsonl lines that parse, the number written as null", "[unit][sweep][json]") {
  config::SweepSpec spec = Spec(false);
  SweepScheduler s(spec, config::GenerateTrials(spec), 1);
  SweepScheduler::Assignment a;
  REQUIRE(s.NextFor(0, 12.3456, &a) == Next::kAssigned);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CHECK_FALSE(s.OnEpoch(0, 0, 1, {{"val_accuracy", nan}, {"loss", inf}}, 13));
  s.OnEnd(0, 0, false, false, "loss went to \"inf\"\n", {{"loss", -inf}}, 14);
  std::vector<nlohmann::json> lines;
  for (const std::string& l : s.TakeLines()) {
    INFO(l);
    lines.push_back(nlohmann::json::parse(l, nullptr, /*allow_exceptions=*/false));
    REQUIRE_FALSE(lines.back().is_discarded());
    CHECK(l.find('\n') == std::string::npos);  // one line each
  }
  REQUIRE(lines.size() == 3);
  CHECK(lines[0]["event"] == "placed");
  CHECK(lines[0]["ts"] == 12.346);
  CHECK(lines[0]["params"]["optimizer.learning_rate"] == 0.1);
  CHECK(lines[1]["event"] == "epoch");
  CHECK(lines[1]["val_accuracy"].is_null());
  CHECK(lines[1]["metrics"]["val_accuracy"].is_null());
  CHECK(lines[1]["metrics"]["loss"].is_null());
  CHECK(lines[2]["event"] == "end");
  CHECK(lines[2]["status"] == "FAILED");
  CHECK(lines[2]["reason"] == "loss went to \"inf\"\n");
  CHECK(lines[2]["metrics"]["loss"].is_null());
}

// A regression sweep: the objective is val_mae (lower is better) by default.
config::SweepSpec RegressionSpec(bool asha) {
  Result<config::SweepSpec> s = config::ParseSweepSpec(
      std::string(R"({"job": {"model": "mlp", "data": {"train": "y.csv", "task": "regression", "test_split": 0.2}, "validation_split": 0.2,
                              "epochs": 9, "batch_size": 10, "optimizer": {"type": "sgd", "learning_rate": 0.1}},
                      "space": {"optimizer.learning_rate": [0.1, 0.2, 0.3, 0.4]})") +
          (asha ? R"(, "scheduler": "asha"})" : "}"),
      "s.json");
  INFO(s.status().message());
  REQUIRE(s.ok());
  return *s;
}

Metrics Reported(double val_mae, double test_mae) {
  return {{"loss", 0.1}, {"mae", 0.2}, {"val_mae", val_mae}, {"val_rmse", val_mae * 1.25}, {"test_mae", test_mae}, {"test_rmse", test_mae * 1.25}};
}

TEST_CASE("a regression sweep picks the lowest val_mae, never the test MAE; the leaderboard is sorted by it and shows the test MAE",
          "[unit][sweep][regression]") {
  config::SweepSpec spec = RegressionSpec(false);
  REQUIRE(spec.metric == "val_mae");
  REQUIRE_FALSE(spec.maximize);
  SweepScheduler s(spec, config::GenerateTrials(spec), 4);
  SweepScheduler::Assignment x;
  for (int w = 0; w < 4; ++w) REQUIRE(s.NextFor(w, 0, &x) == Next::kAssigned);
  // Trial 2 has the lowest test MAE but not the lowest validation MAE: it must not win.
  CHECK_FALSE(s.OnEpoch(0, 0, 1, Reported(0.30, 0.31), 0));
  CHECK_FALSE(s.OnEpoch(0, 0, 2, Reported(0.12, 0.14), 0));  // trial 0's best epoch
  CHECK_FALSE(s.OnEpoch(0, 0, 3, Reported(0.15, 0.11), 0));
  CHECK_FALSE(s.OnEpoch(1, 1, 1, Reported(0.50, 0.52), 0));
  CHECK_FALSE(s.OnEpoch(2, 2, 1, Reported(0.20, 0.01), 0));
  s.OnEnd(3, 3, false, false, "diverged", {}, 0);
  for (int t = 0; t < 3; ++t) s.OnEnd(t, t, true, false, "", {}, 0);
  REQUIRE(s.finished());
  REQUIRE(s.best() == 0);
  const TrialState& b = s.trials()[0];
  CHECK(b.best == 0.12);
  CHECK(b.metric == 0.15);  // the last epoch's
  CHECK(b.best_epoch == 2);
  CHECK(ReportedAtBest(b, "test_mae") == 0.14);  // at the best epoch, not the last
  CHECK_FALSE(ReportedAtBest(s.trials()[3], "test_mae").has_value());

  const std::string csv = LeaderboardCsv(s.trials(), spec.metric, spec.maximize, spec.shown);
  INFO(csv);
  CHECK_THAT(csv, Catch::StartsWith("trial,status,epoch,val_mae,best,test_mae,test_rmse,worker,attempts,params,reason\n"
                                    "0,DONE,3,0.15,0.12,0.14,"));
  // Ascending by the best val_mae (0.12, 0.20, 0.50), the failed trial without one last.
  std::vector<int> order;
  for (std::size_t at = csv.find('\n') + 1; at < csv.size(); at = csv.find('\n', at) + 1) order.push_back(std::stoi(csv.substr(at)));
  CHECK(order == std::vector<int>{0, 2, 1, 3});
  const std::vector<std::string> rows = LeaderboardRows(s.trials(), spec.metric, spec.maximize, s.best(), spec.shown);
  REQUIRE(rows.size() == 5);
  CHECK_THAT(rows[0], Catch::Contains("val_mae") && Catch::Contains("test_mae") && Catch::Contains("test_rmse"));
  CHECK_THAT(rows[1], Catch::StartsWith("*     0  DONE") && Catch::Contains("0.1200") && Catch::Contains("0.1400"));
}

TEST_CASE("ASHA on a regression sweep stops the trial whose val_mae is highest at the rung", "[unit][sweep][regression][asha]") {
  config::SweepSpec spec = RegressionSpec(true);  // grace 1, eta 3, max 9: rungs 1 and 3
  SweepScheduler s(spec, config::GenerateTrials(spec), 4);
  SweepScheduler::Assignment x;
  for (int w = 0; w < 3; ++w) REQUIRE(s.NextFor(w, 0, &x) == Next::kAssigned);
  CHECK_FALSE(s.OnEpoch(0, 0, 1, Reported(0.40, 0.40), 0));
  CHECK_FALSE(s.OnEpoch(1, 1, 1, Reported(0.10, 0.90), 0));  // n=2, keep 1: lower than 0.40, goes on
  CHECK(s.OnEpoch(2, 2, 1, Reported(0.30, 0.05), 0));         // n=3, keep 1: 0.10 is lower; its test MAE does not count
  CHECK(s.trials()[2].reason == "pruned by ASHA at rung epoch 1");
}

}  // namespace
}  // namespace tfd::coordinator

namespace tfd::coordinator {
namespace {

TEST_CASE("a regression ensemble averages its members' outputs and reports its and each member's test MAE and RMSE",
          "[unit][sweep][ensemble][regression]") {
  Result<config::SweepSpec> spec = config::ParseEnsembleSpec(
      R"({"model": "mlp", "data": {"train": "a.csv", "test_split": 0.2, "task": "regression"}, "epochs": 2, "batch_size": 10,
          "optimizer": {"type": "sgd", "learning_rate": 0.1}, "ensemble": {"members": 2}})",
      "e.json");
  INFO(spec.status().message());
  REQUIRE(spec.ok());
  CHECK(spec->metric == "test_mae");  // members are ranked by it, lower first
  CHECK_FALSE(spec->maximize);
  for (const config::Trial& t : config::GenerateTrials(*spec)) {
    Result<config::JobSpec> member = config::ParseJobSpec(t.job_text, "member");
    REQUIRE(member.ok());
    CHECK(member->seed == 1u + static_cast<unsigned>(t.id));
    CHECK(member->data.split_seed == std::optional<std::uint64_t>(1));  // every member holds out the same test set
  }
  SweepScheduler s(*spec, config::GenerateTrials(*spec), 2);
  SweepScheduler::Assignment a, b;
  REQUIRE(s.NextFor(0, 0, &a) == Next::kAssigned);
  REQUIRE(s.NextFor(1, 0, &b) == Next::kAssigned);
  CHECK(a.predictions);
  const std::vector<ClassId> rows(3, 0);
  const std::vector<float> targets = {1.5f, 2, 3};
  REQUIRE(s.OnPredictions(0, 0, 1, 1, rows, {1, 2, 5}, targets, 0));  // errors 0.5, 0, 2
  CHECK(s.ensemble_epochs().empty());                                    // member 1 has not reported
  CHECK_FALSE(s.OnPredictions(1, 1, 1, 1, rows, {2, 2, 2}, {1.5f, 2, 4}, 0));  // other targets: not the same test set
  CHECK_FALSE(s.OnPredictions(1, 1, 1, 1, rows, {2, 2, 2}, {}, 0));            // a classification's report
  REQUIRE(s.OnPredictions(1, 1, 1, 1, rows, {2, 2, 2}, targets, 0));           // errors 0.5, 0, 1
  REQUIRE(s.ensemble_epochs().size() == 1);
  const SweepScheduler::EnsembleEpoch& e = s.ensemble_epochs()[0];
  CHECK(e.regression);
  CHECK(e.members == 2);
  CHECK(e.by_member.at(0).mae == Approx(2.5 / 3));
  CHECK(e.by_member.at(0).rmse == Approx(std::sqrt(4.25 / 3)));
  CHECK(e.by_member.at(1).mae == Approx(0.5));
  CHECK(e.best_member == Approx(0.5));
  CHECK(e.mean_member_mae == Approx((2.5 / 3 + 0.5) / 2));
  // The mean is 1.5, 2, 3.5: errors 0, 0, 0.5.
  CHECK(e.ensemble.mae == Approx(0.5 / 3));
  CHECK(e.ensemble.rmse == Approx(std::sqrt(0.25 / 3)));
  CHECK(s.last_predictions().mean == std::vector<float>{1.5f, 2, 3.5f});
  CHECK(s.last_predictions().targets == targets);
  const std::vector<std::string> lines = s.TakeLines();
  REQUIRE_FALSE(lines.empty());
  const nlohmann::json line = nlohmann::json::parse(lines.back());
  CHECK(line["event"] == "ensemble");
  CHECK(line["ensemble_test_mae"].get<double>() == Approx(0.5 / 3));
  CHECK(line["mean_member_test_mae"].get<double>() == Approx((2.5 / 3 + 0.5) / 2));
  CHECK(line["member_test_mae"]["1"].get<double>() == Approx(0.5));
  CHECK(line["member_test_rmse"]["0"].get<double>() == Approx(std::sqrt(4.25 / 3)));
  CHECK_FALSE(line.contains("ensemble_test_accuracy"));
}

TEST_CASE("a restored scheduler keeps ended and pruned trials, and queues the rest after their checkpoint's epoch", "[unit][sweep]") {
  config::SweepSpec spec = Spec(true);  // ASHA: rungs at epochs 1, 3 (grace 1, eta 3, 9 epochs)
  SweepScheduler live(spec, config::GenerateTrials(spec), 2);
  SweepScheduler::Assignment a;
  // Trial 0 runs to its end; trial 1 reports epoch 1 and goes on; trial 2 is pruned at rung 1 (its
  // end not recorded: the coordinator died first); trial 3 never starts.
  REQUIRE(live.NextFor(0, 0, &a) == Next::kAssigned);
  CHECK_FALSE(live.OnEpoch(0, 0, 1, {{"val_accuracy", 0.9}}, 0));
  live.OnEnd(0, 0, true, false, "", {}, 0);
  REQUIRE(live.NextFor(0, 0, &a) == Next::kAssigned);
  REQUIRE(live.NextFor(1, 0, &a) == Next::kAssigned);
  CHECK_FALSE(live.OnEpoch(0, 1, 1, {{"val_accuracy", 0.95}}, 0));  // the best at the rung
  CHECK(live.OnEpoch(1, 2, 1, {{"val_accuracy", 0.05}}, 0));        // 3 at the rung, 2 better: pruned
  const std::vector<std::string> lines = live.TakeLines();
  std::vector<nlohmann::ordered_json> parsed;
  for (const std::string& l : lines) parsed.push_back(nlohmann::ordered_json::parse(l));

  SweepScheduler restored(spec, config::GenerateTrials(spec), 1);
  std::vector<std::pair<int, int>> asked;
  Result<SweepScheduler::Restored> r = restored.Restore(parsed, [&](int trial, int epoch) {
    asked.emplace_back(trial, epoch);
    return epoch;
  }, 0);
  REQUIRE(r.ok());
  CHECK(r->done == 2);  // trial 0 DONE, trial 2 pruned (ended as its worker would have)
  CHECK(r->resumed == 1);
  CHECK(r->from_checkpoint == 1);
  CHECK(r->pending == 1);
  CHECK(restored.trials()[2].status == TrialStatus::kStopped);
  CHECK(restored.trials()[2].reason == "pruned by ASHA at rung epoch 1");
  CHECK(asked == std::vector<std::pair<int, int>>{{1, 1}});
  // Trial 1 goes on after epoch 1 (attempt 2), then trial 3; ASHA's rung 1 holds the 3 records.
  REQUIRE(restored.NextFor(0, 0, &a) == Next::kAssigned);
  CHECK(a.trial == 1);
  CHECK(a.attempt == 1);
  CHECK(a.resume_epoch == 1);
  CHECK_FALSE(restored.OnEpoch(0, 1, 1, {{"val_accuracy", 0.99}}, 0));  // a repeat changes nothing
  CHECK(restored.trials()[1].best == 0.95);
  restored.OnEnd(0, 1, true, false, "", {}, 0);
  REQUIRE(restored.NextFor(0, 0, &a) == Next::kAssigned);
  CHECK(a.trial == 3);
  CHECK(restored.OnEpoch(0, 3, 1, {{"val_accuracy", 0.01}}, 0));  // 4th at the rung, 3 better: pruned, as live
}

TEST_CASE("restoring names the line that is not a trial event of this sweep", "[unit][sweep]") {
  config::SweepSpec spec = Spec(false);
  SweepScheduler s(spec, config::GenerateTrials(spec), 1);
  const auto none = [](int, int) { return 0; };
  Result<SweepScheduler::Restored> r = s.Restore({nlohmann::ordered_json::parse(R"({"event": "placed", "trial": 9})")}, none, 0);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() == "line 1: trial 9 is not in the sweep (it has 4 trials)");
  r = s.Restore({nlohmann::ordered_json::parse(R"({"event": "epoch", "trial": 0, "epoch": "two"})")}, none, 0);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().starts_with("line 1: "));
}

}  // namespace
}  // namespace tfd::coordinator
