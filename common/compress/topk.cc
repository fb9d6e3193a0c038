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

TopK::TopK(std::vector<TensorRun> runs, std::size_t total, double ratio)
    : runs_(std::move(runs)), residual_(total, 0.0f), ratio_(ratio) {
  for (const TensorRun& r : runs_) {
    TFD_CHECK(r.offset + r.size <= total);
    kept_ += TopKCount(r.size, ratio);
  }
}

void TopK::Compress(std::span<const float> grad, std::span<std::uint32_t> indices, std::span<float> values) {
  TFD_CHECK(grad.size() == residual_.size() && indices.size() == kept_ && values.size() == kept_);
  for (std::size_t i = 0; i < grad.size(); ++i) residual_[i] += grad[i];
  std::size_t out = 0;
  for (const TensorRun& r : runs_) {
    const std::span<float> t = std::span<float>(residual_).subspan(r.offset, r.size);
    for (std::uint32_t j : SelectTopK(t, TopKCount(r.size, ratio_))) {
      indices[out] = static_cast<std::uint32_t>(r.offset) + j;
      values[out] = t[j];
      t[j] = 0.0f;
      ++out;
    }
  }
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
