#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tfd::compress {

// A tensor inside a flat gradient: floats [offset, offset + size).
struct TensorRun {
  std::size_t offset = 0, size = 0;
};

// The values top-k keeps of a tensor of `size` values: ceil(ratio * size), at least 1 (0 for an
// empty tensor), at most size.
std::size_t TopKCount(std::size_t size, double ratio);

// The indices of the k values of largest |v[i]| in increasing index order (k <= v.size()); among
// equal magnitudes the lower index wins, so the choice is a function of the values alone.
std::vector<std::uint32_t> SelectTopK(std::span<const float> v, std::size_t k);
// The same into `out`, with `scratch` for the candidates (both reused between calls): the k-th
// largest magnitude by radix select over the magnitudes' bit patterns, then one pass in index order.
void SelectTopK(std::span<const float> v, std::size_t k, std::vector<std::uint32_t>* scratch, std::vector<std::uint32_t>* out);

// Top-k with error feedback, per tensor (Stich et al. 2018; Lin et al.'s Deep Gradient
// Compression): each step adds the residual (what earlier steps dropped) to the gradient, keeps
// each tensor's TopKCount largest magnitudes and carries the rest to the next step.
//
// Warm-up (Deep Gradient Compression's): over the first `warmup_steps` steps the share kept falls
// from 1/4 to the ratio in stages, 1/4, 1/16, 1/64, ... (each power of 1/4 above the ratio, for an
// equal part of the warm-up), so the large early gradients are not held back in the residual for
// many steps. The stages are powers of two and the counts integer arithmetic: every worker, on any
// CPU, keeps the same count at the same step. Not thread-safe; one per worker.
class TopK {
 public:
  TopK(std::vector<TensorRun> runs, std::size_t total, double ratio, std::int64_t warmup_steps = 0);
  std::size_t kept() const { return kept_; }  // values kept per step after the warm-up, every tensor together
  std::size_t KeptAt(std::int64_t step) const;  // ... at `step` (from 0)
  std::size_t max_kept() const { return KeptAt(0); }
  int warmup_stages() const { return stages_; }  // the powers of 1/4 above the ratio (0: no warm-up)

  // `grad` (the whole flat gradient, `total` floats) plus the residual: the values kept at `step`
  // go to indices/values (KeptAt(step) of each, at least that many; indices into the flat gradient,
  // increasing with the runs in order), and the residual becomes the rest (0 where kept). Floats
  // outside every run stay in the residual (a model's runs cover its whole gradient). Returns the
  // count kept.
  std::size_t Compress(std::span<const float> grad, std::int64_t step, std::span<std::uint32_t> indices, std::span<float> values);

  // The residual, for a checkpoint or a test; Restore takes one back (`total` floats).
  std::span<const float> residual() const { return residual_; }
  void Restore(std::span<const float> residual);

 private:
  // Each tensor's count at `step`: the ratio's, or in warm-up stage s, ceil(size / 4^(s+1)).
  std::size_t CountAt(std::size_t size, std::int64_t step) const;

  std::vector<TensorRun> runs_;
  std::vector<float> residual_;
  std::vector<std::uint32_t> keys_, chosen_;  // SelectTopK's scratch and result, reused
  double ratio_ = 0;
  std::size_t kept_ = 0;
  std::int64_t warmup_steps_ = 0;
  int stages_ = 0;
};

// Adds sparse (index, value) pairs into `dense`: dense[indices[i]] += values[i], in order. The
// caller has bounded every index by dense.size().
void AddSparse(std::span<const std::uint32_t> indices, std::span<const float> values, std::span<float> dense);

}  // namespace tfd::compress
