#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

// The optimizers' updates over flat device buffers, one kernel each, with the formulas of
// common/optim/optimizer.cc (their CPU twins). The rate is read on the device when the kernel runs
// (`lr` points at device memory), so a captured graph replays with each step's rate. This file is
// compiled without FMA contraction and with IEEE division and square root, so the results are the
// CPU's bit for bit (test/unit/common/tensor/cuda_kernels_test.cc checks it).
namespace tfd::cuda {

// p -= lr * g
void SgdUpdate(float* p, const float* g, std::int64_t n, const float* lr, cudaStream_t stream);
// a = momentum * a + g; p -= lr * a   (nesterov: p -= lr * (g + momentum * a))
void MomentumUpdate(float* p, const float* g, float* a, std::int64_t n, float momentum, bool nesterov, const float* lr,
                    cudaStream_t stream);
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr_t * m / (sqrt(v) + eps), where *lr_t is
// lr * sqrt(1 - b2^t) / (1 - b1^t) computed on the host as the CPU does.
void AdamUpdate(float* p, const float* g, float* m, float* v, std::int64_t n, float b1, float b2, float eps, const float* lr_t,
                cudaStream_t stream);
// g += decay * p (OptimizerState's weight decay on one decayed range).
void AddWeightDecay(float* g, const float* p, std::int64_t n, float decay, cudaStream_t stream);

}  // namespace tfd::cuda
