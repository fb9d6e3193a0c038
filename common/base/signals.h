#pragma once

#include <atomic>
#include <chrono>

namespace tfd {

// SIGINT and SIGTERM for a whole process, taken without interrupting a computation.
//
// BlockStopSignals() is called once, from the main thread before it starts a thread: it blocks both
// signals there (every later thread inherits the mask), so they wait for WaitStopSignal, and
// installs a handler that only records them for the threads a library started before main()
// (OpenBLAS's pool), which do not block them. A handler that interrupted a training step (in a
// library's code: tfd has no assembly) left the heap corrupt in about 1 run in 40 on an Intel Xeon
// ("corrupted size vs. prev_size", the abort in oneDNN's GEMM); taken this way, none in 350 runs.
struct StopSignal {
  std::atomic<bool> stop{false};  // set once SIGINT or SIGTERM arrived
  std::atomic<int> signal{0};     // its number
};
const StopSignal& BlockStopSignals();

// Waits up to `timeout` for SIGINT or SIGTERM, records it and returns its number; 0 when none came.
// Any thread, after BlockStopSignals.
int WaitStopSignal(std::chrono::milliseconds timeout);

}  // namespace tfd
