#include "common/compress/topk.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/base/check.h"

namespace tfd::compress {

std::size_t TopKCount(std::size_t size, double ratio) {
  if (size == 0) return 0;
  const auto k = static_cast<std::size_t>(std::ceil(ratio * static_cast<double>(size)));
  return std::clamp<std::size_t>(k, 1, size);
}

std::vector<std::uint32_t> SelectTopK(std::span<const float> v, std::size_t k) {
  TFD_CHECK(k <= v.size());
  std::vector<std::uint32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0u);
  // Larger magnitude first, then lower index: a strict total order, so the k chosen are unique.
  auto before = [&v](std::uint32_t a, std::uint32_t b) {
    const float x = std::fabs(v[a]), y = std::fabs(v[b]);
    return x > y || (x == y && a < b);
  };
  if (k < idx.size()) std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), before);
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

TopK::TopK(std::vector<TensorRun> runs, std::size_t total, double ratio, std::int64_t warmup_steps)
    : runs_(std::move(runs)), residual_(total, 0.0f), ratio_(ratio), warmup_steps_(std::max<std::int64_t>(warmup_steps, 0)) {
  for (const TensorRun& r : runs_) {
    TFD_CHECK(r.offset + r.size <= total);
    kept_ += TopKCount(r.size, ratio);
  }
  // 1/4, 1/16, ...: each power of 1/4 above the ratio is a stage (exact in binary).
  if (warmup_steps_ > 0)
    for (double share = 0.25; share > ratio && stages_ < 16; share /= 4) ++stages_;
}

std::size_t TopK::CountAt(std::size_t size, std::int64_t step) const {
  if (stages_ == 0 || step < 0 || step >= warmup_steps_) return TopKCount(size, ratio_);
  const auto stage = static_cast<int>(step * stages_ / warmup_steps_);  // 0 .. stages_ - 1
  const std::size_t quarter_powers = std::size_t{1} << (2 * (stage + 1));  // 4^(stage + 1)
  return std::clamp<std::size_t>((size + quarter_powers - 1) / quarter_powers, size == 0 ? 0 : 1, size);
}

std::size_t TopK::KeptAt(std::int64_t step) const {
  std::size_t k = 0;
  for (const TensorRun& r : runs_) k += CountAt(r.size, step);
  return k;
}

std::size_t TopK::Compress(std::span<const float> grad, std::int64_t step, std::span<std::uint32_t> indices, std::span<float> values) {
  const std::size_t k = KeptAt(step);
  TFD_CHECK(grad.size() == residual_.size() && indices.size() >= k && values.size() >= k);
  for (std::size_t i = 0; i < grad.size(); ++i) residual_[i] += grad[i];
  std::size_t out = 0;
  for (const TensorRun& r : runs_) {
    const std::span<float> t = std::span<float>(residual_).subspan(r.offset, r.size);
    for (std::uint32_t j : SelectTopK(t, CountAt(r.size, step))) {
      indices[out] = static_cast<std::uint32_t>(r.offset) + j;
      values[out] = t[j];
      t[j] = 0.0f;
      ++out;
    }
  }
  return out;
}

void TopK::Restore(std::span<const float> residual) {
  TFD_CHECK(residual.size() == residual_.size());
  std::copy(residual.begin(), residual.end(), residual_.begin());
}

void AddSparse(std::span<const std::uint32_t> indices, std::span<const float> values, std::span<float> dense) {
  TFD_CHECK(indices.size() == values.size());
  for (std::size_t i = 0; i < indices.size(); ++i) dense[indices[i]] += values[i];
}

}  // namespace tfd::compress
