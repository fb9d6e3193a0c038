#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "common/base/check.h"

namespace tfd {

enum class Code {
  kOk = 0,
  kInvalidArgument,     // bad input or configuration: exit code 2
  kNotFound,            // a named file or entry does not exist: exit code 2
  kCorruption,          // bad bytes from a file or a peer
  kUnavailable,         // a peer is gone or unreachable
  kDeadlineExceeded,
  kFailedPrecondition,
  kInternal,
  kPermissionDenied,    // no or the wrong cluster token, or a token file others can read: exit code 2
  // Values travel in ERROR frames: append, never renumber.
};

std::string_view CodeName(Code code);

// The outcome of an operation that can fail for reasons outside the program's control. Cheap to
// copy when ok. Messages name the file, field or peer and what was expected.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
  static Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) { return {Code::kDeadlineExceeded, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {Code::kFailedPrecondition, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: message", or "OK".
  std::string ToString() const;
  // Same code, message prefixed with `context: `.
  Status WithContext(std::string_view context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// A value or the Status that explains its absence.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}                        // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) { TFD_CHECK(!status_.ok()); }  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { TFD_CHECK(ok()); return *value_; }
  const T& value() const& { TFD_CHECK(ok()); return *value_; }
  T&& value() && { TFD_CHECK(ok()); return std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

// A failure code received from a peer (an ERROR frame), which is untrusted: anything but a known
// failure code (0 is "OK") becomes kInternal.
Code CodeFromWire(std::uint16_t code);

// Process exit code for a failed Status: 2 for bad usage or configuration, 1 otherwise.
int ExitCodeFor(const Status& status);

}  // namespace tfd

#define TFD_RETURN_IF_ERROR(expr)                  \
  do {                                             \
    ::tfd::Status tfd_status_ = (expr);            \
    if (!tfd_status_.ok()) return tfd_status_;     \
  } while (0)

#define TFD_CONCAT_INNER_(a, b) a##b
#define TFD_CONCAT_(a, b) TFD_CONCAT_INNER_(a, b)
// TFD_ASSIGN_OR_RETURN(auto x, MakeX()); returns the Status when MakeX() failed.
#define TFD_ASSIGN_OR_RETURN(lhs, expr) TFD_ASSIGN_OR_RETURN_IMPL_(TFD_CONCAT_(tfd_result_, __LINE__), lhs, expr)
#define TFD_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
