// Prometheus metrics as an operator meets them: real tfd tasks scraped over HTTP and checked by
// Debian's promtool, then a tfctl run scraped by a real Prometheus server through the run's
// targets.json. Exits 77 (skipped) where prometheus or promtool is not installed.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/http/server.h"
#include "test/catch/subjects.h"
#include "test/system/tfctl_util.h"
#include "test/test_util.h"

namespace tfd::testing::metrics_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The job both tests train: far longer than the tests (100000 epochs of synthetic data, minutes even
// on a fast machine), so the tasks are still there to be scraped however slowly Prometheus starts;
// the tests stop them.
nlohmann::json LongJob(const TempDir& dir) {
  WriteSyntheticMnist(dir / "", 800, 100);
  return {{"model", {{"name", "mlp"}, {"init", "glorot_uniform"}}},
          {"data", dir.path()},
          {"epochs", 100000},
          {"batch_size", 20},
          {"optimizer", {{"type", "sgd"}, {"learning_rate", 0.05}}}};
}

// GET http://127.0.0.1:port/target until `done` says yes or `limit` passes; the last answer.
template <class Done>
Result<http::Fetched> GetUntil(int port, const std::string& target, std::chrono::seconds limit, Done done) {
  const auto until = Clock::now() + limit;
  Result<http::Fetched> got = Status::Unavailable("not asked yet");
  while (Clock::now() < until) {
    got = http::Get("127.0.0.1", static_cast<std::uint16_t>(port), target, 5000);
    if (got.ok() && done(*got)) return got;
    std::this_thread::sleep_for(200ms);
  }
  return got;
}

// The value of the sample line that starts with `prefix` (name and labels), or -1.
double Sample(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix + " ", 0) == 0) return std::stod(line.substr(prefix.size() + 1));
  return -1;
}

TEST_CASE("a ps and a worker serve /metrics that promtool finds clean, /healthz, and 404 elsewhere", "[system][metrics]") {
  TempDir dir;
  WriteFile(dir / "job.json", LongJob(dir).dump());
  const std::vector<int> ports = FreePorts(4);  // ps, worker, and their metrics
  const std::string cluster = R"({"cluster": {"ps": ["127.0.0.1:)" + std::to_string(ports[0]) + R"("], "worker": ["127.0.0.1:)" +
                              std::to_string(ports[1]) + R"("]}, "task": {"type": ")";
  Process ps({kTfd, "--metrics", "127.0.0.1:" + std::to_string(ports[2]), "--run-name", "sys"},
             {"TF_CONFIG=" + cluster + R"(ps", "index": 0}})"}, dir / "ps.out", dir / "ps.err");
  Process worker({kTfd, "--job", dir / "job.json", "--metrics", "127.0.0.1:" + std::to_string(ports[3]), "--run-name", "sys"},
                 {"TF_CONFIG=" + cluster + R"(worker", "index": 0}})"}, dir / "w.out", dir / "w.err");
  const std::string step_prefix = R"(tfd_steps_total{job="worker",task="0",run="sys"})";
  Result<http::Fetched> w = GetUntil(ports[3], "/metrics", 120s, [&](const http::Fetched& f) { return Sample(f.body, step_prefix) > 0; });
  INFO("worker stderr:\n" << worker.err() << "\nps stderr:\n" << ps.err());
  REQUIRE(w.ok());
  REQUIRE(Sample(w->body, step_prefix) > 0);
  CHECK(w->status == 200);
  CHECK(w->content_type == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(Sample(w->body, R"(tfd_push_bytes_total{job="worker",task="0",run="sys"})") > 0);
  CHECK(Sample(w->body, R"(tfd_connected_peers{job="worker",task="0",run="sys"})") == 1);
  Result<http::Fetched> p = GetUntil(ports[2], "/metrics", 30s, [](const http::Fetched&) { return true; });
  REQUIRE(p.ok());
  CHECK(Sample(p->body, R"(tfd_ps_pushes_total{job="ps",task="0",run="sys",outcome="applied"})") > 0);
  CHECK(Sample(p->body, R"(tfd_connected_peers{job="ps",task="0",run="sys"})") == 1);
  CHECK(p->body.find(R"(tfd_refused_connections_total{job="ps",task="0",run="sys",reason="busy"} 0)") != std::string::npos);
  // Debian's promtool lints each scrape: clean means no output and exit 0.
  for (const auto& [name, body] : {std::pair{"worker", w->body}, {"ps", p->body}}) {
    WriteFile(dir / (std::string(name) + ".prom"), body);
    const CommandResult lint = RunCommand("promtool check metrics < " + dir / (std::string(name) + ".prom"), dir);
    INFO(name << ": promtool said:\n" << lint.out << lint.err);
    CHECK(lint.exit_code == 0);
    CHECK(lint.out + lint.err == "");
  }
  Result<http::Fetched> health = http::Get("127.0.0.1", static_cast<std::uint16_t>(ports[3]), "/healthz");
  REQUIRE(health.ok());
  CHECK(health->status == 200);
  CHECK(health->body.rfind("ok worker:0 running global_step=", 0) == 0);
  Result<http::Fetched> other = http::Get("127.0.0.1", static_cast<std::uint16_t>(ports[3]), "/other");
  REQUIRE(other.ok());
  CHECK(other->status == 404);

  // The worker's metrics port is taken: a second task cannot bind it and says so, exit 2.
  Process clash({kTfd, "--standalone", "--job", dir / "job.json", "--metrics", "127.0.0.1:" + std::to_string(ports[3])}, {},
                dir / "c.out", dir / "c.err");
  auto code = clash.Wait(60s);
  REQUIRE(code.has_value());
  CHECK(*code == 2);
  CHECK(clash.err().find("--metrics: ") != std::string::npos);
  worker.Signal(SIGTERM);
  ps.Signal(SIGTERM);
  CHECK(worker.Wait(60s).has_value());
  CHECK(ps.Wait(60s).has_value());
}

TEST_CASE("Prometheus scrapes every worker of a tfctl run through the run folder's targets.json", "[system][metrics]") {
  TempDir dir;
  const std::vector<int> ports = FreePorts(4);  // ps, two workers, Prometheus
  nlohmann::json f = {{"name", "prom"},
                      {"cluster",
                       {{"ps", {"127.0.0.1:" + std::to_string(ports[0])}},
                        {"worker", {"127.0.0.1:" + std::to_string(ports[1]), "127.0.0.1:" + std::to_string(ports[2])}}}},
                      {"train", LongJob(dir)},
                      {"launch", {{"tfd", kTfd}, {"run_dir", dir / "runs"}}}};
  WriteFile(dir / "cluster.json", f.dump(2));
  Process up({kTfctl, "up", dir / "cluster.json"}, {}, dir / "up.out", dir / "up.err");
  const auto until = Clock::now() + 60s;
  std::string run;
  while (Clock::now() < until && (run.empty() || !std::filesystem::exists(run + "/targets.json"))) {
    if (std::filesystem::exists(dir / "runs")) run = RunFolder(dir);
    std::this_thread::sleep_for(100ms);
  }
  INFO("tfctl stdout:\n" << up.out() << "\ntfctl stderr:\n" << up.err());
  REQUIRE(std::filesystem::exists(run + "/targets.json"));
  const std::string run_name = std::filesystem::path(run).filename().string();
  const nlohmann::json targets = nlohmann::json::parse(ReadAll(run + "/targets.json"));
  REQUIRE(targets.size() == 3);
  CHECK(targets[0]["labels"]["job"] == "ps");
  CHECK(targets[2]["labels"]["task"] == "1");
  CHECK(targets[2]["labels"]["run"] == run_name);

  WriteFile(dir / "prometheus.yml", "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                    "scrape_configs:\n  - job_name: tfd\n    honor_labels: true\n"
                                    "    file_sd_configs:\n      - files: ['" + run + "/targets.json']\n        refresh_interval: 1s\n");
  Process prometheus({"/usr/bin/prometheus", "--config.file=" + dir / "prometheus.yml", "--storage.tsdb.path=" + dir / "tsdb",
                      "--web.listen-address=127.0.0.1:" + std::to_string(ports[3])},
                     {}, dir / "prom.out", dir / "prom.err");
  std::set<std::string> seen;
  nlohmann::json last;
  Result<http::Fetched> answer = GetUntil(ports[3], "/api/v1/query?query=tfd_steps_total", 120s, [&](const http::Fetched& got) {
    if (got.status != 200) return false;
    last = nlohmann::json::parse(got.body, nullptr, false);
    seen.clear();
    if (last.is_discarded() || !last.contains("data")) return false;
    for (const auto& r : last["data"]["result"])
      if (r["metric"].value("job", "") == "worker" && r["metric"].value("run", "") == run_name) seen.insert(r["metric"].value("task", ""));
    return seen.size() == 2;
  });
  INFO("last answer: " << (answer.ok() ? answer->body : answer.status().ToString()) << "\nprometheus stderr (end):\n"
                       << [&] { const std::string e = prometheus.err(); return e.substr(e.size() > 3000 ? e.size() - 3000 : 0); }());
  CHECK(seen == std::set<std::string>{"0", "1"});
  // The ps is scraped too, with its own metrics.
  Result<http::Fetched> ps = GetUntil(ports[3], "/api/v1/query?query=tfd_ps_pushes_total", 30s, [](const http::Fetched& got) {
    return got.body.find(R"("job":"ps")") != std::string::npos;
  });
  CHECK((ps.ok() && ps->body.find(R"("job":"ps")") != std::string::npos));

  prometheus.Signal(SIGTERM);
  CHECK(prometheus.Wait(60s).has_value());
  up.Signal(SIGTERM);  // tfctl stops its tasks
  CHECK(up.Wait(90s).has_value());
  CHECK(WaitUntilNoneLeft(dir.path(), 30s));
}

// Why this subject cannot run here ("" when it can): tfd_process_tests then skips it (exit 77).
std::string CannotRunHere(const std::string&) {
  for (const char* tool : {"/usr/bin/prometheus", "/usr/bin/promtool"})
    if (!std::filesystem::exists(tool)) return std::string(tool) + " is not installed (scripts/setup installs the prometheus package)";
  return "";
}
const SubjectNeeds kNeeds(__FILE__, &CannotRunHere);

}  // namespace
}  // namespace tfd::testing::metrics_test
