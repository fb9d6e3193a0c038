#include "common/transport/io_thread.h"

namespace tfd::transport {

IoThread::IoThread(std::function<void()> before_stop)
    : before_stop_(std::move(before_stop)), work_(asio::make_work_guard(ioc_)), thread_([this] { ioc_.run(); }) {}

IoThread::~IoThread() {
  if (before_stop_) before_stop_();
  // Let the closes run (connections release their handlers), then stop.
  work_.reset();
  asio::steady_timer limit(ioc_, std::chrono::milliseconds(200));
  limit.async_wait([this](const boost::system::error_code&) { ioc_.stop(); });
  thread_.join();
}

}  // namespace tfd::transport
