// Same-host links: a dial to this host reaches the listener through its abstract Unix socket, the
// bytes cross it, the accepting side names the peer "local pid N"; TFD_LOCAL_LINK=tcp keeps to
// TCP; a listener bound to one address is found only by a dial to that address.
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/transport/dial.h"
#include "common/transport/listener.h"
#include "common/transport/local_link.h"
#include "test/test_util.h"

namespace tfd::transport {
namespace {

using namespace std::chrono_literals;

// A listener on `address` (any port) whose accepted sockets are kept, served by a thread of its own.
struct Accepting {
  explicit Accepting(const std::string& address) : work(asio::make_work_guard(ioc)) {
    auto bound = Listener::Bind(ioc, address, 0, [this](tcp::socket s) {
      std::lock_guard<std::mutex> lock(mu);
      accepted.push_back(std::move(s));
    });
    REQUIRE(bound.ok());
    listener = std::move(bound).value();
    listener->Start();
    thread = std::thread([this] { ioc.run(); });
  }
  ~Accepting() {
    listener->Stop();
    work.reset();
    ioc.stop();
    thread.join();
  }
  // Waits (10 s at most) for the first accepted socket.
  tcp::socket* First() {
    const auto until = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!accepted.empty()) return &accepted.front();
      }
      if (std::chrono::steady_clock::now() > until) return nullptr;
      std::this_thread::sleep_for(5ms);
    }
  }
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::unique_ptr<Listener> listener;
  std::mutex mu;
  std::vector<tcp::socket> accepted;  // guarded by mu
  std::thread thread;
};

// Sends a few bytes each way between the two ends, blocking.
void Exchange(tcp::socket& a, tcp::socket& b) {
  const std::array<char, 5> hello = {'h', 'e', 'l', 'l', 'o'};
  std::array<char, 5> got{};
  asio::write(a, asio::buffer(hello));
  asio::read(b, asio::buffer(got));
  CHECK(got == hello);
  got = {};
  asio::write(b, asio::buffer(hello));
  asio::read(a, asio::buffer(got));
  CHECK(got == hello);
}

TEST_CASE("a dial to this host goes through the listener's Unix socket, and the accepting side names the process", "[unit][transport]") {
  REQUIRE(LocalLinksEnabled());
  Accepting server("");  // every interface: the name tfd:*:PORT
  // Dial connects over TCP asynchronously, on an io_context that must run: the server's.
  auto dialed = Dial(server.ioc, "127.0.0.1", server.listener->port(), "the test's listener", Clock::now() + 10s);
  REQUIRE(dialed.ok());
  CHECK(IsLocalSocket(*dialed));
  CHECK(PeerAddress(*dialed) == "local");
  tcp::socket* accepted = server.First();
  REQUIRE(accepted != nullptr);
  CHECK(IsLocalSocket(*accepted));
  CHECK(PeerAddress(*accepted, /*with_port=*/true) == "local pid " + std::to_string(getpid()));
  Exchange(*dialed, *accepted);
}

TEST_CASE("TFD_LOCAL_LINK=tcp: the same dial and listener use loopback TCP", "[unit][transport]") {
  {
    const testing::ScopedEnv tcp_only("TFD_LOCAL_LINK", "tcp");
    Accepting server("");
    auto dialed = Dial(server.ioc, "127.0.0.1", server.listener->port(), "the test's listener", Clock::now() + 10s);
    REQUIRE(dialed.ok());
    CHECK_FALSE(IsLocalSocket(*dialed));
    tcp::socket* accepted = server.First();
    REQUIRE(accepted != nullptr);
    CHECK_FALSE(IsLocalSocket(*accepted));
    CHECK(PeerAddress(*accepted) == "127.0.0.1");
    CHECK(PeerAddress(*accepted, /*with_port=*/true).starts_with("127.0.0.1:"));
    Exchange(*dialed, *accepted);
    // Without the name, no Unix socket to reach.
    CHECK_FALSE(DialLocal(server.ioc, asio::ip::make_address("127.0.0.1"), server.listener->port()).ok());
  }
}

TEST_CASE("a listener bound to one address is found by a dial to that address only", "[unit][transport]") {
  Accepting server("127.0.0.1");  // the name tfd:127.0.0.1:PORT
  const std::uint16_t port = server.listener->port();
  asio::io_context ioc;
  auto same = DialLocal(ioc, asio::ip::make_address("127.0.0.1"), port);
  INFO((same.ok() ? std::string() : same.status().message()));
  CHECK(same.ok());
  // 127.0.0.2 is this host too, but nothing listens there: no tfd:127.0.0.2:PORT nor tfd:*:PORT.
  auto other = DialLocal(ioc, asio::ip::make_address("127.0.0.2"), port);
  REQUIRE_FALSE(other.ok());
  CHECK(other.status().message().find("tfd:*:" + std::to_string(port)) != std::string::npos);
}

TEST_CASE("same-host link names and this host's addresses", "[unit][transport]") {
  CHECK(LocalLinkName("", 2222) == "tfd:*:2222");
  CHECK(LocalLinkName("0.0.0.0", 2222) == "tfd:*:2222");
  CHECK(LocalLinkName("::", 2222) == "tfd:*:2222");
  CHECK(LocalLinkName("127.0.0.1", 2222) == "tfd:127.0.0.1:2222");
  CHECK(IsThisHost(asio::ip::make_address("127.0.0.1")));
  CHECK(IsThisHost(asio::ip::make_address("127.9.9.9")));
  CHECK(IsThisHost(asio::ip::make_address("::1")));
  CHECK(IsThisHost(asio::ip::make_address("::ffff:127.0.0.1")));
  CHECK_FALSE(IsThisHost(asio::ip::make_address("192.0.2.1")));  // TEST-NET-1: never an interface's
}

}  // namespace
}  // namespace tfd::transport
