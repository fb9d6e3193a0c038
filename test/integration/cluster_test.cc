// Real tfd processes on 127.0.0.1 as ps and worker tasks: training in async and sync mode,
// reproducibility, start order, a missing ps, refusal of a stranger, and shutdown. Every wait has a
// deadline that fails the test instead of hanging.
#define CATCH_CONFIG_RUNNER
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/config/cluster.h"
#include "common/transport/auth.h"
#include "common/wire/messages.h"
#include "test/test_util.h"

namespace tfd::testing {
namespace {

using namespace std::chrono_literals;

const std::string kTfd = TFD_BINARY;
std::string g_mnist;  // empty when MNIST is not there: those tests are skipped

struct TaskResult {
  int exit_code = -1;
  std::string out, err;
  nlohmann::json done;  // the "done" event, or null
};

// A cluster of tfd processes on free loopback ports, all in one temp dir.
class Cluster {
 public:
  Cluster(int num_ps, int num_workers, const std::string& job_json) : num_ps_(num_ps), num_workers_(num_workers) {
    WriteFile(dir_ / "job.json", job_json);
    nlohmann::json cluster;
    for (int i = 0; i < num_ps; ++i) cluster["ps"].push_back("127.0.0.1:" + std::to_string(FreePort()));
    for (int i = 0; i < num_workers; ++i) cluster["worker"].push_back("127.0.0.1:" + std::to_string(FreePort()));
    cluster_ = cluster;
  }

  std::string TfConfig(const std::string& type, int index) const {
    return nlohmann::json{{"cluster", cluster_}, {"task", {{"type", type}, {"index", index}}}}.dump();
  }
  const nlohmann::json& cluster() const { return cluster_; }
  const TempDir& dir() const { return dir_; }

  void StartPs(int i, std::vector<std::string> extra = {}) { Start("ps", i, std::move(extra)); }
  void StartWorker(int i, std::vector<std::string> extra = {}) { Start("worker", i, std::move(extra)); }
  void StartAll() {
    for (int i = 0; i < num_ps_; ++i) StartPs(i);
    for (int i = 0; i < num_workers_; ++i) StartWorker(i);
  }
  Process& process(const std::string& type, int i) { return *procs_.at(type + std::to_string(i)); }

  // Waits for the task to exit (failing the test after `limit`) and collects what it wrote.
  TaskResult Finish(const std::string& type, int i, std::chrono::milliseconds limit = 120s) {
    Process& p = process(type, i);
    std::optional<int> code = p.Wait(limit);
    TaskResult r;
    r.out = p.out();
    r.err = p.err();
    INFO(type << ":" << i << " stderr:\n" << r.err);
    REQUIRE(code.has_value());  // still running at the deadline: the destructor kills it
    r.exit_code = *code;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      auto e = nlohmann::json::parse(line, nullptr, false);
      if (!e.is_discarded() && e["event"] == "done") r.done = e;
    }
    return r;
  }

 private:
  void Start(const std::string& type, int i, std::vector<std::string> extra) {
    std::vector<std::string> argv = {kTfd, "--log-format", "json"};
    if (type != "ps") {
      argv.push_back("--job");
      argv.push_back(dir_ / "job.json");
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    const std::string name = type + std::to_string(i);
    procs_[name] = std::make_unique<Process>(argv, std::vector<std::string>{"TF_CONFIG=" + TfConfig(type, i)},
                                             dir_ / (name + ".out"), dir_ / (name + ".err"));
    REQUIRE(procs_[name]->started());
  }

  TempDir dir_;
  int num_ps_, num_workers_;
  nlohmann::json cluster_;
  std::map<std::string, std::unique_ptr<Process>> procs_;
};

std::string Job(const std::string& data, const std::string& update, int epochs, const std::string& optimizer,
                int batch = 100, const std::string& model = R"({"name": "mlp", "init": "glorot_uniform"})") {
  return R"({"model": )" + model + R"(, "data": ")" + data + R"(", "epochs": )" + std::to_string(epochs) +
         R"(, "batch_size": )" + std::to_string(batch) + R"(, "optimizer": )" + optimizer + R"(, "update": )" + update +
         R"(, "seed": 5, "log_every_steps": 0})";
}

// Runs a whole cluster to completion and returns the workers' done events.
std::vector<nlohmann::json> RunToCompletion(Cluster& c, int num_ps, int num_workers, std::vector<std::string> worker_extra = {}) {
  for (int i = 0; i < num_ps; ++i) c.StartPs(i);
  for (int i = 0; i < num_workers; ++i) {
    std::vector<std::string> extra = worker_extra;
    for (auto& e : extra)
      if (e == "PARAMS") e = c.dir() / ("params" + std::to_string(i) + ".bin");
    c.StartWorker(i, extra);
  }
  std::vector<nlohmann::json> done;
  for (int i = 0; i < num_workers; ++i) {
    TaskResult w = c.Finish("worker", i);
    INFO("worker:" << i << " stderr:\n" << w.err);
    REQUIRE(w.exit_code == 0);
    REQUIRE(w.done.is_object());
    done.push_back(w.done);
  }
  for (int i = 0; i < num_ps; ++i) {
    TaskResult p = c.Finish("ps", i, 30s);
    INFO("ps:" << i << " stderr:\n" << p.err);
    CHECK(p.exit_code == 0);  // a ps exits by itself once every worker is done
  }
  return done;
}

std::vector<float> ReadFloats(const std::string& path) {
  std::string bytes = ReadAll(path);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

TEST_CASE("1 ps + 2 workers, async, reach 94% on MNIST in 3 epochs; the ps exits 0", "[integration][cluster][mnist]") {
  if (g_mnist.empty()) return;
  // Adam 2e-3 reaches 95.5-95.8% here in async runs (their interleaving varies).
  Cluster c(1, 2, Job(g_mnist, R"({"mode": "async"})", 3, R"({"type": "adam", "learning_rate": 0.002})"));
  auto done = RunToCompletion(c, 1, 2);
  for (const auto& d : done) {
    INFO(d.dump());
    CHECK(d["test_accuracy"].get<double>() >= 0.94);
    CHECK(d["local_step"] == 900);  // 60000 / 2 workers / batch 100 * 3 epochs
  }
}

TEST_CASE("1 ps + 2 workers, sync, reach 94% on MNIST in 3 epochs with identical workers", "[integration][cluster][mnist]") {
  if (g_mnist.empty()) return;
  // Deterministic: 94.95% every run.
  Cluster c(1, 2, Job(g_mnist, R"({"mode": "sync", "replicas_to_aggregate": 2, "total_num_replicas": 2})", 3,
                      R"({"type": "adam", "learning_rate": 0.002})"));
  auto done = RunToCompletion(c, 1, 2);
  CHECK(done[0]["test_accuracy"].get<double>() >= 0.94);
  CHECK(done[0]["global_step"] == 900);  // one global step per pair of gradients
  CHECK(done[0]["params_sha256"] == done[1]["params_sha256"]);
}

TEST_CASE("the dnn seed configuration converges in async mode with 2 workers", "[integration][cluster][mnist]") {
  // PyTorch's RPC parameter server diverges here (0.098 after one epoch); so does raw async
  // momentum without staleness scaling (8.9% after an epoch). It reaches 95-97% after two epochs
  // (async runs vary with the interleaving, more so on a loaded machine); 90% tells the two apart.
  if (g_mnist.empty()) return;
  Cluster c(1, 2, Job(g_mnist, R"({"mode": "async"})", 2, R"({"type": "momentum", "learning_rate": 0.01, "momentum": 0.95})", 50,
                      R"("dnn")"));
  auto done = RunToCompletion(c, 1, 2);
  for (const auto& d : done) {
    INFO(d.dump());
    CHECK(d["test_accuracy"].get<double>() >= 0.90);
  }
}

TEST_CASE("sync runs are bit-identical across repeats and across 1 and 2 ps", "[integration][cluster]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 1200, 200);
  const std::string job = Job(data.path(), R"({"mode": "sync"})", 2, R"({"type": "adam", "learning_rate": 0.01})", 20);
  Cluster one(1, 2, job), again(1, 2, job), two(2, 2, job);
  const auto a = RunToCompletion(one, 1, 2);
  const auto b = RunToCompletion(again, 1, 2);
  const auto c = RunToCompletion(two, 2, 2);
  CHECK(a[0]["params_sha256"] == a[1]["params_sha256"]);
  CHECK(a[0]["params_sha256"] == b[0]["params_sha256"]);
  CHECK(a[0]["params_sha256"] == c[0]["params_sha256"]);
  CHECK(a[0]["params_sha256"] == c[1]["params_sha256"]);
}

TEST_CASE("a sync run of 2 workers with batch b matches one process with batch 2b", "[integration][cluster]") {
  // Same seed, same examples per step, same initial weights; only the floating-point order of
  // the gradient sums differs (mean of two means of 10 vs one mean of 20). After 100 sgd steps
  // every parameter must agree within 1e-4 (observed differences are around 1e-6).
  TempDir data;
  WriteSyntheticMnist(data.path(), 2000, 200);
  const std::string opt = R"({"type": "sgd", "learning_rate": 0.1})";
  Cluster c(2, 2, Job(data.path(), R"({"mode": "sync"})", 2, opt, 20));
  RunToCompletion(c, 2, 2, {"--params-out", "PARAMS"});
  TempDir solo;
  WriteFile(solo / "job.json", Job(data.path(), R"({"mode": "async"})", 2, opt, 40));
  CommandResult r = RunCommand(kTfd + " --standalone --job " + solo / "job.json" + " --params-out " + solo / "params.bin", solo);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::vector<float> cluster = ReadFloats(c.dir() / "params0.bin"), single = ReadFloats(solo / "params.bin");
  REQUIRE(cluster.size() == single.size());
  REQUIRE(cluster.size() == 784 * 100 + 100 + 100 * 10 + 10 - (784 - 64) * 100);  // 8x8 synthetic images
  float max_diff = 0;
  for (std::size_t i = 0; i < cluster.size(); ++i) max_diff = std::max(max_diff, std::abs(cluster[i] - single[i]));
  INFO("max |cluster - single| = " << max_diff);
  CHECK(max_diff <= 1e-4f);
  CHECK(cluster != single);  // the sums really were ordered differently (else the test proves little)
}

TEST_CASE("sync with a backup worker (2 of 3 aggregated) lets every worker finish", "[integration][cluster]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 1200, 100);
  Cluster c(1, 3, Job(data.path(), R"({"mode": "sync", "replicas_to_aggregate": 2, "total_num_replicas": 3})", 2,
                      R"({"type": "sgd", "learning_rate": 0.1})", 20));
  auto done = RunToCompletion(c, 1, 3);
  for (const auto& d : done) CHECK(d["test_accuracy"].get<double>() > 0.5);
}

TEST_CASE("sync: a lost worker makes the others fail with its name instead of waiting", "[integration][cluster]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 2000, 50);
  Cluster c(1, 2, Job(data.path(), R"({"mode": "sync"})", 1000, R"({"type": "sgd", "learning_rate": 0.1})", 20));
  c.StartPs(0);
  c.StartWorker(0);
  c.StartWorker(1);
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (c.process("worker", 0).err().find("epoch=1 ") == std::string::npos && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(50ms);
  c.process("worker", 1).Signal(SIGKILL);
  TaskResult w = c.Finish("worker", 0, 30s);
  CHECK(w.exit_code == 1);
  INFO(w.err);
  CHECK(w.err.find("cannot complete: it needs 2 gradients") != std::string::npos);
  CHECK(w.err.find("worker:1 (127.0.0.1:") != std::string::npos);
  CHECK(w.err.find("was lost") != std::string::npos);
}

TEST_CASE("workers started before their ps wait for it and still train", "[integration][cluster]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 600, 100);
  Cluster c(2, 2, Job(data.path(), R"({"mode": "async"})", 1, R"({"type": "sgd", "learning_rate": 0.1})", 20));
  c.StartWorker(1);
  c.StartWorker(0);
  std::this_thread::sleep_for(1500ms);
  c.StartPs(1);
  std::this_thread::sleep_for(500ms);
  c.StartPs(0);
  for (int i = 0; i < 2; ++i) {
    TaskResult w = c.Finish("worker", i);
    INFO(w.err);
    CHECK(w.exit_code == 0);
  }
  for (int i = 0; i < 2; ++i) CHECK(c.Finish("ps", i, 30s).exit_code == 0);
}

TEST_CASE("a ps that never starts makes the worker exit 1 naming it", "[integration][cluster]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 200, 50);
  Cluster c(1, 1, Job(data.path(), R"({"mode": "async"})", 1, R"({"type": "sgd", "learning_rate": 0.1})", 20));
  c.StartWorker(0, {"--startup-timeout", "2"});
  TaskResult w = c.Finish("worker", 0, 60s);
  CHECK(w.exit_code == 1);
  const std::string ps = c.cluster()["ps"][0].get<std::string>();
  INFO(w.err);
  CHECK(w.err.find("ps:0 at " + ps + " did not accept a connection in time") != std::string::npos);
}

// Starts 1 ps and 1 worker on a long synthetic job and returns once the worker has finished its
// first epoch (failing the test if that takes over a minute).
std::unique_ptr<Cluster> StartTraining(const TempDir& data, std::vector<std::string> worker_extra = {}) {
  WriteSyntheticMnist(data.path(), 2000, 50);
  auto c = std::make_unique<Cluster>(1, 1, Job(data.path(), R"({"mode": "async"})", 1000, R"({"type": "sgd", "learning_rate": 0.1})", 20));
  c->StartPs(0);
  c->StartWorker(0, std::move(worker_extra));
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (c->process("worker", 0).err().find("epoch=1 ") == std::string::npos && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(50ms);
  INFO(c->process("worker", 0).err());
  REQUIRE(c->process("worker", 0).err().find("epoch=1 ") != std::string::npos);
  return c;
}

TEST_CASE("a worker whose ps dies and stays dead gets an error naming the ps after the reconnect timeout", "[integration][cluster]") {
  TempDir data;
  auto cluster = StartTraining(data, {"--reconnect-timeout", "2"});
  Cluster& c = *cluster;
  c.process("ps", 0).Signal(SIGKILL);  // the ps dies outright
  TaskResult w = c.Finish("worker", 0, 30s);
  CHECK(w.exit_code == 1);
  INFO(w.err);
  const std::string ps = "ps:0 (" + c.cluster()["ps"][0].get<std::string>() + ")";
  CHECK(w.err.find("lost " + ps + ": ") != std::string::npos);
  CHECK(w.err.find("reconnecting (for up to 2 s)") != std::string::npos);
  CHECK(w.err.find("error lost " + ps + " (") != std::string::npos);
  CHECK(w.err.find(") and could not reconnect: ps:0 at " + c.cluster()["ps"][0].get<std::string>() +
                   " did not accept a connection in time") != std::string::npos);
}

TEST_CASE("SIGTERM stops a ps and a worker within a second each", "[integration][cluster]") {
  TempDir data;
  auto cluster = StartTraining(data);
  Cluster& c = *cluster;
  c.process("worker", 0).Signal(SIGTERM);
  // Generous for a loaded machine; the design target is well under a second.
  TaskResult w = c.Finish("worker", 0, 5s);
  CHECK(w.exit_code == 128 + SIGTERM);
  CHECK(w.err.find("stopped by a signal") != std::string::npos);
  c.process("ps", 0).Signal(SIGTERM);
  TaskResult p = c.Finish("ps", 0, 5s);
  CHECK(p.exit_code == 128 + SIGTERM);
}

TEST_CASE("a worker of another cluster is refused with both cluster ids named", "[integration][cluster]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 200, 50);
  Cluster c(1, 1, Job(data.path(), R"({"mode": "async"})", 1, R"({"type": "sgd", "learning_rate": 0.1})", 20));
  c.StartPs(0);
  // Same ps, but this worker's cluster lists an extra worker: another cluster id.
  nlohmann::json other = c.cluster();
  other["worker"].push_back("127.0.0.1:" + std::to_string(FreePort()));
  const std::string tf_config = nlohmann::json{{"cluster", other}, {"task", {{"type", "worker"}, {"index", 0}}}}.dump();
  Process stranger({kTfd, "--job", c.dir() / "job.json", "--startup-timeout", "20"}, {"TF_CONFIG=" + tf_config},
                   c.dir() / "s.out", c.dir() / "s.err");
  std::optional<int> code = stranger.Wait(60s);
  REQUIRE(code.has_value());
  CHECK(*code == 1);
  INFO(stranger.err());
  CHECK(stranger.err().find("cluster id mismatch: worker:0 has cluster id") != std::string::npos);
  c.process("ps", 0).Signal(SIGTERM);
  c.Finish("ps", 0, 10s);
  CHECK(c.process("ps", 0).err().find("refused worker:0") != std::string::npos);
}

// Connects to 127.0.0.1:port (retrying for 10 s while nothing listens); reads time out after 10 s.
int ConnectLoopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  for (int i = 0; i < 200 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0; ++i) {
    close(fd);
    std::this_thread::sleep_for(50ms);
    fd = socket(AF_INET, SOCK_STREAM, 0);
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Connects to 127.0.0.1:port, sends `bytes`, and returns what comes back until the peer closes
// (at most 64 KB, within 10 s).
std::string Exchange(int port, const std::string& bytes) {
  const int fd = ConnectLoopback(port);
  (void)!write(fd, bytes.data(), bytes.size());
  std::string got;
  char buf[4096];
  for (ssize_t n; got.size() < 65536 && (n = read(fd, buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
  close(fd);
  return got;
}

std::string Le(std::uint64_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

TEST_CASE("a ps answers malformed frames with an ERROR frame naming the fault, then closes", "[integration][cluster]") {
  Cluster c(1, 1, Job("/nonexistent", R"({"mode": "async"})", 1, R"({"type": "sgd", "learning_rate": 0.1})"));
  c.StartPs(0);
  const std::string ep = c.cluster()["ps"][0].get<std::string>();
  const int port = std::stoi(ep.substr(ep.rfind(':') + 1));
  auto expect_error = [&](const std::string& sent, const std::string& fragment) {
    const std::string got = Exchange(port, sent);
    INFO("sent " << sent.size() << " bytes; got " << got.size());
    REQUIRE(got.size() >= 28);
    CHECK(got.substr(0, 4) == "TFD1");
    CHECK(got[6] == 30);  // type ERROR
    CHECK(got.find(fragment) != std::string::npos);
  };
  const std::string header_tail = Le(0, 2) + Le(0, 2) + Le(0, 8);  // flags, reserved, request id
  expect_error("GET / HTTP/1.1\r\nHost: example\r\n\r\n", "bad magic");
  // A HELLO-sized limit applies before the handshake: a big first frame is refused at once.
  expect_error("TFD1" + Le(1, 2) + Le(1, 2) + header_tail + Le(5000, 4) + Le(0, 4), "over the limit of 4096");
  expect_error("TFD1" + Le(2, 2) + Le(1, 2) + header_tail + Le(0, 4) + Le(0, 4), "protocol version 2");
  expect_error("TFD1" + Le(1, 2) + Le(999, 2) + header_tail + Le(0, 4) + Le(0, 4), "unknown message type 999");
  // A 4 GB length is refused from the header alone: nothing is allocated, nothing more is read.
  expect_error("TFD1" + Le(1, 2) + Le(12, 2) + header_tail + Le(0xffffffffu, 4) + Le(0, 4), "over the limit");
  expect_error("TFD1" + Le(1, 2) + Le(1, 2) + header_tail + Le(3, 4) + Le(0, 4) + "abc", "CRC");
  // A well-formed frame before HELLO is refused too.
  expect_error("TFD1" + Le(1, 2) + Le(10, 2) + Le(0, 2) + Le(0, 2) + Le(1, 8) + Le(8, 4) + Le(0x8c28b28au, 4) + Le(0, 8),
               "before HELLO");
  // A peer that sends a few bytes and then nothing is closed at the handshake deadline (5 s),
  // without being sent heartbeats.
  const auto start = std::chrono::steady_clock::now();
  const std::string got = Exchange(port, "TFD1");
  CHECK(got.empty());
  CHECK(std::chrono::steady_clock::now() - start < 9s);
  c.process("ps", 0).Signal(SIGTERM);
  CHECK(c.Finish("ps", 0, 10s).exit_code == 128 + SIGTERM);
}

TEST_CASE("a worker refused by a peer with a nonsense error code reports it instead of aborting", "[integration][cluster]") {
  // A fake "ps" that answers the worker's HELLO with ERROR code 0 (which is not an error code).
  TempDir data;
  WriteSyntheticMnist(data.path(), 200, 50);
  Cluster c(1, 1, Job(data.path(), R"({"mode": "async"})", 1, R"({"type": "sgd", "learning_rate": 0.1})", 20));
  const std::string ep = c.cluster()["ps"][0].get<std::string>();
  const int port = std::stoi(ep.substr(ep.rfind(':') + 1));
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  REQUIRE(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  listen(listener, 1);
  std::thread fake([&] {
    int fd = accept(listener, nullptr, nullptr);
    char hello[64];
    (void)!read(fd, hello, sizeof hello);
    wire::OutFrame f = wire::Encode(wire::ErrorMessage{0, "go away"});
    (void)f.Seal();
    std::array<std::byte, wire::kFrameHeaderBytes> header;
    wire::EncodeHeader(f.header, header);
    (void)!write(fd, header.data(), header.size());
    (void)!write(fd, f.head.data(), f.head.size());
    std::this_thread::sleep_for(500ms);
    close(fd);
  });
  c.StartWorker(0, {"--startup-timeout", "20"});
  TaskResult w = c.Finish("worker", 0, 60s);
  fake.join();
  close(listener);
  CHECK(w.exit_code == 1);
  INFO(w.err);
  CHECK(w.err.find("refused: go away") != std::string::npos);
}

TEST_CASE("allreduce: 2 and 3 workers reach 94% on MNIST in 3 epochs with bit-identical parameters", "[integration][cluster][mnist][allreduce]") {
  if (g_mnist.empty()) return;
  for (int n : {2, 3}) {
    Cluster c(0, n, Job(g_mnist, R"({"mode": "allreduce"})", 3, R"({"type": "adam", "learning_rate": 0.003})"));
    auto done = RunToCompletion(c, 0, n);
    INFO(n << " workers: " << done[0].dump());
    CHECK(done[0]["test_accuracy"].get<double>() >= 0.94);
    CHECK(done[0]["global_step"] == 3 * (60000 / n / 100));
    for (int i = 1; i < n; ++i) {
      CHECK(done[static_cast<std::size_t>(i)]["params_sha256"] == done[0]["params_sha256"]);
      CHECK(done[static_cast<std::size_t>(i)]["test_accuracy"] == done[0]["test_accuracy"]);
    }
  }
}

TEST_CASE("allreduce runs are bit-identical across repeats, whatever the start order", "[integration][cluster][allreduce]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 600, 100);
  const std::string job = Job(data.path(), R"({"mode": "allreduce"})", 2, R"({"type": "momentum", "learning_rate": 0.05, "momentum": 0.9})", 20);
  Cluster a(0, 3, job);
  auto first = RunToCompletion(a, 0, 3);
  Cluster b(0, 3, job);
  for (int i : {2, 0, 1}) {
    b.StartWorker(i);
    std::this_thread::sleep_for(300ms);
  }
  for (int i = 0; i < 3; ++i) {
    TaskResult w = b.Finish("worker", i);
    INFO(w.err);
    REQUIRE(w.exit_code == 0);
    CHECK(w.done["params_sha256"] == first[0]["params_sha256"]);
  }
}

TEST_CASE("allreduce in buckets overlapped with backprop gives the same bits as one bucket after it", "[integration][cluster][allreduce]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 400, 100);
  const std::string optimizer = R"({"type": "momentum", "learning_rate": 0.02, "momentum": 0.9})";
  auto job = [&](int bucket_kb) {
    return Job(data.path(), R"({"mode": "allreduce", "bucket_kb": )" + std::to_string(bucket_kb) + "}", 2, optimizer, 20, R"({"name": "dnn"})");
  };
  // Two workers: each float's sum is one addition, the same whichever bucket it travels in.
  Cluster one(0, 2, job(0));
  auto after = RunToCompletion(one, 0, 2);
  Cluster overlapped(0, 2, job(16));  // the dnn's six layers in five buckets
  auto during = RunToCompletion(overlapped, 0, 2);
  REQUIRE(after[0]["params_sha256"].is_string());
  CHECK(after[0]["params_sha256"] == during[0]["params_sha256"]);
  CHECK(during[0]["params_sha256"] == during[1]["params_sha256"]);
  // Three workers: another summation order than one bucket's, but the same bits every run.
  Cluster a(0, 3, job(16));
  auto first = RunToCompletion(a, 0, 3);
  Cluster b(0, 3, job(16));
  auto second = RunToCompletion(b, 0, 3);
  for (int i = 0; i < 3; ++i) CHECK(second[static_cast<std::size_t>(i)]["params_sha256"] == first[0]["params_sha256"]);
}

TEST_CASE("allreduce with a cluster token: the ring authenticates, and a worker with another token is refused",
          "[integration][cluster][allreduce][auth]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 600, 100);
  const std::string job = Job(data.path(), R"({"mode": "allreduce"})", 2, R"({"type": "sgd", "learning_rate": 0.1})", 20);
  Cluster a(0, 2, job);
  const std::string token = a.dir() / "token", other = a.dir() / "other";
  REQUIRE(transport::ClusterToken::Generate().WriteFile(token).ok());
  REQUIRE(transport::ClusterToken::Generate().WriteFile(other).ok());
  auto done = RunToCompletion(a, 0, 2, {"--token-file", token});
  CHECK(done[0]["params_sha256"] == done[1]["params_sha256"]);

  Cluster b(0, 2, job);
  b.StartWorker(0, {"--token-file", token, "--startup-timeout", "20"});
  b.StartWorker(1, {"--token-file", other, "--startup-timeout", "20"});
  for (int i = 0; i < 2; ++i) {
    TaskResult w = b.Finish("worker", i, 60s);
    INFO(w.err);
    CHECK(w.exit_code != 0);
    CHECK(w.err.find("holds a different cluster token") != std::string::npos);
  }
}

TEST_CASE("allreduce with uneven shards: the worker that runs out joins the remaining steps and all finish identical", "[integration][cluster][allreduce]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 1200, 100);
  Cluster c(0, 3, Job(data.path(), R"({"mode": "allreduce"})", 2, R"({"type": "sgd", "learning_rate": 0.1})", 20));
  c.StartWorker(0);
  c.StartWorker(1, {"--shard-limit", "100"});  // 5 batches an epoch where the others have 20
  c.StartWorker(2, {"--shard-limit", "250"});  // 12 batches (the last partial batch is dropped)
  std::vector<TaskResult> w;
  for (int i = 0; i < 3; ++i) {
    w.push_back(c.Finish("worker", i));
    INFO("worker:" << i << " " << w.back().err);
    REQUIRE(w.back().exit_code == 0);
  }
  CHECK(w[0].done["local_step"] == 40);
  CHECK(w[1].done["local_step"] == 10);
  CHECK(w[2].done["local_step"] == 24);
  for (int i = 0; i < 3; ++i) {
    CHECK(w[static_cast<std::size_t>(i)].done["global_step"] == 40);
    CHECK(w[static_cast<std::size_t>(i)].done["params_sha256"] == w[0].done["params_sha256"]);
  }
  CHECK(w[1].err.find("joined_without_data=15") != std::string::npos);
}

TEST_CASE("allreduce refuses a cluster with ps tasks, naming the field (exit 2)", "[integration][cluster][allreduce]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 200, 50);
  Cluster c(1, 2, Job(data.path(), R"({"mode": "allreduce"})", 1, R"({"type": "sgd", "learning_rate": 0.1})", 20));
  c.StartWorker(0);
  TaskResult w = c.Finish("worker", 0, 30s);
  INFO(w.err);
  CHECK(w.exit_code == 2);
  CHECK(w.err.find("cluster.ps: 1 ps tasks, but allreduce mode has none") != std::string::npos);
}

TEST_CASE("allreduce: a killed worker makes every other worker fail naming it, within the deadline", "[integration][cluster][allreduce]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 2000, 50);
  Cluster c(0, 4, Job(data.path(), R"({"mode": "allreduce"})", 1000, R"({"type": "sgd", "learning_rate": 0.1})", 20));
  for (int i = 0; i < 4; ++i) c.StartWorker(i, {"--peer-timeout", "5"});
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (c.process("worker", 0).err().find("epoch=1 ") == std::string::npos && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(50ms);
  REQUIRE(c.process("worker", 0).err().find("epoch=1 ") != std::string::npos);
  c.process("worker", 2).Signal(SIGKILL);
  const std::string lost = "worker:2 (" + c.cluster()["worker"][2].get<std::string>() + ")";
  for (int i : {0, 1, 3}) {
    TaskResult w = c.Finish("worker", i, 30s);
    INFO("worker:" << i << " " << w.err);
    CHECK(w.exit_code == 1);
    CHECK(w.err.find(lost) != std::string::npos);
  }
}

TEST_CASE("a ps and a worker tell systemd READY=1 through NOTIFY_SOCKET once they are up", "[integration][cluster]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 400, 50);
  Cluster c(1, 1, Job(data.path(), R"({"mode": "async"})", 1, R"({"type": "sgd", "learning_rate": 0.1})", 20));
  // The datagram socket systemd would provide.
  const std::string path = c.dir() / "notify.sock";
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  Process ps({kTfd}, {"TF_CONFIG=" + c.TfConfig("ps", 0), "NOTIFY_SOCKET=" + path}, c.dir() / "ps.out", c.dir() / "ps.err");
  auto receive = [&] {
    char buf[1024];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  };
  const std::string from_ps = receive();
  INFO(ps.err());
  CHECK(from_ps.find("READY=1") != std::string::npos);
  CHECK(from_ps.find("STATUS=ps:0 listening on port") != std::string::npos);
  Process worker({kTfd, "--job", c.dir() / "job.json"}, {"TF_CONFIG=" + c.TfConfig("worker", 0), "NOTIFY_SOCKET=" + path},
                 c.dir() / "w.out", c.dir() / "w.err");
  std::string from_worker;
  for (int i = 0; i < 5 && from_worker.find("READY=1") == std::string::npos; ++i) from_worker = receive();
  INFO(worker.err());
  CHECK(from_worker.find("STATUS=worker:0 training from global step 0") != std::string::npos);
  CHECK(worker.Wait(60s) == std::optional<int>(0));
  CHECK(ps.Wait(30s) == std::optional<int>(0));
  close(fd);
}

TEST_CASE("a worker whose ps stops answering (SIGSTOP) gets an error naming it after the peer and reconnect timeouts",
          "[integration][cluster]") {
  TempDir data;
  auto cluster = StartTraining(data, {"--peer-timeout", "2", "--reconnect-timeout", "3"});
  Cluster& c = *cluster;
  c.process("ps", 0).Signal(SIGSTOP);
  TaskResult w = c.Finish("worker", 0, 30s);
  c.process("ps", 0).Signal(SIGCONT);
  CHECK(w.exit_code == 1);
  INFO(w.err);
  CHECK(w.err.find("ps:0 (" + c.cluster()["ps"][0].get<std::string>() + ") sent nothing for 2.0 s") != std::string::npos);
  CHECK(w.err.find("could not reconnect") != std::string::npos);  // it accepts connections, but answers nothing
}

// ---------------------------------------------------------------------------------------------
// Worker failure

// Waits until `p`'s stderr contains `text`; fails the test after `limit`.
void AwaitLine(Process& p, const std::string& text, std::chrono::seconds limit = 60s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (p.err().find(text) == std::string::npos && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(20ms);
  INFO(p.err());
  REQUIRE(p.err().find(text) != std::string::npos);
}

TEST_CASE("async: a worker killed mid-epoch and restarted resumes its shard; accuracy holds", "[integration][cluster][mnist][fault]") {
  if (g_mnist.empty()) return;
  const std::string job = Job(g_mnist, R"({"mode": "async"})", 3, R"({"type": "adam", "learning_rate": 0.002})");
  Cluster undisturbed(1, 2, job);
  const double reference = RunToCompletion(undisturbed, 1, 2)[0]["test_accuracy"].get<double>();

  Cluster c(1, 2, job);
  c.StartPs(0);
  c.StartWorker(0);
  c.StartWorker(1, {"--log-level", "info"});
  AwaitLine(c.process("worker", 1), "worker=1 epoch=1 ");
  c.process("worker", 1).Signal(SIGKILL);
  AwaitLine(c.process("ps", 0), "lost worker:1");
  // The others go on meanwhile; the restarted worker (a new incarnation) picks up where the ps
  // says its last applied step was, in the same data order.
  c.StartWorker(1);
  TaskResult w1 = c.Finish("worker", 1);
  CHECK(w1.exit_code == 0);
  CHECK(w1.err.find("resuming at epoch 2 step ") != std::string::npos);
  REQUIRE(w1.done.is_object());
  CHECK(w1.done["local_step"] == 900);  // counted across both incarnations: no step taken twice
  TaskResult w0 = c.Finish("worker", 0);
  CHECK(w0.exit_code == 0);
  REQUIRE(w0.done.is_object());
  TaskResult ps = c.Finish("ps", 0, 30s);
  CHECK(ps.exit_code == 0);
  CHECK(ps.err.find("worker:1 (127.0.0.1:") != std::string::npos);
  CHECK(ps.err.find(") rejoined (incarnation ") != std::string::npos);
  // Async runs interleave differently every time: undisturbed ones have ended anywhere from 94.6% to
  // 95.8% here on a loaded machine. The fault must not cost accuracy beyond that spread.
  INFO("undisturbed " << reference << ", disturbed " << w0.done["test_accuracy"].get<double>());
  CHECK(w0.done["test_accuracy"].get<double>() >= reference - 0.015);
  CHECK(w0.done["test_accuracy"].get<double>() >= 0.94);
}

TEST_CASE("sync, on_worker_loss wait: the others wait for a killed worker, which comes back and resumes", "[integration][cluster][fault]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 2000, 50);
  // 2 workers x 50 steps per epoch (batch 20), 30 epochs.
  Cluster c(1, 2, Job(data.path(), R"({"mode": "sync", "on_worker_loss": "wait"})", 30, R"({"type": "sgd", "learning_rate": 0.1})", 20));
  c.StartPs(0);
  c.StartWorker(0);
  c.StartWorker(1);
  AwaitLine(c.process("worker", 1), "worker=1 epoch=2 ");
  c.process("worker", 1).Signal(SIGKILL);
  AwaitLine(c.process("ps", 0), "waits for worker:1 (127.0.0.1:");
  c.StartWorker(1);
  TaskResult w1 = c.Finish("worker", 1);
  TaskResult w0 = c.Finish("worker", 0);
  CHECK(w0.exit_code == 0);
  CHECK(w1.exit_code == 0);
  CHECK(w1.err.find("resuming at epoch ") != std::string::npos);
  REQUIRE(w0.done.is_object());
  REQUIRE(w1.done.is_object());
  CHECK(w0.done["global_step"] == 1500);  // every step aggregated both workers' gradients: none lost, none doubled
  CHECK(w0.done["params_sha256"] == w1.done["params_sha256"]);
  CHECK(c.Finish("ps", 0, 30s).exit_code == 0);
}

TEST_CASE("sync, on_worker_loss shrink: the others go on with a smaller quorum, logged, and the ps ends", "[integration][cluster][fault]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 3000, 50);
  Cluster c(1, 3, Job(data.path(), R"({"mode": "sync", "on_worker_loss": "shrink", "min_replicas": 2})", 20,
                      R"({"type": "sgd", "learning_rate": 0.1})", 20));
  c.StartPs(0);
  for (int i = 0; i < 3; ++i) c.StartWorker(i);
  AwaitLine(c.process("worker", 2), "worker=2 epoch=1 ");
  c.process("worker", 2).Signal(SIGKILL);
  for (int i = 0; i < 2; ++i) {
    TaskResult w = c.Finish("worker", i);
    CHECK(w.exit_code == 0);
    CHECK(w.done.is_object());
  }
  TaskResult ps = c.Finish("ps", 0, 30s);
  CHECK(ps.exit_code == 0);
  INFO(ps.err);
  CHECK(ps.err.find("quorum: sync steps aggregate 2 of 3 gradients from step ") != std::string::npos);
  CHECK(ps.err.find("worker:2 (127.0.0.1:") != std::string::npos);
}

TEST_CASE("sync, on_worker_loss shrink below min_replicas fails the step naming the lost worker", "[integration][cluster][fault]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 2000, 50);
  Cluster c(1, 2, Job(data.path(), R"({"mode": "sync", "on_worker_loss": "shrink", "min_replicas": 2})", 1000,
                      R"({"type": "sgd", "learning_rate": 0.1})", 20));
  c.StartPs(0);
  c.StartWorker(0);
  c.StartWorker(1);
  AwaitLine(c.process("worker", 1), "worker=1 epoch=1 ");
  c.process("worker", 1).Signal(SIGKILL);
  TaskResult w0 = c.Finish("worker", 0, 60s);
  CHECK(w0.exit_code == 1);
  INFO(w0.err);
  CHECK(w0.err.find("was lost (fewer than min_replicas 2)") != std::string::npos);
  c.process("ps", 0).Signal(SIGTERM);
  c.Finish("ps", 0, 10s);
}

TEST_CASE("a ps killed mid-run and restarted is initialised again by the chief; training goes on from its step",
          "[integration][cluster][fault]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 2000, 200);
  Cluster c(1, 2, Job(data.path(), R"({"mode": "async"})", 30, R"({"type": "sgd", "learning_rate": 0.1})", 20));
  c.StartPs(0);
  // Worker 1 first, waiting for the chief's INIT, so neither can finish before the other starts.
  c.StartWorker(1);
  AwaitLine(c.process("worker", 1), "connected to ps:0 (");
  c.StartWorker(0);
  AwaitLine(c.process("worker", 1), "worker=1 epoch=1 ");  // both are training
  AwaitLine(c.process("worker", 0), "worker=0 epoch=3 ");
  c.process("ps", 0).Signal(SIGKILL);
  std::this_thread::sleep_for(500ms);
  c.StartPs(0);  // as systemd's Restart=on-failure or tfctl would
  TaskResult w0 = c.Finish("worker", 0);
  TaskResult w1 = c.Finish("worker", 1);
  CHECK(w0.exit_code == 0);
  CHECK(w1.exit_code == 0);
  INFO(w0.err);
  CHECK(w0.err.find("reconnected to ps:0 (") != std::string::npos);
  CHECK(w0.err.find("restarted: initialised again from this chief's parameters at global_step ") != std::string::npos);
  INFO(w1.err);
  CHECK(w1.err.find("reconnected to ps:0 (") != std::string::npos);  // restarted, or already initialised again by then
  // No re-initialised weights: the chief's accuracy after the restart is as high as before it.
  REQUIRE(w0.done.is_object());
  CHECK(w0.done["test_accuracy"].get<double>() >= 0.9);
  CHECK(w0.done["local_step"] == 1500);
  TaskResult ps = c.Finish("ps", 0, 30s);
  CHECK(ps.exit_code == 0);
  INFO(ps.err);
  // It starts counting at the step the chief last saw from the killed ps, not at 0.
  const auto at = ps.err.find("async mode, at global_step ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stoll(ps.err.substr(at + 27)) >= 2 * 50 * 3 - 60);
}

TEST_CASE("a worker stopped (SIGSTOP) past the peer timeout reconnects when continued and finishes", "[integration][cluster][fault]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 2000, 50);
  Cluster c(1, 2, Job(data.path(), R"({"mode": "async"})", 40, R"({"type": "sgd", "learning_rate": 0.1})", 20));
  c.StartPs(0, {"--peer-timeout", "2"});
  c.StartWorker(0);
  c.StartWorker(1, {"--peer-timeout", "2"});
  AwaitLine(c.process("worker", 1), "worker=1 epoch=1 ");
  c.process("worker", 1).Signal(SIGSTOP);
  AwaitLine(c.process("ps", 0), "lost worker:1");
  c.process("worker", 1).Signal(SIGCONT);
  TaskResult w1 = c.Finish("worker", 1);
  CHECK(w1.exit_code == 0);
  INFO(w1.err);
  CHECK(w1.err.find("reconnected to ps:0 (") != std::string::npos);
  REQUIRE(w1.done.is_object());
  CHECK(w1.done["local_step"] == 2000);
  CHECK(c.Finish("worker", 0).exit_code == 0);
  TaskResult ps = c.Finish("ps", 0, 30s);
  CHECK(ps.exit_code == 0);
  CHECK(ps.err.find("rejoined") != std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Authentication with a cluster token

TEST_CASE("with a cluster token a cluster trains; a worker with another token or none is refused, named on both sides",
          "[integration][cluster][auth]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 400, 50);
  Cluster c(1, 2, Job(data.path(), R"({"mode": "async"})", 1, R"({"type": "sgd", "learning_rate": 0.1})", 20));
  const std::string token = c.dir() / "token", other = c.dir() / "other", loose = c.dir() / "loose";
  REQUIRE(transport::ClusterToken::Generate().WriteFile(token).ok());
  REQUIRE(transport::ClusterToken::Generate().WriteFile(other).ok());
  REQUIRE(transport::ClusterToken::Generate().WriteFile(loose).ok());
  chmod(loose.c_str(), 0644);
  c.StartPs(0, {"--token-file", token});
  auto stranger = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {kTfd, "--job", c.dir() / "job.json", "--startup-timeout", "20"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    Process p(argv, {"TF_CONFIG=" + c.TfConfig("worker", 0)}, c.dir() / "s.out", c.dir() / "s.err");
    std::optional<int> code = p.Wait(60s);
    REQUIRE(code.has_value());
    return std::pair{*code, p.err()};
  };
  const std::string ps_name = "ps:0 (" + c.cluster()["ps"][0].get<std::string>() + ")";
  auto [wrong_code, wrong_err] = stranger({"--token-file", other});
  CHECK(wrong_code == 2);
  CHECK(wrong_err.find(ps_name + " holds a different cluster token (its --token-file differs from this task's)") != std::string::npos);
  auto [none_code, none_err] = stranger({});
  CHECK(none_code == 2);
  CHECK(none_err.find("sent HELLO without authenticating, but this task requires the cluster token") != std::string::npos);
  auto [loose_code, loose_err] = stranger({"--token-file", loose});
  CHECK(loose_code == 2);
  CHECK(loose_err == "tfd: token file " + loose + " has mode 0644: others may read it; run chmod 600 " + loose + "\n");
  // The refused ones leave the ps serving: the cluster with the token trains to the end.
  c.StartWorker(0, {"--token-file", token});
  c.StartWorker(1, {"--token-file", token});
  for (int i = 0; i < 2; ++i) {
    TaskResult w = c.Finish("worker", i);
    CHECK(w.exit_code == 0);
    CHECK(w.done.is_object());
  }
  TaskResult ps = c.Finish("ps", 0);
  CHECK(ps.exit_code == 0);
  INFO(ps.err);
  CHECK(ps.err.find("refused: 127.0.0.1:") != std::string::npos);
  CHECK(ps.err.find("refused to authenticate: " + ps_name + " holds a different cluster token") != std::string::npos);
  CHECK(ps.err.find("sent HELLO without authenticating") != std::string::npos);
  // The token itself is never logged.
  const std::string hex = ReadAll(token).substr(0, 64);
  CHECK(ps.err.find(hex) == std::string::npos);
  CHECK(ps.out.find(hex) == std::string::npos);
}

// The client side of the token handshake done by hand, then frames sealed (or tampered with) by
// the test, against a live ps.
class HandAuthenticated {
 public:
  HandAuthenticated(int port, const transport::ClusterToken& token, bool same_token = true) {
    fd_ = ConnectLoopback(port);
    wire::AuthHello hello;
    transport::RandomBytes(hello.nonce);
    SendRaw(wire::Encode(hello));
    const std::string reply = Read(28 + 64);
    REQUIRE(reply.size() == 28 + 64);
    REQUIRE(reply[6] == static_cast<char>(wire::MessageType::kAuthChallenge));
    wire::AuthChallenge challenge;
    REQUIRE(wire::Decode(AsBytes(reply).subspan(28), &challenge).ok());
    // The server proved it holds the token (or, with another token, that it holds a different one).
    CHECK(same_token == transport::SameBytes(challenge.proof, token.Derive(transport::kServerProofLabel, hello.nonce, challenge.nonce)));
    wire::AuthProof proof;
    proof.proof = token.Derive(transport::kClientProofLabel, hello.nonce, challenge.nonce);
    SendRaw(wire::Encode(proof));
    send_ = std::make_unique<transport::FrameMac>(token.Derive(transport::kClientToServerLabel, hello.nonce, challenge.nonce));
    recv_ = std::make_unique<transport::FrameMac>(token.Derive(transport::kServerToClientLabel, hello.nonce, challenge.nonce));
  }
  ~HandAuthenticated() { close(fd_); }

  // A frame as bytes: MAC'd with the next sequence number unless `mac` is false (then CRC'd).
  std::string Seal(wire::OutFrame f, bool mac = true) {
    REQUIRE(f.Seal(/*with_crc=*/!mac).ok());
    if (mac) f.header.flags = wire::kFlagMac;
    std::array<std::byte, wire::kFrameHeaderBytes> header;
    wire::EncodeHeader(f.header, header);
    std::string bytes(reinterpret_cast<const char*>(header.data()), header.size());
    bytes.append(reinterpret_cast<const char*>(f.head.data()), f.head.size());
    if (mac) {
      std::array<std::byte, 16> tag;
      const std::array<std::span<const std::byte>, 2> parts = {std::span<const std::byte>(header), std::span<const std::byte>(f.head)};
      send_->Tag(seq_++, parts, tag);
      bytes.append(reinterpret_cast<const char*>(tag.data()), tag.size());
    }
    return bytes;
  }
  void Write(const std::string& bytes) { REQUIRE(write(fd_, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size())); }
  // Up to `n` bytes, or whatever came before the peer closed (10 s at most).
  std::string Read(std::size_t n = 65536) {
    std::string got;
    char buf[4096];
    for (ssize_t r; got.size() < n && (r = read(fd_, buf, std::min(sizeof buf, n - got.size()))) > 0;) got.append(buf, static_cast<std::size_t>(r));
    return got;
  }
  // Checks a MAC'd reply from the server with its next sequence number.
  bool Verifies(const std::string& frame) {
    if (frame.size() < 28 + 16) return false;
    std::array<std::byte, 16> tag;
    const auto bytes = AsBytes(frame);
    const std::array<std::span<const std::byte>, 2> parts = {bytes.first(28), bytes.subspan(28, frame.size() - 28 - 16)};
    recv_->Tag(recv_seq_++, parts, tag);
    return transport::SameBytes(tag, bytes.last(16));
  }

 private:
  static std::span<const std::byte> AsBytes(const std::string& s) { return std::as_bytes(std::span<const char>(s.data(), s.size())); }
  void SendRaw(wire::OutFrame f) { Write(Seal(std::move(f), /*mac=*/false)); }

  int fd_ = -1;
  std::unique_ptr<transport::FrameMac> send_, recv_;
  std::uint64_t seq_ = 0, recv_seq_ = 0;
};

TEST_CASE("an authenticated ps refuses altered, replayed and unMAC'd frames, and big frames before authentication",
          "[integration][cluster][auth]") {
  Cluster c(1, 1, Job("/nonexistent", R"({"mode": "async"})", 1, R"({"type": "sgd", "learning_rate": 0.1})"));
  const std::string token_file = c.dir() / "token";
  REQUIRE(transport::ClusterToken::Generate().WriteFile(token_file).ok());
  const transport::ClusterToken token = *transport::ClusterToken::ReadFile(token_file);
  c.StartPs(0, {"--token-file", token_file});
  const std::string ep = c.cluster()["ps"][0].get<std::string>();
  const int port = std::stoi(ep.substr(ep.rfind(':') + 1));
  Result<config::TfConfig> config = config::ParseTfConfig(c.TfConfig("worker", 0), "TF_CONFIG");
  REQUIRE(config.ok());
  wire::Hello hello;
  hello.kind = wire::TaskKind::kWorker;
  hello.cluster_id = config->cluster.Id();

  SECTION("a correctly MAC'd HELLO is welcomed, with a MAC'd WELCOME") {
    HandAuthenticated a(port, token);
    a.Write(a.Seal(wire::Encode(hello)));
    const std::string welcome = a.Read(28 + 30 + 16);
    REQUIRE(welcome.size() == 28 + 30 + 16);
    CHECK(welcome[6] == static_cast<char>(wire::MessageType::kWelcome));
    CHECK(welcome[8] == static_cast<char>(wire::kFlagMac));
    CHECK(a.Verifies(welcome));
  }
  SECTION("an altered frame") {
    HandAuthenticated a(port, token);
    std::string bytes = a.Seal(wire::Encode(hello));
    bytes[30] ^= 1;  // the task kind: worker becomes chief
    a.Write(bytes);
    CHECK(a.Read().find("the MAC of a HELLO frame does not verify") != std::string::npos);
  }
  SECTION("a replayed frame") {
    HandAuthenticated a(port, token);
    const std::string bytes = a.Seal(wire::Encode(hello));
    a.Write(bytes);
    REQUIRE(a.Read(28 + 30 + 16).size() == 28 + 30 + 16);
    a.Write(bytes);  // same bytes again: the sequence number has moved on
    CHECK(a.Read().find("does not verify: the frame was altered, injected or replayed") != std::string::npos);
  }
  SECTION("a frame without a MAC after the handshake") {
    HandAuthenticated a(port, token);
    a.Write(a.Seal(wire::Encode(hello), /*mac=*/false));
    CHECK(a.Read().find("sent a HELLO frame without a MAC on an authenticated connection") != std::string::npos);
  }
  SECTION("a frame over 224 bytes before authentication") {
    const std::string got = Exchange(port, "TFD1" + Le(1, 2) + Le(6, 2) + Le(0, 2) + Le(0, 2) + Le(0, 8) + Le(225, 4) + Le(0, 4));
    CHECK(got.find("AUTH_HELLO payload of 225 bytes is over the limit of 224") != std::string::npos);
  }
  SECTION("an AUTH_PROOF with the wrong proof") {
    // Another token's proof: the ps refuses it, names the fault, and logs it.
    HandAuthenticated a(port, transport::ClusterToken::Generate(), /*same_token=*/false);
    CHECK(a.Read().find("holds a different cluster token") != std::string::npos);
  }
  c.process("ps", 0).Signal(SIGTERM);
  CHECK(c.Finish("ps", 0, 10s).exit_code == 128 + SIGTERM);
}

TEST_CASE("abuse against a live ps: 1,000 connections at once, a byte a second, a wrong token; honest workers train on",
          "[integration][cluster][auth][fault]") {
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = std::min<rlim_t>(files.rlim_max, 4096);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &files) == 0);
  REQUIRE(files.rlim_cur >= 1100);
  TempDir data;
  WriteSyntheticMnist(data.path(), 2000, 50);
  Cluster c(1, 2, Job(data.path(), R"({"mode": "async"})", 100000, R"({"type": "sgd", "learning_rate": 0.1})", 20));
  const std::string token = c.dir() / "token";
  REQUIRE(transport::ClusterToken::Generate().WriteFile(token).ok());
  c.StartPs(0, {"--token-file", token});
  c.StartWorker(0, {"--token-file", token});
  c.StartWorker(1, {"--token-file", token});
  AwaitLine(c.process("worker", 1), "worker=1 epoch=2 ");
  const std::string ep = c.cluster()["ps"][0].get<std::string>();
  const int port = std::stoi(ep.substr(ep.rfind(':') + 1));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));

  // A stranger with another token (before the flood below takes this address's handshake slots).
  {
    HandAuthenticated stranger(port, transport::ClusterToken::Generate(), /*same_token=*/false);
    CHECK(stranger.Read().find("holds a different cluster token") != std::string::npos);
  }
  // A byte a second: never a whole header. Closed at the handshake deadline (5 s).
  bool slow_closed = false;
  double slow_secs = 0;
  int slow_fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(connect(slow_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  std::thread slow([&] {  // no Catch2 macros off the main thread
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 15 && !slow_closed; ++i) {
      slow_closed = send(slow_fd, "T", 1, MSG_NOSIGNAL) != 1;
      char b;
      pollfd p{slow_fd, POLLIN, 0};
      if (poll(&p, 1, 1000) > 0 && recv(slow_fd, &b, 1, 0) <= 0) slow_closed = true;
    }
    slow_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    close(slow_fd);
  });
  // 1,000 connections at once, saying nothing.
  std::vector<int> flood;
  for (int i = 0; i < 1000; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    REQUIRE(fd >= 0);
    (void)connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    flood.push_back(fd);
  }
  slow.join();
  CHECK(slow_closed);
  CHECK(slow_secs < 9);
  // Most of the flood was turned away at once (64 handshakes per address at most), the rest at the
  // handshake deadline: every one of them is closed by now.
  int closed = 0;
  for (int fd : flood) {
    char b;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 2000) > 0 && recv(fd, &b, 1, 0) <= 0) ++closed;
    close(fd);
  }
  CHECK(closed == 1000);
  // The honest workers went on training throughout.
  const std::string before = c.process("worker", 1).err();
  const auto epochs_logged = [](const std::string& log) { return std::count(log.begin(), log.end(), '\n'); };
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (epochs_logged(c.process("worker", 1).err()) <= epochs_logged(before) + 2 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(50ms);
  CHECK(epochs_logged(c.process("worker", 1).err()) > epochs_logged(before) + 2);
  CHECK_FALSE(c.process("worker", 0).Wait(0ms).has_value());
  for (int i = 0; i < 2; ++i) c.process("worker", i).Signal(SIGTERM);
  c.process("ps", 0).Signal(SIGTERM);
  TaskResult ps = c.Finish("ps", 0, 20s);
  CHECK(ps.exit_code == 128 + SIGTERM);
  INFO(ps.err);
  CHECK(ps.err.find("refused connections from 127.0.0.1: 64 handshakes from it are in progress already") != std::string::npos);
  const auto at = ps.err.find("refused connections: ");
  REQUIRE(at != std::string::npos);
  const std::string counts = ps.err.substr(at, ps.err.find('\n', at) - at);
  CHECK(counts.find("1 authentication") != std::string::npos);
  CHECK(counts.find("busy (too many handshakes from one address)") != std::string::npos);
  CHECK(counts.find("handshake timeout") != std::string::npos);
}

}  // namespace
}  // namespace tfd::testing

int main(int argc, char** argv) {
  const char* dir = std::getenv("TFD_MNIST_DIR");
  if (dir != nullptr && std::filesystem::exists(std::filesystem::path(dir) / "train-images-idx3-ubyte"))
    tfd::testing::g_mnist = std::filesystem::absolute(dir).string();
  else
    std::fprintf(stderr, "note: no MNIST in TFD_MNIST_DIR: the MNIST cluster tests pass without running\n");
  return Catch::Session().run(argc, argv);
}
