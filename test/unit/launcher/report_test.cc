// tfctl report's and the dashboard's reading of a run folder: events -> curves, task states, and
// the events endpoint's offsets and caps. No sockets, no processes.
#include <filesystem>
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/dashboard.h"
#include "launcher/report.h"
#include "test/test_util.h"

namespace tfd::launcher {
namespace {

using testing::ReadAll;
using testing::TempDir;
using testing::WriteFile;

std::string Step(const std::string& task, int step, double loss) {
  return fmt::format(R"({{"ts": 1, "task": "{}", "event": "step", "epoch": 1, "global_step": {}, "loss": {}, "accuracy": 0.5}})", task, step, loss) +
         "\n";
}
std::string Epoch(const std::string& task, int epoch, int step, double loss) {
  return fmt::format(R"({{"ts": 1, "task": "{}", "event": "epoch", "epoch": {}, "global_step": {}, "loss": {}, "accuracy": 0.6, "samples_per_sec": 900, "test_accuracy": 0.7}})",
                     task, epoch, step, loss) +
         "\n";
}

const Chart& ChartOf(const RunCurves& c, const std::string& metric) {
  for (const Chart& ch : c.charts)
    if (ch.metric == metric) return ch;
  FAIL("no chart " << metric);
  return c.charts.front();
}

TEST_CASE("ExtractCurves takes loss from step events where a worker has them, else from its epoch events", "[unit][report]") {
  std::string text = R"({"ts": 1, "task": "ps:0", "event": "start", "pid": 3})" "\n";
  text += Step("worker:0", 5, 2.0) + Step("worker:0", 10, 1.5) + Epoch("worker:0", 1, 10, 1.7);
  text += Epoch("worker:1", 1, 10, 1.8) + Epoch("worker:1", 2, 20, 1.1);
  text += "not json\n";
  text += Step("worker:0", 15, 1.0).substr(0, 30);  // being written: left out
  const RunCurves c = ExtractCurves(text);
  CHECK(c.events == 6);
  CHECK(c.skipped == 1);
  const Chart& loss = ChartOf(c, "loss");
  REQUIRE(loss.series.size() == 2);  // the ps has no curve
  CHECK(loss.series[0].task == "worker:0");
  REQUIRE(loss.series[0].points.size() == 2);  // the step events, not the epoch's
  CHECK(loss.series[0].points[1].x == 10);
  CHECK(loss.series[0].points[1].y == 1.5);
  CHECK(loss.series[1].task == "worker:1");
  REQUIRE(loss.series[1].points.size() == 2);  // no step events: the epochs
  CHECK(loss.series[1].points[1].x == 20);
  const Chart& rate = ChartOf(c, "samples_per_sec");
  REQUIRE(rate.series.size() == 2);
  CHECK(rate.series[0].points.size() == 1);
  CHECK(rate.series[0].points[0].x == 1);  // per epoch
  CHECK(ChartOf(c, "test_accuracy").series.size() == 2);
  for (const Chart& ch : c.charts) CHECK(ch.metric != "val_accuracy");  // no worker has it
}

TEST_CASE("a model-parallel run draws one curve per replica, from its stage 0", "[unit][report][pipeline]") {
  auto start = [](const std::string& task, int replica, int stage) {
    return fmt::format(R"({{"ts": 1, "task": "{}", "event": "start", "stage": {}, "stages": 2, "replica": {}, "replicas": 2}})", task,
                       stage, replica) +
           "\n";
  };
  std::string text = start("worker:0", 0, 0) + start("worker:1", 0, 1) + start("worker:2", 1, 0) + start("worker:3", 1, 1);
  // Every stage logs its replica's loss; stage 1's lines must not draw a second curve.
  text += Epoch("worker:0", 1, 10, 1.7) + Epoch("worker:1", 1, 10, 1.7) + Epoch("worker:2", 1, 10, 1.9) + Epoch("worker:3", 1, 10, 1.9);
  text += Epoch("worker:0", 2, 20, 1.2) + Epoch("worker:1", 2, 20, 1.2);
  const RunCurves c = ExtractCurves(text);
  const Chart& loss = ChartOf(c, "loss");
  REQUIRE(loss.series.size() == 2);
  CHECK(loss.series[0].task == "replica 0");
  REQUIRE(loss.series[0].points.size() == 2);
  CHECK(loss.series[0].points[1].y == 1.2);
  CHECK(loss.series[1].task == "replica 1");
  CHECK(loss.series[1].points.size() == 1);
  CHECK(loss.series[1].points[0].y == 1.9);
  // A data-parallel run's start events (no stage) change nothing.
  const RunCurves plain = ExtractCurves(R"({"ts": 1, "task": "worker:0", "event": "start", "rank": 0})" "\n" + Epoch("worker:0", 1, 10, 1.7));
  REQUIRE(ChartOf(plain, "loss").series.size() == 1);
  CHECK(ChartOf(plain, "loss").series[0].task == "worker:0");
}

TEST_CASE("curves.svg has one path per worker and metric, with its point count", "[unit][report]") {
  const RunCurves c = ExtractCurves(Step("worker:0", 5, 2.0) + Step("worker:0", 10, 1.5) + Step("worker:1", 5, 2.5));
  const std::string svg = RenderCurvesSvg(c);
  CHECK(svg.find(R"(data-task="worker:0" data-metric="loss" data-points="2" d="M)") != std::string::npos);
  CHECK(svg.find(R"(data-task="worker:1" data-metric="loss" data-points="1" d="M)") != std::string::npos);
  CHECK(svg.find("http://www.w3.org/2000/svg") != std::string::npos);
}

TEST_CASE("task states come from start, done and error events, and summary.json's exit codes win", "[unit][report]") {
  const std::string text = R"({"task": "ps:0", "event": "start"})" "\n" R"({"task": "worker:0", "event": "start"})" "\n"
                           R"({"task": "worker:1", "event": "start"})" "\n" R"({"task": "worker:1", "event": "start"})" "\n"
                           R"({"task": "worker:0", "event": "done", "test_accuracy": 0.9})" "\n";
  std::vector<TaskState> tasks = TaskStatesFromEvents(text);
  REQUIRE(tasks.size() == 3);
  CHECK(tasks[0].state == "running");
  CHECK(tasks[1].state == "done");
  CHECK(tasks[1].test_accuracy == 0.9);
  CHECK(tasks[2].state == "restarted");
  CHECK(tasks[2].restarts == 1);
  REQUIRE(ApplySummary(R"({"exit_code": 1, "tasks": [{"task": "ps:0", "exit_code": 143, "restarts": 0},
                           {"task": "worker:1", "exit_code": 1, "restarts": 1}]})",
                       "summary.json", &tasks)
              .ok());
  CHECK(tasks[0].state == "stopped");
  CHECK(tasks[2].state == "failed (1)");
  const Status bad = ApplySummary(R"({"tasks": [{"task": "ps:0"}]})", "r/summary.json", &tasks);
  CHECK(bad.code() == Code::kInvalidArgument);
  CHECK(bad.message() == "r/summary.json: tasks[0]: expected \"task\" and an integer \"exit_code\"");
}

TEST_CASE("WriteReport names the missing or bad file, and a run with no events still gets a report", "[unit][report]") {
  TempDir dir;
  Status s = WriteReport(dir / "nope");
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("nope: not a run folder") != std::string::npos);
  s = WriteReport(dir.path());
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message() == (dir / "job.json") + ": no such file");
  WriteFile(dir / "job.json", "[1,");
  CHECK(WriteReport(dir.path()).message() == (dir / "job.json") + ": expected a JSON object (the job spec)");
  WriteFile(dir / "job.json", R"({"model": {"name": "mlp"}, "epochs": 3})");
  CHECK(WriteReport(dir.path()).message() == (dir / "metrics.jsonl") + ": no such file");
  WriteFile(dir / "metrics.jsonl", "");
  REQUIRE(WriteReport(dir.path()).ok());
  const std::string html = ReadAll(dir / "report.html");
  CHECK(html.find("No events yet") != std::string::npos);
  CHECK(html.find("model.name") != std::string::npos);
  CHECK(html.find("http://") == std::string::npos);  // nothing to fetch: it opens offline
  CHECK(std::filesystem::exists(dir / "curves.svg"));
  WriteFile(dir / "metrics.jsonl", "garbage\n");
  CHECK(WriteReport(dir.path()).message() == (dir / "metrics.jsonl") + ": no line is a JSON event");
  WriteFile(dir / "metrics.jsonl", Epoch("worker:0", 1, 10, 1.0));
  WriteFile(dir / "summary.json", "{");
  CHECK(WriteReport(dir.path()).message() == (dir / "summary.json") + ": not valid JSON");
}

TEST_CASE("the report shows the exported model: where, the commands that use it, and model.json's metrics", "[unit][report]") {
  TempDir dir;
  WriteFile(dir / "job.json", R"({"model": "mlp", "data": "data/mnist", "epochs": 1, "batch_size": 10, "optimizer": {"type": "sgd", "learning_rate": 0.1}})");
  WriteFile(dir / "metrics.jsonl", Epoch("worker:0", 1, 10, 1.0));
  const std::string model = dir / "model";
  std::filesystem::create_directories(model + "/1");
  WriteFile(model + "/1/model.json", R"({"format": "tfd-model", "version": 1, "metrics": {"test_accuracy": 0.9175, "epochs": 1}})");
  WriteFile(dir / "summary.json", fmt::format(R"({{"exit_code": 0, "model": {{"task": "worker:0", "path": "{}/1", "version": "1", "global_step": 583}},
                                                  "tasks": [{{"task": "worker:0", "exit_code": 0}}]}})",
                                              model));
  REQUIRE(WriteReport(dir.path()).ok());
  std::string html = ReadAll(dir / "report.html");
  CHECK(html.find("<table id=\"model\">") != std::string::npos);
  CHECK(html.find("<code>" + model + "/1</code>") != std::string::npos);
  CHECK(html.find("<code>tfd serve --model " + model + "</code>") != std::string::npos);
  CHECK(html.find("<code>tfd predict --model " + model + " --data data/mnist</code>") != std::string::npos);
  CHECK(html.find(R"(<tr data-metric="test_accuracy"><th>test_accuracy</th><td>0.9175</td></tr>)") != std::string::npos);
  // A remote chief's model: host:path, and no model.json read from this machine.
  WriteFile(dir / "summary.json", R"({"exit_code": 0, "model": {"task": "worker:0", "host": "pc-02", "path": "runs/x/model/1", "version": "1"},
                                      "tasks": [{"task": "worker:0", "exit_code": 0}]})");
  REQUIRE(WriteReport(dir.path()).ok());
  html = ReadAll(dir / "report.html");
  CHECK(html.find("<code>pc-02:runs/x/model/1</code>") != std::string::npos);
  CHECK(html.find("serve (on pc-02)") != std::string::npos);
  CHECK(html.find("<tr data-metric=") == std::string::npos);
  // A run that exported nothing says so.
  WriteFile(dir / "summary.json", R"({"exit_code": 0, "tasks": [{"task": "worker:0", "exit_code": 0}]})");
  REQUIRE(WriteReport(dir.path()).ok());
  CHECK(ReadAll(dir / "report.html").find("exported no model") != std::string::npos);
}

TEST_CASE("CommandsFor: tfd predict reads the job's test files, else its training files, quoted where a shell needs it", "[unit][report]") {
  const ModelSummary m{.path = "/runs/my run/model/2", .version = "2"};
  config::DataSpec data;
  data.format = config::DataSpec::Format::kCsv;
  data.train.paths = {"iris.csv"};
  ModelCommands c = CommandsFor(m, data);
  CHECK(c.serve == "tfd serve --model '/runs/my run/model'");
  CHECK(c.predict == "tfd predict --model '/runs/my run/model' --data iris.csv");
  data.format = config::DataSpec::Format::kNpy;
  data.test.x = "x_test.npy", data.test.y = "y_test.npy";
  CHECK(CommandsFor(m, data).predict == "tfd predict --model '/runs/my run/model' --data x_test.npy --labels y_test.npy");
}

TEST_CASE("ReadEventsPage hands out complete lines from a byte offset, within its caps", "[unit][dashboard]") {
  TempDir dir;
  const std::string a = Step("worker:0", 1, 1), b = Step("worker:0", 2, 1), c = Step("worker:1", 1, 1);
  WriteFile(dir / "m.jsonl", a + "oops\n" + b + c + "{\"task\": \"w");  // a bad line and one being written
  auto page = ReadEventsPage(dir / "m.jsonl", 0, /*max_lines=*/2, /*max_bytes=*/1 << 20);
  REQUIRE(page.ok());
  REQUIRE(page->lines.size() == 2);
  CHECK(page->lines[0] + "\n" == a);
  CHECK(page->skipped == 1);
  CHECK(page->more);
  const std::uint64_t after_b = a.size() + 5 + b.size();
  CHECK(page->next == after_b);
  page = ReadEventsPage(dir / "m.jsonl", page->next, 2, 1 << 20);
  REQUIRE(page.ok());
  REQUIRE(page->lines.size() == 1);
  CHECK(page->lines[0] + "\n" == c);
  CHECK(page->next == after_b + c.size());  // the partial line waits
  CHECK_FALSE(page->more);
  // The byte cap: only what fits, and never half a line.
  page = ReadEventsPage(dir / "m.jsonl", 0, 100, a.size() + 3);
  REQUIRE(page.ok());
  CHECK(page->lines.size() == 1);
  CHECK(page->next == a.size());
  CHECK(page->more);
  // A line longer than a whole answer is passed over, not waited on forever.
  page = ReadEventsPage(dir / "m.jsonl", 0, 100, 10);
  REQUIRE(page.ok());
  CHECK(page->lines.empty());
  CHECK(page->skipped == 1);
  CHECK(page->next == a.size());
  auto past = ReadEventsPage(dir / "m.jsonl", 1 << 20);
  CHECK(past.status().code() == Code::kInvalidArgument);
  CHECK(ReadEventsPage(dir / "none.jsonl", 0).status().code() == Code::kNotFound);
}

TEST_CASE("the dashboard's endpoints: the page, events from an offset, tasks live or from the files", "[unit][dashboard]") {
  TempDir dir;
  WriteFile(dir / "job.json", R"({"epochs": 3})");
  DashboardSite site(dir.path());
  auto get = [&](const std::string& target) { return site.Handle({.method = "GET", .target = target, .body = ""}); };
  http::Response page = get("/");
  CHECK(page.status == 200);
  CHECK(page.content_type.rfind("text/html", 0) == 0);
  CHECK(page.body.find("/api/events?since=") != std::string::npos);
  CHECK(page.body.find("src=\"http") == std::string::npos);  // our own script only
  // No metrics.jsonl yet: an empty answer, not an error.
  auto events = nlohmann::json::parse(get("/api/events?since=0").body);
  CHECK(events["events"].empty());
  WriteFile(dir / "metrics.jsonl", R"({"task": "worker:0", "event": "start"})" "\n" + Step("worker:0", 5, 1.25));
  events = nlohmann::json::parse(get("/api/events?since=0").body);
  REQUIRE(events["events"].size() == 2);
  CHECK(events["events"][1]["loss"] == 1.25);
  events = nlohmann::json::parse(get("/api/events?since=" + std::to_string(events["next"].get<std::uint64_t>())).body);
  CHECK(events["events"].empty());
  CHECK(get("/api/events?since=abc").status == 400);
  CHECK(get("/api/events?since=99999").status == 400);
  CHECK(get("/nope").status == 404);
  CHECK(site.Handle({.method = "POST", .target = "/", .body = ""}).status == 405);
  auto tasks = nlohmann::json::parse(get("/api/tasks").body);
  CHECK(tasks["live"] == false);
  REQUIRE(tasks["tasks"].size() == 1);
  CHECK(tasks["tasks"][0]["state"] == "running");
  site.SetTasks({{.task = "ps:0", .state = "running"}, {.task = "worker:0", .state = "restarted", .restarts = 1}});
  tasks = nlohmann::json::parse(get("/api/tasks").body);
  CHECK(tasks["live"] == true);
  REQUIRE(tasks["tasks"].size() == 2);
  CHECK(tasks["tasks"][1]["state"] == "restarted");
  CHECK(nlohmann::json::parse(get("/api/job").body)["epochs"] == 3);
}

}  // namespace
}  // namespace tfd::launcher
