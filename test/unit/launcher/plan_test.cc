#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/config/cluster_file.h"
#include "common/config/job_cluster.h"
#include "launcher/plan.h"

namespace tfd::launcher {
namespace {

config::ClusterFile Parse(const std::string& text) {
  auto f = config::ParseClusterFile(text, "c.json");
  INFO(f.status().ToString());
  REQUIRE(f.ok());
  return *f;
}

std::string ErrorOf(const std::string& text) {
  auto f = config::ParseClusterFile(text, "c.json");
  REQUIRE_FALSE(f.ok());
  CHECK(f.status().code() == Code::kInvalidArgument);
  return f.status().message();
}

constexpr const char* kTrain = R"("train": {"model": "mlp", "data": "d", "epochs": 1, "batch_size": 10,
  "optimizer": {"type": "sgd", "learning_rate": 0.1}})";

TEST_CASE("ShellQuote survives spaces, quotes and shell syntax", "[unit][launcher]") {
  CHECK(ShellQuote("plain") == "'plain'");
  CHECK(ShellQuote("it's") == R"('it'\''s')");
  CHECK(ShellQuote("a b; rm -rf / $(x) `y` \"z\"") == R"('a b; rm -rf / $(x) `y` "z"')");
  CHECK(ShellQuote("") == "''");
}

TEST_CASE("a local cluster file plans ps first, then the chief and workers, each with its TF_CONFIG", "[unit][launcher]") {
  auto f = Parse(std::string(R"({"cluster": {"ps": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "localhost:2002"]}, )") + kTrain +
                 R"(, "launch": {"tfd": "/opt/tfd", "workdir": "/srv", "env": {"A": "1"}}})");
  auto plan = MakePlan(f, {.job_path = "/runs/x/job.json"});
  REQUIRE(plan.size() == 3);
  CHECK(plan[0].task.ToString() == "ps:0");
  CHECK(plan[1].task.ToString() == "worker:0");
  CHECK(plan[2].task.ToString() == "worker:1");
  CHECK(plan[0].argv == std::vector<std::string>{"/opt/tfd", "--log-format", "json"});
  CHECK(plan[2].argv == std::vector<std::string>{"/opt/tfd", "--log-format", "json", "--job", "/runs/x/job.json"});
  CHECK(plan[2].local);
  CHECK(plan[2].workdir == "/srv");
  CHECK(plan[2].tf_config ==
        R"({"cluster":{"worker":["127.0.0.1:2001","localhost:2002"],"ps":["127.0.0.1:2000"]},"task":{"type":"worker","index":1}})");
  CHECK(plan[2].env == std::vector<std::string>{"TF_CONFIG=" + plan[2].tf_config, "A=1"});
}

TEST_CASE("a remote task is one ssh argv with every remote word quoted and host keys checked", "[unit][launcher]") {
  auto f = Parse(std::string(R"({"cluster": {"ps": ["pc-01:2000"], "worker": ["pc-02:2001"]}, )") + kTrain +
                 R"(, "launch": {"tfd": "/opt/my tfd", "env": {"NOTE": "it's fine"},
                     "hosts": {"pc-02": {"workdir": "/srv/a b", "ssh": {"user": "lab", "port": 2222, "identity_file": "/k",
                                                                       "options": ["Compression=yes"]}}}}})");
  auto plan = MakePlan(f, {.job_path = "/r/job.json", .remote_run_dir = "runs/r1", .job_json = R"({"a": "it's"})"});
  const TaskPlan& w = plan[1];
  CHECK_FALSE(w.local);
  const std::vector<std::string> head = {"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
                                         "-o", "ServerAliveCountMax=3", "-p", "2222", "-i", "/k", "-l", "lab", "-o",
                                         "Compression=yes", "--", "pc-02"};
  REQUIRE(w.argv.size() == head.size() + 1);
  CHECK(std::vector<std::string>(w.argv.begin(), w.argv.end() - 1) == head);
  // Enter the workdir, write the job, start tfd in its own session with a pid file, and stop that
  // session when ssh's stdin (kept on fd 3) closes; the line's status is tfd's.
  CHECK(w.argv.back() ==
        R"(cd '/srv/a b' && mkdir -p 'runs/r1' && printf '%s\n' '{"a": "it'\''s"}' > 'runs/r1'/job.json && exec 3<&0 && )"
        R"({ env TF_CONFIG=')" + w.tf_config +
            R"(' NOTE='it'\''s fine' setsid '/opt/my tfd' '--log-format' 'json' '--job' 'runs/r1/job.json' '--summaries-dir' 'runs/r1' '--export-dir' 'runs/r1/model' </dev/null 3<&- & )"
            R"(pid=$!; echo $pid > 'runs/r1'/'worker:0.pid'; )"
            R"(( cat <&3 >/dev/null; kill -TERM -$pid 2>/dev/null; sleep 5; kill -KILL -$pid 2>/dev/null ) >/dev/null 2>&1 & )"
            R"(wait $pid; })");
  for (const std::string& a : plan[0].argv) CHECK(a.find("StrictHostKeyChecking") == std::string::npos);
  auto opt_in = MakePlan(f, {.job_path = "/r/job.json", .accept_new_hostkeys = true});
  CHECK(std::find(opt_in[1].argv.begin(), opt_in[1].argv.end(), "StrictHostKeyChecking=accept-new") != opt_in[1].argv.end());
}

TEST_CASE("every task writes its summaries into its run folder, on its own host", "[unit][launcher]") {
  auto f = Parse(std::string(R"({"cluster": {"ps": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "pc-02:2002"]}, )") + kTrain + "}");
  auto plan = MakePlan(f, {.job_path = "/runs/x/job.json", .run_dir = "/runs/x", .remote_run_dir = "runs/x", .job_json = "{}"});
  REQUIRE(plan.size() == 3);
  auto has = [](const std::vector<std::string>& argv, const std::string& value) {
    for (std::size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == "--summaries-dir") return argv[i + 1] == value;
    return false;
  };
  CHECK(has(plan[0].argv, "/runs/x"));  // the ps too
  CHECK(has(plan[1].argv, "/runs/x"));
  REQUIRE_FALSE(plan[2].local);
  CHECK(plan[2].argv.back().find("'--summaries-dir' 'runs/x'") != std::string::npos);  // relative to the remote workdir
}

TEST_CASE("every training task exports into RUN/model on its own host, unless the job names export.dir", "[unit][launcher]") {
  const std::string cluster = R"({"cluster": {"ps": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "pc-02:2002"]}, )";
  const PlanOptions options{.job_path = "/runs/x/job.json", .run_dir = "/runs/x", .remote_run_dir = "runs/x", .job_json = "{}"};
  auto export_dir = [](const std::vector<std::string>& argv) -> std::string {
    for (std::size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == "--export-dir") return argv[i + 1];
    return "";
  };
  auto plan = MakePlan(Parse(cluster + kTrain + "}"), options);
  REQUIRE(plan.size() == 3);
  CHECK(export_dir(plan[0].argv).empty());  // a ps trains nothing
  CHECK(export_dir(plan[1].argv) == "/runs/x/model");
  REQUIRE_FALSE(plan[2].local);
  CHECK(plan[2].argv.back().find("'--export-dir' 'runs/x/model'") != std::string::npos);  // relative to the remote workdir
  // The job's own export.dir wins: tfctl adds no flag that would override it.
  std::string own = kTrain;
  own.insert(own.rfind('}'), R"(, "export": {"dir": "/models/mnist"})");
  plan = MakePlan(Parse(cluster + own + "}"), options);
  CHECK(export_dir(plan[1].argv).empty());
  CHECK(plan[2].argv.back().find("--export-dir") == std::string::npos);
}

TEST_CASE("the run's token reaches tasks as a file path or on ssh's stdin, never on a command line", "[unit][launcher]") {
  auto f = Parse(std::string(R"({"cluster": {"ps": ["127.0.0.1:2000"], "worker": ["pc-02:2001"]}, )") + kTrain + "}");
  const std::string hex(64, 'a');
  auto plan = MakePlan(f, {.job_path = "/r/job.json", .remote_run_dir = "runs/r1", .job_json = "{}", .token_path = "/r/token",
                           .token_hex = hex});
  REQUIRE(plan.size() == 2);
  const TaskPlan& ps = plan[0];
  const TaskPlan& w = plan[1];
  REQUIRE(ps.local);
  CHECK(std::vector<std::string>(ps.argv.begin() + 1, ps.argv.end()) == std::vector<std::string>{"--log-format", "json", "--token-file", "/r/token"});
  CHECK(ps.stdin_data.empty());
  REQUIRE_FALSE(w.local);
  CHECK(w.stdin_data == hex + "\n");
  for (const TaskPlan& t : plan) {
    for (const std::string& a : t.argv) CHECK(a.find(hex) == std::string::npos);
    for (const std::string& e : t.env) CHECK(e.find(hex) == std::string::npos);
  }
  // The remote line reads one line of stdin into a file made under umask 077, before ssh's stdin
  // is kept on fd 3, and tfd reads that file.
  CHECK(w.argv.back().find(R"(> 'runs/r1'/job.json && ( umask 077 && IFS= read -r t && printf '%s\n' "$t" > 'runs/r1'/token ) && )"
                           R"(exec 3<&0 && )") != std::string::npos);
  CHECK(w.argv.back().find(R"('--token-file' 'runs/r1/token')") != std::string::npos);
}

TEST_CASE("launch.restart gives the named roles max_restarts restarts each", "[unit][launcher]") {
  auto f = Parse(std::string(R"({"cluster": {"ps": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "127.0.0.1:2002"]}, )") + kTrain +
                 R"(, "launch": {"restart": {"ps": "on-failure", "worker": "never"}, "max_restarts": 5}})");
  auto plan = MakePlan(f, {.job_path = "/r/job.json"});
  REQUIRE(plan.size() == 3);
  CHECK(plan[0].max_restarts == 5);
  CHECK(plan[1].max_restarts == 0);
  CHECK(plan[2].max_restarts == 0);
  auto defaults = MakePlan(Parse(std::string(R"({"cluster": {"worker": ["127.0.0.1:2001"]}, )") + kTrain +
                                 R"(, "launch": {"restart": {"worker": "on-failure"}}})"),
                           {.job_path = "/r/job.json"});
  CHECK(defaults[0].max_restarts == 3);
  CHECK(ErrorOf(std::string(R"({"cluster": {"worker": ["a:1"]}, )") + kTrain + R"(, "launch": {"restart": {"ps": "always"}}})") ==
        "c.json: launch.restart.ps: unknown policy \"always\" (expected on-failure or never)");
  CHECK(ErrorOf(std::string(R"({"cluster": {"worker": ["a:1"]}, )") + kTrain + R"(, "launch": {"restart": {"master": "never"}}})") ==
        "c.json: launch.restart.master: unknown field (expected one of: chief, evaluator, ps, worker)");
  CHECK(ErrorOf(std::string(R"({"cluster": {"worker": ["a:1"]}, )") + kTrain + R"(, "launch": {"max_restarts": 1000}})") ==
        "c.json: launch.max_restarts: expected an integer in [0, 100], got 1000");
}

// A cluster of one ps, one worker and an evaluator on `evaluator_host`, training `train_extra`.
std::string WithEvaluator(const std::string& train_extra, const std::string& evaluator_host = "127.0.0.1") {
  return R"({"cluster": {"ps": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001"], "evaluator": [")" + evaluator_host +
         R"(:2002"]}, "train": {"model": "mlp", "data": "d", "epochs": 1, "batch_size": 10,
         "optimizer": {"type": "sgd", "learning_rate": 0.1})" + train_extra + R"(}, "launch": {"restart": {"evaluator": "on-failure"}}})";
}

TEST_CASE("an evaluator task is planned last, with the job, and launch.restart may name it", "[unit][launcher][evaluator]") {
  auto f = Parse(WithEvaluator(R"(, "checkpoint": {"dir": "ck"}, "evaluation": "evaluator")"));
  CHECK(f.train.evaluation == config::Evaluation::kEvaluator);
  auto plan = MakePlan(f, {.job_path = "/r/job.json"});
  REQUIRE(plan.size() == 3);
  CHECK(plan[2].task.ToString() == "evaluator:0");
  CHECK(plan[2].max_restarts == 3);
  CHECK(plan[1].max_restarts == 0);
  CHECK(fmt::format("{}", fmt::join(plan[2].argv, " ")).find("--job /r/job.json") != std::string::npos);
  CHECK(plan[2].tf_config.find(R"("task":{"type":"evaluator","index":0})") != std::string::npos);
  // "chief" (the default) may have an evaluator too: both evaluate.
  CHECK(Parse(WithEvaluator(R"(, "checkpoint": {"dir": "ck"})")).train.evaluation == config::Evaluation::kChief);
}

TEST_CASE("an evaluator task needs checkpoints and an evaluation other than none", "[unit][launcher][evaluator]") {
  CHECK(ErrorOf(WithEvaluator("")) ==
        "c.json: train.checkpoint: missing: the cluster has an evaluator task, which evaluates the chief's checkpoints (set "
        "checkpoint.dir)");
  CHECK(ErrorOf(WithEvaluator(R"(, "checkpoint": {"dir": "ck"}, "evaluation": "none")")) ==
        "c.json: train.evaluation: \"none\", but the cluster has an evaluator task (remove it, or set \"evaluation\": \"evaluator\")");
  // An allreduce ring writes checkpoints (its rank 0): an evaluator beside it has them to read.
  const auto ring = config::ParseClusterFile(
      R"({"cluster": {"worker": ["127.0.0.1:2001", "127.0.0.1:2003"], "evaluator": ["127.0.0.1:2002"]}, "train": {"model": "mlp",
         "data": "d", "epochs": 1, "batch_size": 10, "optimizer": {"type": "sgd", "learning_rate": 0.1}, "update": {"mode": "allreduce"},
         "checkpoint": {"dir": "ck"}, "evaluation": "evaluator"}})",
      "c.json");
  INFO(ring.status().ToString());
  CHECK(ring.ok());
  config::JobSpec job;
  config::ClusterSpec without;
  CHECK(config::CheckEvaluation(without, job, "j.json: ").ok());
}

TEST_CASE("launch.timeouts reach every task as tfd's timeout flags", "[unit][launcher]") {
  auto f = Parse(std::string(R"({"cluster": {"ps": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "pc-02:2002"]}, )") + kTrain +
                 R"(, "launch": {"timeouts": {"peer": 1.5, "reconnect": 20, "step": 30}}})");
  CHECK(f.launch.timeouts.peer_secs == 1.5);
  CHECK(f.launch.timeouts.ReconnectOrDefault() == 20);
  CHECK(f.launch.timeouts.startup_secs == 0);
  auto plan = MakePlan(f, {.job_path = "/r/job.json"});
  REQUIRE(plan.size() == 3);
  for (const TaskPlan& p : plan) {
    const std::string words = fmt::format("{}", fmt::join(p.argv, " "));
    INFO(words);
    CHECK(words.find("--peer-timeout") != std::string::npos);
    CHECK(words.find("--startup-timeout") == std::string::npos);  // not given: tfd's default
  }
  auto has = [](const std::vector<std::string>& argv, const std::string& flag, const std::string& value) {
    for (std::size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == flag && argv[i + 1] == value) return true;
    return false;
  };
  CHECK(has(plan[0].argv, "--peer-timeout", "1.5"));
  CHECK(has(plan[1].argv, "--reconnect-timeout", "20"));
  CHECK(has(plan[1].argv, "--step-timeout", "30"));
  CHECK(plan[2].argv.back().find("'--reconnect-timeout' '20'") != std::string::npos);  // the remote one, quoted in ssh's line
  CHECK(plan[2].ssh.size() == plan[2].argv.size() - 1);
  CHECK(plan[0].ssh.empty());
  auto defaults = Parse(std::string(R"({"cluster": {"worker": ["127.0.0.1:2001"]}, )") + kTrain + "}");
  CHECK(defaults.launch.timeouts.PeerOrDefault() == 8);
  CHECK(defaults.launch.timeouts.ReconnectOrDefault() == 60);
  CHECK(ErrorOf(std::string(R"({"cluster": {"worker": ["a:1"]}, )") + kTrain + R"(, "launch": {"timeouts": {"peer": 0}}})") ==
        "c.json: launch.timeouts.peer: expected a number in (0, 100000], got 0");
  CHECK(ErrorOf(std::string(R"({"cluster": {"worker": ["a:1"]}, )") + kTrain + R"(, "launch": {"timeouts": {"reconect": 5}}})") ==
        "c.json: launch.timeouts.reconect: unknown field (expected one of: peer, reconnect, startup, step)");
  CHECK(ErrorOf(std::string(R"({"cluster": {"worker": ["a:1"]}, )") + kTrain + R"(, "launch": {"timeouts": 5}})")
            .rfind("c.json: launch.timeouts: ", 0) == 0);
}

TEST_CASE("cluster file errors name the file and the JSON path", "[unit][launcher]") {
  const std::string c = R"("cluster": {"ps": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001"]})";
  CHECK(ErrorOf("[") == "c.json: not valid JSON");
  CHECK(ErrorOf(std::string("{") + kTrain + "}") ==
        "c.json: cluster: missing (expected {\"ps\": [\"host:port\", ...], \"worker\": [...]})");
  CHECK(ErrorOf("{" + c + "}") == "c.json: train: missing (expected the job spec: model, data, epochs, batch_size, optimizer, ...)");
  CHECK(ErrorOf(R"({"cluster": {"worker": ["127.0.0.1:2001", "127.0.0.1:2001"]}, )" + std::string(kTrain) + "}") ==
        R"(c.json: cluster.worker[1]: "127.0.0.1:2001" is listed twice)");
  CHECK(ErrorOf(R"({"cluster": {"worker": ["pc-03"]}, )" + std::string(kTrain) + "}") == R"(c.json: cluster.worker[0]: "pc-03" has no port)");
  CHECK(ErrorOf("{" + c + R"(, "train": {"model": "mlp"}})") == "c.json: train.data: missing (expected a folder with the MNIST IDX files, or an object naming your data's files)");
  CHECK(ErrorOf("{" + c + "," + kTrain + R"(, "launch": {"ssh": {"port": 0}}})") ==
        "c.json: launch.ssh.port: expected an integer in [1, 65535], got 0");
  CHECK(ErrorOf("{" + c + "," + kTrain + R"(, "launch": {"ssh": {"options": ["StrictHostKeyChecking=no"]}}})") ==
        "c.json: launch.ssh.options[0]: tfctl never turns host-key checking off (use --accept-new-hostkeys for new hosts)");
  CHECK(ErrorOf("{" + c + "," + kTrain + R"(, "launch": {"env": {"TF_CONFIG": "x"}}})") ==
        "c.json: launch.env.TF_CONFIG: tfctl sets TF_CONFIG for each task itself");
  CHECK(ErrorOf("{" + c + "," + kTrain + R"(, "launch": {"hosts": {"pc-9": {"tfd": "x"}}}})") ==
        R"(c.json: launch.hosts.pc-9: no task of the cluster runs on "pc-9")");
  CHECK(ErrorOf("{" + c + "," + kTrain + R"(, "launch": {"tdf": "x"}})").rfind("c.json: launch.tdf: unknown field", 0) == 0);
  CHECK(ErrorOf("{" + c + "," + kTrain + R"(, "name": "a/b"})") ==
        R"(c.json: name: "a/b": use letters, digits, '-', '_' and '.' (it names the run folder))");
}

TEST_CASE("event lines parse into numbers and strings", "[unit][launcher]") {
  auto e = config::ParseEvent(R"({"ts":1.5,"task":"worker:1","event":"epoch","epoch":3,"loss":0.25,"params_sha256":"ab"})");
  REQUIRE(e.ok());
  CHECK(e->task == "worker:1");
  CHECK(e->event == "epoch");
  CHECK(e->Number("epoch") == 3);
  CHECK(e->Number("missing", 7) == 7);
  CHECK(e->strings["params_sha256"] == "ab");
  CHECK_FALSE(config::ParseEvent("2026-11-22 info epoch=3").ok());
  CHECK_FALSE(config::ParseEvent(R"({"no_event": 1})").ok());
}

TEST_CASE("WithWorkers grows an elastic run: new ranks after the run's, tfd.base_workers set, places kept", "[unit][launcher][scale]") {
  auto f = Parse(std::string(R"({"cluster": {"ps": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "127.0.0.1:2002"]}, )") + kTrain +
                 R"(, "launch": {"tfd": "/opt/tfd", "metrics": {"port_base": 9400}}})");
  CHECK(WithWorkers(f, 2).cluster.base_workers == -1);  // nothing to grow
  const config::ClusterFile grown = WithWorkers(f, 4);
  REQUIRE(grown.cluster.worker.size() == 4);
  CHECK(grown.cluster.base_workers == 2);
  CHECK(grown.cluster.worker[2].ToString() == "127.0.0.1:2003");
  CHECK(grown.cluster.worker[3].ToString() == "127.0.0.1:2004");
  // The run's tasks keep their cluster id: only the first base_workers workers count.
  CHECK(grown.cluster.Id() == f.cluster.Id());
  auto plan = MakePlan(grown, {.job_path = "/r/job.json"});
  REQUIRE(plan.size() == 5);
  CHECK(plan[3].task.ToString() == "worker:2");
  CHECK(plan[3].tf_config.ends_with(R"("task":{"type":"worker","index":2},"tfd":{"base_workers":2}})"));
  auto parsed = config::ParseTfConfig(plan[4].tf_config, "TF_CONFIG");
  REQUIRE(parsed.ok());
  CHECK(parsed->cluster.base_num_workers() == 2);
  CHECK(parsed->cluster.Id() == f.cluster.Id());
  // A joiner's metrics port comes after every task the run started with.
  CHECK(plan[3].metrics_target == "127.0.0.1:9403");
  CHECK(plan[1].tf_config.find("base_workers") != std::string::npos);  // a grown file's every TF_CONFIG says so
}

}  // namespace
}  // namespace tfd::launcher

namespace tfd::launcher {
namespace {

bool HasFlag(const std::vector<std::string>& argv, const std::string& flag, const std::string& value) {
  for (std::size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == flag && argv[i + 1] == value) return true;
  return false;
}

TEST_CASE("launch.metrics: local tasks get the free ports found for them, the run name, and a file-SD target each",
          "[unit][launcher][metrics]") {
  auto f = Parse(std::string(R"({"cluster": {"ps": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "pc-02:2002"]}, )") + kTrain + "}");
  CHECK(f.launch.metrics.enabled);
  auto plan = MakePlan(f, {.job_path = "/r/job.json", .run_name = "20260101-000000-t", .metrics_ports = {9001, 9002, 9003}});
  REQUIRE(plan.size() == 3);
  CHECK(HasFlag(plan[0].argv, "--metrics", "127.0.0.1:9001"));
  CHECK(HasFlag(plan[0].argv, "--run-name", "20260101-000000-t"));
  CHECK(HasFlag(plan[1].argv, "--metrics", "127.0.0.1:9002"));
  CHECK(plan[1].metrics_target == "127.0.0.1:9002");
  // A remote task has no port of its own without port_base.
  CHECK(plan[2].metrics_target.empty());
  CHECK(plan[2].argv.back().find("--metrics") == std::string::npos);
  CHECK(plan[2].argv.back().find("'--run-name' '20260101-000000-t'") != std::string::npos);
  CHECK(TargetsJson(plan, "20260101-000000-t") ==
        "[\n"
        "  {\"targets\": [\"127.0.0.1:9001\"], \"labels\": {\"job\": \"ps\", \"task\": \"0\", \"run\": \"20260101-000000-t\"}},\n"
        "  {\"targets\": [\"127.0.0.1:9002\"], \"labels\": {\"job\": \"worker\", \"task\": \"0\", \"run\": \"20260101-000000-t\"}}\n"
        "]\n");
}

TEST_CASE("launch.metrics port_base gives task k port base + k on every host; false turns metrics off", "[unit][launcher][metrics]") {
  auto f = Parse(std::string(R"({"cluster": {"ps": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "pc-02:2002"]}, )") + kTrain +
                 R"(, "launch": {"metrics": {"port_base": 9400}}})");
  auto plan = MakePlan(f, {.job_path = "/r/job.json", .metrics_ports = {1, 2, 3}});
  CHECK(HasFlag(plan[0].argv, "--metrics", "127.0.0.1:9400"));
  CHECK(HasFlag(plan[1].argv, "--metrics", "127.0.0.1:9401"));
  CHECK(plan[2].argv.back().find("'--metrics' ':9402'") != std::string::npos);  // every interface of pc-02
  CHECK(plan[2].metrics_target == "pc-02:9402");
  auto off = MakePlan(Parse(std::string(R"({"cluster": {"worker": ["127.0.0.1:2001"]}, )") + kTrain + R"(, "launch": {"metrics": false}})"),
                      {.job_path = "/r/job.json", .metrics_ports = {9001}});
  CHECK(off[0].metrics_target.empty());
  CHECK(std::find(off[0].argv.begin(), off[0].argv.end(), "--metrics") == off[0].argv.end());
  CHECK(TargetsJson(off, "r") == "[]\n");
}

TEST_CASE("launch.metrics errors name the JSON path and what was expected", "[unit][launcher][metrics]") {
  const std::string head = std::string(R"({"cluster": {"worker": ["a:1", "a:2"]}, )") + kTrain;
  CHECK(ErrorOf(head + R"(, "launch": {"metrics": "yes"}})") ==
        "c.json: launch.metrics: expected true, false or {\"enabled\": BOOL, \"port_base\": PORT}, got \"yes\"");
  CHECK(ErrorOf(head + R"(, "launch": {"metrics": {"port_base": 0}}})") ==
        "c.json: launch.metrics.port_base: expected an integer in [1, 65535], got 0");
  CHECK(ErrorOf(head + R"(, "launch": {"metrics": {"port": 9400}}})") ==
        "c.json: launch.metrics.port: unknown field (expected one of: enabled, port_base)");
  CHECK(ErrorOf(head + R"(, "launch": {"metrics": {"enabled": 1}}})") == "c.json: launch.metrics.enabled: expected true or false, got 1");
  CHECK(ErrorOf(head + R"(, "launch": {"metrics": {"port_base": 65535}}})") ==
        "c.json: launch.metrics.port_base: 65535 + 2 tasks goes past port 65535");
}

TEST_CASE("launch.tasks places one training task on a GPU and tfctl checks the shares of each GPU", "[unit][launcher][gpu]") {
  const std::string cluster = R"({"cluster": {"ps": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "127.0.0.1:2002", "pc-02:2003"]}, )";
  auto f = Parse(cluster + kTrain +
                 R"(, "launch": {"tasks": {"worker:0": {"device": "cuda:0", "gpu_memory_fraction": 0.5},
                                            "worker:1": {"device": "cuda:0", "gpu_memory_fraction": 0.5},
                                            "worker:2": {"device": "cuda:0"}}}})");
  auto plan = MakePlan(f, {.job_path = "/r/job.json"});
  REQUIRE(plan.size() == 4);
  const std::string ps = fmt::format("{}", fmt::join(plan[0].argv, " "));
  CHECK(ps.find("--device") == std::string::npos);  // a ps never touches a GPU
  CHECK(fmt::format("{}", fmt::join(plan[1].argv, " ")).find("--device cuda:0 --gpu-memory-fraction 0.5") != std::string::npos);
  CHECK(plan[3].argv.back().find("'--device' 'cuda:0'") != std::string::npos);
  CHECK(plan[3].argv.back().find("--gpu-memory-fraction") == std::string::npos);  // the job's (1): alone on pc-02's GPU

  // Two tasks on one host's cuda:0 at the job's default fraction (1) ask for twice its memory.
  CHECK(ErrorOf(cluster + R"("train": {"model": "mlp", "data": "d", "epochs": 1, "batch_size": 10, "device": "cuda:0", "optimizer": {"type": "sgd", "learning_rate": 0.1}}})") ==
        "c.json: launch.tasks: the tasks on 127.0.0.1 cuda:0 (worker:0 1, worker:1 1) ask for 2 of its memory in all; at most 1 (set "
        "gpu_memory_fraction per task under launch.tasks, or the job's)");
  // The same with shares that fit, or with one of them moved to another GPU, is fine.
  Parse(cluster + R"("train": {"model": "mlp", "data": "d", "epochs": 1, "batch_size": 10, "device": "cuda:0", "gpu_memory_fraction": 0.5, "optimizer": {"type": "sgd", "learning_rate": 0.1}}})");
  Parse(cluster + R"("train": {"model": "mlp", "data": "d", "epochs": 1, "batch_size": 10, "device": "cuda:0", "optimizer": {"type": "sgd", "learning_rate": 0.1}},
                     "launch": {"tasks": {"worker:1": {"device": "cuda:1"}}}})");
  CHECK(ErrorOf(cluster + kTrain + R"(, "launch": {"tasks": {"ps:0": {"device": "cuda:0"}}}})") ==
        "c.json: launch.tasks.ps:0: not a training task of the cluster (expected chief:0 or worker:N; a ps or evaluator task never uses a GPU)");
  CHECK(ErrorOf(cluster + kTrain + R"(, "launch": {"tasks": {"worker:1": {"device": "gpu1"}}}})") ==
        "c.json: launch.tasks.worker:1.device: expected \"cpu\" or \"cuda:N\", got \"gpu1\"");
  CHECK(ErrorOf(cluster + kTrain + R"(, "launch": {"tasks": {"worker:1": {"gpu_memory_fraction": 1.5}}}})").find(
            "c.json: launch.tasks.worker:1.gpu_memory_fraction: expected a number in (0, 1]") == 0);
}

}  // namespace
}  // namespace tfd::launcher
