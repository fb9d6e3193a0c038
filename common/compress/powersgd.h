#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/compress/topk.h"

namespace tfd::compress {

// A tensor of the flat gradient seen as a row-major matrix: floats [offset, offset + rows * cols),
// element (i, j) at offset + i * cols + j (a dense kernel [in, out] is in x out; a convolution's
// [kh, kw, cin, cout] is kh * kw * cin x cout).
struct MatrixRun {
  std::size_t offset = 0, rows = 0, cols = 0;
};

// Orthonormalises the columns of the row-major rows x cols matrix `a` in place by Gram-Schmidt, in
// column order (dot products and norms in double). A column that becomes 0 stays 0.
void Orthogonalize(std::span<float> a, std::size_t rows, std::size_t cols);

// PowerSGD (Vogels et al., NeurIPS 2019) as PyTorch DDP's powerSGD_hook, one power iteration per
// step with error feedback and Q warm-started. Per matrix M (n x m) and rank r, on every worker:
//   M += e;  P = M Q;  [all-reduce P];  orthogonalise P;  Q = M^T P;  [all-reduce Q];
//   approx = P Q^T (the sum over workers of P P^T M_w);  e = M - approx / contributors.
// The caller does the two all-reduces (ring sums, the same bits on every worker), so every worker
// holds the same Q after each step; Q starts from N(0, 1) draws of a fixed seed, the same on every
// worker. Tensors that are not worth compressing (1-D, or (n + m) r >= n m) travel whole: the caller
// all-reduces them beside P. Not thread-safe; one per worker.
class PowerSgd {
 public:
  PowerSgd(std::vector<MatrixRun> matrices, std::vector<TensorRun> whole, std::size_t total, int rank, std::uint64_t seed);
  std::size_t p_size() const { return p_size_; }          // floats of every matrix's P together
  std::size_t q_size() const { return q_size_; }          // ... of every Q
  std::size_t whole_size() const { return whole_size_; }  // floats of the tensors that travel whole
  const std::vector<MatrixRun>& matrices() const { return matrices_; }

  // Step 1: M = grad + e for every matrix (kept here), P = M Q into `p` (p_size()); the whole
  // tensors' gradients into `whole` (whole_size()). contributes false (a worker without a batch):
  // P and the whole tensors are 0, and the error stays for the next step this worker contributes.
  void ComputeP(std::span<const float> grad, bool contributes, std::span<float> p, std::span<float> whole);
  // Step 2, on the summed P: orthogonalises each matrix's P in place and writes Q = M^T P to `q`.
  void ComputeQ(std::span<float> p_sum, std::span<float> q);
  // Step 3, on the summed Q (kept as the next step's warm start) and the summed whole tensors:
  // writes the sum's approximation P Q^T of every matrix and the whole tensors' sums into `out`
  // (total floats), and the error e = M - approx / contributors.
  void Decompress(std::span<const float> p_orth, std::span<const float> q_sum, std::span<const float> whole_sum, float contributors,
                  std::span<float> out);

  // The error feedback and Q, for a checkpoint or a test; Restore takes them back.
  std::span<const float> error() const { return error_; }
  std::span<const float> q() const { return q_; }
  void Restore(std::span<const float> error, std::span<const float> q);

 private:
  std::vector<MatrixRun> matrices_;
  std::vector<TensorRun> whole_;
  std::size_t rank_;
  std::size_t p_size_ = 0, q_size_ = 0, whole_size_ = 0;
  std::vector<float> error_;  // total floats: e of each matrix at its offset; M while a step runs
  std::vector<float> q_;      // q_size_: every matrix's Q (m x r, row-major), in order
  bool contributed_ = false;  // the step in progress has this worker's M
};

// Splits a gradient's tensors (flat runs with their shapes) into PowerSGD's matrices and the
// tensors that travel whole: a tensor of 2 or more dimensions is prod(shape[:-1]) x shape[-1],
// compressed when (n + m) r < n m.
void SplitForPowerSgd(std::span<const TensorRun> runs, std::span<const std::vector<std::int64_t>> shapes, int rank,
                      std::vector<MatrixRun>* matrices, std::vector<TensorRun>* whole);

}  // namespace tfd::compress
