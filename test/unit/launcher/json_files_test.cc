// The JSON that tfctl writes (summary.json, TF_CONFIG, targets.json, its own JSON lines, scale.request
// and scale.reply, the dashboard's events page), built with nlohmann and read back by nlohmann:
// strings with quotes, backslashes, control characters, non-ASCII and stray bytes, and numbers that
// are not finite, never make invalid JSON.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/config/cluster.h"
#include "common/config/json_writer.h"
#include "launcher/dashboard.h"
#include "launcher/plan.h"
#include "launcher/run_summary.h"
#include "launcher/runner.h"
#include "launcher/scale.h"
#include "test/test_util.h"

namespace tfd::launcher {
namespace {

using nlohmann::json;
using testing::ReadAll;
using testing::TempDir;
using testing::WriteFile;

// Quotes, backslashes, control characters (a tab, a newline, 0x01, 0x1f, DEL) and non-ASCII.
const std::string kAwkward = "q\"uo\"te b\\ack\\slash \t tab \n newline \x01\x1f\x7f caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac";
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

json Parsed(const std::string& text) {
  INFO(text);
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

TEST_CASE("JsonText writes one line with spaces, opens the outer levels asked for, and is dump(2) with every level open",
          "[unit][json]") {
  const nlohmann::ordered_json j = {{"b", 1}, {"a", {{"x", {1, 2}}, {"y", nlohmann::ordered_json::object()}}}, {"c", nlohmann::ordered_json::array()}};
  CHECK(config::JsonText(j) == R"({"b": 1, "a": {"x": [1, 2], "y": {}}, "c": []})");
  CHECK(config::JsonText(j, 1) == "{\n  \"b\": 1,\n  \"a\": {\"x\": [1, 2], \"y\": {}},\n  \"c\": []\n}");
  CHECK(config::JsonText(j, config::kAllLevels) == j.dump(2));
  CHECK(config::CompactJson(j) == j.dump());
  const json sorted = {{"b", 1}, {"a", 2}};  // a nlohmann::json object is sorted
  CHECK(config::JsonText(sorted) == R"({"a": 2, "b": 1})");
  CHECK(config::JsonText(nlohmann::ordered_json::array(), 2) == "[]");
}

TEST_CASE("a NaN or infinite number is written as null and stray bytes as U+FFFD: the text always parses", "[unit][json]") {
  const nlohmann::ordered_json j = {{"nan", kNaN}, {"inf", kInf}, {"minus_inf", -kInf}, {"bytes", "ok \xff\xfe end"}, {"awkward", kAwkward}};
  for (int levels : {0, 1, config::kAllLevels}) {
    const json back = Parsed(config::JsonText(j, levels));
    CHECK(back["nan"].is_null());
    CHECK(back["inf"].is_null());
    CHECK(back["minus_inf"].is_null());
    CHECK(back["bytes"] == "ok \xef\xbf\xbd\xef\xbf\xbd end");
    CHECK(back["awkward"] == kAwkward);
  }
  CHECK(Parsed(config::CompactJson(j))["awkward"] == kAwkward);
}

TEST_CASE("summary.json round-trips a run folder and task name with quotes, backslashes, control characters and non-ASCII",
          "[unit][json][summary]") {
  RunSummary s{.run_dir = "/runs/" + kAwkward, .exit_code = 1};
  s.tasks.push_back({.task = kAwkward, .exit_code = 137, .restarts = 2, .ended_at = 1795322136.9714, .past_deadline = true,
                     .test_accuracy = 0.9712, .global_step = 1200, .params_sha256 = "ab\"\\\n"});
  s.tasks.push_back({.task = "ps:0", .exit_code = 0, .scaled_down = true});
  const std::string text = SummaryJson(s);
  const json j = Parsed(text);
  CHECK(j["run_dir"] == "/runs/" + kAwkward);
  CHECK(j["tasks"][0]["task"] == kAwkward);
  CHECK(j["tasks"][0]["ended_at"] == 1795322136.971);  // to the millisecond
  CHECK(j["tasks"][0]["global_step"].is_number_integer());
  CHECK_FALSE(j["tasks"][1].contains("past_deadline"));  // written only when true
  CHECK_FALSE(j["tasks"][1].contains("test_accuracy"));
  CHECK(text.find("\n    {\"task\": \"ps:0\", \"exit_code\": 0") != std::string::npos);  // one task a line

  Result<RunSummary> back = ParseSummary(text, "summary.json");
  REQUIRE(back.ok());
  CHECK(back->run_dir == s.run_dir);
  CHECK(back->exit_code == 1);
  REQUIRE(back->tasks.size() == 2);
  const TaskSummary& t = back->tasks[0];
  CHECK(t.task == kAwkward);
  CHECK(t.exit_code == 137);
  CHECK(t.restarts == 2);
  CHECK(t.past_deadline);
  CHECK(t.test_accuracy == 0.9712);
  CHECK(t.global_step == 1200);
  CHECK(t.params_sha256 == "ab\"\\\n");
  CHECK(back->tasks[1].scaled_down);
  CHECK_FALSE(back->tasks[1].test_accuracy.has_value());
}

TEST_CASE("summary.json with a NaN or infinite test accuracy is valid JSON, read back as no accuracy", "[unit][json][summary]") {
  for (double bad : {kNaN, kInf}) {
    RunSummary s{.run_dir = "r"};
    s.tasks.push_back({.task = "worker:0", .exit_code = 0, .ended_at = kNaN, .test_accuracy = bad});
    const std::string text = SummaryJson(s);
    const json j = Parsed(text);
    CHECK(j["tasks"][0]["test_accuracy"].is_null());
    CHECK(j["tasks"][0]["ended_at"].is_null());
    Result<RunSummary> back = ParseSummary(text, "summary.json");
    REQUIRE(back.ok());
    CHECK_FALSE(back->tasks[0].test_accuracy.has_value());
    CHECK(back->tasks[0].ended_at == 0);
  }
}

TEST_CASE("summary.json keeps the exported model, with its host when it is on another machine", "[unit][json][summary]") {
  RunSummary s{.run_dir = "/r", .exit_code = 0};
  s.model = ModelSummary{.task = "worker:0", .host = "pc-02", .path = "/srv/runs/x/model/3", .version = "3", .global_step = 1200};
  s.tasks.push_back({.task = "worker:0", .exit_code = 0});
  Result<RunSummary> back = ParseSummary(SummaryJson(s), "summary.json");
  REQUIRE(back.ok());
  REQUIRE(back->model.has_value());
  CHECK(back->model->task == "worker:0");
  CHECK(back->model->path == "/srv/runs/x/model/3");
  CHECK(back->model->version == "3");
  CHECK(back->model->global_step == 1200);
  CHECK(back->model->base() == "/srv/runs/x/model");
  CHECK(back->model->where() == "pc-02:/srv/runs/x/model/3");
  s.model->host.clear();
  back = ParseSummary(SummaryJson(s), "summary.json");
  REQUIRE(back.ok());
  CHECK(back->model->where() == "/srv/runs/x/model/3");
  CHECK(SummaryJson(s).find("\"host\"") == std::string::npos);
  s.model.reset();  // a run that exported nothing has no "model"
  CHECK(SummaryJson(s).find("\"model\"") == std::string::npos);
  back = ParseSummary(SummaryJson(s), "summary.json");
  REQUIRE(back.ok());
  CHECK_FALSE(back->model.has_value());
}

TEST_CASE("ParseSummary names the file and the field of the wrong type", "[unit][json][summary]") {
  auto error = [](const std::string& text) {
    Result<RunSummary> s = ParseSummary(text, "r/summary.json");
    REQUIRE_FALSE(s.ok());
    CHECK(s.status().code() == Code::kInvalidArgument);
    return s.status().message();
  };
  CHECK(error("{") == "r/summary.json: not valid JSON");
  CHECK(error("[]") == "r/summary.json: expected an object with a \"tasks\" array");
  CHECK(error(R"({"tasks": [{"task": "ps:0", "exit_code": 0.5}]})") == "r/summary.json: tasks[0]: expected \"task\" and an integer \"exit_code\"");
  CHECK(error(R"({"tasks": [{"task": "ps:0", "exit_code": 0, "restarts": "1"}]})") == "r/summary.json: tasks[0].restarts: expected an integer");
  CHECK(error(R"({"tasks": [{"task": "ps:0", "exit_code": 0, "past_deadline": 1}]})") ==
        "r/summary.json: tasks[0].past_deadline: expected true or false");
  CHECK(error(R"({"tasks": [{"task": "ps:0", "exit_code": 0, "test_accuracy": "high"}]})") ==
        "r/summary.json: tasks[0].test_accuracy: expected a number or null");
  CHECK(error(R"({"model": {"path": "m/1"}, "tasks": []})") == "r/summary.json: model: expected an object with string \"path\" and \"version\"");
  CHECK(error(R"({"model": {"path": "m/1", "version": "1", "global_step": "x"}, "tasks": []})") ==
        "r/summary.json: model.global_step: expected an integer");
}

TEST_CASE("Run's summary.json and metrics.jsonl parse for a run folder named with quotes, backslashes, control characters and non-ASCII",
          "[unit][json][summary]") {
  TempDir dir;
  const std::string run_dir = dir / ("run " + kAwkward);
  REQUIRE(std::filesystem::create_directories(run_dir));
  // The task's stdout: a done event whose hash is awkward too.
  const std::string events = dir / "events.jsonl";
  WriteFile(events, json{{"task", "worker:0"}, {"event", "done"}, {"test_accuracy", 0.75}, {"global_step", 30}, {"params_sha256", kAwkward}}.dump() +
                        "\n");
  std::vector<TaskPlan> plan(1);
  plan[0].task = {config::TaskType::kWorker, 0};
  plan[0].argv = {"/bin/cat", events};
  CHECK(Run(plan, {.run_dir = run_dir}) == 0);
  const json summary = Parsed(ReadAll(run_dir + "/summary.json"));
  CHECK(summary["run_dir"] == run_dir);
  CHECK(summary["exit_code"] == 0);
  REQUIRE(summary["tasks"].size() == 1);
  CHECK(summary["tasks"][0]["task"] == "worker:0");
  CHECK(summary["tasks"][0]["test_accuracy"] == 0.75);
  CHECK(summary["tasks"][0]["global_step"] == 30);
  CHECK(summary["tasks"][0]["params_sha256"] == kAwkward);
  Result<RunSummary> back = ParseSummary(ReadAll(run_dir + "/summary.json"), "summary.json");
  REQUIRE(back.ok());
  CHECK(back->run_dir == run_dir);
}

TEST_CASE("a TF_CONFIG with quotes, backslashes, control characters and non-ASCII in its hosts round-trips through nlohmann",
          "[unit][json][launcher]") {
  config::ClusterSpec c;
  c.worker = {{.host = kAwkward, .port = 2222}, {.host = "pc-02", .port = 2223}};
  c.ps = {{.host = "pc-\"03\\", .port = 2000}};
  c.base_workers = 1;
  const std::string text = TfConfigFor(c, {config::TaskType::kWorker, 1});
  const json j = Parsed(text);
  CHECK(j["cluster"]["worker"][0] == kAwkward + ":2222");
  CHECK(j["cluster"]["worker"][1] == "pc-02:2223");
  CHECK(j["cluster"]["ps"][0] == "pc-\"03\\:2000");
  CHECK(j["task"] == json{{"type", "worker"}, {"index", 1}});
  CHECK(j["tfd"]["base_workers"] == 1);
  CHECK(text.find('\n') == std::string::npos);  // one line: an environment variable
}

TEST_CASE("targets.json round-trips a run name with quotes, backslashes, control characters and non-ASCII", "[unit][json][metrics]") {
  std::vector<TaskPlan> plan(2);
  plan[0].task = {config::TaskType::kPs, 0};
  plan[0].metrics_target = "127.0.0.1:9001";
  plan[1].task = {config::TaskType::kWorker, 3};
  plan[1].metrics_target = "pc-02:9002";
  const json j = Parsed(TargetsJson(plan, kAwkward));
  REQUIRE(j.size() == 2);
  CHECK(j[1]["targets"] == json::array({"pc-02:9002"}));
  CHECK(j[1]["labels"] == json{{"job", "worker"}, {"task", "3"}, {"run", kAwkward}});
}

TEST_CASE("Say's JSON line parses whatever the message holds, with its extra members after the others", "[unit][json][launcher]") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  Say(f, /*json=*/true, "run_folder", kAwkward + " \xff", {{"run_dir", kAwkward}, {"exit_code", std::int64_t{3}}, {"ok", false}}, "tfctl");
  std::rewind(f);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f));
  std::fclose(f);
  REQUIRE(text.ends_with("}\n"));
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);  // one line
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
  CHECK(j["message"] == kAwkward + " \xef\xbf\xbd");
  CHECK(j["run_dir"] == kAwkward);
  CHECK(j["exit_code"] == 3);
  CHECK(j["ok"] == false);
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  CHECK(keys == std::vector<std::string>{"ts", "task", "event", "message", "run_dir", "exit_code", "ok"});
}

TEST_CASE("scale.request and scale.reply are one JSON object each, and read back", "[unit][json][scale]") {
  TempDir dir;
  REQUIRE(WriteScaleRequest(dir.path(), {.workers = 3, .id = kAwkward}).ok());
  const json request = Parsed(ReadAll(dir / "scale.request"));
  CHECK(request == json{{"id", kAwkward}, {"workers", 3}});
  Result<std::optional<ScaleRequest>> taken = TakeScaleRequest(dir.path());
  REQUIRE(taken.ok());
  REQUIRE(taken->has_value());
  CHECK((*taken)->id == kAwkward);
  CHECK((*taken)->workers == 3);
  CHECK_FALSE(std::filesystem::exists(dir / "scale.request"));
  taken = TakeScaleRequest(dir.path());
  REQUIRE(taken.ok());
  CHECK_FALSE(taken->has_value());  // none left

  REQUIRE(WriteScaleReply(dir.path(), {.id = kAwkward, .ok = true, .message = "started worker:2; 3 workers run", .started = {"worker:2"}}).ok());
  CHECK(Parsed(ReadAll(dir / "scale.reply")) ==
        json{{"id", kAwkward}, {"ok", true}, {"message", "started worker:2; 3 workers run"}, {"started", {"worker:2"}}});
  Result<std::optional<ScaleReply>> reply = ReadScaleReply(dir.path(), kAwkward);
  REQUIRE(reply.ok());
  REQUIRE(reply->has_value());
  CHECK((*reply)->ok);
  CHECK((*reply)->started == std::vector<std::string>{"worker:2"});
  CHECK((*reply)->message == "started worker:2; 3 workers run");
  reply = ReadScaleReply(dir.path(), "another request");
  REQUIRE(reply.ok());
  CHECK_FALSE(reply->has_value());
}

TEST_CASE("a malformed scale.request is removed, answered, and its error names the file", "[unit][json][scale]") {
  TempDir dir;
  const std::string path = dir / "scale.request";
  auto take = [&](const std::string& text) {
    WriteFile(path, text);
    Result<std::optional<ScaleRequest>> r = TakeScaleRequest(dir.path());
    CHECK_FALSE(std::filesystem::exists(path));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kCorruption);
    return r.status().message();
  };
  CHECK(take("4711-1 3\n") == path + ": not valid JSON");  // the old line format
  CHECK(take("[1]") == path + ": expected a JSON object");
  CHECK(take(R"({"workers": 3})") == path + ": \"id\": expected a string");
  CHECK(take(R"({"id": "7-1", "workers": 0})") == path + ": \"workers\": expected an integer of at least 1");
  // The requester hears why, under its id.
  Result<std::optional<ScaleReply>> reply = ReadScaleReply(dir.path(), "7-1");
  REQUIRE(reply.ok());
  REQUIRE(reply->has_value());
  CHECK_FALSE((*reply)->ok);
  CHECK((*reply)->message == path + ": \"workers\": expected an integer of at least 1");
  CHECK(take(R"({"id": "7-2", "workers": 2.5})") == path + ": \"workers\": expected an integer of at least 1");
  CHECK(take("") == path + ": not valid JSON");
  reply = ReadScaleReply(dir.path(), "?");  // no id to answer under
  REQUIRE(reply.ok());
  CHECK(reply->has_value());
}

TEST_CASE("a malformed scale.reply is an error naming the file", "[unit][json][scale]") {
  TempDir dir;
  const std::string path = dir / "scale.reply";
  WriteFile(path, "7-1 ok - 3 workers run\n");  // the old line format
  Result<std::optional<ScaleReply>> reply = ReadScaleReply(dir.path(), "7-1");
  REQUIRE_FALSE(reply.ok());
  CHECK(reply.status().code() == Code::kCorruption);
  CHECK(reply.status().message() == path + ": not valid JSON");
  WriteFile(path, R"({"id": "7-1", "ok": true, "message": "m", "started": [2]})");
  reply = ReadScaleReply(dir.path(), "7-1");
  REQUIRE_FALSE(reply.ok());
  CHECK(reply.status().message() == path + ": \"started\": expected an array of task names");
  CHECK(ParseScaleReply(R"({"id": "7-1", "message": "m", "started": []})", "x").status().message() == "x: \"ok\": expected true or false");
}

TEST_CASE("the dashboard's events page is one JSON object holding each event line, non-finite numbers as null", "[unit][json][dashboard]") {
  TempDir dir;
  std::string lines = json{{"task", kAwkward}, {"event", "log"}, {"message", kAwkward}}.dump() + "\n";
  lines += "not json\n";
  lines += R"({"task": "worker:0", "event": "epoch", "loss": null, "epoch": 1})" "\n";
  WriteFile(dir / "metrics.jsonl", lines);
  DashboardSite site(dir.path());
  const http::Response got = site.Handle({.method = "GET", .target = "/api/events?since=0"});
  REQUIRE(got.status == 200);
  const json page = Parsed(got.body);
  CHECK(page["since"] == 0);
  CHECK(page["next"] == lines.size());
  CHECK(page["more"] == false);
  CHECK(page["skipped"] == 1);
  REQUIRE(page["events"].size() == 2);
  CHECK(page["events"][0]["task"] == kAwkward);
  CHECK(page["events"][0]["message"] == kAwkward);
  CHECK(page["events"][1]["loss"].is_null());
  CHECK(page["events"][1]["epoch"] == 1);
}

}  // namespace
}  // namespace tfd::launcher
