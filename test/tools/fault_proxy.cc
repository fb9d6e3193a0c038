#include "test/tools/fault_proxy.h"

#include <algorithm>
#include <deque>
#include <future>
#include <vector>

#include <fmt/format.h>

namespace tfd::testing {

namespace asio = boost::asio;
using asio::redirect_error;
using asio::use_awaitable;
using boost::system::error_code;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kReadChunk = 64 * 1024;
constexpr std::size_t kMaxHeld = 1 << 20;  // per stream; then the reader waits

int Index(Direction d) { return d == Direction::kClientToServer ? 0 : 1; }

}  // namespace

// One proxied connection: the client's socket, the target's socket and a pump per direction.
// Lives on the proxy thread only; coroutines hold shared_from_this().
class ProxyConnection : public std::enable_shared_from_this<ProxyConnection> {
 public:
  ProxyConnection(FaultProxy& proxy, tcp::socket client, tcp::socket server)
      : proxy_(proxy),
        sockets_{std::move(client), std::move(server)},
        streams_{Stream(proxy.ioc_), Stream(proxy.ioc_)} {}

  void Start() {
    for (int dir = 0; dir < 2; ++dir) {
      asio::co_spawn(proxy_.ioc_, ReadLoop(dir), asio::detached);
      asio::co_spawn(proxy_.ioc_, WriteLoop(dir), asio::detached);
    }
  }

  // Wakes every waiting loop so it looks at the faults again.
  void Wake() {
    for (Stream& s : streams_) {
      s.wake_reader.cancel();
      s.wake_writer.cancel();
    }
  }

  // Closes both sockets, with an RST when `reset`. Idempotent.
  void Close(bool reset) {
    if (closed_) return;
    closed_ = true;
    error_code ec;
    for (tcp::socket& s : sockets_) {
      if (reset) {
        s.set_option(asio::socket_base::linger(true, 0), ec);
      } else {
        s.shutdown(tcp::socket::shutdown_send, ec);
      }
      s.close(ec);
    }
    Wake();
    proxy_.connections_.erase(shared_from_this());
  }

 private:
  struct Chunk {
    Clock::time_point release;
    std::vector<char> bytes;
    std::size_t written = 0;
    bool close_after = false;  // drop_after reached: close the connection once written
  };
  struct Stream {
    explicit Stream(asio::io_context& ioc) : wake_reader(ioc), wake_writer(ioc) {}
    std::deque<Chunk> held;
    std::size_t held_bytes = 0;
    std::uint64_t read_offset = 0;  // stream bytes read so far
    bool eof = false;               // the sender closed; nothing more will be held
    bool reset = false;             // ... with an error (a reset), not a FIN
    Clock::time_point next_send{};  // throttle: earliest time of the next slice
    asio::steady_timer wake_reader, wake_writer;
  };

  // Direction `dir` reads from sockets_[dir] (0: the client) and writes to sockets_[1 - dir].
  asio::awaitable<void> ReadLoop(int dir) {
    auto self = shared_from_this();
    Stream& s = streams_[dir];
    std::vector<char> buf(kReadChunk);
    for (;;) {
      while (!closed_ && s.held_bytes >= kMaxHeld) co_await Sleep(s.wake_reader, Clock::time_point::max());
      if (closed_) co_return;
      error_code ec;
      std::size_t n = co_await sockets_[dir].async_read_some(asio::buffer(buf), redirect_error(use_awaitable, ec));
      if (closed_) co_return;
      if (ec) {
        // Passed on once what is held has been forwarded (a stall holds the end too).
        s.eof = true;
        s.reset = ec != asio::error::eof;
        s.wake_writer.cancel();
        co_return;
      }
      const FaultProxy::Faults& f = proxy_.faults_[dir];
      Chunk chunk;
      chunk.bytes.assign(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
      if (f.drop_after && s.read_offset + n >= *f.drop_after) {
        chunk.bytes.resize(static_cast<std::size_t>(*f.drop_after > s.read_offset ? *f.drop_after - s.read_offset : 0));
        chunk.close_after = true;
      }
      for (std::size_t i = 0; i < chunk.bytes.size(); ++i) {
        const std::uint64_t at = s.read_offset + i;
        if (f.corrupt_at && at == *f.corrupt_at) chunk.bytes[i] = static_cast<char>(chunk.bytes[i] ^ f.corrupt_at_mask);
        if (f.corrupt_every > 0 && (at + 1) % f.corrupt_every == 0)
          chunk.bytes[i] = static_cast<char>(chunk.bytes[i] ^ f.corrupt_every_mask);
      }
      s.read_offset += chunk.bytes.size();
      s.held_bytes += chunk.bytes.size();
      chunk.release = Clock::now() + f.delay;
      const bool last = chunk.close_after;
      s.held.push_back(std::move(chunk));
      s.wake_writer.cancel();
      if (last) co_return;  // drop_after reached: nothing more is read
    }
  }

  asio::awaitable<void> WriteLoop(int dir) {
    auto self = shared_from_this();
    Stream& s = streams_[dir];
    tcp::socket& to = sockets_[1 - dir];
    for (;;) {
      if (closed_) co_return;
      const FaultProxy::Faults& f = proxy_.faults_[dir];
      if (f.stalled || (s.held.empty() && !s.eof)) {
        co_await Sleep(s.wake_writer, Clock::time_point::max());
        continue;
      }
      if (s.held.empty()) {
        if (s.reset) {  // pass a reset on
          Close(/*reset=*/true);
          co_return;
        }
        // Pass the half-close on; the connection ends when both ways have.
        error_code ec;
        to.shutdown(tcp::socket::shutdown_send, ec);
        if (++half_closed_ == 2) Close(/*reset=*/false);
        co_return;
      }
      Chunk& chunk = s.held.front();
      const auto now = Clock::now();
      if (now < chunk.release) {
        co_await Sleep(s.wake_writer, chunk.release);
        continue;
      }
      std::size_t len = chunk.bytes.size() - chunk.written;
      if (f.throttle > 0) {
        if (now < s.next_send) {
          co_await Sleep(s.wake_writer, s.next_send);
          continue;
        }
        len = std::min<std::size_t>(len, std::max<std::uint64_t>(1, f.throttle / 50));  // ~20 ms slices
        s.next_send = std::max(now, s.next_send) +
                      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(static_cast<double>(len) / static_cast<double>(f.throttle)));
      }
      error_code ec;
      if (len > 0) {
        co_await asio::async_write(to, asio::buffer(chunk.bytes.data() + chunk.written, len), redirect_error(use_awaitable, ec));
      }
      if (closed_) co_return;
      if (ec) {
        Close(/*reset=*/true);
        co_return;
      }
      proxy_.forwarded_[dir] += len;
      chunk.written += len;
      s.held_bytes -= len;
      s.wake_reader.cancel();
      if (chunk.written == chunk.bytes.size()) {
        const bool close_after = chunk.close_after;
        s.held.pop_front();
        if (close_after) {
          Close(/*reset=*/false);
          co_return;
        }
      }
    }
  }

  // Waits until `until` or until someone cancels `timer`, whichever is first.
  static asio::awaitable<void> Sleep(asio::steady_timer& timer, Clock::time_point until) {
    timer.expires_at(until);
    error_code ec;
    co_await timer.async_wait(redirect_error(use_awaitable, ec));
  }

  FaultProxy& proxy_;
  tcp::socket sockets_[2];  // [0] the client, [1] the target
  Stream streams_[2];       // [0] client→server, [1] server→client
  int half_closed_ = 0;
  bool closed_ = false;
};

FaultProxy::FaultProxy(const FaultProxyOptions& options) : options_(options), acceptor_(ioc_) {}

Result<std::unique_ptr<FaultProxy>> FaultProxy::Start(const FaultProxyOptions& options) {
  std::unique_ptr<FaultProxy> proxy(new FaultProxy(options));
  error_code ec;
  const asio::ip::address address = asio::ip::make_address(options.listen_address, ec);
  if (ec) return Status::InvalidArgument(fmt::format("fault proxy: \"{}\" is not an IP address", options.listen_address));
  const tcp::endpoint endpoint(address, options.listen_port);
  tcp::acceptor& a = proxy->acceptor_;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::Unavailable(fmt::format("fault proxy: cannot listen on {}:{}: {}", options.listen_address, options.listen_port,
                                           ec.message()));
  }
  proxy->port_ = a.local_endpoint().port();
  asio::co_spawn(proxy->ioc_, proxy->AcceptLoop(), asio::detached);
  proxy->thread_ = std::thread([p = proxy.get()] {
    auto guard = asio::make_work_guard(p->ioc_);
    p->ioc_.run();
  });
  return proxy;
}

FaultProxy::~FaultProxy() {
  RunOnIo([this] {
    error_code ec;
    acceptor_.close(ec);
    auto open = connections_;  // Close() erases from connections_
    for (const auto& c : open) c->Close(/*reset=*/false);
  });
  ioc_.stop();
  thread_.join();
}

template <typename F>
void FaultProxy::RunOnIo(F&& f) {
  std::promise<void> done;
  asio::post(ioc_, [&] {
    f();
    done.set_value();
  });
  done.get_future().wait();
}

template <typename F>
void FaultProxy::Update(Direction d, F&& f) {
  RunOnIo([&] {
    if (d != Direction::kServerToClient) f(faults_[Index(Direction::kClientToServer)]);
    if (d != Direction::kClientToServer) f(faults_[Index(Direction::kServerToClient)]);
    for (const auto& c : connections_) c->Wake();
  });
}

void FaultProxy::SetDelay(Direction d, std::chrono::milliseconds delay) {
  Update(d, [&](Faults& f) { f.delay = delay; });
}
void FaultProxy::Stall(Direction d) {
  Update(d, [](Faults& f) { f.stalled = true; });
}
void FaultProxy::Resume(Direction d) {
  Update(d, [](Faults& f) { f.stalled = false; });
}
void FaultProxy::SetDropAfter(Direction d, std::optional<std::uint64_t> bytes) {
  Update(d, [&](Faults& f) { f.drop_after = bytes; });
}
void FaultProxy::CorruptAt(Direction d, std::uint64_t offset, std::uint8_t mask) {
  Update(d, [&](Faults& f) {
    f.corrupt_at = offset;
    f.corrupt_at_mask = mask;
  });
}
void FaultProxy::CorruptEvery(Direction d, std::uint64_t n, std::uint8_t mask) {
  Update(d, [&](Faults& f) {
    f.corrupt_every = n;
    f.corrupt_every_mask = mask;
  });
}
void FaultProxy::SetThrottle(Direction d, std::uint64_t bytes_per_second) {
  Update(d, [&](Faults& f) { f.throttle = bytes_per_second; });
}
void FaultProxy::ClearFaults() {
  Update(Direction::kBoth, [](Faults& f) { f = Faults{}; });
  RunOnIo([this] { refuse_ = Refuse::kNo; });
}

void FaultProxy::SetRefuse(Refuse mode) {
  RunOnIo([&] { refuse_ = mode; });
}

void FaultProxy::ResetAll() {
  RunOnIo([this] {
    auto open = connections_;
    for (const auto& c : open) c->Close(/*reset=*/true);
  });
}

std::uint64_t FaultProxy::bytes_forwarded(Direction d) const {
  if (d == Direction::kBoth) return forwarded_[0].load() + forwarded_[1].load();
  return forwarded_[Index(d)].load();
}

std::size_t FaultProxy::open_connections() {
  std::size_t n = 0;
  RunOnIo([&] { n = connections_.size(); });
  return n;
}

asio::awaitable<void> FaultProxy::AcceptLoop() {
  for (;;) {
    tcp::socket client(ioc_);
    error_code ec;
    co_await acceptor_.async_accept(client, redirect_error(use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
    if (ec) {  // out of file descriptors, say: do not spin
      asio::steady_timer pause(ioc_, std::chrono::milliseconds(50));
      co_await pause.async_wait(redirect_error(use_awaitable, ec));
      continue;
    }
    ++accepted_;
    if (refuse_ != Refuse::kNo) {
      if (refuse_ == Refuse::kReset) client.set_option(asio::socket_base::linger(true, 0), ec);
      client.close(ec);
      continue;
    }
    asio::co_spawn(ioc_, Connect(std::move(client)), asio::detached);
  }
}

asio::awaitable<void> FaultProxy::Connect(tcp::socket client) {
  error_code ec;
  tcp::resolver resolver(ioc_);
  auto endpoints = co_await resolver.async_resolve(options_.target_host, std::to_string(options_.target_port),
                                                   redirect_error(use_awaitable, ec));
  tcp::socket server(ioc_);
  if (!ec) co_await asio::async_connect(server, endpoints, redirect_error(use_awaitable, ec));
  if (ec || !acceptor_.is_open()) {  // the target is not there: the client sees a reset
    client.set_option(asio::socket_base::linger(true, 0), ec);
    client.close(ec);
    co_return;
  }
  client.set_option(tcp::no_delay(true), ec);
  server.set_option(tcp::no_delay(true), ec);
  auto conn = std::make_shared<ProxyConnection>(*this, std::move(client), std::move(server));
  connections_.insert(conn);
  conn->Start();
}

}  // namespace tfd::testing
