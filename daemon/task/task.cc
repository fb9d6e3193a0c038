#include "daemon/task/task.h"

#include <csignal>
#include <cstdio>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/base/service.h"

namespace tfd::task {

Task::Task(std::string name, const TaskFlags& flags)
    : name_(std::move(name)), events_(stdout, name_, flags.json_events), signal_(BlockStopSignals()) {
  SetupLogging(name_, flags.log_level);
  std::signal(SIGPIPE, SIG_IGN);
  // Takes the signals for the process until it exits.
  std::thread([] {
    for (;;) WaitStopSignal(std::chrono::hours(1));
  }).detach();
}

const std::atomic<bool>* Task::stop() const { return &signal_.stop; }

int Task::Finish(const Status& result) {
  if (result.ok()) return 0;
  const int sig = signal_.signal.load();
  if (sig != 0) NotifyStopping();
  spdlog::error("{}", result.message());
  events_.Emit("error", {{"message", result.message()}});
  return sig != 0 ? 128 + sig : ExitCodeFor(result);
}

}  // namespace tfd::task
