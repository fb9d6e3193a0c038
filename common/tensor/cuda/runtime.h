#pragma once

#include <string>

#include "common/base/status.h"

// Whether this build has the CUDA backend and whether a job may use a GPU. Plain C++ (no CUDA
// headers), built in every configuration: without the backend every call answers "not built".
namespace tfd::cuda {

// True when this tfd was built with the CUDA backend (TFD_WITH_CUDA found a toolkit).
bool Built();

// Ok when device `index` (counted among CUDA_VISIBLE_DEVICES) can be used; FailedPrecondition with
// a one-line reason otherwise: no backend built, no device visible (with CUDA_VISIBLE_DEVICES's
// value, or the driver's error), or the index out of range.
Status CheckDevice(int index);

// "NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90" for a device CheckDevice accepted; empty otherwise.
std::string DeviceDescription(int index);

}  // namespace tfd::cuda
