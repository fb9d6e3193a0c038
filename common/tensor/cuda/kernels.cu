#include "common/tensor/cuda/kernels.h"

#include "common/tensor/cuda/cublas_loader.h"

#include <algorithm>

namespace tfd::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ std::int64_t Size(ActShape s) { return std::int64_t{s.h} * s.w * s.c; }

int Blocks(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::min<std::int64_t>(std::max<std::int64_t>(b, 1), 65535 * 8));
}

// The CPU's activations (common/tensor/elementwise.cc), same formulas: ELU as exp(x) - 1 on
// min(x, 0), sigmoid as 1 / (1 + exp(-x)).
__device__ __forceinline__ float Act(float x, Activation act) {
  switch (act) {
    case Activation::kRelu: return fmaxf(x, 0.0f);
    case Activation::kSigmoid: return 1.0f / (1.0f + expf(-x));
    case Activation::kElu: return x > 0.0f ? x : expf(fminf(x, 0.0f)) - 1.0f;
    case Activation::kTanh: return tanhf(x);
    case Activation::kNone: break;
    case Activation::kRelu6:
    case Activation::kGelu: break;  // no kernel yet: config::CheckCudaLayers refuses them before a model gets here
  }
  return x;
}

// act'(x) as a function of y = act(x), as the CPU's GradRow.
__device__ __forceinline__ float ActGrad(float y, float d, Activation act) {
  switch (act) {
    case Activation::kRelu: return y > 0.0f ? d : 0.0f;
    case Activation::kSigmoid: return d * (y * (1.0f - y));
    case Activation::kElu: return y > 0.0f ? d : d * (y + 1.0f);
    case Activation::kTanh: return d * (1.0f - y * y);
    case Activation::kNone: break;
    case Activation::kRelu6:
    case Activation::kGelu: break;  // refused by config::CheckCudaLayers
  }
  return d;
}

__global__ void BiasActivationKernel(float* y, const float* bias, std::int64_t n, int cols, Activation act) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x)
    y[i] = Act(y[i] + bias[i % cols], act);
}

__global__ void ActivationGradKernel(const float* y, float* dy, std::int64_t n, Activation act) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x)
    dy[i] = ActGrad(y[i], dy[i], act);
}

// One thread per row (the models have few classes): the CPU's loop, then one block sums the rows.
__global__ void SoftmaxRowsKernel(const float* logits, const ClassId* labels, int batch, int classes, float* dlogits,
                                  float* row_loss, int* row_hit) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= batch) return;
  const float* z = logits + static_cast<std::int64_t>(i) * classes;
  int best = 0;
  for (int c = 1; c < classes; ++c)
    if (z[c] > z[best]) best = c;
  const float max = z[best];
  float sum = 0;
  for (int c = 0; c < classes; ++c) sum += expf(z[c] - max);
  const int label = labels[i];
  row_loss[i] = logf(sum) - (z[label] - max);
  row_hit[i] = best == label;
  if (dlogits != nullptr) {
    const float inv_batch = 1.0f / static_cast<float>(batch);
    const float scale = inv_batch / sum;
    float* e = dlogits + static_cast<std::int64_t>(i) * classes;
    for (int c = 0; c < classes; ++c) e[c] = expf(z[c] - max) * scale;
    e[label] -= inv_batch;
  }
}

// One block: each thread sums a strided set of rows, then a tree in shared memory. Fixed order.
__global__ void SumRowsKernel(const float* row_loss, const int* row_hit, int batch, LossSums* sums) {
  __shared__ double loss[kThreads];
  __shared__ int hits[kThreads];
  double l = 0;
  int h = 0;
  for (int i = threadIdx.x; i < batch; i += kThreads) {
    l += static_cast<double>(row_loss[i]);
    h += row_hit[i];
  }
  loss[threadIdx.x] = l;
  hits[threadIdx.x] = h;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) {
      loss[threadIdx.x] += loss[threadIdx.x + s];
      hits[threadIdx.x] += hits[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sums->loss_sum = loss[0];
    sums->correct = hits[0];
    sums->pad = 0;
  }
}

// SplitMix64 of the seed, the stream and the index: a counter-based generator, so each element's
// draw needs no state and any thread can make it.
__device__ __forceinline__ std::uint64_t Mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__global__ void DropoutForwardKernel(const float* in, float* out, float* mask, std::int64_t n, float rate, float scale,
                                     const std::uint64_t* seed, std::uint64_t stream_id) {
  const std::uint64_t base = Mix(*seed ^ Mix(stream_id));
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x) {
    const float u = static_cast<float>(Mix(base + static_cast<std::uint64_t>(i)) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    const float m = u < rate ? 0.0f : scale;
    mask[i] = m;
    out[i] = in[i] * m;
  }
}

__global__ void MultiplyKernel(const float* a, const float* b, float* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x)
    out[i] = a[i] * b[i];
}

// cols[((n * oh + oy) * ow + ox) * patch + (ky * k + kx) * c + ch] = in[n][oy + ky][ox + kx][ch].
__global__ void Im2ColKernel(const float* in, float* cols, std::int64_t total, ActShape s, int k, int oh, int ow) {
  const int patch = k * k * s.c;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < total; i += std::int64_t{gridDim.x} * blockDim.x) {
    const int p = static_cast<int>(i % patch);
    const std::int64_t row = i / patch;
    const int ox = static_cast<int>(row % ow), oy = static_cast<int>(row / ow % oh);
    const std::int64_t n = row / (std::int64_t{ow} * oh);
    const int ch = p % s.c, kx = p / s.c % k, ky = p / (s.c * k);
    cols[i] = in[((n * s.h + oy + ky) * s.w + ox + kx) * s.c + ch];
  }
}

// din[n][y][x][ch] = the sum over the patches covering (y, x), in (ky, kx) order.
__global__ void Col2ImKernel(const float* cols, float* din, std::int64_t total, ActShape s, int k, int oh, int ow) {
  const int patch = k * k * s.c;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < total; i += std::int64_t{gridDim.x} * blockDim.x) {
    const int ch = static_cast<int>(i % s.c);
    const int x = static_cast<int>(i / s.c % s.w), y = static_cast<int>(i / (std::int64_t{s.c} * s.w) % s.h);
    const std::int64_t n = i / Size(s);
    float sum = 0;
    for (int ky = 0; ky < k; ++ky) {
      const int oy = y - ky;
      if (oy < 0 || oy >= oh) continue;
      for (int kx = 0; kx < k; ++kx) {
        const int ox = x - kx;
        if (ox < 0 || ox >= ow) continue;
        sum += cols[((n * oh + oy) * ow + ox) * patch + (ky * k + kx) * s.c + ch];
      }
    }
    din[i] = sum;
  }
}

__global__ void MaxPoolForwardKernel(const float* in, float* out, std::int64_t total, ActShape s, int p, int oh, int ow) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < total; i += std::int64_t{gridDim.x} * blockDim.x) {
    const int ch = static_cast<int>(i % s.c);
    const int px = static_cast<int>(i / s.c % ow), py = static_cast<int>(i / (std::int64_t{s.c} * ow) % oh);
    const std::int64_t n = i / (std::int64_t{s.c} * ow * oh);
    const float* img = in + n * Size(s);
    float m = img[(std::int64_t{py} * p * s.w + px * p) * s.c + ch];
    for (int dy = 0; dy < p; ++dy)
      for (int dx = 0; dx < p; ++dx) {
        const float v = img[(std::int64_t{py * p + dy} * s.w + px * p + dx) * s.c + ch];
        m = v > m ? v : m;
      }
    out[i] = m;
  }
}

// One thread per input: it takes its window's gradient when it is the window's first input equal
// to the max.
__global__ void MaxPoolBackwardKernel(const float* in, const float* out, const float* dout, float* din, std::int64_t total, ActShape s,
                                      int p, int oh, int ow) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < total; i += std::int64_t{gridDim.x} * blockDim.x) {
    const int ch = static_cast<int>(i % s.c);
    const int x = static_cast<int>(i / s.c % s.w), y = static_cast<int>(i / (std::int64_t{s.c} * s.w) % s.h);
    const std::int64_t n = i / Size(s);
    const int py = y / p, px = x / p;
    float g = 0.0f;
    if (py < oh && px < ow) {
      const std::int64_t o = ((n * oh + py) * ow + px) * s.c + ch;
      const float m = out[o];
      const float* img = in + n * Size(s);
      bool first = false, found = false;
      for (int dy = 0; dy < p && !found; ++dy)
        for (int dx = 0; dx < p && !found; ++dx) {
          if (img[(std::int64_t{py * p + dy} * s.w + px * p + dx) * s.c + ch] == m) {
            found = true;
            first = py * p + dy == y && px * p + dx == x;
          }
        }
      g = 0.0f + (first ? 1.0f : 0.0f) * dout[o];  // as the CPU's 0 + hit * g: +0, never -0, where it misses
    }
    din[i] = g;
  }
}

__global__ void FillKernel(float* p, std::int64_t n, float value) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x)
    p[i] = value;
}

}  // namespace

cublasStatus_t Gemm(cublasHandle_t handle, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                    const float* b, int ldb, float beta, float* c, int ldc) {
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: B and A swap places.
  return Cublas().sgemm(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a,
                     lda, &beta, c, ldc);
}

void BiasActivation(float* y, const float* bias, std::int64_t rows, int cols, Activation act, cudaStream_t stream) {
  const std::int64_t n = rows * cols;
  BiasActivationKernel<<<Blocks(n), kThreads, 0, stream>>>(y, bias, n, cols, act);
}

void ActivationGrad(const float* y, float* dy, std::int64_t n, Activation act, cudaStream_t stream) {
  if (act == Activation::kNone) return;
  ActivationGradKernel<<<Blocks(n), kThreads, 0, stream>>>(y, dy, n, act);
}

cublasStatus_t BiasGradient(cublasHandle_t handle, const float* dy, int rows, int cols, const float* ones, float* dbias) {
  // dy row-major [rows, cols] is column-major [cols, rows]: dbias = that matrix times ones.
  const float one = 1.0f, zero = 0.0f;
  return Cublas().sgemv(handle, CUBLAS_OP_N, cols, rows, &one, dy, cols, ones, 1, &zero, dbias, 1);
}

void SoftmaxCrossEntropy(const float* logits, const ClassId* labels, int batch, int classes, float* dlogits, float* row_loss,
                         int* row_hit, LossSums* sums, cudaStream_t stream) {
  SoftmaxRowsKernel<<<(batch + 127) / 128, 128, 0, stream>>>(logits, labels, batch, classes, dlogits, row_loss, row_hit);
  SumRowsKernel<<<1, kThreads, 0, stream>>>(row_loss, row_hit, batch, sums);
}

void DropoutForward(const float* in, float* out, float* mask, std::int64_t n, float rate, const std::uint64_t* seed,
                    std::uint64_t stream_id, cudaStream_t stream) {
  DropoutForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(in, out, mask, n, rate, 1.0f / (1.0f - rate), seed, stream_id);
}

void DropoutBackward(const float* dout, const float* mask, float* din, std::int64_t n, cudaStream_t stream) {
  MultiplyKernel<<<Blocks(n), kThreads, 0, stream>>>(dout, mask, din, n);
}

void Im2Col(const float* in, float* cols, int batch, ActShape s, int k, cudaStream_t stream) {
  const int oh = s.h - k + 1, ow = s.w - k + 1;
  const std::int64_t total = std::int64_t{batch} * oh * ow * k * k * s.c;
  Im2ColKernel<<<Blocks(total), kThreads, 0, stream>>>(in, cols, total, s, k, oh, ow);
}

void Col2Im(const float* cols, float* din, int batch, ActShape s, int k, cudaStream_t stream) {
  const std::int64_t total = std::int64_t{batch} * s.size();
  Col2ImKernel<<<Blocks(total), kThreads, 0, stream>>>(cols, din, total, s, k, s.h - k + 1, s.w - k + 1);
}

void MaxPoolForward(const float* in, float* out, int batch, ActShape s, int pool, cudaStream_t stream) {
  const int oh = s.h / pool, ow = s.w / pool;
  const std::int64_t total = std::int64_t{batch} * oh * ow * s.c;
  MaxPoolForwardKernel<<<Blocks(total), kThreads, 0, stream>>>(in, out, total, s, pool, oh, ow);
}

void MaxPoolBackward(const float* in, const float* out, const float* dout, float* din, int batch, ActShape s, int pool,
                     cudaStream_t stream) {
  const std::int64_t total = std::int64_t{batch} * s.size();
  MaxPoolBackwardKernel<<<Blocks(total), kThreads, 0, stream>>>(in, out, dout, din, total, s, pool, s.h / pool, s.w / pool);
}

void Fill(float* p, std::int64_t n, float value, cudaStream_t stream) {
  FillKernel<<<Blocks(n), kThreads, 0, stream>>>(p, n, value);
}

}  // namespace tfd::cuda
