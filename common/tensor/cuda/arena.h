#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "common/base/status.h"

// The device memory of one process: a limit of gpu_memory_fraction x the device's total memory,
// and one cudaMalloc made once the whole need is known, from which buffers are carved. A need past
// the limit is a Status naming both, never an out-of-memory crash later. Plain C++ header.
namespace tfd::cuda {

class DeviceArena {
 public:
  // Makes `device` current and sets the limit. FailedPrecondition when the device is unusable.
  static Result<std::unique_ptr<DeviceArena>> Create(int device, double memory_fraction);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // Makes the one allocation of `bytes` (the sum of every later Take, each rounded up to 256
  // bytes). FailedPrecondition naming `what`, the need and the limit when it is past the limit or
  // the device has not that much free.
  Status Reserve(std::size_t bytes, std::string_view what);
  // The next `bytes` of the reservation (256-byte aligned); Internal when the reservation is spent.
  Result<void*> Take(std::size_t bytes, std::string_view what);
  template <typename T>
  Result<T*> Take(std::size_t count, std::string_view what) {
    Result<void*> p = Take(count * sizeof(T), what);
    if (!p.ok()) return p.status();
    return static_cast<T*>(*p);
  }

  static std::size_t Rounded(std::size_t bytes) { return (bytes + 255) / 256 * 256; }
  std::size_t limit() const { return limit_; }
  std::size_t reserved() const { return reserved_; }
  std::size_t used() const { return used_; }
  int device() const { return device_; }

 private:
  DeviceArena() = default;
  int device_ = 0;
  std::size_t limit_ = 0, reserved_ = 0, used_ = 0;
  char* base_ = nullptr;
};

// "1.50 GiB", "12.0 MiB": for messages.
std::string FormatBytes(std::size_t bytes);

}  // namespace tfd::cuda
