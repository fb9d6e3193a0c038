#include "daemon/task/task.h"

#include <csignal>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "common/base/service.h"

namespace tfd::task {
namespace {

// Written by the signal handler only (async-signal-safe: lock-free atomics).
std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

extern "C" void OnSignal(int sig) {
  g_signal.store(sig);
  g_stop.store(true);
}

}  // namespace

Task::Task(std::string name, const TaskFlags& flags) : name_(std::move(name)), events_(stdout, name_, flags.json_events) {
  SetupLogging(name_, flags.log_level);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);
}

const std::atomic<bool>* Task::stop() const { return &g_stop; }

int Task::Finish(const Status& result) {
  if (result.ok()) return 0;
  const int sig = g_signal.load();
  if (sig != 0) NotifyStopping();
  spdlog::error("{}", result.message());
  events_.Emit("error", {{"message", result.message()}});
  return sig != 0 ? 128 + sig : ExitCodeFor(result);
}

}  // namespace tfd::task
