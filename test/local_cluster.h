#pragma once
// A cluster of tfd processes on free loopback ports, for the integration tests: each task's
// TF_CONFIG and argv, its log files, its JSON event lines, and waits whose deadline fails the test
// instead of hanging. Every helper here runs on the test's main thread (Catch2 macros inside).

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/test_util.h"

namespace tfd::testing {

// A job spec's JSON: `model` (by default the mlp, Glorot-initialised) on the IDX files in `data`,
// seed 5, no step log lines; `extra` goes in last (", \"checkpoint\": {...}").
inline std::string Job(const std::string& data, const std::string& update, int epochs, const std::string& optimizer,
                       int batch = 100, const std::string& model = R"({"name": "mlp", "init": "glorot_uniform"})",
                       const std::string& extra = "") {
  return R"({"model": )" + model + R"(, "data": ")" + data + R"(", "epochs": )" + std::to_string(epochs) +
         R"(, "batch_size": )" + std::to_string(batch) + R"(, "optimizer": )" + optimizer + R"(, "update": )" + update +
         R"(, "seed": 5, "log_every_steps": 0)" + extra + "}";
}

// Whether `p`'s stderr contains `text` within `limit` (polled; true at once if it does already).
inline bool LogsWithin(Process& p, const std::string& text, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (p.err().find(text) == std::string::npos && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return p.err().find(text) != std::string::npos;
}

// Waits until `p`'s stderr contains `text`; fails the test (showing that stderr) after `limit`.
inline void AwaitLine(Process& p, const std::string& text, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  const bool seen = LogsWithin(p, text, limit);
  INFO(p.err());
  REQUIRE(seen);
}

// The first event named `event` on `p`'s stdout (under --log-format json) with every field of
// `fields` (and satisfying `also`, where given), polled for up to `limit`; null if none came.
inline nlohmann::json EventWithin(Process& p, std::string_view event, const nlohmann::json& fields, std::chrono::milliseconds limit,
                                  const std::function<bool(const nlohmann::json&)>& also = {}) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const bool last = std::chrono::steady_clock::now() >= until;
    for (nlohmann::json& e : ParseEvents(p.out(), event))
      if (HasFields(e, fields) && (!also || also(e))) return std::move(e);
    if (last) return nullptr;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// EventWithin, but failing the test (showing `p`'s stderr) when no such event comes in time: the
// event counterpart of AwaitLine.
inline nlohmann::json AwaitEvent(Process& p, std::string_view event, const nlohmann::json& fields = nlohmann::json::object(),
                                 std::chrono::milliseconds limit = std::chrono::seconds(60),
                                 const std::function<bool(const nlohmann::json&)>& also = {}) {
  nlohmann::json found = EventWithin(p, event, fields, limit, also);
  INFO("no event " << event << " with " << fields.dump() << " within " << limit.count() << " ms; stderr:\n" << p.err());
  REQUIRE(found.is_object());
  return found;
}

// What a task left when it exited.
struct TaskResult {
  int exit_code = -1;
  std::string out, err;                     // its stdout (event lines) and stderr (the human log)
  nlohmann::json done;                      // the last "done" event, or null
  std::vector<nlohmann::json> checkpoints;  // the "checkpoint" events, in order
};

struct LocalClusterOptions {
  int num_ps = 1;
  int num_workers = 1;
  // The job spec's JSON: written as job.json in dir() and given to every worker as --job. Empty:
  // no job file, and a worker's extra flags name one.
  std::string job;
  // Where the job file and the logs go, if not a fresh folder of the cluster's own; it must
  // outlive the cluster (several clusters may share one, to share data or checkpoints).
  const TempDir* dir = nullptr;
  // Finish's deadline where a call names none.
  std::chrono::milliseconds finish_limit = std::chrono::seconds(120);
  bool evaluator = false;  // the cluster spec lists one evaluator task too (started by StartEvaluator)
  // Worker i's address in the cluster spec, where listed (else 127.0.0.1): 127.0.0.2 is loopback
  // too, and stands for a second host to code that groups workers by address.
  std::vector<std::string> worker_hosts;
  // ps i's address, where listed (else 127.0.0.1), as worker_hosts.
  std::vector<std::string> ps_hosts;
};

// The cluster spec lists num_ps ps and num_workers worker endpoints on 127.0.0.1 (or ps_hosts, worker_hosts), each port free
// when the cluster was made; no task runs until a Start call. Each start of a task writes its own
// logs, <type><index>.<n>.out and .err in dir() (n counts that task's starts from 0), so the logs
// of a killed task are still there after its restart. The destructor kills whatever still runs.
class LocalCluster {
 public:
  explicit LocalCluster(LocalClusterOptions options)
      : options_(std::move(options)),
        own_dir_(options_.dir == nullptr ? std::make_unique<TempDir>() : nullptr),
        dir_(options_.dir == nullptr ? *own_dir_ : *options_.dir) {
    if (!options_.job.empty()) WriteFile(dir_ / "job.json", options_.job);
    const std::vector<int> ports = FreePorts(options_.num_ps + options_.num_workers + (options_.evaluator ? 1 : 0));
    for (int i = 0; i < options_.num_ps; ++i) {
      const auto at = static_cast<std::size_t>(i);
      cluster_["ps"].push_back((at < options_.ps_hosts.size() ? options_.ps_hosts[at] : "127.0.0.1") + ":" + std::to_string(ports[at]));
    }
    for (int i = 0; i < options_.num_workers; ++i) {
      const auto at = static_cast<std::size_t>(i);
      const std::string host = at < options_.worker_hosts.size() ? options_.worker_hosts[at] : "127.0.0.1";
      cluster_["worker"].push_back(host + ":" + std::to_string(ports[options_.num_ps + i]));
    }
    if (options_.evaluator) cluster_["evaluator"].push_back("127.0.0.1:" + std::to_string(ports.back()));
  }
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  int num_ps() const { return options_.num_ps; }
  int num_workers() const { return options_.num_workers; }
  const nlohmann::json& cluster() const { return cluster_; }
  const TempDir& dir() const { return dir_; }
  // "127.0.0.1:P", as the cluster spec lists task type:i.
  std::string endpoint(const std::string& type, int i) const { return cluster_.at(type).at(i).get<std::string>(); }
  int port(const std::string& type, int i) const {
    const std::string ep = endpoint(type, i);
    return std::stoi(ep.substr(ep.rfind(':') + 1));
  }
  // The TF_CONFIG of task type:index in this cluster.
  std::string TfConfig(const std::string& type, int index) const {
    return nlohmann::json{{"cluster", cluster_}, {"task", {{"type", type}, {"index", index}}}}.dump();
  }

  // Starts the task as `tfd --log-format json [--job dir()/job.json] extra...` with its TF_CONFIG
  // in the environment (--job for a worker, when the options carry a job). A task started again
  // replaces its previous process, killing it if it still runs.
  void StartPs(int i, std::vector<std::string> extra = {}) { Start("ps", i, std::move(extra)); }
  void StartWorker(int i, std::vector<std::string> extra = {}) { Start("worker", i, std::move(extra)); }
  void StartEvaluator(std::vector<std::string> extra = {}) { Start("evaluator", 0, std::move(extra)); }
  // An elastic job's worker joining the run as worker:i (i >= num_workers()): its TF_CONFIG lists
  // the cluster's workers, then new endpoints up to its own, with tfd.base_workers set to
  // num_workers() (docs/operations.md, "Elastic runs").
  void StartJoiner(int i, std::vector<std::string> extra = {}) {
    nlohmann::json cluster = cluster_;
    const std::vector<int> ports = FreePorts(i + 1 - options_.num_workers);
    for (int p : ports) cluster["worker"].push_back("127.0.0.1:" + std::to_string(p));
    const std::string tf_config =
        nlohmann::json{{"cluster", cluster}, {"task", {{"type", "worker"}, {"index", i}}}, {"tfd", {{"base_workers", options_.num_workers}}}}.dump();
    Start("worker", i, std::move(extra), tf_config);
  }
  void StartAll(const std::vector<std::string>& worker_extra = {}) {
    for (int i = 0; i < options_.num_ps; ++i) StartPs(i);
    for (int i = 0; i < options_.num_workers; ++i) StartWorker(i, worker_extra);
  }
  // The latest process of task type:i (started before).
  Process& process(const std::string& type, int i) { return *procs_.at(type + std::to_string(i)); }

  // The task's event lines so far (its latest start), only those named `event` unless empty.
  std::vector<nlohmann::json> Events(const std::string& type, int i, std::string_view event = {}) {
    return ParseEvents(process(type, i).out(), event);
  }

  // The task's (its latest start's) event, as the free EventWithin and AwaitEvent below find it.
  nlohmann::json EventWithin(const std::string& type, int i, std::string_view event, const nlohmann::json& fields,
                             std::chrono::milliseconds limit, const std::function<bool(const nlohmann::json&)>& also = {}) {
    return tfd::testing::EventWithin(process(type, i), event, fields, limit, also);
  }
  nlohmann::json AwaitEvent(const std::string& type, int i, std::string_view event, const nlohmann::json& fields = nlohmann::json::object(),
                            std::chrono::milliseconds limit = std::chrono::seconds(60),
                            const std::function<bool(const nlohmann::json&)>& also = {}) {
    return tfd::testing::AwaitEvent(process(type, i), event, fields, limit, also);
  }

  // Waits for the task to exit and collects what it wrote. Fails the test (showing its stderr) if
  // it still runs after `limit` (options' finish_limit when zero); the destructor then kills it.
  TaskResult Finish(const std::string& type, int i, std::chrono::milliseconds limit = {}) {
    Process& p = process(type, i);
    std::optional<int> code = p.Wait(limit.count() > 0 ? limit : options_.finish_limit);
    TaskResult r;
    r.out = p.out();
    r.err = p.err();
    INFO(type << ":" << i << " stderr:\n" << r.err);
    REQUIRE(code.has_value());
    r.exit_code = *code;
    for (nlohmann::json& e : ParseEvents(r.out)) {
      if (e["event"] == "done") r.done = e;
      if (e["event"] == "checkpoint") r.checkpoints.push_back(std::move(e));
    }
    return r;
  }

  // Waits for every worker, then every ps: each worker must exit 0 with a done event (else the
  // test stops), and each ps should exit 0 by itself within 30 s of the last worker. Returns the
  // workers' results in index order.
  std::vector<TaskResult> FinishAll() {
    std::vector<TaskResult> workers;
    for (int i = 0; i < options_.num_workers; ++i) {
      workers.push_back(Finish("worker", i));
      INFO("worker:" << i << " stderr:\n" << workers.back().err);
      REQUIRE(workers.back().exit_code == 0);
      REQUIRE(workers.back().done.is_object());
    }
    for (int i = 0; i < options_.num_ps; ++i) {
      TaskResult p = Finish("ps", i, std::chrono::seconds(30));
      INFO("ps:" << i << " stderr:\n" << p.err);
      CHECK(p.exit_code == 0);  // a ps exits by itself once every worker is done
    }
    return workers;
  }
  // StartAll, then FinishAll.
  std::vector<TaskResult> Run(const std::vector<std::string>& worker_extra = {}) {
    StartAll(worker_extra);
    return FinishAll();
  }

 private:
  void Start(const std::string& type, int i, std::vector<std::string> extra, const std::string& tf_config = "") {
    std::vector<std::string> argv = {kTfd, "--log-format", "json"};
    if (type != "ps" && !options_.job.empty()) argv.insert(argv.end(), {"--job", dir_ / "job.json"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    const std::string name = type + std::to_string(i);
    const std::string file = name + "." + std::to_string(starts_[name]++);
    procs_[name] = std::make_unique<Process>(argv, std::vector<std::string>{"TF_CONFIG=" + (tf_config.empty() ? TfConfig(type, i) : tf_config)},
                                             dir_ / (file + ".out"), dir_ / (file + ".err"));
    REQUIRE(procs_[name]->started());
  }

  LocalClusterOptions options_;
  std::unique_ptr<TempDir> own_dir_;  // null when the options name a folder
  const TempDir& dir_;
  nlohmann::json cluster_;
  std::map<std::string, int> starts_;
  std::map<std::string, std::unique_ptr<Process>> procs_;  // last: killed before the folder goes
};

}  // namespace tfd::testing
