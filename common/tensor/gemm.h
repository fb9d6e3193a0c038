#pragma once

#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace tfd::tensor {

// The CPU GEMM implementations a build may have; GemmBackends() says which this one has.
enum class GemmBackend { kOneDnn, kOpenBlas, kEigen };

// The build's fastest backend: oneDNN when the build found it, else OpenBLAS, else Eigen's kernels.
GemmBackend DefaultGemmBackend();

// Which backend a Gemm runs on and how many threads it may use. A value, carried by the code that
// calls Gemm (a model::Model holds one, from the job's `threads`), so two models in one process
// each run on their own setting; nothing about it is process-wide.
//
// Threads: oneDNN's are OpenMP's, whose count belongs to the calling thread; Eigen's products
// follow the same OpenMP count when the build has OpenMP (a oneDNN build) and run on the calling
// thread alone otherwise. OpenBLAS keeps one count for the whole process, by its design
// (openblas_set_num_threads has no per-thread form): each OpenBLAS Gemm sets that count to its
// config's where it differs, so a Gemm after another config's, on any thread, runs on its own
// count; but two configs with different counts whose OpenBLAS GEMMs overlap in time on two
// threads may each have some run on the other's count.
//
// Convolutions (MakeConv2D) on oneDNN run on its convolution primitives, which need no im2col
// patches; `im2col_convolutions` runs them as im2col + Gemm instead, as on the other backends, so
// tests and benchmarks can set the two side by side on any CPU.
struct GemmConfig {
  GemmBackend backend = DefaultGemmBackend();
  int threads = 1;  // 1 = the calling thread only; less than 1 counts as 1
  bool im2col_convolutions = false;
};

// C = alpha * op(A) * op(B) + beta * C for row-major matrices, op(X) = X or X^T; op(A) is m x k,
// op(B) is k x n, C is m x n; lda/ldb/ldc are row strides. Runs on `config`'s backend with its
// thread count, applied before the call where the backend's current count differs. oneDNN and
// OpenBLAS pick their kernels for the CPU at run time. Any thread may call it. A backend this
// build lacks (SetGemmBackend refuses its name) runs on Eigen's kernels.
void Gemm(const GemmConfig& config, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc);

// Gives the calling thread `config`'s thread count for its backend where the count it runs on now
// differs, as Gemm does before each call: for code that runs the backend's other primitives
// (oneDNN's convolutions), which read the same count.
void ApplyGemmThreads(const GemmConfig& config);

// The backends this build has, fastest first: some of "onednn", "openblas", and always "eigen".
std::vector<std::string_view> GemmBackends();

// The thread count `backend` would run a Gemm from the calling thread on now, before any config's
// count is applied: the calling thread's OpenMP count (oneDNN; Eigen in a build with OpenMP),
// OpenBLAS's count for the process, 1 for Eigen without OpenMP. A backend this build lacks
// answers as Eigen, which runs its GEMMs. For logs and tests.
int CurrentGemmThreads(GemmBackend backend);

// Sets config->backend to the backend called `name` (one of GemmBackends()). InvalidArgument
// naming the built ones otherwise, leaving *config unchanged.
Status SetGemmBackend(std::string_view name, GemmConfig* config);

// "onednn", "openblas" or "eigen".
const char* GemmBackendName(GemmBackend backend);

}  // namespace tfd::tensor
