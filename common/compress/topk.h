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

// Top-k with error feedback, per tensor (Stich et al. 2018; Lin et al.'s Deep Gradient
// Compression): each step adds the residual (what earlier steps dropped) to the gradient, keeps
// each tensor's TopKCount largest magnitudes and carries the rest to the next step. Not
// thread-safe; one per worker.
class TopK {
 public:
  TopK(std::vector<TensorRun> runs, std::size_t total, double ratio);
  std::size_t kept() const { return kept_; }  // values kept per step, every tensor together

  // `grad` (the whole flat gradient, `total` floats) plus the residual: the kept values go to
  // indices/values (kept() each; indices into the flat gradient, increasing with the runs in
  // order), and the residual becomes the rest (0 where kept). Floats outside every run stay in the
  // residual (a model's runs cover its whole gradient).
  void Compress(std::span<const float> grad, std::span<std::uint32_t> indices, std::span<float> values);

  // The residual, for a checkpoint or a test; Restore takes one back (`total` floats).
  std::span<const float> residual() const { return residual_; }
  void Restore(std::span<const float> residual);

 private:
  std::vector<TensorRun> runs_;
  std::vector<float> residual_;
  double ratio_ = 0;
  std::size_t kept_ = 0;
};

// Adds sparse (index, value) pairs into `dense`: dense[indices[i]] += values[i], in order. The
// caller has bounded every index by dense.size().
void AddSparse(std::span<const std::uint32_t> indices, std::span<const float> values, std::span<float> dense);

}  // namespace tfd::compress
