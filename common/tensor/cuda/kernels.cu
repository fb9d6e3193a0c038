#include "common/tensor/cuda/kernels.h"

#include "common/tensor/cuda/cublas_loader.h"

#include <algorithm>

namespace tfd::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ std::int64_t Size(ActShape s) { return std::int64_t{s.h} * s.w * s.c; }

// Index arithmetic in 32 bits where every index a kernel forms stays below kNarrow (a 64-bit
// division or remainder costs many times a 32-bit one on a GPU); 64 bits past it.
constexpr std::int64_t kNarrow = std::int64_t{1} << 30;
#define TFD_INDEX_LOOP(I, i, n)                                                                               \
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < (n); \
       i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x))

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
    case Activation::kRelu6: return fminf(fmaxf(x, 0.0f), 6.0f);
    case Activation::kNone:
    case Activation::kGelu: break;  // Gelu, from the pre-activation
  }
  return x;
}

// gelu(x) = x Phi(x), Keras' exact form, as the CPU's GeluRow; and gelu'(x) = Phi(x) + x phi(x).
__device__ __forceinline__ float Gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float GeluGrad(float x) {
  return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * (0.39894228040143268f * expf(-0.5f * x * x));
}

// act'(x) as a function of y = act(x), as the CPU's GradRow.
__device__ __forceinline__ float ActGrad(float y, float d, Activation act) {
  switch (act) {
    case Activation::kRelu: return y > 0.0f ? d : 0.0f;
    case Activation::kSigmoid: return d * (y * (1.0f - y));
    case Activation::kElu: return y > 0.0f ? d : d * (y + 1.0f);
    case Activation::kTanh: return d * (1.0f - y * y);
    case Activation::kRelu6: return y > 0.0f && y < 6.0f ? d : 0.0f;
    case Activation::kNone:
    case Activation::kGelu: break;  // GeluGrad, from the pre-activation
  }
  return d;
}

template <typename I>
__global__ void BiasActivationKernel(float* y, const float* bias, I n, int cols, Activation act, float* pre) {
  TFD_INDEX_LOOP(I, i, n) {
    const float x = y[i] + (bias != nullptr ? bias[i % cols] : 0.0f);
    if (act == Activation::kGelu) {
      pre[i] = x;
      y[i] = Gelu(x);
    } else {
      y[i] = Act(x, act);
    }
  }
}

__global__ void ActivationGradKernel(const float* y, float* dy, std::int64_t n, Activation act, const float* pre) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x)
    dy[i] = act == Activation::kGelu ? dy[i] * GeluGrad(pre[i]) : ActGrad(y[i], dy[i], act);
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
    sums->abs_sum = 0;
    sums->squared_sum = 0;
  }
}

// One thread per row, the CPU's loop over the row's targets (doutputs: its expressions, so its
// bits: a product of two products, nothing to contract).
__global__ void RegressionRowsKernel(const float* outputs, const float* targets, int batch, int width, bool mae, float inv_n,
                                     float* doutputs, double* row_err) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= batch) return;
  double loss = 0, abs_sum = 0, squared_sum = 0;
  for (std::int64_t j = std::int64_t{i} * width, end = j + width; j < end; ++j) {
    const float diff = outputs[j] - targets[j];
    const double sq = static_cast<double>(diff) * diff, abs = fabs(static_cast<double>(diff));
    abs_sum += abs;
    squared_sum += sq;
    loss += mae ? abs : sq;
    if (doutputs != nullptr) doutputs[j] = mae ? static_cast<float>((diff > 0) - (diff < 0)) * inv_n : 2.0f * diff * inv_n;
  }
  row_err[i] = loss;
  row_err[batch + i] = abs_sum;
  row_err[2 * batch + i] = squared_sum;
}

// SumRowsKernel's order for the three sums of RegressionRowsKernel.
__global__ void SumRegressionRowsKernel(const double* row_err, int batch, LossSums* sums) {
  __shared__ double part[3][kThreads];
  double s[3] = {0, 0, 0};
  for (int i = threadIdx.x; i < batch; i += kThreads)
    for (int k = 0; k < 3; ++k) s[k] += row_err[k * batch + i];
  for (int k = 0; k < 3; ++k) part[k][threadIdx.x] = s[k];
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w)
      for (int k = 0; k < 3; ++k) part[k][threadIdx.x] += part[k][threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sums->loss_sum = part[0][0];
    sums->correct = 0;
    sums->pad = 0;
    sums->abs_sum = part[1][0];
    sums->squared_sum = part[2][0];
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

// cols[((n * oh + oy) * ow + ox) * patch + (ky * k + kx) * c + ch] = in[n][iy][ix][ch] with
// iy = oy * stride - pad_y + ky (likewise ix), 0 where that falls in the padding. A block writes
// kIm2ColRows patches (rows of cols) at a time: each row's image and window corner decoded once
// into shared memory, each patch element's (ky, kx, ch) once per thread, so the inner loop over
// the rows divides nothing; neighbouring threads write neighbouring floats of a row.
constexpr int kIm2ColRows = 32, kIm2ColThreads = 128;
__global__ void Im2ColKernel(const float* in, float* cols, std::int64_t rows, WindowGeometry g) {
  __shared__ std::int64_t image[kIm2ColRows];
  __shared__ int y0[kIm2ColRows], x0[kIm2ColRows];
  const ActShape s = g.in;
  const int patch = g.k * g.k * s.c;
  for (std::int64_t first = std::int64_t{blockIdx.x} * kIm2ColRows; first < rows; first += std::int64_t{gridDim.x} * kIm2ColRows) {
    __syncthreads();  // the last chunk's rows are read
    if (threadIdx.x < kIm2ColRows && first + threadIdx.x < rows) {
      const std::int64_t row = first + threadIdx.x;
      const int ox = static_cast<int>(row % g.ow), oy = static_cast<int>(row / g.ow % g.oh);
      image[threadIdx.x] = row / (std::int64_t{g.ow} * g.oh) * Size(s);
      y0[threadIdx.x] = oy * g.stride - g.pad_y;
      x0[threadIdx.x] = ox * g.stride - g.pad_x;
    }
    __syncthreads();
    const int count = static_cast<int>(min(std::int64_t{kIm2ColRows}, rows - first));
    for (int p = static_cast<int>(threadIdx.x); p < patch; p += static_cast<int>(blockDim.x)) {
      const int ch = p % s.c, kx = p / s.c % g.k, ky = p / (s.c * g.k);
      float* out = cols + first * patch + p;
      for (int r = 0; r < count; ++r) {
        const int iy = y0[r] + ky, ix = x0[r] + kx;
        out[std::int64_t{r} * patch] = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w ? in[image[r] + (iy * s.w + ix) * s.c + ch] : 0.0f;
      }
    }
  }
}

// The windows along one axis that cover input cell `at`: [*first, *last] (empty when first > last).
__device__ __forceinline__ void Covering(int at, int pad, int k, int stride, int out, int* first, int* last) {
  const int hi = at + pad;  // window w covers `at` when w * stride <= hi < w * stride + k
  *first = hi - k + 1 <= 0 ? 0 : (hi - k + 1 + stride - 1) / stride;
  *last = min(hi / stride, out - 1);
}

// din[n][y][x][ch] = the sum over the patches covering (y, x), in (oy, ox) order (no atomics).
// (One thread per input value in 32-bit arithmetic measured faster here than Im2Col's scheme of
// pixels decoded into shared memory: 130 µs against 184 µs for the residual convnet's eight.)
template <typename I>
__global__ void Col2ImKernel(const float* cols, float* din, I total, WindowGeometry g) {
  const ActShape s = g.in;
  const int k = g.k, patch = k * k * s.c;
  TFD_INDEX_LOOP(I, i, total) {
    const int ch = static_cast<int>(i % s.c);
    const int x = static_cast<int>(i / s.c % s.w), y = static_cast<int>(i / (static_cast<I>(s.c) * s.w) % s.h);
    const I n = i / static_cast<I>(Size(s));
    int oy0, oy1, ox0, ox1;
    Covering(y, g.pad_y, k, g.stride, g.oh, &oy0, &oy1);
    Covering(x, g.pad_x, k, g.stride, g.ow, &ox0, &ox1);
    float sum = 0;
    for (int oy = oy0; oy <= oy1; ++oy) {
      const int ky = y + g.pad_y - oy * g.stride;
      for (int ox = ox0; ox <= ox1; ++ox) {
        const int kx = x + g.pad_x - ox * g.stride;
        sum += cols[((n * g.oh + oy) * g.ow + ox) * patch + (ky * k + kx) * s.c + ch];
      }
    }
    din[i] = sum;
  }
}

// Window (py, px)'s cells inside the input, [y0, y1) x [x0, x1), as the CPU's CellsOf: padding
// cells take no part.
struct Cells {
  int y0, y1, x0, x1;
};
__device__ __forceinline__ Cells CellsOf(const WindowGeometry& g, int py, int px) {
  const int y = py * g.stride - g.pad_y, x = px * g.stride - g.pad_x;
  return {max(y, 0), min(y + g.k, g.in.h), max(x, 0), min(x + g.k, g.in.w)};
}

// Max: the first cell, then each next one where it is greater (the CPU's strict ">" scan). Average:
// the sum in row-major order times 1 / cells, rounded as the CPU rounds (no fused multiply-add).
template <bool kMax, typename I>
__global__ void PoolForwardKernel(const float* in, float* out, I total, WindowGeometry g) {
  const ActShape s = g.in;
  TFD_INDEX_LOOP(I, i, total) {
    const int ch = static_cast<int>(i % s.c);
    const int px = static_cast<int>(i / s.c % g.ow), py = static_cast<int>(i / (static_cast<I>(s.c) * g.ow) % g.oh);
    const float* img = in + static_cast<std::int64_t>(i / (static_cast<I>(s.c) * g.ow * g.oh)) * Size(s);
    const Cells w = CellsOf(g, py, px);
    float m = img[(std::int64_t{w.y0} * s.w + w.x0) * s.c + ch];
    bool first = true;
    for (int y = w.y0; y < w.y1; ++y)
      for (int x = w.x0; x < w.x1; ++x) {
        if (first) {
          first = false;
          continue;
        }
        const float v = img[(std::int64_t{y} * s.w + x) * s.c + ch];
        if constexpr (kMax) m = v > m ? v : m;
        else m = __fadd_rn(m, v);
      }
    if constexpr (!kMax) m = __fmul_rn(m, 1.0f / static_cast<float>((w.y1 - w.y0) * (w.x1 - w.x0)));
    out[i] = m;
  }
}

// One thread per input cell, over the windows that cover it in row-major order, as the CPU adds
// them: max gives a window's gradient to its first cell equal to the window's max, average gives
// every cell its share (gradient / cells). +0 where nothing reaches the cell.
template <bool kMax, typename I>
__global__ void PoolBackwardKernel(const float* in, const float* out, const float* dout, float* din, I total, WindowGeometry g) {
  const ActShape s = g.in;
  TFD_INDEX_LOOP(I, i, total) {
    const int ch = static_cast<int>(i % s.c);
    const int x = static_cast<int>(i / s.c % s.w), y = static_cast<int>(i / (static_cast<I>(s.c) * s.w) % s.h);
    const std::int64_t n = i / static_cast<I>(Size(s));
    const float* img = in + n * Size(s);
    int py0, py1, px0, px1;
    Covering(y, g.pad_y, g.k, g.stride, g.oh, &py0, &py1);
    Covering(x, g.pad_x, g.k, g.stride, g.ow, &px0, &px1);
    float d = 0.0f;
    for (int py = py0; py <= py1; ++py)
      for (int px = px0; px <= px1; ++px) {
        const std::int64_t o = ((n * g.oh + py) * g.ow + px) * s.c + ch;
        const Cells w = CellsOf(g, py, px);
        if constexpr (kMax) {
          const float m = out[o];
          bool found = false, mine = false;
          for (int wy = w.y0; wy < w.y1 && !found; ++wy)
            for (int wx = w.x0; wx < w.x1 && !found; ++wx)
              if (img[(std::int64_t{wy} * s.w + wx) * s.c + ch] == m) {
                found = true;
                mine = wy == y && wx == x;
              }
          if (mine) d = __fadd_rn(d, dout[o]);
        } else {
          const float scale = 1.0f / static_cast<float>((w.y1 - w.y0) * (w.x1 - w.x0));
          d = __fadd_rn(d, __fmul_rn(scale, dout[o]));
        }
      }
    din[i] = d;
  }
}

// One thread per (image, channel): the sum over the cells in row-major order, times 1 / cells.
__global__ void GlobalAvgPoolForwardKernel(const float* in, float* out, std::int64_t total, ActShape s) {
  const int cells = s.h * s.w;
  const float inv = 1.0f / static_cast<float>(cells);
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < total; i += std::int64_t{gridDim.x} * blockDim.x) {
    const int ch = static_cast<int>(i % s.c);
    const float* img = in + i / s.c * Size(s);
    float sum = img[ch];
    for (int p = 1; p < cells; ++p) sum = __fadd_rn(sum, img[std::int64_t{p} * s.c + ch]);
    out[i] = __fmul_rn(sum, inv);
  }
}

__global__ void GlobalAvgPoolBackwardKernel(const float* dout, float* din, std::int64_t total, ActShape s) {
  const float inv = 1.0f / static_cast<float>(s.h * s.w);
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < total; i += std::int64_t{gridDim.x} * blockDim.x)
    din[i] = __fmul_rn(dout[i / Size(s) * s.c + i % s.c], inv);
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

void BiasActivation(float* y, const float* bias, std::int64_t rows, int cols, Activation act, float* pre, cudaStream_t stream) {
  const std::int64_t n = rows * cols;
  if (n < kNarrow) BiasActivationKernel<<<Blocks(n), kThreads, 0, stream>>>(y, bias, static_cast<int>(n), cols, act, pre);
  else BiasActivationKernel<<<Blocks(n), kThreads, 0, stream>>>(y, bias, n, cols, act, pre);
}

void ActivationGrad(const float* y, float* dy, std::int64_t n, Activation act, const float* pre, cudaStream_t stream) {
  if (act == Activation::kNone) return;
  ActivationGradKernel<<<Blocks(n), kThreads, 0, stream>>>(y, dy, n, act, pre);
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

void RegressionLoss(const float* outputs, const float* targets, int batch, int width, tensor::LossKind kind, float* doutputs,
                    double* row_err, LossSums* sums, cudaStream_t stream) {
  const float inv_n = 1.0f / static_cast<float>(std::int64_t{batch} * width);  // the CPU's float
  RegressionRowsKernel<<<(batch + 127) / 128, 128, 0, stream>>>(outputs, targets, batch, width, kind == tensor::LossKind::kMae, inv_n,
                                                                 doutputs, row_err);
  SumRegressionRowsKernel<<<1, kThreads, 0, stream>>>(row_err, batch, sums);
}

void DropoutForward(const float* in, float* out, float* mask, std::int64_t n, float rate, const std::uint64_t* seed,
                    std::uint64_t stream_id, cudaStream_t stream) {
  DropoutForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(in, out, mask, n, rate, 1.0f / (1.0f - rate), seed, stream_id);
}

void DropoutBackward(const float* dout, const float* mask, float* din, std::int64_t n, cudaStream_t stream) {
  MultiplyKernel<<<Blocks(n), kThreads, 0, stream>>>(dout, mask, din, n);
}

WindowGeometry Geometry(ActShape in, int k, int stride, tensor::Padding padding) {
  const tensor::WindowAxis y = tensor::Window(in.h, k, stride, padding), x = tensor::Window(in.w, k, stride, padding);
  return {in, k, stride, y.pad_before, x.pad_before, y.out, x.out};
}

void Im2Col(const float* in, float* cols, int batch, const WindowGeometry& g, cudaStream_t stream) {
  const std::int64_t rows = std::int64_t{batch} * g.oh * g.ow;
  const auto blocks = static_cast<int>(std::min<std::int64_t>((rows + kIm2ColRows - 1) / kIm2ColRows, 65535 * 8));
  Im2ColKernel<<<blocks, kIm2ColThreads, 0, stream>>>(in, cols, rows, g);
}

void Col2Im(const float* cols, float* din, int batch, const WindowGeometry& g, cudaStream_t stream) {
  const std::int64_t total = std::int64_t{batch} * g.in.size();
  const std::int64_t col_total = std::int64_t{batch} * g.oh * g.ow * g.k * g.k * g.in.c;
  if (col_total < kNarrow && total < kNarrow) Col2ImKernel<<<Blocks(total), kThreads, 0, stream>>>(cols, din, static_cast<int>(total), g);
  else Col2ImKernel<<<Blocks(total), kThreads, 0, stream>>>(cols, din, total, g);
}

void PoolForward(bool max, const float* in, float* out, int batch, const WindowGeometry& g, cudaStream_t stream) {
  const std::int64_t total = std::int64_t{batch} * g.oh * g.ow * g.in.c;
  const bool narrow = batch * g.in.size() < kNarrow;
  const auto t32 = static_cast<int>(total);
  if (max && narrow) PoolForwardKernel<true><<<Blocks(total), kThreads, 0, stream>>>(in, out, t32, g);
  else if (max) PoolForwardKernel<true><<<Blocks(total), kThreads, 0, stream>>>(in, out, total, g);
  else if (narrow) PoolForwardKernel<false><<<Blocks(total), kThreads, 0, stream>>>(in, out, t32, g);
  else PoolForwardKernel<false><<<Blocks(total), kThreads, 0, stream>>>(in, out, total, g);
}

void PoolBackward(bool max, const float* in, const float* out, const float* dout, float* din, int batch, const WindowGeometry& g,
                  cudaStream_t stream) {
  const std::int64_t total = std::int64_t{batch} * g.in.size();
  const bool narrow = total < kNarrow;
  const auto t32 = static_cast<int>(total);
  if (max && narrow) PoolBackwardKernel<true><<<Blocks(total), kThreads, 0, stream>>>(in, out, dout, din, t32, g);
  else if (max) PoolBackwardKernel<true><<<Blocks(total), kThreads, 0, stream>>>(in, out, dout, din, total, g);
  else if (narrow) PoolBackwardKernel<false><<<Blocks(total), kThreads, 0, stream>>>(in, out, dout, din, t32, g);
  else PoolBackwardKernel<false><<<Blocks(total), kThreads, 0, stream>>>(in, out, dout, din, total, g);
}

void GlobalAvgPoolForward(const float* in, float* out, int batch, ActShape s, cudaStream_t stream) {
  const std::int64_t total = std::int64_t{batch} * s.c;
  GlobalAvgPoolForwardKernel<<<Blocks(total), kThreads, 0, stream>>>(in, out, total, s);
}

void GlobalAvgPoolBackward(const float* dout, float* din, int batch, ActShape s, cudaStream_t stream) {
  const std::int64_t total = std::int64_t{batch} * s.size();
  GlobalAvgPoolBackwardKernel<<<Blocks(total), kThreads, 0, stream>>>(dout, din, total, s);
}

void Fill(float* p, std::int64_t n, float value, cudaStream_t stream) {
  FillKernel<<<Blocks(n), kThreads, 0, stream>>>(p, n, value);
}

}  // namespace tfd::cuda
