#include "common/transport/dial.h"

#include <algorithm>
#include <future>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/transport/local_link.h"

namespace tfd::transport {

Result<tcp::socket> Dial(asio::io_context& ioc, const std::string& host, std::uint16_t port, const std::string& peer,
                         Clock::time_point deadline, const std::atomic<bool>* stop) {
  using boost::system::error_code;
  auto backoff = std::chrono::milliseconds(50);
  auto next_log = Clock::now() + std::chrono::seconds(2);
  std::string last_error = "not tried";
  tcp::resolver resolver(ioc);
  for (;;) {
    error_code ec;
    auto endpoints = resolver.resolve(host, std::to_string(port), ec);
    if (!ec && LocalLinksEnabled()) {
      // A task on this host: its Unix socket first (local_link.h), TCP if it has none.
      for (const auto& entry : endpoints) {
        if (!IsThisHost(entry.endpoint().address())) continue;
        Result<tcp::socket> socket = DialLocal(ioc, entry.endpoint().address(), port);
        if (socket.ok()) return std::move(*socket);
      }
    }
    if (ec) {
      last_error = fmt::format("cannot resolve {}: {}", host, ec.message());
    } else {
      // Shared with the close posted below: the attempt may complete before that close runs, and
      // the close must not outlive the socket it closes.
      auto socket = std::make_shared<tcp::socket>(asio::make_strand(ioc));
      auto done = std::make_shared<std::promise<error_code>>();
      auto result = done->get_future();
      asio::async_connect(*socket, endpoints, [done](const error_code& e, const tcp::endpoint&) { done->set_value(e); });
      const auto attempt_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(5));
      if (result.wait_until(attempt_deadline) != std::future_status::ready) {
        // Close, not cancel: a cancelled attempt would move on to the host's next address.
        asio::post(socket->get_executor(), [socket] {
          error_code ignored;
          socket->close(ignored);
        });
        result.wait();
        last_error = "connect timed out";
      } else if (error_code e = result.get(); e) {
        last_error = e.message();
      } else {
        // A task of this host that was starting up may have begun listening on TCP just after
        // its Unix socket was tried: take the Unix socket now that it listens.
        error_code e2;
        const tcp::endpoint remote = socket->remote_endpoint(e2);
        if (!e2 && LocalLinksEnabled() && IsThisHost(remote.address())) {
          if (Result<tcp::socket> local = DialLocal(ioc, remote.address(), port); local.ok()) {
            socket->close(e2);
            return std::move(*local);
          }
        }
        return std::move(*socket);
      }
    }
    const auto now = Clock::now();
    if (stop != nullptr && stop->load())
      return Status::FailedPrecondition(fmt::format("stopped by a signal while dialling {} at {}:{}", peer, host, port));
    if (now >= deadline) {
      return Status::Unavailable(fmt::format("{} at {}:{} did not accept a connection in time (last error: {})", peer, host, port,
                                             last_error));
    }
    if (now >= next_log) {
      spdlog::info("waiting for {} at {}:{} ({})", peer, host, port, last_error);
      next_log = now + std::chrono::seconds(5);
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace tfd::transport
