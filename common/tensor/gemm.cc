#include "common/tensor/gemm.h"

#include <Eigen/Core>
#include <fmt/format.h>
#include <fmt/ranges.h>

#if TFD_HAVE_OPENBLAS
#include <cblas.h>
#endif
#if TFD_HAVE_ONEDNN
#include <dnnl.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

namespace tfd::tensor {
namespace {

constexpr GemmBackend kAll[] = {GemmBackend::kOneDnn, GemmBackend::kOpenBlas, GemmBackend::kEigen};  // fastest first

#if TFD_HAVE_ONEDNN
constexpr bool kHaveOneDnn = true;
#else
constexpr bool kHaveOneDnn = false;
#endif
#if TFD_HAVE_OPENBLAS
constexpr bool kHaveOpenBlas = true;
#else
constexpr bool kHaveOpenBlas = false;
#endif

constexpr bool Built(GemmBackend b) {
  switch (b) {
    case GemmBackend::kOneDnn: return kHaveOneDnn;
    case GemmBackend::kOpenBlas: return kHaveOpenBlas;
    case GemmBackend::kEigen: return true;
  }
  return false;
}

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;
using ConstStrided = Eigen::Map<const RowMatrix, Eigen::Unaligned, Stride>;
using Strided = Eigen::Map<RowMatrix, Eigen::Unaligned, Stride>;

void EigenGemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
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

// Gives `threads` to a built `backend` where the count it reads now differs: OpenMP's count of the
// calling thread (oneDNN, and Eigen, whose own count is never set here so that it follows
// OpenMP's), or OpenBLAS's one count for the process. Reading the runtime's count rather than a
// copy of what was last applied keeps each config's count right when another config's Gemm, on
// this thread or (OpenBLAS) another, changed it in between.
void ApplyThreads(GemmBackend backend, int threads) {
  const int want = threads < 1 ? 1 : threads;
  if (CurrentGemmThreads(backend) == want) return;
  switch (backend) {
    case GemmBackend::kOneDnn:
    case GemmBackend::kEigen:
#ifdef _OPENMP
      omp_set_num_threads(want);
#endif
      break;
    case GemmBackend::kOpenBlas:
#if TFD_HAVE_OPENBLAS
      openblas_set_num_threads(want);
#endif
      break;
  }
}

}  // namespace

int CurrentGemmThreads(GemmBackend backend) {
  switch (Built(backend) ? backend : GemmBackend::kEigen) {
    case GemmBackend::kOneDnn:
#ifdef _OPENMP
      return omp_get_max_threads();
#else
      return 1;  // not reached: a build with oneDNN has OpenMP
#endif
    case GemmBackend::kOpenBlas:
#if TFD_HAVE_OPENBLAS
      return openblas_get_num_threads();
#else
      return 1;
#endif
    case GemmBackend::kEigen: return Eigen::nbThreads();  // OpenMP's count, or 1 without OpenMP
  }
  return 1;
}

GemmBackend DefaultGemmBackend() {
  for (GemmBackend b : kAll)
    if (Built(b)) return b;
  return GemmBackend::kEigen;
}

void Gemm(const GemmConfig& config, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  const GemmBackend backend = Built(config.backend) ? config.backend : GemmBackend::kEigen;
  ApplyThreads(backend, config.threads);
  switch (backend) {
    case GemmBackend::kOneDnn:
#if TFD_HAVE_ONEDNN
      // Row-major, as BLAS's sgemm with the transposes spelled as characters. Status is only
      // ever an argument error, which the callers' shapes rule out.
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
#else
      break;
#endif
    case GemmBackend::kOpenBlas:
#if TFD_HAVE_OPENBLAS
      cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k,
                  alpha, a, lda, b, ldb, beta, c, ldc);
      return;
#else
      break;
#endif
    case GemmBackend::kEigen: break;
  }
  EigenGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void ApplyGemmThreads(const GemmConfig& config) {
  ApplyThreads(Built(config.backend) ? config.backend : GemmBackend::kEigen, config.threads);
}

std::vector<std::string_view> GemmBackends() {
  std::vector<std::string_view> v;
  for (GemmBackend b : kAll)
    if (Built(b)) v.push_back(GemmBackendName(b));
  return v;
}

Status SetGemmBackend(std::string_view name, GemmConfig* config) {
  for (GemmBackend b : kAll) {
    if (Built(b) && name == GemmBackendName(b)) {
      config->backend = b;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument(fmt::format("GEMM backend \"{}\": this build has {}", name,
                                             fmt::join(GemmBackends(), ", ")));
}

const char* GemmBackendName(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::kOneDnn: return "onednn";
    case GemmBackend::kOpenBlas: return "openblas";
    case GemmBackend::kEigen: return "eigen";
  }
  return "?";
}

}  // namespace tfd::tensor
