#pragma once

// A small HTTP/1.1 server (Boost.Beast) for what tfd and tfctl serve to people and scrapers:
// Prometheus's /metrics, /healthz, tfctl's dashboard. Not for training traffic.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/base/status.h"

namespace tfd::http {

struct Request {
  std::string method;  // "GET", "HEAD", ...
  std::string target;  // path and query, as sent: "/metrics", "/api/events?since=10"
  std::string body;
};

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers, e.g. Cache-Control
};

// Called on the server's own thread, one request at a time; it must not block for long (a scrape
// or a page poll waits for it). What it throws becomes a 500.
using Handler = std::function<Response(const Request&)>;

// Serves `handler` on HOST:PORT from a thread of its own until destroyed. Requests are bounded
// (header 8 KiB, body 64 KiB, 10 s to arrive: 413/408 beyond), at most 64 connections at a time
// (more are closed at once), keep-alive honoured. HEAD gets GET's headers without the body.
class Server {
 public:
  // `port` 0 binds a free port (see port()). InvalidArgument for a bad host, Unavailable when the
  // address cannot be bound (the message names it and the system's reason).
  static Result<std::unique_ptr<Server>> Start(std::string_view host, std::uint16_t port, Handler handler);
  ~Server();  // stops accepting, closes every connection, joins the thread
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::uint16_t port() const;
  std::string address() const;  // "127.0.0.1:9464"

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "HOST:PORT", ":PORT" (all interfaces) or "PORT" (loopback) as a host and port; `what` names the
// flag or field in the InvalidArgument ("--metrics: expected HOST:PORT, got \"x\"").
Result<std::pair<std::string, std::uint16_t>> ParseListenAddress(std::string_view text, std::string_view what);

// One GET (tests and tfctl's checks): the status and the body. Unavailable when the server cannot
// be reached or does not answer within `timeout_ms`.
struct Fetched {
  int status = 0;
  std::string content_type;
  std::string body;
};
Result<Fetched> Get(std::string_view host, std::uint16_t port, std::string_view target, int timeout_ms = 10000);

}  // namespace tfd::http
