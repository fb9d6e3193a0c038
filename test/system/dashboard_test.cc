// tfctl report, the live dashboard and tfctl up --log-format json, on real local clusters. The
// tests tagged [chromium] load the pages in headless Chromium and read the DOM its scripts (or the
// report's inline SVG) produced; that binary run exits 77 (skipped) where Chromium is missing.
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/http/server.h"
#include "test/catch/subjects.h"
#include "test/system/tfctl_util.h"
#include "test/test_util.h"

namespace tfd::testing::dashboard_test {
namespace {

using namespace std::chrono_literals;

std::string g_chromium;  // set by main() for [chromium] runs

// A cluster file (tfctl_util.h) with step events every 2 steps.
std::string StepsClusterFile(const TempDir& dir, int epochs) {
  auto f = nlohmann::json::parse(ReadAll(ClusterFile(dir, epochs)));
  f["train"]["log_every_steps"] = 2;
  WriteFile(dir / "cluster.json", f.dump(2));
  return dir / "cluster.json";
}

// Headless Chromium on `url` for a virtual `budget_ms`: the DOM as its scripts left it, or with
// `screenshot` a PNG there. Fails the test when Chromium does not finish within two minutes.
std::string Chromium(const TempDir& dir, const std::string& url, int budget_ms, const std::string& screenshot = "") {
  std::vector<std::string> argv = {g_chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                   "--user-data-dir=" + (dir / "chromium-profile"), "--virtual-time-budget=" + std::to_string(budget_ms)};
  if (screenshot.empty()) argv.push_back("--dump-dom");
  else argv.insert(argv.end(), {"--window-size=1000,1000", "--screenshot=" + screenshot});
  argv.push_back(url);
  Process p(argv, {}, dir / "chromium.out", dir / "chromium.err");
  auto code = p.Wait(120s);
  INFO("chromium stderr:\n" << p.err());
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  return p.out();
}

// data-points of every curve of `metric` in `dom`, by task.
std::map<std::string, int> CurvePoints(const std::string& dom, const std::string& metric) {
  std::map<std::string, int> out;
  const std::regex re("<path class=\"curve\" data-task=\"([^\"]+)\" data-metric=\"" + metric + "\" data-points=\"([0-9]+)\" d=\"M[^\"]+\"");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), re); it != std::sregex_iterator(); ++it) out[(*it)[1]] = std::stoi((*it)[2]);
  return out;
}

bool WaitFor(const std::function<bool()>& ok, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!ok() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(50ms);
  return ok();
}

// The port `tfctl dashboard` (started as `p`) says it serves on, waiting up to 30 s for its line.
std::uint16_t DashboardPort(Process& p) {
  const std::regex url_re("dashboard at http://127\\.0\\.0\\.1:([0-9]+)/");
  std::smatch m;
  std::string err;
  REQUIRE(WaitFor([&] { err = p.err(); return std::regex_search(err, m, url_re); }, 30s));
  return static_cast<std::uint16_t>(std::stoi(m[1]));
}

TEST_CASE("tfctl report on a finished run: Chromium draws a loss curve with points for each worker", "[system][report][chromium]") {
  TempDir dir;
  Process up({kTfctl, "up", StepsClusterFile(dir, 2)}, {}, dir / "out", dir / "err");
  auto code = up.Wait(120s);
  INFO("stdout:\n" << up.out() << "\nstderr:\n" << up.err());
  REQUIRE(code.has_value());
  REQUIRE(*code == 0);
  const std::string run = RunFolder(dir);
  CHECK(up.out().find("tfctl: report " + run + "/report.html") != std::string::npos);  // up writes it at the end
  std::filesystem::remove(run + "/report.html");
  std::filesystem::remove(run + "/curves.svg");
  CommandResult r = RunCommand(kTfctl + " report " + run, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(std::filesystem::exists(run + "/curves.svg"));
  const std::string dom = Chromium(dir, "file://" + run + "/report.html", 1000);
  // 2 epochs of 20 steps per worker, a step event every 2 steps: 20 points each.
  const auto loss = CurvePoints(dom, "loss");
  CHECK(loss.size() == 2);
  CHECK(loss.count("worker:0") == 1);
  CHECK(loss.count("worker:1") == 1);
  for (const auto& [task, n] : loss) CHECK(n >= 10);
  const auto test_acc = CurvePoints(dom, "test_accuracy");
  CHECK(test_acc.size() >= 1);  // the chief's, per epoch
  CHECK(dom.find("data-task=\"ps:0\" data-state=\"done\"") != std::string::npos);
}

TEST_CASE("tfctl up --dashboard: Chromium sees both workers' curves grow and the tasks while the run goes on", "[system][dashboard][chromium]") {
  TempDir dir;
  Process up({kTfctl, "up", StepsClusterFile(dir, 100000), "--dashboard", "127.0.0.1:0", "--grace", "5"}, {}, dir / "out", dir / "err");
  std::smatch m;
  const std::regex url_re("tfctl: dashboard at (http://127\\.0\\.0\\.1:[0-9]+/)");
  REQUIRE(WaitFor([&] { const std::string e = up.err(); return std::regex_search(e, m, url_re); }, 60s));
  const std::string err = up.err();
  REQUIRE(std::regex_search(err, m, url_re));
  const std::string url = m[1];
  REQUIRE(WaitFor([&] { return RunEventWithin(dir, "epoch", {{"task", "worker:0"}, {"epoch", 1}}, 0ms) && RunEventWithin(dir, "epoch", {{"task", "worker:1"}, {"epoch", 1}}, 0ms); }, 90s));
  const std::string dom = Chromium(dir, url, 5000);
  INFO("DOM:\n" << dom.substr(0, 4000));
  const auto loss = CurvePoints(dom, "loss");
  CHECK(loss.count("worker:0") == 1);
  CHECK(loss.count("worker:1") == 1);
  for (const auto& [task, n] : loss) CHECK(n >= 5);
  CHECK(CurvePoints(dom, "samples_per_sec").size() == 2);
  CHECK(dom.find("data-status=\"live\"") != std::string::npos);
  for (const char* task : {"ps:0", "worker:0", "worker:1"}) CHECK(dom.find(std::string("<tr data-task=\"") + task + "\" data-state=\"") != std::string::npos);
  // One screenshot kept with the test's output.
  std::filesystem::create_directories(TFD_DASHBOARD_OUTPUT_DIR);
  const std::string shot = std::string(TFD_DASHBOARD_OUTPUT_DIR) + "/dashboard.png";
  std::filesystem::remove(shot);
  Chromium(dir, url, 5000, shot);
  CHECK(std::filesystem::file_size(shot) > 1000);
  std::printf("dashboard screenshot: %s\n", shot.c_str());
  up.Signal(SIGINT);
  auto code = up.Wait(60s);
  REQUIRE(code.has_value());
  CHECK(*code == 130);
  CHECK(std::filesystem::exists(RunFolder(dir) + "/report.html"));  // written after Ctrl-C too
}

TEST_CASE("tfctl up --log-format json writes nothing but JSON lines, the dashboard's URL among them", "[system][report]") {
  TempDir dir;
  Process up({kTfctl, "up", StepsClusterFile(dir, 2), "--log-format", "json", "--dashboard", "127.0.0.1:0"}, {}, dir / "out", dir / "err");
  auto code = up.Wait(120s);
  INFO("stdout:\n" << up.out() << "\nstderr:\n" << up.err());
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  std::map<std::string, int> events;  // "task event" -> count
  std::string url;
  for (const std::string& text : {up.out(), up.err()}) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      INFO(line);
      REQUIRE(j.is_object());
      REQUIRE(j.contains("event"));
      REQUIRE(j.contains("task"));
      events[j["task"].get<std::string>() + " " + j["event"].get<std::string>()]++;
      if (j["event"] == "dashboard") url = j["url"];
    }
  }
  CHECK(url.rfind("http://127.0.0.1:", 0) == 0);
  CHECK(events["worker:0 epoch"] == 2);
  CHECK(events["worker:1 epoch"] == 2);
  CHECK(events["worker:1 log"] > 0);  // its log lines, as JSON
  CHECK(events["tfctl describe"] == 1);
  CHECK(events["tfctl run_folder"] == 1);
  CHECK(events["tfctl report"] == 1);
  CHECK(std::filesystem::exists(RunFolder(dir) + "/report.html"));

  CommandResult r = RunCommand(kTfctl + " up " + (dir / "cluster.json") + " --log-format json --bogus", dir);
  CHECK(r.exit_code == 2);
  CHECK(r.out.empty());
  CHECK(nlohmann::json::parse(r.err)["message"] == "unknown option --bogus (see tfctl --help)");
}

TEST_CASE("tfctl report, dashboard and up --dashboard refuse bad input in one line with exit 2", "[system][report]") {
  TempDir dir;
  auto one_line = [](const std::string& s) { return !s.empty() && s.find('\n') == s.size() - 1; };
  CommandResult r = RunCommand(kTfctl + " report " + (dir / "missing"), dir);
  CHECK(r.exit_code == 2);
  CHECK(one_line(r.err));
  CHECK(r.err.find(dir / "missing") != std::string::npos);
  std::filesystem::create_directories(dir / "run");
  WriteFile(dir / "run/job.json", "{}");
  r = RunCommand(kTfctl + " report " + (dir / "run"), dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err == "tfctl: " + (dir / "run/metrics.jsonl") + ": no such file\n");
  WriteFile(dir / "run/metrics.jsonl", "");
  r = RunCommand(kTfctl + " report " + (dir / "run"), dir);
  CHECK(r.exit_code == 0);  // no events yet is still a report
  CHECK(ReadAll(dir / "run/report.html").find("No events yet") != std::string::npos);
  r = RunCommand(kTfctl + " dashboard " + (dir / "run") + " --port 127.0.0.1:x", dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err == "tfctl: --port: expected HOST:PORT, :PORT or PORT, got \"127.0.0.1:x\"\n");
  r = RunCommand(kTfctl + " up " + ClusterFile(dir, 1) + " --dashboard nohost:1", dir);
  CHECK(r.exit_code == 2);
  CHECK(one_line(r.err));
  CHECK(r.err.find("--dashboard: \"nohost\" is not an IP address") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "runs"));  // refused before anything started
}

TEST_CASE("the dashboard draws a model-parallel run as one curve per replica, not one per stage", "[system][dashboard][chromium]") {
  TempDir dir;
  std::filesystem::create_directories(dir / "run");
  WriteFile(dir / "run/job.json", R"({"epochs": 2})");
  std::string events;
  for (int w = 0; w < 4; ++w) {  // 2 replicas of 2 stages: worker w is stage w % 2 of replica w / 2
    events += fmt::format(R"({{"ts": 1, "task": "worker:{}", "event": "start", "stage": {}, "stages": 2, "replica": {}, "replicas": 2}})",
                          w, w % 2, w / 2) + "\n";
  }
  for (int epoch = 1; epoch <= 2; ++epoch)
    for (int w = 0; w < 4; ++w)  // every stage logs its replica's loss
      events += fmt::format(R"({{"ts": 2, "task": "worker:{}", "event": "epoch", "epoch": {}, "global_step": {}, "loss": {}, "accuracy": 0.5, "samples_per_sec": 1000}})",
                            w, epoch, 10 * epoch, 1.0 / epoch + w / 2) + "\n";
  WriteFile(dir / "run/metrics.jsonl", events);
  std::string tasks;
  for (int w = 0; w < 4; ++w) tasks += fmt::format(R"({}{{"task": "worker:{}", "exit_code": 0, "restarts": 0}})", w == 0 ? "" : ", ", w);
  WriteFile(dir / "run/summary.json", R"({"exit_code": 0, "tasks": [)" + tasks + "]}");
  Process p({kTfctl, "dashboard", dir / "run", "--port", "127.0.0.1:0"}, {}, dir / "out", dir / "err");
  const std::string dom = Chromium(dir, "http://127.0.0.1:" + std::to_string(DashboardPort(p)) + "/", 3000);
  const auto loss = CurvePoints(dom, "loss");
  INFO(dom.substr(0, 2000));
  CHECK(loss.size() == 2);
  CHECK(loss.count("replica 0") == 1);
  CHECK(loss.count("replica 1") == 1);
  for (const auto& [name, n] : loss) CHECK(n == 2);  // one point per epoch, not one per stage and epoch
  for (int w = 0; w < 4; ++w) CHECK(dom.find("<tr data-task=\"worker:" + std::to_string(w) + "\" data-state=\"done\"") != std::string::npos);
  p.Signal(SIGINT);
  auto code = p.Wait(10s);
  REQUIRE(code.has_value());
  CHECK(*code == 0);
}

TEST_CASE("tfctl dashboard serves a finished run folder from its files", "[system][dashboard]") {
  TempDir dir;
  std::filesystem::create_directories(dir / "run");
  WriteFile(dir / "run/job.json", R"({"epochs": 1})");
  WriteFile(dir / "run/metrics.jsonl", R"({"task": "worker:0", "event": "start"})" "\n");
  WriteFile(dir / "run/summary.json", R"({"exit_code": 0, "tasks": [{"task": "worker:0", "exit_code": 0, "restarts": 0}]})");
  Process p({kTfctl, "dashboard", dir / "run", "--port", "127.0.0.1:0"}, {}, dir / "out", dir / "err");
  auto got = http::Get("127.0.0.1", DashboardPort(p), "/api/tasks");
  REQUIRE(got.ok());
  auto tasks = nlohmann::json::parse(got->body);
  CHECK(tasks["ended"] == true);
  CHECK(tasks["live"] == false);
  CHECK(tasks["tasks"][0]["state"] == "done");
  p.Signal(SIGINT);
  auto code = p.Wait(10s);
  REQUIRE(code.has_value());
  CHECK(*code == 0);
}

// Why this subject cannot run here ("" when it can): tfd_process_tests then skips it (exit 77).
// Only the [chromium] cases need Chromium (g_chromium); ~[chromium] leaves them out.
std::string CannotRunHere(const std::string& spec) {
  const std::size_t at = spec.find("[chromium]");
  if (at == std::string::npos || (at > 0 && spec[at - 1] == '~')) return "";
  const char* env = std::getenv("TFD_CHROMIUM");
  g_chromium = env != nullptr ? env : "/usr/bin/chromium";
  if (!std::filesystem::exists(g_chromium)) return "no chromium at " + g_chromium + " (scripts/setup installs it; TFD_CHROMIUM names another)";
  return "";
}
const SubjectNeeds kNeeds(__FILE__, &CannotRunHere);

}  // namespace
}  // namespace tfd::testing::dashboard_test
