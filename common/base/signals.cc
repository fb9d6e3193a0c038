#include "common/base/signals.h"

#include <pthread.h>

#include <csignal>
#include <ctime>

namespace tfd {
namespace {

// Written by the handler (async-signal-safe: lock-free atomics) and by WaitStopSignal.
StopSignal g_stop_signal;

void Record(int sig) {
  g_stop_signal.signal.store(sig);
  g_stop_signal.stop.store(true);
}

extern "C" void OnStopSignal(int sig) { Record(sig); }

sigset_t StopSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

const StopSignal& BlockStopSignals() {
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  const sigset_t set = StopSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return g_stop_signal;
}

int WaitStopSignal(std::chrono::milliseconds timeout) {
  const sigset_t set = StopSet();
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const timespec period{.tv_sec = static_cast<time_t>(s.count()),
                        .tv_nsec = static_cast<long>(std::chrono::nanoseconds(timeout - s).count())};
  const int sig = sigtimedwait(&set, nullptr, &period);
  if (sig <= 0) return 0;
  Record(sig);
  return sig;
}

}  // namespace tfd
