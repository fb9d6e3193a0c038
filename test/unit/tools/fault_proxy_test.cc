// The fault proxy between a blocking client and an echo server on loopback: each fault does what
// it says, and nothing else. Timing is only ever checked from below; every read has a deadline.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "test/tools/fault_proxy.h"

namespace tfd::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kDeadline = 10s;  // for anything that should happen; a failure, not a hang

// Echoes every connection's bytes back until the client half-closes, then closes.
class EchoServer {
 public:
  EchoServer() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(listen(listen_fd_, 16) == 0);
    socklen_t len = sizeof addr;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] {
      for (;;) {
        int fd = accept(listen_fd_, nullptr, nullptr);
        if (fd < 0) return;  // shut down
        std::lock_guard<std::mutex> lock(mu_);
        ++accepted_;
        fds_.push_back(fd);
        sessions_.emplace_back([fd] {
          char buf[16384];
          for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) {
            for (ssize_t off = 0; off < n;) {
              ssize_t w = send(fd, buf + off, static_cast<std::size_t>(n - off), MSG_NOSIGNAL);
              if (w <= 0) return;
              off += w;
            }
          }
          shutdown(fd, SHUT_WR);
        });
      }
    });
  }
  ~EchoServer() {
    shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
    acceptor_.join();
    close(listen_fd_);
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    for (auto& t : sessions_) t.join();
    for (int fd : fds_) close(fd);
  }
  std::uint16_t port() const { return port_; }
  int accepted() {
    std::lock_guard<std::mutex> lock(mu_);
    return accepted_;
  }

 private:
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread acceptor_;
  std::mutex mu_;
  int accepted_ = 0;
  std::vector<int> fds_;
  std::vector<std::thread> sessions_;
};

// A blocking loopback client whose reads give up after `kDeadline`.
class Client {
 public:
  explicit Client(std::uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Client() { close(fd_); }

  void Send(const std::string& bytes) {
    for (std::size_t off = 0; off < bytes.size();) {
      ssize_t w = send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);  // EPIPE, not SIGPIPE
      REQUIRE(w > 0);
      off += static_cast<std::size_t>(w);
    }
  }
  void CloseWrite() { shutdown(fd_, SHUT_WR); }

  // Reads until `n` bytes, EOF, an error or `limit`; `error` gets errno (0 on EOF or success).
  std::string Read(std::size_t n, std::chrono::milliseconds limit = kDeadline) {
    std::string got;
    const auto until = Clock::now() + limit;
    error = 0;
    eof = false;
    while (got.size() < n) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[16384];
      ssize_t r = read(fd_, buf, std::min(sizeof buf, n - got.size()));
      if (r < 0) {
        error = errno;
        break;
      }
      if (r == 0) {
        eof = true;
        break;
      }
      got.append(buf, static_cast<std::size_t>(r));
    }
    return got;
  }
  // Everything until EOF or an error (within the deadline).
  std::string ReadToEnd() { return Read(std::string::npos); }

  int error = 0;
  bool eof = false;

 private:
  int fd_ = -1;
};

std::string RandomBytes(std::size_t n, std::uint32_t seed = 1) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(gen());
  return s;
}

std::unique_ptr<FaultProxy> ProxyTo(std::uint16_t port) {
  auto p = FaultProxy::Start({.target_port = port});
  INFO(p.status().message());
  REQUIRE(p.ok());
  return std::move(p).value();
}

// Polls `done` until it holds or the deadline passes; the result is the last answer.
bool WaitFor(const std::function<bool()>& done) {
  const auto until = Clock::now() + kDeadline;
  while (!done() && Clock::now() < until) std::this_thread::sleep_for(5ms);
  return done();
}

double MsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

TEST_CASE("fault proxy: with no fault, bytes pass unchanged both ways and are counted", "[unit][fault_proxy]") {
  EchoServer echo;
  auto proxy = ProxyTo(echo.port());
  const std::string data = RandomBytes(300 * 1024);
  Client c(proxy->port());
  std::thread sender([&] {
    c.Send(data);
    c.CloseWrite();
  });
  const std::string got = c.ReadToEnd();
  sender.join();
  CHECK(got.size() == data.size());
  CHECK(got == data);
  CHECK(c.eof);  // the half-close went through and the echo server's close came back
  CHECK(proxy->connections_accepted() == 1);
  CHECK(WaitFor([&] { return proxy->bytes_forwarded(Direction::kServerToClient) == data.size(); }));
  CHECK(proxy->bytes_forwarded(Direction::kClientToServer) == data.size());
  CHECK(WaitFor([&] { return proxy->open_connections() == 0; }));
}

TEST_CASE("fault proxy: delay holds each direction's bytes at least that long", "[unit][fault_proxy]") {
  EchoServer echo;
  auto proxy = ProxyTo(echo.port());
  Client c(proxy->port());
  c.Send("warm");
  REQUIRE(c.Read(4) == "warm");

  proxy->SetDelay(Direction::kClientToServer, 300ms);
  auto t = Clock::now();
  c.Send("one");
  REQUIRE(c.Read(3) == "one");
  CHECK(MsSince(t) >= 300);

  proxy->SetDelay(Direction::kBoth, 200ms);
  t = Clock::now();
  for (int i = 0; i < 5; ++i) c.Send(std::to_string(i));  // several chunks keep their order
  REQUIRE(c.Read(5) == "01234");
  CHECK(MsSince(t) >= 400);

  proxy->SetDelay(Direction::kBoth, 0ms);
  c.Send("fast");
  CHECK(c.Read(4) == "fast");
}

TEST_CASE("fault proxy: a stall holds the bytes with the connection open; resume delivers them in order", "[unit][fault_proxy]") {
  EchoServer echo;
  auto proxy = ProxyTo(echo.port());
  Client c(proxy->port());
  c.Send("hi");
  REQUIRE(c.Read(2) == "hi");

  proxy->Stall(Direction::kBoth);
  const std::string data = RandomBytes(100 * 1024, 3);
  for (std::size_t off = 0; off < data.size(); off += 10 * 1024) c.Send(data.substr(off, 10 * 1024));
  CHECK(c.Read(1, 500ms).empty());  // nothing comes back while stalled ...
  CHECK(c.error == 0);
  CHECK_FALSE(c.eof);  // ... and the connection is still up
  CHECK(proxy->bytes_forwarded(Direction::kClientToServer) == 2);
  CHECK(echo.accepted() == 1);

  proxy->Resume(Direction::kBoth);
  CHECK(c.Read(data.size()) == data);

  // A stall of one direction: the server gets the bytes, the echo waits in the proxy.
  proxy->Stall(Direction::kServerToClient);
  c.Send("later");
  CHECK(WaitFor([&] { return proxy->bytes_forwarded(Direction::kClientToServer) == 2 + data.size() + 5; }));
  CHECK(c.Read(1, 300ms).empty());
  proxy->Resume(Direction::kServerToClient);
  CHECK(c.Read(5) == "later");
}

TEST_CASE("fault proxy: a stall holds a peer's close too, until resume", "[unit][fault_proxy]") {
  EchoServer echo;
  auto proxy = ProxyTo(echo.port());
  Client c(proxy->port());
  proxy->Stall(Direction::kServerToClient);
  c.Send("abc");
  c.CloseWrite();  // the echo server answers and closes
  CHECK(WaitFor([&] { return proxy->bytes_forwarded(Direction::kClientToServer) == 3; }));
  CHECK(c.Read(1, 500ms).empty());
  CHECK_FALSE(c.eof);
  proxy->Resume(Direction::kServerToClient);
  CHECK(c.ReadToEnd() == "abc");
  CHECK(c.eof);
}

TEST_CASE("fault proxy: reset closes every connection with an RST", "[unit][fault_proxy]") {
  EchoServer echo;
  auto proxy = ProxyTo(echo.port());
  Client a(proxy->port()), b(proxy->port());
  a.Send("a");
  b.Send("b");
  REQUIRE(a.Read(1) == "a");
  REQUIRE(b.Read(1) == "b");
  REQUIRE(proxy->open_connections() == 2);
  proxy->ResetAll();
  CHECK(a.Read(1).empty());
  CHECK(a.error == ECONNRESET);
  CHECK(b.Read(1).empty());
  CHECK(b.error == ECONNRESET);
  CHECK(proxy->open_connections() == 0);
  // The proxy itself still serves new connections.
  Client again(proxy->port());
  again.Send("ok");
  CHECK(again.Read(2) == "ok");
}

TEST_CASE("fault proxy: drop_after forwards exactly N bytes of a direction, then EOF", "[unit][fault_proxy]") {
  EchoServer echo;
  auto proxy = ProxyTo(echo.port());
  proxy->SetDropAfter(Direction::kServerToClient, 1000);
  const std::string data = RandomBytes(5000, 4);
  Client c(proxy->port());
  c.Send(data);
  const std::string got = c.ReadToEnd();
  CHECK(c.eof);
  CHECK(c.error == 0);
  CHECK(got.size() == 1000);
  CHECK(got == data.substr(0, 1000));
  CHECK(WaitFor([&] { return proxy->open_connections() == 0; }));

  // Client to server: the server reads exactly N bytes then EOF (seen here as the echo of at most N).
  proxy->SetDropAfter(Direction::kServerToClient, std::nullopt);
  proxy->SetDropAfter(Direction::kClientToServer, 10);
  Client d(proxy->port());
  d.Send(data);
  const std::string echoed = d.ReadToEnd();
  CHECK((d.eof || d.error != 0));
  CHECK(echoed.size() <= 10);
  CHECK(echoed == data.substr(0, echoed.size()));
  CHECK(WaitFor([&] { return proxy->bytes_forwarded(Direction::kClientToServer) == data.size() + 10; }));  // all of the first connection's, 10 of this one
}

TEST_CASE("fault proxy: corrupt flips exactly the chosen bit, or every Nth byte", "[unit][fault_proxy]") {
  EchoServer echo;
  auto proxy = ProxyTo(echo.port());
  const std::string data = RandomBytes(4096, 5);

  SECTION("one byte at an offset") {
    proxy->CorruptAt(Direction::kClientToServer, 1234, 0x10);
    Client c(proxy->port());
    c.Send(data.substr(0, 1000));  // the offset counts across chunks
    REQUIRE(c.Read(1000) == data.substr(0, 1000));
    c.Send(data.substr(1000));
    const std::string got = c.Read(data.size() - 1000);
    REQUIRE(got.size() == data.size() - 1000);
    for (std::size_t i = 0; i < got.size(); ++i) {
      const std::size_t at = 1000 + i;
      INFO("offset " << at);
      CHECK(static_cast<unsigned char>(got[i] ^ data[at]) == (at == 1234 ? 0x10 : 0));
    }
  }
  SECTION("every Nth byte") {
    proxy->CorruptEvery(Direction::kServerToClient, 100);
    Client c(proxy->port());
    c.Send(data);
    const std::string got = c.Read(data.size());
    REQUIRE(got.size() == data.size());
    int flipped = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const unsigned char diff = static_cast<unsigned char>(got[i] ^ data[i]);
      INFO("offset " << i);
      CHECK(diff == ((i + 1) % 100 == 0 ? 0x01 : 0));
      flipped += diff != 0;
    }
    CHECK(flipped == 40);
  }
}

TEST_CASE("fault proxy: refuse closes or resets new connections; the target never sees them", "[unit][fault_proxy]") {
  EchoServer echo;
  auto proxy = ProxyTo(echo.port());
  Client before(proxy->port());  // an open connection is left alone
  before.Send("x");
  REQUIRE(before.Read(1) == "x");

  proxy->SetRefuse(Refuse::kClose);
  {
    Client c(proxy->port());
    CHECK(c.Read(1).empty());
    CHECK(c.eof);
  }
  proxy->SetRefuse(Refuse::kReset);
  {
    Client c(proxy->port());
    CHECK(c.Read(1).empty());
    CHECK(c.error == ECONNRESET);
  }
  CHECK(proxy->connections_accepted() == 3);
  CHECK(echo.accepted() == 1);
  before.Send("y");
  CHECK(before.Read(1) == "y");

  proxy->SetRefuse(Refuse::kNo);
  Client after(proxy->port());
  after.Send("z");
  CHECK(after.Read(1) == "z");
  CHECK(echo.accepted() == 2);
}

TEST_CASE("fault proxy: throttle caps the rate", "[unit][fault_proxy]") {
  EchoServer echo;
  auto proxy = ProxyTo(echo.port());
  proxy->SetThrottle(Direction::kServerToClient, 20000);
  const std::string data = RandomBytes(10000, 6);
  Client c(proxy->port());
  const auto t = Clock::now();
  c.Send(data);
  CHECK(c.Read(data.size()) == data);
  CHECK(MsSince(t) >= 400);  // 10 KB at 20 KB/s, the first slice free
}

TEST_CASE("fault proxy: a target that is not listening resets the client", "[unit][fault_proxy]") {
  std::uint16_t dead_port;
  {
    EchoServer gone;
    dead_port = gone.port();
  }
  auto proxy = ProxyTo(dead_port);
  Client c(proxy->port());
  CHECK(c.Read(1).empty());
  CHECK(c.error == ECONNRESET);
}

}  // namespace
}  // namespace tfd::testing
