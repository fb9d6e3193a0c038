#pragma once

// A small HTTP/1.1 server (Boost.Beast) for what tfd and tfctl serve to people and scrapers:
// Prometheus's /metrics, /healthz, tfctl's dashboard, and `tfd serve`'s prediction API (whose
// handler answers later, from its batcher thread). Not for training traffic.

#include <chrono>
#include <cstddef>
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
  std::string authorization;  // the Authorization header, as sent ("" when absent)
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

// Answers one request of an AsyncHandler: call it once, from any thread. The connection reads no
// further request until it is called. Every Respond must be called or destroyed before the Server
// is (it holds the connection).
using Respond = std::function<void(Response)>;
// Called on the server's thread; hands the request on (to a queue) and returns at once. What it
// throws before it hands `respond` on becomes a 500.
using AsyncHandler = std::function<void(Request, Respond)>;

struct ServerOptions {
  std::size_t max_body_bytes = 64 * 1024;  // 413 beyond
  int max_connections = 64;                // more are closed at once
  // A request must arrive whole within read_timeout of its first byte (slow clients get a 408); a
  // kept-alive connection that sends nothing for idle_timeout is closed.
  std::chrono::milliseconds read_timeout{10000};
  std::chrono::milliseconds idle_timeout{10000};
  // The answer the server gives itself (413, 408) given its status and message, on the server's
  // thread (to count it, or answer in the handler's format); empty: plain text.
  std::function<Response(int status, std::string_view message)> refusal;
};

// Serves a handler on HOST:PORT from a thread of its own until destroyed. Requests are bounded
// (header 8 KiB, body and time as ServerOptions: 413/408 beyond), connections capped, keep-alive
// honoured. HEAD gets GET's headers without the body.
class Server {
 public:
  // `port` 0 binds a free port (see port()). InvalidArgument for a bad host, Unavailable when the
  // address cannot be bound (the message names it and the system's reason).
  static Result<std::unique_ptr<Server>> Start(std::string_view host, std::uint16_t port, Handler handler, ServerOptions options = {});
  static Result<std::unique_ptr<Server>> StartAsync(std::string_view host, std::uint16_t port, AsyncHandler handler,
                                                    ServerOptions options = {});
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
