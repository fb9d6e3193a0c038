#include "common/tensor/cuda/cublas_loader.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include <fmt/format.h>

namespace tfd::cuda {
namespace {

CublasApi g_api;

Status Open() {
  const std::string soname = fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR);
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string why = lib == nullptr ? dlerror() : "";
  if (lib == nullptr) {
    const std::string built = fmt::format("{}/{}", TFD_CUBLAS_DIR, soname);
    lib = dlopen(built.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      return Status::FailedPrecondition(fmt::format("cannot load cuBLAS ({}, nor {}): {}; {}", soname, built, why, dlerror()));
    }
  }
  Status missing = Status::Ok();
  auto resolve = [&](auto* fn, const char* name) {
    *fn = reinterpret_cast<std::remove_reference_t<decltype(*fn)>>(dlsym(lib, name));
    if (*fn == nullptr && missing.ok()) missing = Status::FailedPrecondition(fmt::format("cuBLAS ({}) has no {}", soname, name));
  };
  resolve(&g_api.create, "cublasCreate_v2");
  resolve(&g_api.destroy, "cublasDestroy_v2");
  resolve(&g_api.set_stream, "cublasSetStream_v2");
  resolve(&g_api.set_workspace, "cublasSetWorkspace_v2");
  resolve(&g_api.sgemm, "cublasSgemm_v2");
  resolve(&g_api.sgemv, "cublasSgemv_v2");
  resolve(&g_api.status_string, "cublasGetStatusString");
  return missing;  // the library stays open for the life of the process, as a linked one would
}

}  // namespace

Result<const CublasApi*> LoadCublas() {
  static const Status loaded = Open();
  if (!loaded.ok()) return loaded;
  return &g_api;
}

const CublasApi& Cublas() { return g_api; }

}  // namespace tfd::cuda
