#include "common/optim/cuda/optimizer_kernels.h"

#include <algorithm>

namespace tfd::cuda {
namespace {

constexpr int kThreads = 256;

int Blocks(std::int64_t n) {
  return static_cast<int>(std::clamp<std::int64_t>((n + kThreads - 1) / kThreads, 1, 65535 * 8));
}

#define TFD_GRID_LOOP(i, n) \
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < (n); i += std::int64_t{gridDim.x} * blockDim.x)

__global__ void SgdKernel(float* __restrict__ p, const float* __restrict__ g, std::int64_t n, const float* lr) {
  const float lr_f = *lr;
  TFD_GRID_LOOP(i, n) p[i] -= lr_f * g[i];
}

__global__ void MomentumKernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ a, std::int64_t n,
                               float momentum, bool nesterov, const float* lr) {
  const float lr_f = *lr;
  TFD_GRID_LOOP(i, n) {
    const float acc = momentum * a[i] + g[i];
    a[i] = acc;
    p[i] -= nesterov ? lr_f * (g[i] + momentum * acc) : lr_f * acc;
  }
}

__global__ void AdamKernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m, float* __restrict__ v,
                           std::int64_t n, float b1, float b2, float eps, const float* lr_t) {
  const float lr = *lr_t;
  TFD_GRID_LOOP(i, n) {
    const float gi = g[i];
    const float mi = b1 * m[i] + (1 - b1) * gi;
    const float vi = b2 * v[i] + (1 - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * mi / (sqrtf(vi) + eps);
  }
}

__global__ void DecayKernel(float* __restrict__ g, const float* __restrict__ p, std::int64_t n, float decay) {
  TFD_GRID_LOOP(i, n) g[i] += decay * p[i];
}

}  // namespace

void SgdUpdate(float* p, const float* g, std::int64_t n, const float* lr, cudaStream_t stream) {
  SgdKernel<<<Blocks(n), kThreads, 0, stream>>>(p, g, n, lr);
}

void MomentumUpdate(float* p, const float* g, float* a, std::int64_t n, float momentum, bool nesterov, const float* lr,
                    cudaStream_t stream) {
  MomentumKernel<<<Blocks(n), kThreads, 0, stream>>>(p, g, a, n, momentum, nesterov, lr);
}

void AdamUpdate(float* p, const float* g, float* m, float* v, std::int64_t n, float b1, float b2, float eps, const float* lr_t,
                cudaStream_t stream) {
  AdamKernel<<<Blocks(n), kThreads, 0, stream>>>(p, g, m, v, n, b1, b2, eps, lr_t);
}

void AddWeightDecay(float* g, const float* p, std::int64_t n, float decay, cudaStream_t stream) {
  DecayKernel<<<Blocks(n), kThreads, 0, stream>>>(g, p, n, decay);
}

}  // namespace tfd::cuda
