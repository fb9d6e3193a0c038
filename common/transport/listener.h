#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/base/status.h"
#include "common/transport/asio.h"

namespace tfd::transport {

// Accepts connections on one endpoint and hands each socket, created on its own strand of the
// io_context, to `on_accept` (on the io_context's thread). What becomes of the socket (a
// Connection, and with it the owner's PeerGuard) is the owner's business. Peers on this host may
// come through the listener's Unix socket instead (local_link.h): the same AcceptFn gets them.
class Listener {
 public:
  using AcceptFn = std::function<void(tcp::socket)>;
  // Binds `address:port` (address "" = every interface; port 0 = any free one). InvalidArgument
  // for an address that is not one, Unavailable naming it when it cannot listen (in use, not local).
  static Result<std::unique_ptr<Listener>> Bind(asio::io_context& ioc, const std::string& address, std::uint16_t port,
                                                AcceptFn on_accept);
  // Accepts until Stop. Any thread; Stop closes the acceptor on the io_context, so the listener
  // must stay alive until that has run or the io_context is stopped.
  void Start();
  void Stop();
  std::uint16_t port() const;

 private:
  Listener(asio::io_context& ioc, tcp::acceptor acceptor, AcceptFn on_accept);
  asio::awaitable<void> AcceptLoop();
  asio::awaitable<void> AcceptLocalLoop();
  asio::io_context& ioc_;
  tcp::acceptor acceptor_;
  std::optional<asio::local::stream_protocol::acceptor> local_;  // same-host peers; none if unavailable
  AcceptFn on_accept_;
};

}  // namespace tfd::transport
