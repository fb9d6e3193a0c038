#pragma once
// Durations as the seconds that logs, events and metrics print.

#include <chrono>

namespace tfd {

// `d` in seconds, fractions kept.
template <typename Rep, typename Period>
double Seconds(std::chrono::duration<Rep, Period> d) {
  return std::chrono::duration<double>(d).count();
}

// Seconds from `start` to now on the steady clock.
inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return Seconds(std::chrono::steady_clock::now() - start);
}

// Now on the system clock, as seconds since the Unix epoch (an event's "ts").
inline double UnixSeconds() { return Seconds(std::chrono::system_clock::now().time_since_epoch()); }

}  // namespace tfd
