#include "common/tensor/cuda/arena.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

namespace tfd::cuda {

std::string FormatBytes(std::size_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= double(1 << 30)) return fmt::format("{:.2f} GiB", b / double(1 << 30));
  if (b >= double(1 << 20)) return fmt::format("{:.1f} MiB", b / double(1 << 20));
  return fmt::format("{:.1f} KiB", b / 1024);
}

Result<std::unique_ptr<DeviceArena>> DeviceArena::Create(int device, double memory_fraction) {
  if (!(memory_fraction > 0 && memory_fraction <= 1))
    return Status::InvalidArgument(fmt::format("gpu_memory_fraction: expected a number in (0, 1], got {}", memory_fraction));
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
    return Status::FailedPrecondition(fmt::format("cuda:{}: {}", device, cudaGetErrorString(e)));
  std::size_t free = 0, total = 0;
  if (cudaError_t e = cudaMemGetInfo(&free, &total); e != cudaSuccess)
    return Status::FailedPrecondition(fmt::format("cuda:{}: {}", device, cudaGetErrorString(e)));
  std::unique_ptr<DeviceArena> a(new DeviceArena());
  a->device_ = device;
  a->limit_ = static_cast<std::size_t>(static_cast<double>(total) * memory_fraction);
  return a;
}

DeviceArena::~DeviceArena() {
  if (base_ != nullptr) cudaFree(base_);
}

Status DeviceArena::Reserve(std::size_t bytes, std::string_view what) {
  if (base_ != nullptr) return Status::Internal("device arena: reserved twice");
  if (bytes > limit_) {
    return Status::FailedPrecondition(fmt::format("cuda:{}: {} needs {} of device memory, past the limit of {} that "
                                                  "gpu_memory_fraction allows",
                                                  device_, what, FormatBytes(bytes), FormatBytes(limit_)));
  }
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) {
    cudaGetLastError();  // clear it: the process goes on (and exits cleanly)
    std::size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    return Status::FailedPrecondition(fmt::format("cuda:{}: {} needs {} of device memory and {} are free ({})", device_, what,
                                                  FormatBytes(bytes), FormatBytes(free), cudaGetErrorString(e)));
  }
  base_ = static_cast<char*>(p);
  reserved_ = bytes;
  return Status::Ok();
}

Result<void*> DeviceArena::Take(std::size_t bytes, std::string_view what) {
  const std::size_t n = Rounded(bytes);
  if (base_ == nullptr || used_ + n > reserved_)
    return Status::Internal(fmt::format("device arena: {} ({}) is past the {} reserved", what, FormatBytes(n), FormatBytes(reserved_)));
  void* p = base_ + used_;
  used_ += n;
  return p;
}

}  // namespace tfd::cuda
