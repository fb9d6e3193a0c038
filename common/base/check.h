#pragma once

// TFD_CHECK aborts on a broken invariant of our own code (never on bad input or a peer's error:
// those are Status values).
#define TFD_CHECK(cond)                                                       \
  do {                                                                        \
    if (!(cond)) ::tfd::internal::CheckFailed(__FILE__, __LINE__, #cond);     \
  } while (0)

namespace tfd::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond);
}  // namespace tfd::internal
