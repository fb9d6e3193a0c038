#pragma once

#include <cstdint>
#include <string>

#include "common/base/status.h"
#include "common/transport/asio.h"

namespace tfd::transport {

// Connects to `host:port` (resolving the host), retrying with backoff until `deadline`, and logs
// which peer it is waiting for every few seconds. Blocks the calling thread; `ioc` must be running
// on another thread. The socket is created on a strand of `ioc`, ready for a Connection.
// Unavailable, naming `peer`, if no connection could be made in time.
Result<tcp::socket> Dial(asio::io_context& ioc, const std::string& host, std::uint16_t port, const std::string& peer,
                         Clock::time_point deadline);

}  // namespace tfd::transport
