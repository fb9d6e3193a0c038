// PeerGuard: the per-address cap on handshakes in progress and the refusal counts belong to the
// guard a server passes to its connections, so two servers in one process keep them apart.
#include <utility>

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/transport/connection.h"
#include "common/transport/listener.h"
#include "common/transport/peer_guard.h"

namespace tfd::transport {
namespace {

using namespace std::chrono_literals;

TEST_CASE("two peer guards in one process cap handshakes and count refusals independently", "[unit][transport]") {
  PeerGuard a(/*max_handshakes_per_address=*/2), b(/*max_handshakes_per_address=*/2);
  CHECK(a.TakeHandshakeSlot("10.0.0.1"));
  CHECK(a.TakeHandshakeSlot("10.0.0.1"));
  CHECK_FALSE(a.TakeHandshakeSlot("10.0.0.1"));  // a's cap for that address is reached...
  CHECK(a.TakeHandshakeSlot("10.0.0.2"));        // ...per address
  CHECK(b.TakeHandshakeSlot("10.0.0.1"));        // ...and per guard
  CHECK(b.TakeHandshakeSlot("10.0.0.1"));
  a.ReleaseHandshakeSlot("10.0.0.1");
  CHECK(a.TakeHandshakeSlot("10.0.0.1"));  // a released slot is free again
  CHECK_FALSE(b.TakeHandshakeSlot("10.0.0.1"));

  a.Count(Refusal::kMalformed);
  a.Count(Refusal::kMalformed);
  b.Count(Refusal::kAuthentication);
  b.Count(Refusal::kMismatch);
  b.Count(Refusal::kHandshakeTimeout);
  const RefusalCounts ca = a.counts(), cb = b.counts();
  CHECK(ca.malformed == 2);
  CHECK(ca.busy == 1);
  CHECK(ca.authentication == 0);
  CHECK(ca.mismatch == 0);
  CHECK(ca.handshake_timeout == 0);
  CHECK(ca.total() == 3);
  CHECK(ca.ToString() == "2 malformed, 1 busy (too many handshakes from one address)");
  CHECK(cb.malformed == 0);
  CHECK(cb.busy == 1);
  CHECK(cb.authentication == 1);
  CHECK(cb.mismatch == 1);
  CHECK(cb.handshake_timeout == 1);
  CHECK(cb.total() == 4);
  CHECK(PeerGuard().counts().ToString() == "none");
}

// Keeps the connections a server accepted; frames are ignored.
class Sink : public FrameHandler {
 public:
  void OnFrame(const std::shared_ptr<Connection>&, wire::InFrame) override {}
  void OnClosed(const std::shared_ptr<Connection>&, const Status&) override {}
};

// A server on 127.0.0.1 (any port) whose connections all get `guard`.
struct Server {
  Server(asio::io_context& ioc, Sink& sink, std::shared_ptr<PeerGuard> guard) {
    ConnectionOptions options;
    options.guard = std::move(guard);
    auto bound = Listener::Bind(ioc, "127.0.0.1", 0, [this, &sink, options](tcp::socket s) {
      auto c = std::make_shared<Connection>(std::move(s), sink, "a peer", options);
      {
        std::lock_guard<std::mutex> lock(mu);
        conns.push_back(c);
      }
      c->Start();
    });
    REQUIRE(bound.ok());
    listener = std::move(bound).value();
    listener->Start();
  }
  std::mutex mu;
  std::vector<std::shared_ptr<Connection>> conns;  // guarded by mu
  std::unique_ptr<Listener> listener;
};

template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds limit = 10s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!pred() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
  return pred();
}

TEST_CASE("two servers in one process: each one's connections count on its own guard", "[unit][transport]") {
  Sink sink;
  asio::io_context ioc(1);
  auto work = asio::make_work_guard(ioc);
  std::thread io([&ioc] { ioc.run(); });
  auto guard_a = std::make_shared<PeerGuard>();
  auto guard_b = std::make_shared<PeerGuard>(/*max_handshakes_per_address=*/1);
  {
    Server a(ioc, sink, guard_a), b(ioc, sink, guard_b);
    asio::io_context client_ioc;
    // A header that is no header: server a refuses it as malformed.
    tcp::socket bad(client_ioc);
    bad.connect({asio::ip::make_address("127.0.0.1"), a.listener->port()});
    std::array<std::byte, wire::kFrameHeaderBytes> garbage;
    garbage.fill(std::byte{0xff});
    asio::write(bad, asio::buffer(garbage));
    CHECK(WaitFor([&] { return guard_a->counts().malformed == 1; }));
    // Two idle connections to server b, which takes one handshake per address: the second is busy.
    tcp::socket idle(client_ioc), second(client_ioc);
    idle.connect({asio::ip::make_address("127.0.0.1"), b.listener->port()});
    second.connect({asio::ip::make_address("127.0.0.1"), b.listener->port()});
    CHECK(WaitFor([&] { return guard_b->counts().busy == 1; }));
    CHECK(guard_a->counts().total() == 1);
    CHECK(guard_a->counts().busy == 0);
    CHECK(guard_b->counts().malformed == 0);
    CHECK(guard_b->counts().total() == 1);

    a.listener->Stop();
    b.listener->Stop();
    for (Server* s : {&a, &b}) {
      std::lock_guard<std::mutex> lock(s->mu);
      for (const auto& c : s->conns) c->Close(Status::Unavailable("test over"));
    }
    work.reset();
    asio::steady_timer limit(ioc, 200ms);  // let the closes run, then stop
    limit.async_wait([&ioc](const boost::system::error_code&) { ioc.stop(); });
    io.join();
  }
}

}  // namespace
}  // namespace tfd::transport
