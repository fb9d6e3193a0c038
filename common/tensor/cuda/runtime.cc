#include "common/tensor/cuda/runtime.h"

#include <cstdlib>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

namespace tfd::cuda {

bool Built() { return true; }

Status CheckDevice(int index) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaErrorNoDevice || (err == cudaSuccess && count == 0)) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return Status::FailedPrecondition(
        fmt::format("no CUDA device visible (CUDA_VISIBLE_DEVICES={})", visible != nullptr ? visible : "unset"));
  }
  if (err == cudaErrorInsufficientDriver) {
    return Status::FailedPrecondition(fmt::format("no CUDA device usable: no NVIDIA driver, or one older than this tfd's CUDA {}.{} "
                                                  "runtime ({})",
                                                  CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, cudaGetErrorName(err)));
  }
  if (err != cudaSuccess) {
    return Status::FailedPrecondition(fmt::format("no CUDA device usable: {} ({})", cudaGetErrorString(err), cudaGetErrorName(err)));
  }
  if (index < 0 || index >= count) {
    return Status::FailedPrecondition(fmt::format("index {} out of range: {} device(s) visible", index, count));
  }
  return Status::Ok();
}

std::string DeviceDescription(int index) {
  if (!CheckDevice(index).ok()) return "";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "";
  return fmt::format("{}, {:.1f} GiB, sm_{}{}", prop.name, static_cast<double>(prop.totalGlobalMem) / (1 << 30), prop.major,
                     prop.minor);
}

}  // namespace tfd::cuda
