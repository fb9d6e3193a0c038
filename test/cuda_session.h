#pragma once
// The main() of a test binary that needs a CUDA device: Catch2's session where device 0 is usable,
// else exit 77 (ctest reports the binary skipped) with the one-line reason.
#include <cstdio>

#include "common/tensor/cuda/runtime.h"
#include "test/catch/session.h"

namespace tfd::testing {

inline int RunCatchSessionOnCudaDevice(int argc, char** argv) {
  if (Status s = cuda::CheckDevice(0); !s.ok()) {
    std::printf("skipped: %s\n", s.message().c_str());
    return 77;
  }
  return RunCatchSession(argc, argv);
}

}  // namespace tfd::testing
