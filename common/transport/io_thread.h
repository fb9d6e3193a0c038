#pragma once

#include <functional>
#include <thread>

#include "common/transport/asio.h"

namespace tfd::transport {

// An io_context run on a thread of its own, for a role whose training thread blocks on replies
// (a worker's ps client, an allreduce worker's ring and listener). The destructor calls
// `before_stop` (close what runs on the context), gives the handlers that closing posts up to
// 200 ms to run, then stops the context and joins the thread. Construct and destroy it on one thread.
class IoThread {
 public:
  explicit IoThread(std::function<void()> before_stop = nullptr);
  ~IoThread();
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  asio::io_context& context() { return ioc_; }

 private:
  std::function<void()> before_stop_;
  asio::io_context ioc_{1};
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
};

}  // namespace tfd::transport
