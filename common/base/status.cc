#include "common/base/status.h"

#include <cstdio>
#include <cstdlib>

namespace tfd {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kNotFound: return "NotFound";
    case Code::kCorruption: return "Corruption";
    case Code::kUnavailable: return "Unavailable";
    case Code::kDeadlineExceeded: return "DeadlineExceeded";
    case Code::kFailedPrecondition: return "FailedPrecondition";
    case Code::kInternal: return "Internal";
    case Code::kPermissionDenied: return "PermissionDenied";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(CodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

Code CodeFromWire(std::uint16_t code) {
  return code > 0 && code <= static_cast<std::uint16_t>(Code::kPermissionDenied) ? static_cast<Code>(code) : Code::kInternal;
}

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case Code::kOk: return 0;
    case Code::kInvalidArgument:
    case Code::kNotFound:
    case Code::kPermissionDenied:
      return 2;
    default: return 1;
  }
}

namespace internal {
void CheckFailed(const char* file, int line, const char* cond) {
  std::fprintf(stderr, "tfd: internal error: check failed at %s:%d: %s\n", file, line, cond);
  std::abort();
}
}  // namespace internal

}  // namespace tfd
