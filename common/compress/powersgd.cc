#include "common/compress/powersgd.h"

#include <algorithm>
#include <cmath>

#include "common/base/check.h"
#include "common/base/random.h"

namespace tfd::compress {

void Orthogonalize(std::span<float> a, std::size_t rows, std::size_t cols) {
  TFD_CHECK(a.size() == rows * cols);
  for (std::size_t c = 0; c < cols; ++c) {
    for (std::size_t prev = 0; prev < c; ++prev) {
      double dot = 0;
      for (std::size_t i = 0; i < rows; ++i) dot += static_cast<double>(a[i * cols + c]) * a[i * cols + prev];
      for (std::size_t i = 0; i < rows; ++i) a[i * cols + c] -= static_cast<float>(dot * a[i * cols + prev]);
    }
    double norm = 0;
    for (std::size_t i = 0; i < rows; ++i) norm += static_cast<double>(a[i * cols + c]) * a[i * cols + c];
    norm = std::sqrt(norm);
    if (norm == 0) continue;
    for (std::size_t i = 0; i < rows; ++i) a[i * cols + c] = static_cast<float>(a[i * cols + c] / norm);
  }
}

PowerSgd::PowerSgd(std::vector<MatrixRun> matrices, std::vector<TensorRun> whole, std::size_t total, int rank, std::uint64_t seed)
    : matrices_(std::move(matrices)), whole_(std::move(whole)), rank_(static_cast<std::size_t>(rank)), error_(total, 0.0f) {
  for (const MatrixRun& m : matrices_) {
    TFD_CHECK(m.offset + m.rows * m.cols <= total);
    p_size_ += m.rows * rank_;
    q_size_ += m.cols * rank_;
  }
  for (const TensorRun& t : whole_) whole_size_ += t.size;
  // The same draws on every worker: a stream of the job's seed of its own.
  Rng rng(seed, /*stream=*/0x70736764);  // "psgd"
  q_.resize(q_size_);
  for (float& v : q_) v = static_cast<float>(rng.Normal());
}

void PowerSgd::ComputeP(std::span<const float> grad, bool contributes, std::span<float> p, std::span<float> whole) {
  TFD_CHECK(grad.size() == error_.size() && p.size() == p_size_ && whole.size() == whole_size_);
  contributed_ = contributes;
  std::fill(p.begin(), p.end(), 0.0f);
  std::fill(whole.begin(), whole.end(), 0.0f);
  if (!contributes) return;
  std::size_t po = 0, qo = 0;
  for (const MatrixRun& m : matrices_) {
    float* mm = error_.data() + m.offset;  // becomes M = grad + e
    for (std::size_t i = 0; i < m.rows * m.cols; ++i) mm[i] += grad[m.offset + i];
    const float* q = q_.data() + qo;
    for (std::size_t i = 0; i < m.rows; ++i)
      for (std::size_t k = 0; k < rank_; ++k) {
        double s = 0;
        for (std::size_t j = 0; j < m.cols; ++j) s += static_cast<double>(mm[i * m.cols + j]) * q[j * rank_ + k];
        p[po + i * rank_ + k] = static_cast<float>(s);
      }
    po += m.rows * rank_;
    qo += m.cols * rank_;
  }
  std::size_t wo = 0;
  for (const TensorRun& t : whole_) {
    std::copy_n(grad.begin() + static_cast<std::ptrdiff_t>(t.offset), t.size, whole.begin() + static_cast<std::ptrdiff_t>(wo));
    wo += t.size;
  }
}

void PowerSgd::ComputeQ(std::span<float> p_sum, std::span<float> q) {
  TFD_CHECK(p_sum.size() == p_size_ && q.size() == q_size_);
  std::size_t po = 0, qo = 0;
  for (const MatrixRun& m : matrices_) {
    std::span<float> p = p_sum.subspan(po, m.rows * rank_);
    Orthogonalize(p, m.rows, rank_);
    const float* mm = error_.data() + m.offset;  // M (this worker's), or e when it has no batch: then Q is 0
    for (std::size_t j = 0; j < m.cols; ++j)
      for (std::size_t k = 0; k < rank_; ++k) {
        double s = 0;
        if (contributed_)
          for (std::size_t i = 0; i < m.rows; ++i) s += static_cast<double>(mm[i * m.cols + j]) * p[i * rank_ + k];
        q[qo + j * rank_ + k] = static_cast<float>(s);
      }
    po += m.rows * rank_;
    qo += m.cols * rank_;
  }
}

void PowerSgd::Decompress(std::span<const float> p_orth, std::span<const float> q_sum, std::span<const float> whole_sum,
                          float contributors, std::span<float> out) {
  TFD_CHECK(p_orth.size() == p_size_ && q_sum.size() == q_size_ && whole_sum.size() == whole_size_ && out.size() == error_.size());
  std::copy(q_sum.begin(), q_sum.end(), q_.begin());  // the next step's warm start, the same on every worker
  std::size_t po = 0, qo = 0;
  for (const MatrixRun& m : matrices_) {
    const float* p = p_orth.data() + po;
    const float* q = q_sum.data() + qo;
    float* e = error_.data() + m.offset;
    for (std::size_t i = 0; i < m.rows; ++i)
      for (std::size_t j = 0; j < m.cols; ++j) {
        double s = 0;
        for (std::size_t k = 0; k < rank_; ++k) s += static_cast<double>(p[i * rank_ + k]) * q[j * rank_ + k];
        const auto approx = static_cast<float>(s);
        out[m.offset + i * m.cols + j] = approx;
        if (contributed_ && contributors > 0) e[i * m.cols + j] -= approx / contributors;  // e = M - approx / contributors
      }
    po += m.rows * rank_;
    qo += m.cols * rank_;
  }
  std::size_t wo = 0;
  for (const TensorRun& t : whole_) {
    std::copy_n(whole_sum.begin() + static_cast<std::ptrdiff_t>(wo), t.size, out.begin() + static_cast<std::ptrdiff_t>(t.offset));
    wo += t.size;
  }
}

void PowerSgd::Restore(std::span<const float> error, std::span<const float> q) {
  TFD_CHECK(error.size() == error_.size() && q.size() == q_.size());
  std::copy(error.begin(), error.end(), error_.begin());
  std::copy(q.begin(), q.end(), q_.begin());
}

void SplitForPowerSgd(std::span<const TensorRun> runs, std::span<const std::vector<std::int64_t>> shapes, int rank,
                      std::vector<MatrixRun>* matrices, std::vector<TensorRun>* whole) {
  TFD_CHECK(runs.size() == shapes.size());
  const auto r = static_cast<std::size_t>(rank);
  for (std::size_t t = 0; t < runs.size(); ++t) {
    const std::vector<std::int64_t>& shape = shapes[t];
    if (shape.size() >= 2) {
      const auto m = static_cast<std::size_t>(shape.back());
      const std::size_t n = m == 0 ? 0 : runs[t].size / m;
      if (n * m == runs[t].size && (n + m) * r < n * m) {
        matrices->push_back({runs[t].offset, n, m});
        continue;
      }
    }
    whole->push_back(runs[t]);
  }
}

}  // namespace tfd::compress
