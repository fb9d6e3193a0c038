#include "common/compress/topk.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "common/base/check.h"

namespace tfd::compress {

std::size_t TopKCount(std::size_t size, double ratio) {
  if (size == 0) return 0;
  const auto k = static_cast<std::size_t>(std::ceil(ratio * static_cast<double>(size)));
  return std::clamp<std::size_t>(k, 1, size);
}

namespace {

// A float's magnitude as an integer of the same order: IEEE-754 without its sign bit (NaNs above
// infinity), so -0 and +0 tie, as fabs makes them.
std::uint32_t MagnitudeKey(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits & 0x7fffffffu;
}

}  // namespace

void SelectTopK(std::span<const float> v, std::size_t k, std::vector<std::uint32_t>* scratch, std::vector<std::uint32_t>* out) {
  TFD_CHECK(k <= v.size());
  out->clear();
  if (k == 0) return;
  // The k-th largest magnitude by radix select on the keys, 11, 10 and 10 bits from the top (bit 31
  // is 0): a histogram of the candidates' next bits, the bucket that holds the k-th from the top,
  // and that bucket's keys the next level's candidates (in `scratch`; the first level reads v).
  struct Level {
    int shift;
    std::uint32_t mask;
  };
  constexpr Level kLevels[] = {{20, 0x7ff}, {10, 0x3ff}, {0, 0x3ff}};
  std::array<std::uint32_t, 2048> hist;
  std::uint32_t threshold = 0;  // the k-th largest key's bits found so far
  std::size_t need = k;         // of the candidates, how many from the top are still to count
  bool from_v = true;
  for (const Level& level : kLevels) {
    std::fill(hist.begin(), hist.begin() + level.mask + 1, 0u);
    if (from_v) {
      for (float x : v) ++hist[(MagnitudeKey(x) >> level.shift) & level.mask];
    } else {
      for (std::uint32_t key : *scratch) ++hist[(key >> level.shift) & level.mask];
    }
    std::uint32_t b = level.mask;
    for (std::size_t acc = 0;; --b) {  // stops: the candidates are at least `need`
      if (acc + hist[b] >= need) {
        need -= acc;
        break;
      }
      acc += hist[b];
    }
    threshold |= b << level.shift;
    if (level.shift == 0) break;
    const std::uint32_t high = threshold >> level.shift;  // the bits every next candidate has
    if (from_v) {
      scratch->clear();
      for (float x : v)
        if (const std::uint32_t key = MagnitudeKey(x); (key >> level.shift) == high) scratch->push_back(key);
    } else {
      std::erase_if(*scratch, [&](std::uint32_t key) { return (key >> level.shift) != high; });
    }
    from_v = false;
  }
  // In index order: every value above the threshold, and the `need` lowest-index ones equal to it:
  // larger magnitude first, then lower index, a strict total order, so the k chosen are unique.
  out->reserve(k);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint32_t key = MagnitudeKey(v[i]);
    if (key > threshold) {
      out->push_back(static_cast<std::uint32_t>(i));
    } else if (key == threshold && need > 0) {
      out->push_back(static_cast<std::uint32_t>(i));
      --need;
    }
  }
}

std::vector<std::uint32_t> SelectTopK(std::span<const float> v, std::size_t k) {
  std::vector<std::uint32_t> scratch, out;
  SelectTopK(v, k, &scratch, &out);
  return out;
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
    SelectTopK(t, CountAt(r.size, step), &keys_, &chosen_);
    for (std::uint32_t j : chosen_) {
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
