// What a ps or a worker refuses: a worker of another cluster, malformed frames, and a peer's ERROR
// frame with a nonsense code. Every wait has a deadline that fails the test instead of hanging.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/wire/frame.h"
#include "common/wire/messages.h"
#include "test/integration/cluster_util.h"
#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing::cluster_refusal_test {
namespace {

using namespace std::chrono_literals;

TEST_CASE("a worker of another cluster is refused with both cluster ids named", "[integration][cluster]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 1, .job = SyntheticJob(data, 200, 50, R"({"mode": "async"})", 1)});
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

TEST_CASE("a ps answers malformed frames with an ERROR frame naming the fault, then closes", "[integration][cluster]") {
  LocalCluster c({.num_ps = 1, .num_workers = 1,
                  .job = Job("/nonexistent", R"({"mode": "async"})", 1, R"({"type": "sgd", "learning_rate": 0.1})")});
  c.StartPs(0);
  const int port = c.port("ps", 0);
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
  LocalCluster c({.num_ps = 1, .num_workers = 1, .job = SyntheticJob(data, 200, 50, R"({"mode": "async"})", 1)});
  const int port = c.port("ps", 0);
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr = LoopbackAddress(port);
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

}  // namespace
}  // namespace tfd::testing::cluster_refusal_test
