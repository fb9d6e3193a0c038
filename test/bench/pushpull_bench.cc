// Push+pull round trip of the mlp's 79,510 parameters (318 KB each way) between one worker and one
// ps on loopback, through the real PsClient / PsService / ParameterStore, beside a plain blocking
// socket that echoes the same bytes, in the same run. Prints both and the ratio.
//
//   build/test/bench/tfd_bench_pushpull [--seconds S] [--floats N]
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/base/logging.h"
#include "common/base/memory.h"
#include "common/transport/listener.h"
#include "daemon/worker/placement.h"
#include "daemon/ps/parameter_store.h"
#include "daemon/ps/ps_service.h"
#include "daemon/worker/ps_client.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace asio = tfd::transport::asio;

bool SendAll(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, 0);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool RecvAll(int fd, char* p, std::size_t n) {
  while (n > 0) {
    ssize_t r = recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// Round trips per second of `bytes` each way over a plain TCP socket pair on loopback.
double PlainSocket(std::size_t bytes, double seconds) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  listen(listener, 1);
  std::thread server([&] {
    int fd = accept(listener, nullptr, nullptr);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::vector<char> buf(bytes);
    while (RecvAll(fd, buf.data(), bytes) && SendAll(fd, buf.data(), bytes)) {
    }
    close(fd);
  });
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::vector<char> out(bytes, 1), in(bytes);
  for (int i = 0; i < 20; ++i) SendAll(fd, out.data(), bytes), RecvAll(fd, in.data(), bytes);
  std::int64_t n = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (n < 50 || elapsed < seconds) {
    SendAll(fd, out.data(), bytes);
    RecvAll(fd, in.data(), bytes);
    ++n;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  close(fd);
  server.join();
  close(listener);
  return static_cast<double>(n) / elapsed;
}

// Round trips per second of PushPull through tfd's ps and client.
// With `token`, both sides authenticate and every frame carries a MAC (and no CRC).
double TfdPushPull(std::size_t floats, double seconds, std::shared_ptr<const tfd::transport::ClusterToken> token = nullptr) {
  asio::io_context ps_ioc(1), worker_ioc(1);
  tfd::ps::ParameterStore store;
  tfd::EventWriter events(stdout, "bench", false);
  tfd::config::TfConfig ps_config;
  ps_config.cluster.worker.push_back({"127.0.0.1", 1});
  ps_config.task = {tfd::config::TaskType::kPs, 0};
  std::unique_ptr<tfd::ps::PsService> service;
  std::vector<std::shared_ptr<tfd::transport::Connection>> conns;
  tfd::transport::ConnectionOptions options;
  options.token = token;
  auto listener = tfd::transport::Listener::Bind(ps_ioc, "127.0.0.1", 0, [&](tfd::transport::tcp::socket s) {
    auto c = std::make_shared<tfd::transport::Connection>(std::move(s), *service, "worker", options);
    conns.push_back(c);
    c->Start();
  });
  if (!listener.ok()) return 0;
  ps_config.cluster.ps.push_back({"127.0.0.1", (*listener)->port()});
  service = std::make_unique<tfd::ps::PsService>(ps_config, 1, store, events, tfd::ps::PsService::Limits{}, [](const tfd::ps::PsService::Ending&) {});
  (*listener)->Start();
  std::thread ps_thread([&] { ps_ioc.run(); });
  auto guard = asio::make_work_guard(worker_ioc);
  std::thread io_thread([&] { worker_ioc.run(); });

  tfd::config::TfConfig worker_config = ps_config;
  worker_config.task = {tfd::config::TaskType::kWorker, 0};
  std::vector<tfd::worker::VariableInfo> vars = {{"params", 0, static_cast<std::int64_t>(floats)}};
  tfd::worker::Placement placement = tfd::worker::Place(vars, 1, tfd::config::Placement::kBalanced);
  double rate = 0;
  {
    tfd::worker::PsClientOptions copts;
    copts.connection.token = token;
    auto client = tfd::worker::PsClient::Connect(worker_ioc, worker_config, 7, placement, copts);
    if (client.ok()) {
      std::vector<float> params(floats, 0.5f), grads(floats, 1e-9f);
      tfd::config::OptimizerSpec sgd;
      sgd.learning_rate = 1e-6;
      tfd::config::UpdateSpec update;  // async, one worker
      update.scale_stale = false;
      if ((*client)->Initialize(true, sgd, update, params).ok()) {
        tfd::wire::Push tag;
        tag.incarnation = 7;
        auto step = [&] {
          ++tag.local_step;  // a new step each time, so the ps applies every push (no duplicates)
          return (*client)->PushPull(tag, grads, params, /*sync=*/false).ok();
        };
        for (int i = 0; i < 20; ++i) step();
        std::int64_t n = 0;
        const auto start = Clock::now();
        double elapsed = 0;
        while (n < 50 || elapsed < seconds) {
          if (!step()) break;
          ++n;
          elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        }
        rate = static_cast<double>(n) / elapsed;
      }
      (void)(*client)->Done(0, params);
      (*client)->Close();
    }
  }
  guard.reset();
  worker_ioc.stop();
  io_thread.join();
  ps_ioc.stop();
  ps_thread.join();
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3;
  std::size_t floats = 79510;
  bool plain_side = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--floats" && i + 1 < argc) floats = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--no-plain") plain_side = false;  // tfd only, e.g. for profiling
    else {
      std::fprintf(stderr, "usage: %s [--seconds S] [--floats N] [--no-plain]\n", argv[0]);
      return 2;
    }
  }
  tfd::KeepLargeAllocationsInHeap();
  tfd::SetupLogging("bench", "warn");
  const std::size_t bytes = floats * 4;
  const double plain = plain_side ? PlainSocket(bytes, seconds) : 0;
  const double ours = TfdPushPull(floats, seconds);
  const double authed = TfdPushPull(floats, seconds, std::make_shared<const tfd::transport::ClusterToken>(tfd::transport::ClusterToken::Generate()));
  auto gbps = [bytes](double rate) { return 2.0 * static_cast<double>(bytes) * rate / 1e9; };
  std::printf("push+pull of %zu floats (%.0f KB each way), one worker and one ps on loopback\n", floats, bytes / 1024.0);
  std::printf("%-28s %10s %12s %10s\n", "", "trips/s", "round trip", "GB/s");
  std::printf("%-28s %10.0f %9.1f us %10.2f\n", "plain socket echo", plain, 1e6 / plain, gbps(plain));
  std::printf("%-28s %10.0f %9.1f us %10.2f\n", "tfd PushPull (ps applies)", ours, ours > 0 ? 1e6 / ours : 0, gbps(ours));
  std::printf("%-28s %10.0f %9.1f us %10.2f\n", "tfd PushPull, cluster token", authed, authed > 0 ? 1e6 / authed : 0, gbps(authed));
  std::printf("ratio tfd / plain socket: %.2f (target >= 0.50)\n", plain > 0 ? ours / plain : 0);
  std::printf("ratio tfd with token / plain socket: %.2f; with token / without: %.2f\n", plain > 0 ? authed / plain : 0,
              ours > 0 ? authed / ours : 0);
  return ours > 0 && authed > 0 ? 0 : 1;
}
