#include "common/http/server.h"

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp forgets it

#include <atomic>
#include <charconv>
#include <chrono>
#include <exception>
#include <optional>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

namespace tfd::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

constexpr std::size_t kMaxHeader = 8 * 1024;

bhttp::response<bhttp::string_body> Plain(bhttp::status status, unsigned version, std::string body) {
  bhttp::response<bhttp::string_body> res(status, version);
  res.set(bhttp::field::content_type, "text/plain; charset=utf-8");
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

}  // namespace

// Members are destroyed in reverse order: the io_context goes before the connection count and the
// handler, because destroying it destroys the sessions still queued on it, which count themselves out.
struct Server::Impl {
  std::atomic<int> connections{0};
  AsyncHandler handler;
  ServerOptions options;
  asio::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  std::thread thread;
};

namespace {

// One connection: read a request, hand it to the handler, write its answer when it comes, again
// while the client keeps the connection alive. Runs on the server's thread only; a Respond called
// elsewhere posts its answer there.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server::Impl& server) : stream_(std::move(socket)), server_(server) { ++server_.connections; }
  ~Session() { --server_.connections; }

  // Waits idle_timeout for a request's header, then read_timeout for its body.
  void Read() {
    parser_.emplace();
    parser_->header_limit(kMaxHeader);
    parser_->body_limit(server_.options.max_body_bytes);
    stream_.expires_after(server_.options.idle_timeout);
    bhttp::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->OnRead(ec);
      self->stream_.expires_after(self->server_.options.read_timeout);
      bhttp::async_read(self->stream_, self->buffer_, *self->parser_, [self](beast::error_code ec2, std::size_t) { self->OnRead(ec2); });
    });
  }

 private:
  void OnRead(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == asio::error::operation_aborted) return Close();
    if (ec == beast::error::timeout) {
      if (!parser_->got_some() && buffer_.size() == 0) return Close();  // idle keep-alive connection
      return Refuse(bhttp::status::request_timeout, "request not received in time");
    }
    if (ec == bhttp::error::header_limit || ec == bhttp::error::body_limit)
      return Refuse(bhttp::status::payload_too_large, fmt::format("request too large (header over {} bytes or body over {})", kMaxHeader,
                                                                  server_.options.max_body_bytes));
    if (ec) return Close();
    bhttp::request<bhttp::string_body> req = parser_->release();
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    head_ = req.method() == bhttp::verb::head;
    Request request{head_ ? "GET" : std::string(req.method_string()), std::string(req.target()), std::move(req.body()),
                    std::string(req[bhttp::field::authorization])};
    stream_.expires_never();  // the handler's own deadline bounds the wait for its answer
    try {
      server_.handler(std::move(request), [self = shared_from_this()](Response answer) {
        asio::post(self->stream_.get_executor(), [self, answer = std::move(answer)]() mutable { self->Answer(std::move(answer)); });
      });
    } catch (const std::exception& e) {
      Answer(Response{.status = 500, .body = fmt::format("internal error: {}\n", e.what())});
    }
  }

  void Refuse(bhttp::status status, const std::string& message) {
    keep_alive_ = head_ = false;
    version_ = 11;
    if (!server_.options.refusal) return Send(Plain(status, version_, message + "\n"), false);
    Answer(server_.options.refusal(static_cast<int>(status), message));
  }

  void Answer(Response answer) {
    bhttp::response<bhttp::string_body> res(static_cast<bhttp::status>(answer.status), version_);
    res.set(bhttp::field::content_type, answer.content_type);
    for (const auto& [name, value] : answer.headers) res.set(name, value);
    res.body() = std::move(answer.body);
    res.keep_alive(keep_alive_);
    res.prepare_payload();
    if (head_) res.body().clear();  // Content-Length stays GET's
    Send(std::move(res), keep_alive_);
  }

  void Send(bhttp::response<bhttp::string_body> res, bool keep_alive) {
    auto owned = std::make_shared<bhttp::response<bhttp::string_body>>(std::move(res));
    stream_.expires_after(server_.options.read_timeout);
    bhttp::async_write(stream_, *owned, [self = shared_from_this(), owned, keep_alive](beast::error_code ec, std::size_t) {
      if (ec || !keep_alive) return self->Close();
      self->Read();
    });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  Server::Impl& server_;
  unsigned version_ = 11;
  bool keep_alive_ = false, head_ = false;
};

void Accept(Server::Impl& server) {
  server.acceptor.async_accept([&server](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      if (server.connections.load() >= server.options.max_connections) {
        beast::error_code ignored;
        socket.close(ignored);
      } else {
        std::make_shared<Session>(std::move(socket), server)->Read();
      }
    }
    Accept(server);
  });
}

}  // namespace

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  asio::post(impl_->ioc, [this] {
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->ioc.stop();
  });
  impl_->thread.join();
}

Result<std::unique_ptr<Server>> Server::Start(std::string_view host, std::uint16_t port, Handler handler, ServerOptions options) {
  return StartAsync(
      host, port, [handler = std::move(handler)](Request request, Respond respond) { respond(handler(request)); }, options);
}

Result<std::unique_ptr<Server>> Server::StartAsync(std::string_view host, std::uint16_t port, AsyncHandler handler, ServerOptions options) {
  beast::error_code ec;
  const asio::ip::address ip = asio::ip::make_address(std::string(host), ec);
  if (ec) return Status::InvalidArgument(fmt::format("{}: not an IP address (expected e.g. 127.0.0.1 or 0.0.0.0)", host));
  auto impl = std::make_unique<Impl>();
  impl->handler = std::move(handler);
  impl->options = options;
  const tcp::endpoint endpoint(ip, port);
  const std::string where = endpoint.address().is_v6() ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::Unavailable(fmt::format("cannot listen on {}: {}", where, ec.message()));
  Accept(*impl);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->ioc.run(); });
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

std::uint16_t Server::port() const { return impl_->acceptor.local_endpoint().port(); }

std::string Server::address() const {
  const tcp::endpoint ep = impl_->acceptor.local_endpoint();
  return ep.address().is_v6() ? fmt::format("[{}]:{}", ep.address().to_string(), ep.port())
                              : fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

Result<std::pair<std::string, std::uint16_t>> ParseListenAddress(std::string_view text, std::string_view what) {
  auto bad = [&] { return Status::InvalidArgument(fmt::format("{}: expected HOST:PORT, :PORT or PORT, got \"{}\"", what, text)); };
  std::string host = "127.0.0.1";
  std::string_view port_text = text;
  if (const std::size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    host = std::string(text.substr(0, colon));
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (host.empty()) host = "0.0.0.0";
    port_text = text.substr(colon + 1);
  }
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535) return bad();
  beast::error_code addr_ec;
  asio::ip::make_address(host, addr_ec);
  if (addr_ec) return Status::InvalidArgument(fmt::format("{}: \"{}\" is not an IP address (expected e.g. 127.0.0.1:9464)", what, host));
  return std::make_pair(host, static_cast<std::uint16_t>(port));
}

Result<Fetched> Get(std::string_view host, std::uint16_t port, std::string_view target, int timeout_ms) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  const asio::ip::address ip = asio::ip::make_address(std::string(host), ec);
  if (ec) return Status::InvalidArgument(fmt::format("{}: not an IP address", host));
  const std::string where = fmt::format("http://{}:{}{}", host, port, target);
  stream.expires_after(std::chrono::milliseconds(timeout_ms));
  bhttp::request<bhttp::empty_body> req(bhttp::verb::get, std::string(target), 11);
  req.set(bhttp::field::host, fmt::format("{}:{}", host, port));
  req.keep_alive(false);
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(256 * 1024 * 1024);
  Fetched out;
  stream.async_connect(tcp::endpoint(ip, port), [&](beast::error_code c) {
    if ((ec = c)) return;
    bhttp::async_write(stream, req, [&](beast::error_code w, std::size_t) {
      if ((ec = w)) return;
      bhttp::async_read(stream, buffer, parser, [&](beast::error_code r, std::size_t) { ec = r; });
    });
  });
  ioc.run();
  if (ec) return Status::Unavailable(fmt::format("GET {}: {}", where, ec.message()));
  bhttp::response<bhttp::string_body> res = parser.release();
  out.status = static_cast<int>(res.result_int());
  out.content_type = std::string(res[bhttp::field::content_type]);
  out.body = std::move(res.body());
  return out;
}

}  // namespace tfd::http
