#include "common/transport/listener.h"

#include <unistd.h>

#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/transport/local_link.h"

namespace tfd::transport {

using asio::redirect_error;
using asio::use_awaitable;
using boost::system::error_code;

Listener::Listener(asio::io_context& ioc, tcp::acceptor acceptor, AcceptFn on_accept)
    : ioc_(ioc), acceptor_(std::move(acceptor)), on_accept_(std::move(on_accept)) {}

Result<std::unique_ptr<Listener>> Listener::Bind(asio::io_context& ioc, const std::string& address, std::uint16_t port,
                                                 AcceptFn on_accept) {
  error_code ec;
  asio::ip::address addr = address.empty() ? asio::ip::address(asio::ip::address_v4::any()) : asio::ip::make_address(address, ec);
  if (ec) return Status::InvalidArgument(fmt::format("--bind: \"{}\" is not an IP address", address));
  tcp::endpoint ep(addr, port);
  tcp::acceptor acceptor(ioc);
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  const auto cannot = [&] {
    return Status::Unavailable(fmt::format("cannot listen on {}:{}: {}", address.empty() ? "*" : address, port, ec.message()));
  };
  if (ec) return cannot();
  const std::uint16_t bound_port = acceptor.local_endpoint(ec).port();
  // The Unix socket listens before the TCP port does: a same-host peer that dials while this
  // starts is refused on both and dials again (Unix first), never caught on TCP in between.
  std::optional<asio::local::stream_protocol::acceptor> local_acceptor;
  if (LocalLinksEnabled() && (addr.is_unspecified() || IsThisHost(addr))) {
    // The same listener for peers on this host, over a Unix socket. Without it (another listener
    // holds the name: one bound to the same port on another address) they come over TCP.
    const std::string name = LocalLinkName(address, bound_port);
    asio::local::stream_protocol::acceptor local(ioc);
    local.open(asio::local::stream_protocol(), ec);
    if (!ec) local.bind(asio::local::stream_protocol::endpoint(std::string(1, '\0') + name), ec);
    if (!ec) local.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {  // another listener holds the name: peers on this host reach it, not this one, over a Unix socket
      spdlog::warn("no same-host link on {}: {}; peers on this host that find that name reach its holder, not this task "
                   "(TFD_LOCAL_LINK=tcp on them avoids it)", name, ec.message());
    } else {
      local_acceptor.emplace(std::move(local));
    }
  }
  ec.clear();
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return cannot();
  std::unique_ptr<Listener> listener(new Listener(ioc, std::move(acceptor), std::move(on_accept)));
  if (local_acceptor) listener->local_.emplace(std::move(*local_acceptor));
  return listener;
}

void Listener::Start() {
  asio::co_spawn(acceptor_.get_executor(), AcceptLoop(), asio::detached);
  if (local_) asio::co_spawn(local_->get_executor(), AcceptLocalLoop(), asio::detached);
}

void Listener::Stop() {
  asio::post(acceptor_.get_executor(), [this] {
    error_code ec;
    acceptor_.close(ec);
    if (local_) local_->close(ec);
  });
}

std::uint16_t Listener::port() const { return acceptor_.local_endpoint().port(); }

asio::awaitable<void> Listener::AcceptLoop() {
  for (;;) {
    tcp::socket socket(asio::make_strand(ioc_));
    error_code ec;
    co_await acceptor_.async_accept(socket, redirect_error(use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
    if (ec) {  // out of file descriptors, say: say so, and do not spin
      spdlog::warn("accept: {}", ec.message());
      asio::steady_timer pause(acceptor_.get_executor(), std::chrono::milliseconds(100));
      co_await pause.async_wait(redirect_error(use_awaitable, ec));
      continue;
    }
    on_accept_(std::move(socket));
  }
}

asio::awaitable<void> Listener::AcceptLocalLoop() {
  for (;;) {
    asio::local::stream_protocol::socket local(ioc_);
    error_code ec;
    co_await local_->async_accept(local, redirect_error(use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !local_->is_open()) co_return;
    if (ec) {
      spdlog::warn("accept (same-host link): {}", ec.message());
      asio::steady_timer pause(local_->get_executor(), std::chrono::milliseconds(100));
      co_await pause.async_wait(redirect_error(use_awaitable, ec));
      continue;
    }
    // Handed on as the TCP connections are: a tcp::socket (on a strand of its own) over the fd.
    tcp::socket socket(asio::make_strand(ioc_));
    const int fd = local.release(ec);
    if (!ec) {
      socket.assign(tcp::v4(), fd, ec);
      if (ec) ::close(fd);
    }
    if (ec) {
      spdlog::warn("accept (same-host link): {}", ec.message());
      continue;
    }
    on_accept_(std::move(socket));
  }
}

}  // namespace tfd::transport
