#pragma once

// Boost.Asio, included the one way this module's headers need it, and the names they share.

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp forgets it

#include <chrono>

#include <boost/asio.hpp>

namespace tfd::transport {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

}  // namespace tfd::transport
