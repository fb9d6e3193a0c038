#pragma once
// N ring members as threads of this process over real loopback TCP, each with its own io_context
// thread and listener (port 0), as tfd workers would be.

#include <utility>

#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/collective/ring.h"
#include "common/transport/listener.h"

namespace tfd::testing {

class LocalRing {
 public:
  // Binds every listener and creates the rings. `stranger_id`, when not 0, is member 1's cluster id.
  LocalRing(int n, collective::RingOptions base = {}, std::uint64_t stranger_id = 0) : n_(n) {
    for (int i = 0; i < n; ++i) {
      auto& m = members_.emplace_back(std::make_unique<Member>());
      m->thread = std::thread([io = &m->ioc] { io->run(); });
      auto slot = &m->ring;
      auto listener = transport::Listener::Bind(m->ioc, "127.0.0.1", 0, [slot](transport::tcp::socket s) { (*slot)->Accept(std::move(s)); });
      TFD_CHECK(listener.ok());
      m->listener = std::move(listener).value();
    }
    for (int i = 0; i < n; ++i) {
      base.members.push_back({fmt::format("worker:{}", i), "127.0.0.1", members_[static_cast<std::size_t>(i)]->listener->port(),
                              wire::TaskKind::kWorker, static_cast<std::uint32_t>(i)});
    }
    for (int i = 0; i < n; ++i) {
      collective::RingOptions o = base;
      o.rank = i;
      o.cluster_id = (i == 1 && stranger_id != 0) ? stranger_id : 42;
      members_[static_cast<std::size_t>(i)]->ring = collective::Ring::Create(members_[static_cast<std::size_t>(i)]->ioc, o);
      members_[static_cast<std::size_t>(i)]->listener->Start();
    }
  }
  ~LocalRing() {
    for (auto& m : members_) {
      m->ring->Close(Status::Ok());
      m->listener->Stop();
    }
    for (auto& m : members_) {
      m->guard.reset();
      m->thread.join();
    }
  }

  // Runs fn(rank) on one thread per member and returns the statuses in rank order.
  std::vector<Status> OnEach(const std::function<Status(int)>& fn) {
    std::vector<std::future<Status>> f;
    for (int i = 0; i < n_; ++i) f.push_back(std::async(std::launch::async, fn, i));
    std::vector<Status> out;
    for (auto& x : f) out.push_back(x.get());
    return out;
  }
  std::vector<Status> Connect() {
    return OnEach([this](int r) { return ring(r).Connect(); });
  }
  collective::Ring& ring(int r) { return *members_[static_cast<std::size_t>(r)]->ring; }
  // The member's I/O thread (its listener, handshakes and heartbeats run there).
  transport::asio::io_context& ioc(int r) { return members_[static_cast<std::size_t>(r)]->ioc; }
  int size() const { return n_; }

 private:
  struct Member {
    transport::asio::io_context ioc{1};
    transport::asio::executor_work_guard<transport::asio::io_context::executor_type> guard = transport::asio::make_work_guard(ioc);
    std::thread thread;
    std::unique_ptr<transport::Listener> listener;
    std::shared_ptr<collective::Ring> ring;
  };
  int n_;
  std::vector<std::unique_ptr<Member>> members_;
};

}  // namespace tfd::testing
