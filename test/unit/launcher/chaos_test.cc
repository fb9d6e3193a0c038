// tfctl chaos below its processes: the command line, the fault it resolves to, the promise, the verdict.
#include <csignal>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/config/cluster_file.h"
#include "launcher/chaos.h"
#include "launcher/plan.h"

namespace tfd::launcher {
namespace {

config::ClusterFile ParseChaosCluster(const std::string& update, const std::string& launch = "{}", const std::string& cluster = "") {
  const std::string c = cluster.empty() ? R"({"ps": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "127.0.0.1:2002"]})" : cluster;
  auto f = config::ParseClusterFile(R"({"cluster": )" + c + R"(, "train": {"model": "mlp", "data": "d", "epochs": 1, "batch_size": 10,
    "optimizer": {"type": "sgd", "learning_rate": 0.1}, "update": )" + update + R"(}, "launch": )" + launch + "}",
                                    "c.json");
  INFO(f.status().ToString());
  REQUIRE(f.ok());
  return *f;
}

std::string ParseError(std::vector<std::string> args) {
  auto a = ParseChaosArgs(args);
  REQUIRE_FALSE(a.ok());
  CHECK(a.status().code() == Code::kInvalidArgument);
  return a.status().message();
}

Fault FaultFor(const config::ClusterFile& f, std::vector<std::string> args) {
  args.insert(args.begin(), "c.json");
  auto a = ParseChaosArgs(args);
  REQUIRE(a.ok());
  auto fault = ResolveFault(*a, f);
  INFO(fault.status().ToString());
  REQUIRE(fault.ok());
  return *fault;
}

TEST_CASE("chaos arguments: the fault, its trigger and the action", "[unit][chaos]") {
  auto a = ParseChaosArgs({"c.json", "--kill", "worker:1", "--at", "step:3", "--from", "ps:0", "--signal", "term", "--deadline", "40"});
  REQUIRE(a.ok());
  CHECK(a->run_or_file == "c.json");
  CHECK(a->kill == "worker:1");
  CHECK(a->event == "step");
  CHECK(a->nth == 3);
  CHECK(a->from == "ps:0");
  CHECK(a->action == FaultAction::kTerm);
  CHECK(a->deadline_secs == 40);
  auto stop = ParseChaosArgs({"runs/x", "--kill", "ps", "--at", "ready", "--stop", "2.5"});
  REQUIRE(stop.ok());
  CHECK(stop->nth == 1);
  CHECK(stop->action == FaultAction::kStop);
  CHECK(stop->stop_secs == 2.5);
}

TEST_CASE("chaos refuses bad arguments in one line", "[unit][chaos]") {
  CHECK(ParseError({"c.json", "--kill", "ps", "--at", "stepp"}).rfind("--at stepp: tfd emits no event \"stepp\" (expected one of start, ready, ",
                                                                      0) == 0);
  CHECK(ParseError({"c.json", "--kill", "ps", "--at", "step:0"}) == "--at step:0: N must be a whole number >= 1");
  CHECK(ParseError({"c.json", "--kill", "ps", "--at", "step:-2"}) == "--at step:-2: N must be a whole number >= 1");
  CHECK(ParseError({"c.json", "--kill", "ps", "--at", "step", "--stop", "3", "--signal", "kill"}) ==
        "--stop and --signal: a stopped task gets SIGSTOP, no other signal");
  CHECK(ParseError({"c.json", "--kill", "ps", "--at", "step", "--signal", "hup"}) == "--signal hup: expected kill or term");
  CHECK(ParseError({"c.json", "--kill", "ps", "--at", "step", "--stop", "0"}) == "--stop 0: expected seconds above 0");
  CHECK(ParseError({"c.json", "--at", "step"}) == "chaos needs --kill ROLE[:INDEX] or --grow N");
  CHECK(ParseError({"c.json", "--kill", "ps", "--grow", "3", "--at", "step"}) ==
        "--kill and --grow: one fault per run (--then-kill adds a second kill)");
  CHECK(ParseError({"c.json", "--grow", "3", "--at", "step", "--signal", "term"}) == "--grow sends no signal: not with --signal or --stop");
  CHECK(ParseError({"c.json", "--grow", "2.5", "--at", "step"}) == "--grow: expected a number of workers in [1, 4096], got \"2.5\"");
  CHECK(ParseError({"c.json", "--grow", "3", "--at", "step", "--then-kill", "worker:1"}) ==
        "--then-kill follows a first kill or SIGTERM (--kill, without --stop)");
  CHECK(ParseError({"c.json", "--kill", "worker:1", "--at", "step", "--stop", "2", "--then-kill", "worker:2"}) ==
        "--then-kill follows a first kill or SIGTERM (--kill, without --stop)");
  CHECK(ParseError({"c.json", "--kill", "worker:1", "--at", "step", "--then-after", "1"}) == "--then-after needs --then-kill");
  CHECK(ParseError({"c.json", "--kill", "ps"}) == "chaos needs --at EVENT[:N]");
  CHECK(ParseError({"--kill", "ps", "--at", "step"}) == "chaos needs a run folder or a cluster file");
  CHECK(ParseError({"c.json", "--kill"}) == "--kill needs a value");
  CHECK(ParseError({"c.json", "--kill", "ps", "--at", "step", "--bogus"}) == "chaos: unknown option --bogus");
}

TEST_CASE("every event name tfd emits is known, and only those", "[unit][chaos]") {
  for (const char* e : {"start", "ready", "step", "epoch", "checkpoint", "restored", "done", "peer_lost", "peer_rejoined", "quorum", "error",
                        "checkpoint_start", "worker_done", "gave_up", "run_ended", "stage"})
    CHECK(config::IsEventName(e));
  CHECK_FALSE(config::IsEventName("steps"));
  CHECK_FALSE(config::IsEventName(""));
}

TEST_CASE("chaos targets resolve against the cluster, naming its tasks when out of range", "[unit][chaos]") {
  const config::ClusterFile f = ParseChaosCluster(R"({"mode": "async"})");
  auto task = [&](const std::string& spec) { return ResolveTask(f.cluster, "--kill", spec); };
  CHECK(task("ps")->ToString() == "ps:0");
  CHECK(task("worker:1")->ToString() == "worker:1");
  CHECK(task("chief")->ToString() == "worker:0");  // no chief entry: worker 0
  CHECK(task("worker:5").status().message() == "--kill worker:5: the cluster has 2 workers (worker:0, worker:1)");
  CHECK(task("ps:1").status().message() == "--kill ps:1: the cluster has 1 ps (ps:0)");
  CHECK(task("gpu").status().message() == "--kill gpu: unknown role \"gpu\" (expected ps, chief or worker, with :INDEX)");
  CHECK(task("worker:x").status().message() == "--kill worker:x: expected ROLE[:INDEX], INDEX a whole number");
  CHECK(task("chief:1").status().message() == "--kill chief:1: a cluster has one chief (chief, or chief:0)");
  const config::ClusterFile with_chief =
      ParseChaosCluster(R"({"mode": "async"})", "{}", R"({"ps": ["127.0.0.1:2000"], "chief": ["127.0.0.1:2003"], "worker": ["127.0.0.1:2001"]})");
  CHECK(ResolveTask(with_chief.cluster, "--from", "chief")->ToString() == "chief:0");
  CHECK(ResolveTask(with_chief.cluster, "--from", "worker:1").status().message() == "--from worker:1: the cluster has 1 worker (worker:0)");
}

TEST_CASE("the default deadline is the startup timeout or 2 x peer + reconnect timeout, whichever is longer, (+ the stop) + a 30 s margin",
          "[unit][chaos]") {
  const Fault d = FaultFor(ParseChaosCluster(R"({"mode": "async"})"), {"--kill", "worker:1", "--at", "step"});
  CHECK(d.deadline_secs == 120 + 30);  // tfd's startup timeout outlasts 2 x 8 + 60
  CHECK(d.deadline_why == "startup timeout 120 s + margin 30 s");
  CHECK(d.from.ToString() == "worker:1");
  CHECK(d.Describe() == "SIGKILL to worker:1 at its 1st step event");
  const Fault s = FaultFor(ParseChaosCluster(R"({"mode": "async"})", R"({"timeouts": {"peer": 1, "reconnect": 10}})"),
                           {"--kill", "worker:1", "--at", "ready:2", "--from", "ps:0", "--stop", "3"});
  CHECK(s.deadline_secs == 120 + 3 + 30);
  const Fault lost = FaultFor(ParseChaosCluster(R"({"mode": "async"})", R"({"timeouts": {"peer": 1, "reconnect": 10, "startup": 5}})"),
                              {"--kill", "worker:1", "--at", "step", "--stop", "3"});
  CHECK(lost.deadline_secs == 2 * 1 + 10 + 3 + 30);
  CHECK(lost.deadline_why == "2 x peer timeout 1 s + reconnect timeout 10 s + stop 3 s + margin 30 s");
  CHECK(s.Signal() == SIGSTOP);
  CHECK(s.Describe() == "SIGSTOP (SIGCONT 3 s later) to worker:1 at ps:0's 2nd ready event");
  CHECK(FaultFor(ParseChaosCluster(R"({"mode": "async"})"), {"--kill", "ps", "--at", "step", "--deadline", "12"}).deadline_secs == 12);
}

TEST_CASE("survival is promised by a restart, a short stop, or a non-chief worker the mode can lose", "[unit][chaos]") {
  const config::ClusterFile async = ParseChaosCluster(R"({"mode": "async"})");
  const config::ClusterFile sync = ParseChaosCluster(R"({"mode": "sync"})");
  const config::ClusterFile shrink = ParseChaosCluster(R"({"mode": "sync", "on_worker_loss": "shrink"})");
  const config::ClusterFile shrink_too_few = ParseChaosCluster(R"({"mode": "sync", "on_worker_loss": "shrink", "min_replicas": 2})");
  const std::vector<std::string> kill_w1 = {"--kill", "worker:1", "--at", "step"};
  CHECK(PromiseFor(async, FaultFor(async, kill_w1), 0).survival);
  CHECK_FALSE(PromiseFor(async, FaultFor(async, kill_w1), 0).target_must_exit_zero);
  CHECK_FALSE(PromiseFor(async, FaultFor(async, {"--kill", "chief", "--at", "step"}), 0).survival);
  CHECK_FALSE(PromiseFor(sync, FaultFor(sync, kill_w1), 0).survival);
  CHECK(PromiseFor(shrink, FaultFor(shrink, kill_w1), 0).survival);
  CHECK_FALSE(PromiseFor(shrink_too_few, FaultFor(shrink_too_few, kill_w1), 0).survival);
  const ChaosPromise ps = PromiseFor(async, FaultFor(async, {"--kill", "ps", "--at", "step"}), 0);
  CHECK_FALSE(ps.survival);
  CHECK(ps.why == "no rule promises the run survives losing ps:0: it is not restarted (launch.restart), and it is a ps");
  const ChaosPromise restarted = PromiseFor(sync, FaultFor(sync, {"--kill", "ps", "--at", "step"}), 2);
  CHECK(restarted.survival);
  CHECK(restarted.target_must_exit_zero);
  CHECK(restarted.why == "launch.restart starts ps tasks again (up to 2 times)");
  const ChaosPromise short_stop = PromiseFor(sync, FaultFor(sync, {"--kill", "ps", "--at", "step", "--stop", "5"}), 0);
  CHECK(short_stop.survival);
  CHECK(short_stop.target_must_exit_zero);
  CHECK_FALSE(PromiseFor(sync, FaultFor(sync, {"--kill", "ps", "--at", "step", "--stop", "60"}), 0).survival);
  // A worker stopped past the peer timeout is lost for that long: sync with on_worker_loss fail
  // ends the run, and a ring has no spare (nor takes a restarted member back).
  const std::vector<std::string> stop_w1 = {"--kill", "worker:1", "--at", "step", "--stop", "10"};
  CHECK_FALSE(PromiseFor(sync, FaultFor(sync, stop_w1), 0).survival);
  CHECK(PromiseFor(shrink, FaultFor(shrink, stop_w1), 0).survival);
  CHECK_FALSE(PromiseFor(shrink, FaultFor(shrink, stop_w1), 0).target_must_exit_zero);  // written off meanwhile
  const config::ClusterFile ring = ParseChaosCluster(R"({"mode": "allreduce"})");
  const ChaosPromise ring_stop = PromiseFor(ring, FaultFor(ring, stop_w1), 0);
  CHECK_FALSE(ring_stop.survival);
  CHECK(ring_stop.why.find("an allreduce ring has no spare") != std::string::npos);
  CHECK_FALSE(PromiseFor(ring, FaultFor(ring, kill_w1), 2).survival);
  CHECK(PromiseFor(ring, FaultFor(ring, {"--kill", "worker:1", "--at", "step", "--stop", "2"}), 0).survival);  // < peer timeout 8 s
  // Restarts rescue a sync run only where it waits for the lost worker (wait, shrink), not where
  // the step fails at once (fail): the failed worker then needs a restart too, and so on.
  CHECK_FALSE(PromiseFor(sync, FaultFor(sync, kill_w1), 2).survival);
  const config::ClusterFile wait = ParseChaosCluster(R"({"mode": "sync", "on_worker_loss": "wait"})");
  CHECK(PromiseFor(wait, FaultFor(wait, {"--kill", "chief", "--at", "step"}), 2).survival);
  // A stopped task never exits, so no restart brings it back; a stop within a second of the peer
  // timeout may be noticed.
  const ChaosPromise stopped = PromiseFor(wait, FaultFor(wait, {"--kill", "chief", "--at", "step", "--stop", "100"}), 2);
  CHECK_FALSE(stopped.survival);
  CHECK_FALSE(PromiseFor(ring, FaultFor(ring, {"--kill", "worker:1", "--at", "step", "--stop", "7.5"}), 0).survival);
}

TaskOutcome Outcome(const std::string& task, int code, const std::string& last);

TEST_CASE("a last line names a task by its whole name", "[unit][chaos]") {
  CHECK(config::MentionsTask("lost worker:1 (127.0.0.1:2223)", "worker:1"));
  CHECK(config::MentionsTask("... reports: worker:1", "worker:1"));
  CHECK_FALSE(config::MentionsTask("lost worker:10 (127.0.0.1:2223)", "worker:1"));
  CHECK(config::MentionsTask("worker:10 and worker:1 were lost", "worker:1"));
  CHECK_FALSE(config::MentionsTask("", "ps:0"));
  const ChaosPromise p{.target = "worker:1", .deadline_secs = 98, .survival = false, .target_must_exit_zero = false, .why = ""};
  const ChaosVerdict v = JudgeChaos(p, "", {Outcome("worker:0", 1, "error lost worker:10 (...)"), Outcome("worker:1", 137, "")});
  CHECK_FALSE(v.kept);
}

TaskOutcome Outcome(const std::string& task, int code, const std::string& last = "info done");
TaskOutcome Outcome(const std::string& task, int code, const std::string& last) {
  TaskOutcome o;
  o.task = task;
  o.exit_code = code;
  o.last_line = last;
  o.exit_after_secs = 1;
  return o;
}

TEST_CASE("JudgeChaos: every task in time, failures name the lost task, survival when promised", "[unit][chaos]") {
  ChaosPromise survive{.target = "worker:1", .deadline_secs = 98, .survival = true, .target_must_exit_zero = false, .why = "async"};
  ChaosPromise no_survival = survive;
  no_survival.survival = false;
  SECTION("kept: the others exit 0, the killed worker may not") {
    const ChaosVerdict v = JudgeChaos(survive, "", {Outcome("ps:0", 0), Outcome("worker:0", 0), Outcome("worker:1", 137, "")});
    CHECK(v.kept);
    CHECK(v.reasons.empty());
  }
  SECTION("(a) a task past the deadline") {
    TaskOutcome hung = Outcome("ps:0", 137);
    hung.past_deadline = true;
    const ChaosVerdict v = JudgeChaos(no_survival, "", {hung, Outcome("worker:0", 0), Outcome("worker:1", 137)});
    CHECK_FALSE(v.kept);
    REQUIRE(v.reasons.size() == 1);
    CHECK(v.reasons[0] == "(a) ps:0 was still running 98 s after the fault (the deadline); it was killed");
  }
  SECTION("(b) a failure that does not name the lost task") {
    const ChaosVerdict named = JudgeChaos(no_survival, "", {Outcome("ps:0", 1, "error gave up on worker:1 at global step 40"),
                                                            Outcome("worker:0", 0), Outcome("worker:1", 137)});
    CHECK(named.kept);
    const ChaosVerdict unnamed = JudgeChaos(no_survival, "", {Outcome("ps:0", 1, "error something"), Outcome("worker:1", 137)});
    REQUIRE(unnamed.reasons.size() == 1);
    CHECK(unnamed.reasons[0] == "(b) ps:0 exited 1 without naming worker:1 in its last line");
  }
  SECTION("(c) a failure where survival was promised, even one naming the lost task") {
    const ChaosVerdict v = JudgeChaos(survive, "", {Outcome("ps:0", 1, "lost worker:1"), Outcome("worker:1", 137)});
    REQUIRE(v.reasons.size() == 1);
    CHECK(v.reasons[0] == "(c) ps:0 exited 1, though the run should survive (async)");
  }
  SECTION("(c) a restarted target must finish too") {
    ChaosPromise restarted = survive;
    restarted.target_must_exit_zero = true;
    CHECK_FALSE(JudgeChaos(restarted, "", {Outcome("ps:0", 0), Outcome("worker:1", 1, "worker:1 failed")}).kept);
    CHECK(JudgeChaos(restarted, "", {Outcome("ps:0", 0), Outcome("worker:1", 0)}).kept);
  }
  SECTION("a fault never sent keeps nothing") {
    const ChaosVerdict v = JudgeChaos(survive, "the run ended first", {Outcome("ps:0", 0), Outcome("worker:1", 0)});
    CHECK_FALSE(v.kept);
    CHECK(v.reasons == std::vector<std::string>{"the fault was never sent: the run ended first"});
  }
}

TEST_CASE("the chaos report is one line per task, a verdict line and chaos.json", "[unit][chaos]") {
  const config::ClusterFile f = ParseChaosCluster(R"({"mode": "async"})");
  const Fault fault = FaultFor(f, {"--kill", "worker:1", "--at", "step:3", "--from", "worker:0"});
  const ChaosPromise promise = PromiseFor(f, fault, 0);
  TaskOutcome w0 = Outcome("worker:0", 0, "info done \"quoted\"");
  w0.test_accuracy = 0.9;
  const std::vector<TaskOutcome> tasks = {Outcome("ps:0", 0), w0, Outcome("worker:1", 137, "")};
  const ChaosVerdict verdict = JudgeChaos(promise, "", tasks);
  const auto lines = ChaosReportLines(promise, tasks, verdict);
  REQUIRE(lines.size() == 4);
  CHECK(lines[1] == R"(chaos task=worker:0 exit_code=0 restarts=0 exit_after_secs=1.0 past_deadline=false last_line="info done \"quoted\"")");
  CHECK(lines[3] == "chaos verdict=kept survival=promised: worker:1 is a worker other than the chief, and updates are async");
  auto j = nlohmann::json::parse(ChaosJson(fault, "", 1700000000.5, 0, promise, tasks, verdict));
  CHECK(j["fault"]["signal"] == "SIGKILL");
  CHECK(j["fault"]["target"] == "worker:1");
  CHECK(j["fault"]["sent"] == true);
  CHECK(j["trigger"] == nlohmann::json{{"event", "step"}, {"n", 3}, {"from", "worker:0"}});
  CHECK(j["verdict"] == "kept");
  CHECK(j["tasks"][1]["test_accuracy"] == 0.9);
  CHECK(j["tasks"][0]["test_accuracy"].is_null());
  CHECK(j["tasks"][2]["exit_code"] == 137);
  CHECK_FALSE(j["fault"].contains("then_kill"));
  CHECK_FALSE(j["fault"].contains("grow_to"));
}

config::ClusterFile ElasticRing(int workers, int min_workers) {
  std::string list;
  for (int i = 0; i < workers; ++i) list += fmt::format("{}\"127.0.0.1:{}\"", i == 0 ? "" : ", ", 2001 + i);
  return ParseChaosCluster(fmt::format(R"({{"mode": "allreduce"}}, "elastic": {{"min_workers": {}, "max_workers": 4}})", min_workers), "{}",
                           R"({"worker": [)" + list + "]}");
}

TEST_CASE("chaos --grow and --then-kill: parsed, resolved against an elastic job, and their promises", "[unit][chaos]") {
  auto grow = ParseChaosArgs({"c.json", "--grow", "3", "--at", "step:20", "--from", "worker:0"});
  REQUIRE(grow.ok());
  CHECK(grow->action == FaultAction::kGrow);
  CHECK(grow->grow == 3);
  auto twice = ParseChaosArgs({"c.json", "--kill", "worker:3", "--at", "step", "--then-kill", "worker:2", "--then-after", "0.5"});
  REQUIRE(twice.ok());
  CHECK(twice->then_kill == "worker:2");
  CHECK(twice->then_after_secs == 0.5);

  const config::ClusterFile three = ElasticRing(3, 2), four = ElasticRing(4, 2), two = ElasticRing(2, 2);
  SECTION("--grow: an elastic job, to more workers than it starts, every task to exit 0") {
    const Fault f = FaultFor(two, {"--grow", "3", "--at", "step:20"});
    CHECK(f.grow_to == 3);
    CHECK(f.from.ToString() == "worker:0");  // the chief's events by default
    CHECK(f.Describe() == "the run scaled to 3 workers at worker:0's 20th step event");
    const ChaosPromise p = PromiseFor(two, f, 0);
    CHECK(p.survival);
    CHECK(p.target_must_exit_zero);
    CHECK(p.target.empty());
    // (c) judges every task, and no task is the one hit: a failure naming nobody is (c) alone.
    const ChaosVerdict v = JudgeChaos(p, "", {Outcome("worker:0", 0), Outcome("worker:1", 0), Outcome("worker:2", 1, "error")});
    REQUIRE(v.reasons.size() == 1);
    CHECK(v.reasons[0].rfind("(c) worker:2 exited 1", 0) == 0);
    auto j = nlohmann::json::parse(ChaosJson(f, "", 1700000000.5, 0, p, {}, v));
    CHECK(j["fault"]["action"] == "grow");
    CHECK(j["fault"]["grow_to"] == 3);
    CHECK(j["fault"]["target"].is_null());
    auto a = ParseChaosArgs({"c.json", "--grow", "2", "--at", "step"});
    REQUIRE(a.ok());
    auto same = ResolveFault(*a, two);
    REQUIRE_FALSE(same.ok());
    CHECK(same.status().message() == "--grow 2: the cluster starts 2 workers; --grow takes more");
    auto b = ParseChaosArgs({"c.json", "--grow", "5", "--at", "step"});
    REQUIRE(b.ok());
    CHECK(ResolveFault(*b, two).status().message().rfind("--workers 5: outside the job's elastic min_workers 2 .. max_workers 4", 0) == 0);
    const config::ClusterFile plain = ParseChaosCluster(R"({"mode": "async"})");
    auto c = ParseChaosArgs({"c.json", "--grow", "3", "--at", "step"});
    REQUIRE(c.ok());
    CHECK(ResolveFault(*c, plain).status().message().find("the job is not elastic") != std::string::npos);
  }
  SECTION("an elastic ring survives a lost worker, and a second one, while min_workers remain") {
    const ChaosPromise one = PromiseFor(three, FaultFor(three, {"--kill", "worker:1", "--at", "step"}), 0);
    CHECK(one.survival);
    CHECK_FALSE(one.target_must_exit_zero);
    CHECK(one.why == "an elastic allreduce ring re-forms without worker:1 with the 2 workers left (min_workers 2)");
    CHECK_FALSE(PromiseFor(two, FaultFor(two, {"--kill", "worker:1", "--at", "step"}), 0).survival);
    const Fault f = FaultFor(four, {"--kill", "worker:3", "--at", "step", "--then-kill", "worker:2"});
    CHECK(f.then_kill->ToString() == "worker:2");
    CHECK(f.then_after_secs == 0.05);
    CHECK(f.Describe() == "SIGKILL to worker:3 at its 1st step event, then SIGKILL to worker:2 0.05 s later");
    const ChaosPromise p = PromiseFor(four, f, 0);
    CHECK(p.survival);
    CHECK(p.second_target == "worker:2");
    CHECK_FALSE(PromiseFor(three, FaultFor(three, {"--kill", "worker:2", "--at", "step", "--then-kill", "worker:1"}), 0).survival);
    // Both killed tasks are the ones hit: their exits are no failure, and a failure may name either.
    ChaosPromise no_survival = p;
    no_survival.survival = false;
    CHECK(JudgeChaos(p, "", {Outcome("worker:0", 0), Outcome("worker:1", 0), Outcome("worker:2", 137, ""), Outcome("worker:3", 137, "")}).kept);
    CHECK(JudgeChaos(no_survival, "", {Outcome("worker:0", 1, "error lost worker:2 (127.0.0.1:2003)"), Outcome("worker:2", 137, "")}).kept);
    const ChaosVerdict unnamed = JudgeChaos(no_survival, "", {Outcome("worker:0", 1, "error lost")});
    REQUIRE(unnamed.reasons.size() == 1);
    CHECK(unnamed.reasons[0] == "(b) worker:0 exited 1 without naming worker:3 or worker:2 in its last line");
    auto j = nlohmann::json::parse(ChaosJson(f, "", 1700000000.5, 1700000000.6, p, {}, JudgeChaos(p, "", {})));
    CHECK(j["fault"]["then_kill"]["target"] == "worker:2");
    CHECK(j["fault"]["then_kill"]["sent_at"] == 1700000000.6);
    // Two tasks lost where no ring re-forms: nothing promised.
    const config::ClusterFile async = ParseChaosCluster(R"({"mode": "async"})");
    CHECK_FALSE(PromiseFor(async, FaultFor(async, {"--kill", "worker:1", "--at", "step", "--then-kill", "ps"}), 0).survival);
    auto again = ParseChaosArgs({"c.json", "--kill", "worker:1", "--at", "step", "--then-kill", "worker:1"});
    REQUIRE(again.ok());
    CHECK(ResolveFault(*again, four).status().message() == "--then-kill worker:1: the task --kill hits already; name another");
  }
}

}  // namespace
}  // namespace tfd::launcher
