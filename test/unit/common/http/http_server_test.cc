#include <atomic>
#include <string>

#include <utility>  // before Asio

#include <boost/asio.hpp>
#include <catch2/catch.hpp>

#include "common/http/server.h"

namespace tfd::http {
namespace {

TEST_CASE("http: a server on a free port answers GETs and keeps its handler's status, type and headers", "[http]") {
  std::atomic<int> calls{0};
  Result<std::unique_ptr<Server>> server = Server::Start("127.0.0.1", 0, [&](const Request& r) {
    ++calls;
    if (r.target == "/healthz") return Response{.body = "ok\n"};
    if (r.target.starts_with("/echo")) return Response{.content_type = "application/json", .body = r.method + " " + r.target,
                                                       .headers = {{"Cache-Control", "no-store"}}};
    if (r.target == "/boom") throw std::runtime_error("handler failed");
    return Response{.status = 404, .body = "no such page\n"};
  });
  REQUIRE(server.ok());
  const std::uint16_t port = (*server)->port();
  CHECK(port != 0);
  CHECK((*server)->address() == "127.0.0.1:" + std::to_string(port));

  Result<Fetched> health = Get("127.0.0.1", port, "/healthz");
  REQUIRE(health.ok());
  CHECK(health->status == 200);
  CHECK(health->body == "ok\n");
  CHECK(health->content_type == "text/plain; charset=utf-8");

  Result<Fetched> echo = Get("127.0.0.1", port, "/echo?since=3");
  REQUIRE(echo.ok());
  CHECK(echo->body == "GET /echo?since=3");
  CHECK(echo->content_type == "application/json");

  Result<Fetched> missing = Get("127.0.0.1", port, "/nope");
  REQUIRE(missing.ok());
  CHECK(missing->status == 404);

  Result<Fetched> boom = Get("127.0.0.1", port, "/boom");
  REQUIRE(boom.ok());
  CHECK(boom->status == 500);
  CHECK(boom->body.find("handler failed") != std::string::npos);
  CHECK(calls.load() == 4);
}

TEST_CASE("http: a taken port and a bad host are one-line errors; the server stops when destroyed", "[http]") {
  auto first = Server::Start("127.0.0.1", 0, [](const Request&) { return Response{}; });
  REQUIRE(first.ok());
  const std::uint16_t port = (*first)->port();
  auto second = Server::Start("127.0.0.1", port, [](const Request&) { return Response{}; });
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().message().starts_with("cannot listen on 127.0.0.1:" + std::to_string(port) + ": "));
  auto bad = Server::Start("not-an-ip", 0, [](const Request&) { return Response{}; });
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == Code::kInvalidArgument);
  first->reset();
  CHECK_FALSE(Get("127.0.0.1", port, "/", 2000).ok());
}

TEST_CASE("http: a server destroyed while a client keeps a connection open closes it and returns", "[http]") {
  auto server = Server::Start("127.0.0.1", 0, [](const Request&) { return Response{.body = "ok\n"}; });
  REQUIRE(server.ok());
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::socket client(ioc);
  client.connect({boost::asio::ip::make_address("127.0.0.1"), (*server)->port()});
  const std::string request = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n";  // keep-alive: the session waits for the next
  boost::asio::write(client, boost::asio::buffer(request));
  std::string answer(512, '\0');
  const std::size_t got = client.read_some(boost::asio::buffer(answer));
  CHECK(answer.substr(0, got).starts_with("HTTP/1.1 200"));
  server->reset();  // the session still waits for a request
  boost::system::error_code ec;
  client.read_some(boost::asio::buffer(answer), ec);
  CHECK(ec == boost::asio::error::eof);
}

TEST_CASE("http: listen addresses", "[http]") {
  auto parsed = ParseListenAddress("0.0.0.0:9464", "--metrics");
  REQUIRE(parsed.ok());
  CHECK(parsed->first == "0.0.0.0");
  CHECK(parsed->second == 9464);
  CHECK(ParseListenAddress(":80", "--metrics")->first == "0.0.0.0");
  CHECK(ParseListenAddress("9464", "--metrics")->first == "127.0.0.1");
  CHECK(ParseListenAddress("[::1]:9", "--metrics")->first == "::1");
  CHECK(ParseListenAddress("host:1", "--metrics").status().message() ==
        "--metrics: \"host\" is not an IP address (expected e.g. 127.0.0.1:9464)");
  CHECK(ParseListenAddress("1.2.3.4:70000", "--metrics").status().message() ==
        "--metrics: expected HOST:PORT, :PORT or PORT, got \"1.2.3.4:70000\"");
  CHECK_FALSE(ParseListenAddress("1.2.3.4:", "--metrics").ok());
}

}  // namespace
}  // namespace tfd::http
