#pragma once

namespace tfd::tensor {

// C = alpha * op(A) * op(B) + beta * C for row-major matrices, op(X) = X or X^T; op(A) is m x k,
// op(B) is k x n, C is m x n; lda/ldb/ldc are row strides. Runs on OpenBLAS when the build found it
// (kernels chosen for the CPU at run time), else on Eigen's kernels.
void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc);

// Sets the number of threads the GEMM backend may use (1 = the calling thread only). Process-wide:
// call from main() before training.
void SetComputeThreads(int threads);

// "openblas" or "eigen".
const char* GemmBackendName();

}  // namespace tfd::tensor
