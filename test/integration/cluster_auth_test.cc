// A cluster token: clusters that hold it train, strangers are refused on both sides, a live ps
// refuses altered, replayed and unMAC'd frames (a client handshake done by hand), and abuse
// (a connection flood, a byte a second, a wrong token) leaves honest workers training.
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/config/cluster.h"
#include "common/transport/auth.h"
#include "common/wire/frame.h"
#include "common/wire/messages.h"
#include "test/integration/cluster_util.h"
#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing::cluster_auth_test {
namespace {

using namespace std::chrono_literals;

TEST_CASE("with a cluster token a cluster trains; a worker with another token or none is refused, named on both sides",
          "[integration][cluster][auth]") {
  TempDir data;
  LocalCluster c({.num_ps = 1, .num_workers = 2, .job = SyntheticJob(data, 400, 50, R"({"mode": "async"})", 1)});
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
  const std::string ps_name = "ps:0 (" + c.endpoint("ps", 0) + ")";
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
  CHECK(ps.err.find("refused: local pid ") != std::string::npos);
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
  LocalCluster c({.num_ps = 1, .num_workers = 1,
                  .job = Job("/nonexistent", R"({"mode": "async"})", 1, R"({"type": "sgd", "learning_rate": 0.1})")});
  const std::string token_file = c.dir() / "token";
  REQUIRE(transport::ClusterToken::Generate().WriteFile(token_file).ok());
  const transport::ClusterToken token = *transport::ClusterToken::ReadFile(token_file);
  c.StartPs(0, {"--token-file", token_file});
  const int port = c.port("ps", 0);
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
  LocalCluster c({.num_ps = 1, .num_workers = 2, .job = SyntheticJob(data, 2000, 50, R"({"mode": "async"})", 100000)});
  const std::string token = c.dir() / "token";
  REQUIRE(transport::ClusterToken::Generate().WriteFile(token).ok());
  c.StartPs(0, {"--token-file", token});
  c.StartWorker(0, {"--token-file", token});
  c.StartWorker(1, {"--token-file", token});
  c.AwaitEvent("worker", 1, "epoch", {{"epoch", 2}});
  const int port = c.port("ps", 0);
  sockaddr_in addr = LoopbackAddress(port);

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
}  // namespace tfd::testing::cluster_auth_test
