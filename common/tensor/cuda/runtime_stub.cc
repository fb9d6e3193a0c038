#include "common/tensor/cuda/runtime.h"

// The build without the CUDA backend.
namespace tfd::cuda {

bool Built() { return false; }

Status CheckDevice(int) { return Status::FailedPrecondition("this tfd was built without the CUDA backend"); }

std::string DeviceDescription(int) { return ""; }

}  // namespace tfd::cuda
