// cuBLAS, loaded when a CUDA model is first made rather than when tfd starts.
//
// libcublas brings libcublasLt with it: about 200 MB of memory and 0.4 s of relocations in every
// process that links them, whether or not it ever touches a GPU. tfd is one binary for every role
// (the ps, a coordinator, CPU workers), so it links only the small CUDA runtime and opens cuBLAS
// with dlopen on first use, resolving the few entry points the backend calls.
#pragma once

#include <cublas_v2.h>

#include "common/base/status.h"

namespace tfd::cuda {

struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasSgemv_v2) sgemv = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// Opens libcublas.so.<major of the headers built against> (the loader's search path first, then
// the directory the build found it in) on the first call; later calls return the same table or the
// same error, which names the library and what dlopen or dlsym said.
Result<const CublasApi*> LoadCublas();

// The table LoadCublas filled; only after it succeeded (every CudaModel holds a handle from it).
const CublasApi& Cublas();

}  // namespace tfd::cuda
