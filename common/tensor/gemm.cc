#include "common/tensor/gemm.h"

#include <Eigen/Core>

#if TFD_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace tfd::tensor {

#if TFD_HAVE_OPENBLAS

void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

void SetComputeThreads(int threads) { openblas_set_num_threads(threads); }

const char* GemmBackendName() { return "openblas"; }

#else

namespace {
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;
using ConstStrided = Eigen::Map<const RowMatrix, Eigen::Unaligned, Stride>;
using Strided = Eigen::Map<RowMatrix, Eigen::Unaligned, Stride>;
}  // namespace

void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc) {
  ConstStrided ma(a, trans_a ? k : m, trans_a ? m : k, Stride(lda));
  ConstStrided mb(b, trans_b ? n : k, trans_b ? k : n, Stride(ldb));
  Strided mc(c, m, n, Stride(ldc));
  if (beta == 0.0f) {
    mc.setZero();
  } else if (beta != 1.0f) {
    mc *= beta;
  }
  if (!trans_a && !trans_b) mc.noalias() += alpha * ma * mb;
  else if (trans_a && !trans_b) mc.noalias() += alpha * ma.transpose() * mb;
  else if (!trans_a && trans_b) mc.noalias() += alpha * ma * mb.transpose();
  else mc.noalias() += alpha * ma.transpose() * mb.transpose();
}

void SetComputeThreads(int threads) { Eigen::setNbThreads(threads); }

const char* GemmBackendName() { return "eigen"; }

#endif

}  // namespace tfd::tensor
