// The PyTorch peers at their best, shared by the benchmarks that run them: each setting the peer's
// users would try (1 and 2 BLAS/OpenMP threads, denormals flushed or not; and where the
// environment pins OpenBLAS to one CPU type with OPENBLAS_CORETYPE, also OpenBLAS's own detection,
// which may pick wider kernels), the fastest kept, and which it was.
#pragma once

#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tfd::bench {

struct PeerBest {
  double samples_per_sec = 0;
  std::string setting = "-";  // "1t", "2t+ftz", "1t+ftz+cpu", ...
};

// Calls `visit(threads, flush_denormal, unpin_core, setting)` once per setting, `setting` naming it
// ("1t", "2t+ftz", "1t+ftz+cpu", ...).
template <typename Visit>
void ForEachPeerSetting(Visit visit) {
  const bool pinned = std::getenv("OPENBLAS_CORETYPE") != nullptr;
  for (bool unpin : {false, true}) {
    if (unpin && !pinned) continue;
    for (int threads : {1, 2})
      for (bool flush : {false, true})
        visit(threads, flush, unpin, std::to_string(threads) + "t" + (flush ? "+ftz" : "") + (unpin ? "+cpu" : ""));
  }
}

// `measure(threads, flush_denormal, unpin_core)` runs the peer once and returns its samples/s (0
// when it failed).
template <typename Measure>
PeerBest BestPeer(Measure measure) {
  PeerBest best;
  ForEachPeerSetting([&](int threads, bool flush, bool unpin, const std::string& setting) {
    const double v = measure(threads, flush, unpin);
    if (v > best.samples_per_sec) best = {v, setting};
  });
  return best;
}

// --pin CPU: the benchmark's own process (and the threads it starts after) and every peer run on
// that one CPU alone, so "one core" holds for both sides and the peer's 2-thread settings share it.
// False when the CPU cannot be had.
inline bool PinToCpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}
// The shell prefix that runs a peer on `cpu` (none when cpu < 0).
inline std::string PinPrefix(int cpu) { return cpu < 0 ? std::string() : "taskset -c " + std::to_string(cpu) + " "; }

// The shell prefix and arguments for one of those settings (the peer scripts take --threads and
// --flush-denormal; peer_env.py applies the thread count before torch loads).
inline std::string PeerCommand(const std::string& script_and_args, int threads, bool flush, bool unpin, int pin_cpu = -1) {
  return PinPrefix(pin_cpu) + std::string(unpin ? "env -u OPENBLAS_CORETYPE " : "") + "/usr/bin/python3 " + script_and_args + " --threads " +
         std::to_string(threads) + (flush ? " --flush-denormal" : "");
}

// The standard output of the shell command `cmd`; empty when it cannot start or exits non-zero
// (a peer that failed reads as no figure).
inline std::string RunCapture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  if (pclose(p) != 0) return "";
  return out;
}

}  // namespace tfd::bench
