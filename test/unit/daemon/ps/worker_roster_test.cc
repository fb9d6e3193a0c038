// The ps's worker roster and its give-up rules, on a fake clock, and the sync step verdict
// (whether a step can still complete) that PsService::FailPullsIfStepStuck acts on.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "daemon/ps/worker_roster.h"

namespace tfd::ps {
namespace {

using namespace std::chrono_literals;
using Clock = WorkerRoster::Clock;
using OnWorkerLoss = config::UpdateSpec::OnWorkerLoss;
using Action = StepVerdict::Action;

const Clock::time_point kStart = Clock::time_point{} + 1000s;
// Connections are only compared: any distinct addresses do.
const int kLinks[4] = {};
WorkerRoster::Link Link(int i) { return &kLinks[i]; }

WorkerRoster MakeRoster(int workers) {
  return WorkerRoster(workers, {.return_timeout = 60s, .startup_timeout = 120s}, kStart,
                      [](int rank) { return "worker:" + std::to_string(rank); });
}

// Every worker of `roster` connected at kStart, worker r on Link(r).
void ConnectAll(WorkerRoster& roster, int workers) {
  for (int r = 0; r < workers; ++r) roster.Connected(Link(r), r, false, kStart);
}

TEST_CASE("roster: a worker lost longer than the return timeout is given up on, not before", "[unit][ps][roster]") {
  WorkerRoster roster = MakeRoster(2);
  ConnectAll(roster, 2);
  const WorkerRoster::Departure d = roster.Closed(Link(1), "worker:1 (127.0.0.1:5)", 7, kStart + 1s);
  CHECK(d.rank == 1);
  CHECK_FALSE(d.done);
  CHECK(roster.StateOf(1) == WorkerState::kLost);
  CHECK(roster.lost(1));
  CHECK(roster.GiveUpOverdue(kStart + 61s - 1ms, 9).empty());
  const std::vector<WorkerRoster::Absence> gave_up = roster.GiveUpOverdue(kStart + 61s, 9);
  REQUIRE(gave_up.size() == 1);
  CHECK(gave_up[0].name == "worker:1 (127.0.0.1:5)");
  CHECK(gave_up[0].global_step == 7);  // when it was lost, not when it was given up on
  CHECK_FALSE(gave_up[0].never_connected);
  CHECK(roster.StateOf(1) == WorkerState::kGivenUp);
  CHECK(roster.GiveUpOverdue(kStart + 1h, 9).empty());  // once
  CHECK(roster.GaveUpBecause(gave_up[0]) == "worker:1 (127.0.0.1:5) was lost at global_step 7 and did not come back within 60 s");
  CHECK(roster.ChiefGivenUp() == nullptr);  // a worker, not the chief
}

TEST_CASE("roster: a worker back within the return timeout is not given up on", "[unit][ps][roster]") {
  WorkerRoster roster = MakeRoster(2);
  ConnectAll(roster, 2);
  roster.Closed(Link(1), "worker:1", 3, kStart + 1s);
  const WorkerRoster::Arrival back = roster.Connected(Link(2), 1, false, kStart + 30s);
  CHECK(back.rejoined);
  CHECK_FALSE(back.was_given_up);
  CHECK(roster.StateOf(1) == WorkerState::kConnected);
  CHECK(roster.GiveUpOverdue(kStart + 1h, 3).empty());
}

TEST_CASE("roster: a worker given up on that comes back is in the run again", "[unit][ps][roster]") {
  WorkerRoster roster = MakeRoster(2);
  ConnectAll(roster, 2);
  roster.Closed(Link(1), "worker:1", 3, kStart);
  REQUIRE(roster.GiveUpOverdue(kStart + 60s, 3).size() == 1);
  CHECK(roster.members() == 1);
  const WorkerRoster::Arrival back = roster.Connected(Link(2), 1, false, kStart + 61s);
  CHECK(back.rejoined);
  CHECK(back.was_given_up);
  CHECK(roster.StateOf(1) == WorkerState::kConnected);
  CHECK(roster.members() == 2);
}

TEST_CASE("roster: a worker that never connects is given up on startup_timeout after the ps's start", "[unit][ps][roster]") {
  WorkerRoster roster = MakeRoster(2);
  CHECK(roster.StateOf(1) == WorkerState::kNone);
  CHECK(roster.GiveUpOverdue(kStart + 120s - 1ms, 0).empty());
  const std::vector<WorkerRoster::Absence> gave_up = roster.GiveUpOverdue(kStart + 120s, 4);
  REQUIRE(gave_up.size() == 2);
  CHECK(gave_up[1].name == "worker:1");
  CHECK(gave_up[1].never_connected);
  CHECK(gave_up[1].global_step == 4);
  CHECK(roster.GaveUpBecause(gave_up[1]) == "worker:1 never connected within 120 s");
  REQUIRE(roster.ChiefGivenUp() != nullptr);  // a chief that never came ends the run
  CHECK(roster.ChiefGivenUp()->name == "worker:0");
}

TEST_CASE("roster: the startup timeout counts from the first worker's HELLO once one came", "[unit][ps][roster]") {
  WorkerRoster roster = MakeRoster(2);
  roster.Connected(Link(0), 0, false, kStart + 100s);
  CHECK(roster.GiveUpOverdue(kStart + 219s, 0).empty());  // 120 s after the ps's start, but not after the HELLO
  const std::vector<WorkerRoster::Absence> gave_up = roster.GiveUpOverdue(kStart + 220s, 0);
  REQUIRE(gave_up.size() == 1);
  CHECK(gave_up[0].name == "worker:1");
  CHECK(roster.ChiefGivenUp() == nullptr);
}

TEST_CASE("roster: the chief lost for good is reported, so the run ends", "[unit][ps][roster]") {
  WorkerRoster roster = MakeRoster(2);
  ConnectAll(roster, 2);
  roster.Closed(Link(0), "worker:0 (a)", 11, kStart);
  CHECK(roster.ChiefGivenUp() == nullptr);  // lost, not yet given up on
  roster.GiveUpOverdue(kStart + 60s, 12);
  const WorkerRoster::Absence* chief = roster.ChiefGivenUp();
  REQUIRE(chief != nullptr);
  CHECK(roster.GaveUpBecause(*chief) == "worker:0 (a) was lost at global_step 11 and did not come back within 60 s");
}

TEST_CASE("roster: the run is over once the chief is done and every other worker is done or given up on", "[unit][ps][roster]") {
  WorkerRoster roster = MakeRoster(3);
  ConnectAll(roster, 3);
  CHECK(roster.MarkDone(1));
  CHECK_FALSE(roster.MarkDone(1));  // counted once
  CHECK_FALSE(roster.Finished(false));  // the chief's DONE comes first
  CHECK(roster.MarkDone(0));
  CHECK_FALSE(roster.Finished(false));  // worker 2 still trains
  roster.Closed(Link(2), "worker:2 (b)", 5, kStart);
  CHECK_FALSE(roster.Finished(false));  // lost: it may come back
  // on_worker_loss shrink: a lost worker is written off
  const auto written_off = roster.Finished(true);
  REQUIRE(written_off);
  CHECK(*written_off == std::vector<std::string>{"worker:2 (b)"});
  roster.GiveUpOverdue(kStart + 60s, 5);
  const auto over = roster.Finished(false);
  REQUIRE(over);
  CHECK(over->empty());
  CHECK(roster.AwayNote() == "; gave up on worker:2 (b) (lost at global_step 5)");
  CHECK(roster.AwayNote("sync step 6 cannot complete: worker:2 (b) was lost").empty());  // already named
}

TEST_CASE("roster: a worker whose DONE was counted is never lost, whatever its connection does", "[unit][ps][roster]") {
  WorkerRoster roster = MakeRoster(2);
  ConnectAll(roster, 2);
  roster.MarkDone(1);
  const WorkerRoster::Departure d = roster.Closed(Link(1), "worker:1", 5, kStart);
  CHECK(d.rank == 1);
  CHECK(d.done);
  CHECK(roster.StateOf(1) == WorkerState::kDone);
  CHECK(roster.GiveUpOverdue(kStart + 1h, 5).empty());
  CHECK(roster.Closed(Link(3), "a stranger", 5, kStart).rank == -1);  // never shook hands
}

TEST_CASE("roster: a rank with a second connection open stays connected when the first closes", "[unit][ps][roster]") {
  WorkerRoster roster = MakeRoster(2);
  ConnectAll(roster, 2);
  roster.Connected(Link(2), 1, false, kStart + 1s);  // reconnected before the old connection closed
  roster.Closed(Link(1), "worker:1", 5, kStart + 2s);
  CHECK(roster.StateOf(1) == WorkerState::kConnected);
  CHECK_FALSE(roster.lost(1));
  CHECK(roster.Live() == std::set<int>{0, 1});
  CHECK(roster.GiveUpOverdue(kStart + 1h, 5).empty());
  CHECK(roster.connections() == 2);
}

TEST_CASE("roster: an elastic rank that joins is a rank of the run and a member until done", "[unit][ps][roster]") {
  WorkerRoster roster = MakeRoster(2);
  ConnectAll(roster, 2);
  CHECK(roster.Connected(Link(2), 3, true, kStart).newly_joined);
  CHECK(roster.Ranks() == std::vector<int>{0, 1, 3});
  CHECK(roster.MemberPlace(3).index == 2);
  CHECK(roster.MemberPlace(3).count == 3);
  roster.MarkDone(1);
  CHECK(roster.MemberPlace(3).index == 1);
  CHECK_FALSE(roster.MemberPlace(1).index);  // done: no longer a member
  CHECK(roster.members() == 2);
}

// A roster of `workers` where worker r is: 'c' connected, 'l' lost, 'g' given up on, 'd' done, 'n'
// never connected (not yet given up on).
WorkerRoster RosterOf(const std::string& states) {
  WorkerRoster roster = MakeRoster(static_cast<int>(states.size()));
  for (int r = 0; r < static_cast<int>(states.size()); ++r) {
    if (states[r] != 'n') roster.Connected(Link(r), r, false, kStart);
    if (states[r] == 'd') roster.MarkDone(r);
    if (states[r] == 'l' || states[r] == 'g') roster.Closed(Link(r), "worker:" + std::to_string(r), 2, states[r] == 'g' ? kStart : kStart + 50s);
  }
  roster.GiveUpOverdue(kStart + 60s, 2);
  return roster;
}

TEST_CASE("sync step verdict: enough workers can still send, so the step waits", "[unit][ps][roster]") {
  // worker 1 lost, but workers 0 and 2 (one not even connected yet) make 2 of 3
  const StepVerdict v = JudgeSyncStep(RosterOf("cln"), {false, false, false}, 2, OnWorkerLoss::kFail, 1);
  CHECK(v.action == Action::kWait);
  CHECK(v.can_send == 2);
}

TEST_CASE("sync step verdict: a lost worker under on_worker_loss wait is waited for", "[unit][ps][roster]") {
  const StepVerdict v = JudgeSyncStep(RosterOf("cl"), {true, false}, 2, OnWorkerLoss::kWait, 1);
  CHECK(v.action == Action::kWaitForLost);
  CHECK(v.held == 1);
  CHECK(v.missing == std::vector<std::string>{"worker:1 was lost"});
}

TEST_CASE("sync step verdict: a lost worker under on_worker_loss fail fails the waiting pulls", "[unit][ps][roster]") {
  const StepVerdict v = JudgeSyncStep(RosterOf("cl"), {true, false}, 2, OnWorkerLoss::kFail, 1);
  CHECK(v.action == Action::kFailPulls);
  CHECK(v.lost);
  CHECK_FALSE(v.for_good);
}

TEST_CASE("sync step verdict: a worker given up on ends the run, even under wait", "[unit][ps][roster]") {
  const StepVerdict v = JudgeSyncStep(RosterOf("cg"), {true, false}, 2, OnWorkerLoss::kWait, 1);
  CHECK(v.action == Action::kEndRun);
  CHECK(v.for_good);
  CHECK(v.missing == std::vector<std::string>{"worker:1 was lost at global_step 2 and did not come back within 60 s"});
}

TEST_CASE("sync step verdict: only finished workers missing, the waiting ones get the final parameters", "[unit][ps][roster]") {
  const StepVerdict v = JudgeSyncStep(RosterOf("cdd"), {true, false, false}, 2, OnWorkerLoss::kFail, 1);
  CHECK(v.action == Action::kFinalParams);
  CHECK(v.missing == std::vector<std::string>{"worker:1 has finished", "worker:2 has finished"});
  // A lost worker no longer matters once the chief is done.
  CHECK(JudgeSyncStep(RosterOf("dcl"), {false, true, false}, 2, OnWorkerLoss::kFail, 1).action == Action::kFinalParams);
}

TEST_CASE("sync step verdict: on_worker_loss shrink goes on with those left, down to min_replicas", "[unit][ps][roster]") {
  const StepVerdict v = JudgeSyncStep(RosterOf("ccl"), {true, false, false}, 3, OnWorkerLoss::kShrink, 2);
  CHECK(v.action == Action::kShrink);
  CHECK(v.held + v.can_send == 2);
  CHECK(JudgeSyncStep(RosterOf("ccl"), {true, false, false}, 3, OnWorkerLoss::kShrink, 3).action == Action::kFailPulls);
  CHECK(JudgeSyncStep(RosterOf("ccg"), {true, false, false}, 3, OnWorkerLoss::kShrink, 3).action == Action::kEndRun);
}

TEST_CASE("roster: seeded from a restarted ps's INIT, a worker done before the restart is not waited for", "[unit][ps][roster]") {
  WorkerRoster roster = MakeRoster(3);
  roster.Seed({.done = {2}, .given_up = {}}, 3, 40, kStart);
  CHECK(roster.StateOf(2) == WorkerState::kDone);
  CHECK(roster.done_count() == 1);
  roster.Connected(Link(0), 0, false, kStart);
  roster.Connected(Link(1), 1, false, kStart);
  CHECK(roster.MarkDone(1));
  CHECK_FALSE(roster.Finished(false).has_value());  // the chief's DONE comes first
  CHECK(roster.MarkDone(0));
  const auto finished = roster.Finished(false);
  REQUIRE(finished.has_value());
  CHECK(finished->empty());
  CHECK(roster.AwayNote().empty());  // nobody given up on: the end an undisturbed ps would reach
  CHECK(roster.GiveUpOverdue(kStart + 1h, 50).empty());
  CHECK(roster.progress().done == std::vector<int>{0, 1, 2});
}

TEST_CASE("roster: seeded with the chief done, the last worker's DONE ends the run at once", "[unit][ps][roster]") {
  WorkerRoster roster = MakeRoster(2);
  roster.Seed({.done = {0}, .given_up = {}}, 2, 7, kStart);
  roster.Connected(Link(1), 1, false, kStart);
  CHECK_FALSE(roster.Finished(false).has_value());
  CHECK(roster.GiveUpOverdue(kStart + 1h, 9).empty());  // the chief is done, not awaited
  CHECK(roster.ChiefGivenUp() == nullptr);
  roster.MarkDone(1);
  CHECK(roster.Finished(false).has_value());
}

TEST_CASE("roster: a rank given up on before the restart stays given up on until it shakes hands", "[unit][ps][roster]") {
  WorkerRoster roster = MakeRoster(3);
  roster.Seed({.done = {0}, .given_up = {1, 7}}, 3, 12, kStart);  // rank 7 is beyond the cluster: ignored
  CHECK(roster.StateOf(1) == WorkerState::kGivenUp);
  CHECK(roster.Ranks() == std::vector<int>{0, 1, 2});
  const WorkerRoster::Absence* away = roster.absence(1);
  REQUIRE(away != nullptr);
  CHECK(roster.GaveUpBecause(*away) == "worker:1 was given up on before this ps restarted");
  roster.Connected(Link(2), 2, false, kStart);
  roster.MarkDone(2);
  const auto finished = roster.Finished(false);
  REQUIRE(finished.has_value());
  CHECK(roster.AwayNote() == "; gave up on worker:1 (before this ps restarted)");
  CHECK(roster.progress().given_up == std::vector<int>{1});
  const WorkerRoster::Arrival back = roster.Connected(Link(1), 1, false, kStart + 1s);
  CHECK(back.was_given_up);
  CHECK(roster.StateOf(1) == WorkerState::kConnected);
  CHECK(roster.progress().given_up.empty());
}

}  // namespace
}  // namespace tfd::ps
