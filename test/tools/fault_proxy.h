#pragma once
// A TCP proxy for tests that injects network faults between two peers: latency, a silent
// partition, resets, refused connections, a cut after N bytes, flipped bits and a bandwidth cap.
// It runs its own io_context thread, so a test drives it from its own thread while real peers
// (threads or tfd processes) talk through it.

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp forgets it

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <boost/asio.hpp>

#include "common/base/status.h"

namespace tfd::testing {

// Client→server is the stream from the peer that connected to the proxy to the target.
enum class Direction { kClientToServer, kServerToClient, kBoth };

// What the proxy does with a new connection while refusing.
enum class Refuse {
  kNo,     // forward it
  kClose,  // accept it and close it at once (the client reads EOF)
  kReset,  // accept it and reset it at once (the client reads ECONNRESET)
};

struct FaultProxyOptions {
  std::string listen_address = "127.0.0.1";
  std::uint16_t listen_port = 0;  // 0: a free port, see FaultProxy::port()
  std::string target_host = "127.0.0.1";
  std::uint16_t target_port = 0;
};

class ProxyConnection;

// Accepts connections on `listen_address:listen_port` and forwards each one to the target, both
// directions, bytes in order. Faults apply per direction and per connection stream (offsets count
// from the first byte of that connection in that direction); each setter takes effect before it
// returns and applies to current and future connections. Setters and counters may be called from
// any thread except the proxy's own. The destructor closes every connection and joins the thread.
class FaultProxy {
 public:
  // Unavailable or InvalidArgument naming the address when it cannot listen there.
  static Result<std::unique_ptr<FaultProxy>> Start(const FaultProxyOptions& options);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  std::uint16_t port() const { return port_; }

  // Holds each chunk read `delay` before forwarding it (order is kept; 0 turns it off). Chunks
  // already read keep the delay they were read with.
  void SetDelay(Direction d, std::chrono::milliseconds delay);
  // Stops forwarding while keeping the sockets open: a silent partition. The proxy keeps reading
  // (up to 1 MiB per stream, then the sender's TCP window fills); a sender's close (FIN or reset)
  // is held too. Resume() forwards what it holds, then the close.
  void Stall(Direction d);
  void Resume(Direction d);
  // Closes every current connection with an RST (SO_LINGER 0) on both sides.
  void ResetAll();
  void SetRefuse(Refuse mode);
  // Forwards the first `bytes` of each connection's stream in that direction, then closes that
  // connection (FIN to both peers). nullopt turns it off.
  void SetDropAfter(Direction d, std::optional<std::uint64_t> bytes);
  // Flips the bits of `mask` in the byte at stream offset `offset` (once per connection).
  void CorruptAt(Direction d, std::uint64_t offset, std::uint8_t mask = 0x01);
  // Flips the bits of `mask` in every `n`th byte (offsets n-1, 2n-1, ...); 0 turns it off.
  void CorruptEvery(Direction d, std::uint64_t n, std::uint8_t mask = 0x01);
  // Forwards at most `bytes_per_second` (0: unlimited).
  void SetThrottle(Direction d, std::uint64_t bytes_per_second);
  // Every fault off (Resume included); current connections stay open.
  void ClearFaults();

  std::uint64_t connections_accepted() const { return accepted_.load(); }
  // Bytes written to the receiving peer in direction `d` (kBoth: the sum).
  std::uint64_t bytes_forwarded(Direction d) const;
  // Connections currently forwarding.
  std::size_t open_connections();

 private:
  friend class ProxyConnection;
  struct Faults {
    std::chrono::milliseconds delay{0};
    bool stalled = false;
    std::optional<std::uint64_t> drop_after;
    std::optional<std::uint64_t> corrupt_at;
    std::uint8_t corrupt_at_mask = 0x01;
    std::uint64_t corrupt_every = 0;
    std::uint8_t corrupt_every_mask = 0x01;
    std::uint64_t throttle = 0;
  };

  explicit FaultProxy(const FaultProxyOptions& options);
  boost::asio::awaitable<void> AcceptLoop();
  boost::asio::awaitable<void> Connect(boost::asio::ip::tcp::socket client);
  // Runs `f` on the proxy thread and waits for it.
  template <typename F>
  void RunOnIo(F&& f);
  // Applies `f` to the faults of `d` (both for kBoth) on the proxy thread, then wakes every stream.
  template <typename F>
  void Update(Direction d, F&& f);

  FaultProxyOptions options_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::uint16_t port_ = 0;
  Faults faults_[2];  // [0] client→server, [1] server→client; proxy thread only
  Refuse refuse_ = Refuse::kNo;  // proxy thread only
  std::set<std::shared_ptr<ProxyConnection>> connections_;  // proxy thread only
  std::atomic<std::uint64_t> accepted_{0};
  std::atomic<std::uint64_t> forwarded_[2] = {0, 0};
  std::thread thread_;
};

}  // namespace tfd::testing
