// Batch and layer normalisation, the residual join, depthwise convolution and the categorical
// layers on the device (declared in kernels.h), each the twin of its CPU layer in common/tensor.
#include "common/tensor/cuda/kernels.h"

#include <algorithm>
#include <cmath>

namespace tfd::cuda {
namespace {

constexpr int kThreads = 256;
// A column reduction's block: 32 columns (one warp reads 32 neighbouring floats of a row) by 8 rows.
constexpr int kReduceX = 32, kReduceY = 8;
// Rows per stripe (8 a thread) before another stripe is worth a block; at most kMaxSplits stripes,
// which one warp per column then sums. Many short stripes: the loads of a long one wait in line.
constexpr std::int64_t kRowsPerSplit = 64, kMaxSplits = 1024;
// Index arithmetic in 32 bits where every index stays below kNarrow (kernels.cu's rule).
constexpr std::int64_t kNarrow = std::int64_t{1} << 30;

int Blocks(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::min<std::int64_t>(std::max<std::int64_t>(b, 1), 65535 * 8));
}

#define TFD_GRID_STRIDE(i, n) \
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < (n); i += std::int64_t{gridDim.x} * blockDim.x)
#define TFD_INDEX_LOOP(I, i, n)                                                                               \
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < (n); \
       i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x))

__device__ __forceinline__ double2 operator+(double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); }

// partial[(slice * splits + stripe) * cols + c] = the sum of f(r, c, slice) over the stripe's rows
// (r = stripe * 8 + y, stepping 8 x splits; each thread's rows in order, then the 8 in order).
template <typename F>
__global__ void ColumnReduceKernel(F f, std::int64_t rows, int cols, int splits, double2* partial) {
  __shared__ double2 sums[kReduceY][kReduceX];
  const int c = static_cast<int>(blockIdx.x) * kReduceX + static_cast<int>(threadIdx.x);
  const int stripe = static_cast<int>(blockIdx.y), slice = static_cast<int>(blockIdx.z);
  double2 acc = make_double2(0, 0);
  if (c < cols)
    for (std::int64_t r = std::int64_t{stripe} * kReduceY + threadIdx.y; r < rows; r += std::int64_t{kReduceY} * splits)
      acc = acc + f(r, c, slice);
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  for (int y = 1; y < kReduceY; ++y) acc = acc + sums[y][threadIdx.x];
  partial[(std::int64_t{slice} * splits + stripe) * cols + c] = acc;
}

template <typename F>
void ColumnReduce(F f, std::int64_t rows, int cols, int slices, double2* partial, cudaStream_t stream) {
  const auto splits = static_cast<int>(ReduceSplits(rows));
  const dim3 grid((cols + kReduceX - 1) / kReduceX, splits, slices), block(kReduceX, kReduceY);
  ColumnReduceKernel<<<grid, block, 0, stream>>>(f, rows, cols, splits, partial);
}

// Column c of slice `slice`, summed by a whole warp: each lane the stripes lane, lane + 32, ... in
// order, then a butterfly (every lane ends with the same bits, the same order every call).
__device__ __forceinline__ double2 Total(const double2* partial, int splits, int cols, int slice, int c) {
  double2 t = make_double2(0, 0);
  for (int s = static_cast<int>(threadIdx.x % 32); s < splits; s += 32) t = t + partial[(std::int64_t{slice} * splits + s) * cols + c];
  for (int off = 16; off > 0; off /= 2) {
    t.x += __shfl_xor_sync(0xffffffffu, t.x, off);
    t.y += __shfl_xor_sync(0xffffffffu, t.y, off);
  }
  return t;
}

// The finishing kernels run one warp per column (kWarpThreads threads a block): its index, and
// whether this lane writes.
constexpr int kWarpThreads = 128;
__device__ __forceinline__ int WarpItem() { return static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32); }
__device__ __forceinline__ bool Lane0() { return threadIdx.x % 32 == 0; }
int WarpBlocks(int items) { return (items + kWarpThreads / 32 - 1) / (kWarpThreads / 32); }

// ---- batch norm ----

struct Column {  // x
  const float* x;
  int c;
  __device__ double2 operator()(std::int64_t r, int col, int) const { return make_double2(x[r * c + col], 0); }
};
struct SquaredDeviation {  // (x - mean)², the difference in float as the CPU takes it
  const float* x;
  const float* mean;
  int c;
  __device__ double2 operator()(std::int64_t r, int col, int) const {
    const double d = x[r * c + col] - mean[col];
    return make_double2(d * d, 0);
  }
};
struct GradientSums {  // (g, g * xhat)
  const float* x;
  const float* g;
  const float* mean;
  const float* inv;
  int c;
  __device__ double2 operator()(std::int64_t r, int col, int) const {
    const float gv = g[r * c + col];
    return make_double2(gv, static_cast<double>(gv) * static_cast<double>(__fmul_rn(x[r * c + col] - mean[col], inv[col])));
  }
};

// stats: [0, c) mean, [c, 2c) 1/std, [2c, 3c) scale, [3c, 4c) shift, [4c, 6c) backward's means.
__device__ __forceinline__ float InvStd(float var, double epsilon) {
  return static_cast<float>(1.0 / sqrt(static_cast<double>(var) + epsilon));
}

__device__ __forceinline__ void ScaleShift(const BatchNormArgs& a, int ch) {
  float* st = a.stats;
  const float gamma = a.gamma == nullptr ? 1.0f : a.gamma[ch], beta = a.beta == nullptr ? 0.0f : a.beta[ch];
  st[2 * a.c + ch] = __fmul_rn(gamma, st[a.c + ch]);
  st[3 * a.c + ch] = __fsub_rn(beta, __fmul_rn(st[ch], st[2 * a.c + ch]));
}

__global__ void BatchMeanKernel(BatchNormArgs a, int splits, float count) {
  const int ch = WarpItem();
  if (ch >= a.c) return;
  const double2 t = Total(a.partial, splits, a.c, 0, ch);
  if (Lane0()) a.stats[ch] = __fdiv_rn(static_cast<float>(t.x), count);
}

// The batch's variance of channel ch known: its 1/std, the moving statistics moved, the scale and shift.
__device__ __forceinline__ void FinishStatistics(const BatchNormArgs& a, int ch, float var) {
  a.stats[a.c + ch] = InvStd(var, a.epsilon);
  const auto keep = static_cast<float>(1.0 - a.momentum);
  a.moving_mean[ch] = __fsub_rn(a.moving_mean[ch], __fmul_rn(__fsub_rn(a.moving_mean[ch], a.stats[ch]), keep));
  a.moving_var[ch] = __fsub_rn(a.moving_var[ch], __fmul_rn(__fsub_rn(a.moving_var[ch], var), keep));
  ScaleShift(a, ch);
}

__global__ void BatchVarianceKernel(BatchNormArgs a, int splits, float count) {
  const int ch = WarpItem();
  if (ch >= a.c) return;
  const double2 t = Total(a.partial, splits, a.c, 0, ch);
  if (!Lane0()) return;
  FinishStatistics(a, ch, __fdiv_rn(static_cast<float>(t.x), count));
}

// ---- a synchronised batch norm's steps: a.sync is [0, 2c) the floats the replicas sum, [2c + 1]
// the summed row count. Each sum is this replica's column totals rounded to float, as the CPU's
// layer hands its sums to CrossReplicaSum.

// sync[0, c) = the totals of the last column reduction; sync[c] = rows when rows >= 0.
__global__ void SyncTotalsKernel(BatchNormArgs a, int splits, float rows) {
  const int ch = WarpItem();
  if (ch >= a.c) return;
  const double2 t = Total(a.partial, splits, a.c, 0, ch);
  if (!Lane0()) return;
  a.sync[ch] = static_cast<float>(t.x);
  if (ch == 0 && rows >= 0) a.sync[a.c] = rows;
}

__global__ void SyncMeanKernel(BatchNormArgs a) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= a.c) return;
  if (ch == 0) a.sync[2 * a.c + 1] = a.sync[a.c];
  a.stats[ch] = __fdiv_rn(a.sync[ch], a.sync[a.c]);
}

__global__ void SyncVarianceKernel(BatchNormArgs a) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= a.c) return;
  FinishStatistics(a, ch, __fdiv_rn(a.sync[ch], a.sync[2 * a.c + 1]));
}

// Channel ch's Σdy and Σdy·x̂ over this replica's rows, as floats, after the gradient column
// reduction; dgamma and dbeta written. Lane 0 only: false on the other lanes, which write nothing.
__device__ __forceinline__ bool GammaBetaGradients(const BatchNormArgs& a, int splits, int ch, float* sum_g, float* sum_gx) {
  const double2 t = Total(a.partial, splits, a.c, 0, ch);
  if (!Lane0()) return false;
  *sum_g = static_cast<float>(t.x), *sum_gx = static_cast<float>(t.y);
  if (a.dgamma != nullptr) a.dgamma[ch] = *sum_gx;
  if (a.dbeta != nullptr) a.dbeta[ch] = *sum_g;
  return true;
}

__global__ void SyncGradientTotalsKernel(BatchNormArgs a, int splits) {
  const int ch = WarpItem();
  if (ch >= a.c) return;
  float g = 0, gx = 0;
  if (GammaBetaGradients(a, splits, ch, &g, &gx)) a.sync[ch] = g, a.sync[a.c + ch] = gx;
}

__global__ void SyncGradientMeansKernel(BatchNormArgs a) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= a.c) return;
  const float inv_n = __fdiv_rn(1.0f, a.sync[2 * a.c + 1]);
  a.stats[4 * a.c + ch] = __fmul_rn(a.sync[ch], inv_n);
  a.stats[5 * a.c + ch] = __fmul_rn(a.sync[a.c + ch], inv_n);
}

__global__ void MovingStatisticsKernel(BatchNormArgs a) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= a.c) return;
  a.stats[ch] = a.moving_mean[ch];
  a.stats[a.c + ch] = InvStd(a.moving_var[ch], a.epsilon);
  ScaleShift(a, ch);
}

template <typename I>
__global__ void ScaleShiftKernel(const float* in, float* out, I n, int c, const float* scale, const float* shift) {
  TFD_INDEX_LOOP(I, i, n) {
    const int ch = static_cast<int>(i % c);
    out[i] = __fadd_rn(__fmul_rn(in[i], scale[ch]), shift[ch]);
  }
}

__global__ void BatchGradientKernel(BatchNormArgs a, int splits, float inv_n) {
  const int ch = WarpItem();
  if (ch >= a.c) return;
  float g = 0, gx = 0;
  if (!GammaBetaGradients(a, splits, ch, &g, &gx)) return;
  a.stats[4 * a.c + ch] = __fmul_rn(g, inv_n);
  a.stats[5 * a.c + ch] = __fmul_rn(gx, inv_n);
}

// din = scale (g - mean g - xhat mean(g xhat)), as the CPU's Backward rounds it.
template <typename I>
__global__ void BatchInputGradientKernel(const float* in, const float* dout, float* din, I n, const float* stats, int c) {
  TFD_INDEX_LOOP(I, i, n) {
    const int ch = static_cast<int>(i % c);
    const float xhat = __fmul_rn(__fsub_rn(in[i], stats[ch]), stats[c + ch]);
    din[i] = __fmul_rn(stats[2 * c + ch], __fsub_rn(__fsub_rn(dout[i], stats[4 * c + ch]), __fmul_rn(xhat, stats[5 * c + ch])));
  }
}

// ---- layer norm: one warp per row ----

__device__ __forceinline__ double WarpSum(double v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

struct RowMoments {
  float mean, inv;
};
// The row's mean and 1/std in double (each lane's strided sum, then the warp's butterfly: the same
// order every call).
__device__ __forceinline__ RowMoments Moments(const float* x, int c, double epsilon, int lane) {
  double sum = 0;
  for (int k = lane; k < c; k += 32) sum += x[k];
  const double mean = WarpSum(sum) / c;
  double sq = 0;
  for (int k = lane; k < c; k += 32) sq += (x[k] - mean) * (x[k] - mean);
  return {static_cast<float>(mean), static_cast<float>(1.0 / sqrt(WarpSum(sq) / c + epsilon))};
}

__global__ void LayerNormForwardKernel(const float* in, float* out, std::int64_t rows, LayerNormArgs a) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t warps = std::int64_t{gridDim.x} * (blockDim.x / 32);
  for (std::int64_t r = (blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x) / 32; r < rows; r += warps) {
    const float* x = in + r * a.c;
    const RowMoments m = Moments(x, a.c, a.epsilon, lane);
    for (int k = lane; k < a.c; k += 32) {
      const float gamma = a.gamma == nullptr ? 1.0f : a.gamma[k], beta = a.beta == nullptr ? 0.0f : a.beta[k];
      out[r * a.c + k] = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(x[k], m.mean), m.inv), gamma), beta);
    }
  }
}

// Per row, with g' = g gamma: din = (g' - mean g' - xhat mean(g' xhat)) / std; each row's moments
// kept in row_stats for the gamma and beta gradients.
__global__ void LayerNormBackwardKernel(const float* in, const float* dout, float* din, std::int64_t rows, LayerNormArgs a) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t warps = std::int64_t{gridDim.x} * (blockDim.x / 32);
  for (std::int64_t r = (blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x) / 32; r < rows; r += warps) {
    const float* x = in + r * a.c;
    const float* g = dout + r * a.c;
    const RowMoments m = Moments(x, a.c, a.epsilon, lane);
    if (lane == 0) a.row_stats[2 * r] = m.mean, a.row_stats[2 * r + 1] = m.inv;
    if (din == nullptr) continue;
    double mg = 0, mgx = 0;
    for (int k = lane; k < a.c; k += 32) {
      const float gg = __fmul_rn(g[k], a.gamma == nullptr ? 1.0f : a.gamma[k]);
      mg += gg;
      mgx += static_cast<double>(gg) * __fmul_rn(__fsub_rn(x[k], m.mean), m.inv);
    }
    const auto ma = static_cast<float>(WarpSum(mg) / a.c), mb = static_cast<float>(WarpSum(mgx) / a.c);
    for (int k = lane; k < a.c; k += 32) {
      const float gg = __fmul_rn(g[k], a.gamma == nullptr ? 1.0f : a.gamma[k]);
      const float xhat = __fmul_rn(__fsub_rn(x[k], m.mean), m.inv);
      din[r * a.c + k] = __fmul_rn(m.inv, __fsub_rn(__fsub_rn(gg, ma), __fmul_rn(xhat, mb)));
    }
  }
}

struct RowGradientSums {  // (g, g * xhat) with each row's own moments
  const float* x;
  const float* g;
  const float* row_stats;
  int c;
  __device__ double2 operator()(std::int64_t r, int col, int) const {
    const float gv = g[r * c + col];
    const float xhat = __fmul_rn(__fsub_rn(x[r * c + col], row_stats[2 * r]), row_stats[2 * r + 1]);
    return make_double2(gv, static_cast<double>(gv) * xhat);
  }
};

__global__ void GammaBetaKernel(const double2* partial, int splits, int c, float* dgamma, float* dbeta) {
  const int ch = WarpItem();
  if (ch >= c) return;
  const double2 t = Total(partial, splits, c, 0, ch);
  if (!Lane0()) return;
  if (dgamma != nullptr) dgamma[ch] = static_cast<float>(t.y);
  if (dbeta != nullptr) dbeta[ch] = static_cast<float>(t.x);
}

// ---- the residual join ----

__device__ __forceinline__ float Gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

__global__ void AddActivationKernel(const float* a, const float* b, float* out, std::int64_t n, Activation act, float* pre) {
  TFD_GRID_STRIDE(i, n) {
    const float x = __fadd_rn(a[i], b[i]);
    float y = x;
    switch (act) {
      case Activation::kRelu: y = fmaxf(x, 0.0f); break;
      case Activation::kSigmoid: y = 1.0f / (1.0f + expf(-x)); break;
      case Activation::kElu: y = x > 0.0f ? x : expf(fminf(x, 0.0f)) - 1.0f; break;
      case Activation::kTanh: y = tanhf(x); break;
      case Activation::kRelu6: y = fminf(fmaxf(x, 0.0f), 6.0f); break;
      case Activation::kGelu:
        pre[i] = x;
        y = Gelu(x);
        break;
      case Activation::kNone: break;
    }
    out[i] = y;
  }
}

__global__ void AccumulateKernel(float* y, const float* x, std::int64_t n) { TFD_GRID_STRIDE(i, n) y[i] = __fadd_rn(y[i], x[i]); }

// ---- depthwise convolution ----

// One thread per output value: the taps inside the input in (ky, kx) order, from zero, as the CPU
// adds them.
__global__ void DepthwiseForwardKernel(const float* in, const float* kernel, float* out, std::int64_t total, WindowGeometry g, int m) {
  const ActShape s = g.in;
  const int cm = s.c * m;
  TFD_GRID_STRIDE(i, total) {
    const int o = static_cast<int>(i % cm);
    const int ox = static_cast<int>(i / cm % g.ow), oy = static_cast<int>(i / (std::int64_t{cm} * g.ow) % g.oh);
    const std::int64_t n = i / (std::int64_t{cm} * g.ow * g.oh);
    float sum = 0.0f;
    for (int ky = 0; ky < g.k; ++ky) {
      const int iy = oy * g.stride - g.pad_y + ky;
      if (iy < 0 || iy >= s.h) continue;
      for (int kx = 0; kx < g.k; ++kx) {
        const int ix = ox * g.stride - g.pad_x + kx;
        if (ix < 0 || ix >= s.w) continue;
        sum = __fadd_rn(sum, __fmul_rn(in[((n * s.h + iy) * s.w + ix) * s.c + o / m], kernel[(ky * g.k + kx) * cm + o]));
      }
    }
    out[i] = sum;
  }
}

struct DepthwiseKernelGradient {  // row: an output pixel; column: an output channel; slice: a tap
  const float* x;
  const float* g;
  WindowGeometry geo;
  int m;
  __device__ double2 operator()(std::int64_t r, int col, int tap) const {
    const ActShape s = geo.in;
    const int ox = static_cast<int>(r % geo.ow), oy = static_cast<int>(r / geo.ow % geo.oh);
    const std::int64_t n = r / (std::int64_t{geo.ow} * geo.oh);
    const int iy = oy * geo.stride - geo.pad_y + tap / geo.k, ix = ox * geo.stride - geo.pad_x + tap % geo.k;
    if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) return make_double2(0, 0);
    const float v = __fmul_rn(x[((n * s.h + iy) * s.w + ix) * s.c + col / m], g[r * s.c * m + col]);
    return make_double2(v, 0);
  }
};

__global__ void DepthwiseKernelGradientKernel(const double2* partial, int splits, int cm, int taps, float* dkernel) {
  const int i = WarpItem();
  if (i >= cm * taps) return;
  const double2 t = Total(partial, splits, cm, i / cm, i % cm);
  if (Lane0()) dkernel[i] = static_cast<float>(t.x);
}

// One thread per input cell: the windows that cover it, each tap's m products.
__global__ void DepthwiseInputGradientKernel(const float* dout, const float* kernel, float* din, std::int64_t total, WindowGeometry g,
                                             int m) {
  const ActShape s = g.in;
  const int cm = s.c * m;
  TFD_GRID_STRIDE(i, total) {
    const int ch = static_cast<int>(i % s.c);
    const int x = static_cast<int>(i / s.c % s.w), y = static_cast<int>(i / (std::int64_t{s.c} * s.w) % s.h);
    const std::int64_t n = i / (std::int64_t{s.h} * s.w * s.c);
    float sum = 0.0f;
    for (int ky = 0; ky < g.k; ++ky) {
      const int ty = y + g.pad_y - ky;  // oy * stride
      if (ty < 0 || ty % g.stride != 0 || ty / g.stride >= g.oh) continue;
      for (int kx = 0; kx < g.k; ++kx) {
        const int tx = x + g.pad_x - kx;
        if (tx < 0 || tx % g.stride != 0 || tx / g.stride >= g.ow) continue;
        const float* gr = dout + ((n * g.oh + ty / g.stride) * g.ow + tx / g.stride) * cm + ch * m;
        const float* w = kernel + (ky * g.k + kx) * cm + ch * m;
        for (int j = 0; j < m; ++j) sum = __fadd_rn(sum, __fmul_rn(w[j], gr[j]));
      }
    }
    din[i] = sum;
  }
}

// ---- embedding and one_hot ----

// A feature's id, as the CPU's Categorical::Id: anything but an id in [0, ids) is 0.
__device__ __forceinline__ std::int64_t Id(float v, int ids) {
  return v >= 0.0f && v < static_cast<float>(ids) && v == floorf(v) ? static_cast<std::int64_t>(v) : 0;
}

__global__ void CategoricalForwardKernel(const float* in, const float* params, const CategoricalOutput* map, float* out, int batch,
                                         int in_size, int width) {
  TFD_GRID_STRIDE(i, std::int64_t{batch} * width) {
    const CategoricalOutput e = map[i % width];
    const float v = in[i / width * in_size + e.feature];
    switch (e.kind) {
      case 0: out[i] = v; break;
      case 1: out[i] = params[e.base + Id(v, e.ids) * e.dim]; break;
      default: out[i] = Id(v, e.ids) == e.k ? 1.0f : 0.0f; break;
    }
  }
}

// One thread per embedding output feature (its table column is its alone): the rows in order.
__global__ void CategoricalBackwardKernel(const float* in, const float* dout, const CategoricalOutput* map, float* grads, int batch,
                                          int in_size, int width) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= width) return;
  const CategoricalOutput e = map[o];
  if (e.kind != 1) return;
  for (int n = 0; n < batch; ++n) {
    float* d = grads + e.base + Id(in[std::int64_t{n} * in_size + e.feature], e.ids) * e.dim;
    *d = __fadd_rn(*d, dout[std::int64_t{n} * width + o]);
  }
}

int ChannelBlocks(int c) { return (c + 127) / 128; }

void ScaleShiftRows(const float* in, float* out, std::int64_t rows, const BatchNormArgs& a, cudaStream_t stream) {
  const std::int64_t n = rows * a.c;
  if (n < kNarrow) ScaleShiftKernel<<<Blocks(n), kThreads, 0, stream>>>(in, out, static_cast<int>(n), a.c, a.stats + 2 * a.c, a.stats + 3 * a.c);
  else ScaleShiftKernel<<<Blocks(n), kThreads, 0, stream>>>(in, out, n, a.c, a.stats + 2 * a.c, a.stats + 3 * a.c);
}

void InputGradientRows(const float* in, const float* dout, float* din, std::int64_t rows, const BatchNormArgs& a, cudaStream_t stream) {
  const std::int64_t n = rows * a.c;
  if (n < kNarrow) BatchInputGradientKernel<<<Blocks(n), kThreads, 0, stream>>>(in, dout, din, static_cast<int>(n), a.stats, a.c);
  else BatchInputGradientKernel<<<Blocks(n), kThreads, 0, stream>>>(in, dout, din, n, a.stats, a.c);
}

}  // namespace

std::int64_t ReduceSplits(std::int64_t rows) {
  return std::clamp<std::int64_t>((rows + kRowsPerSplit - 1) / kRowsPerSplit, 1, kMaxSplits);
}

std::int64_t ReducePartials(std::int64_t rows, int cols, int slices) { return ReduceSplits(rows) * cols * slices; }

void BatchNormForward(const float* in, float* out, std::int64_t rows, bool training, const BatchNormArgs& a, cudaStream_t stream) {
  if (training) {
    const auto splits = static_cast<int>(ReduceSplits(rows));
    const auto count = static_cast<float>(rows);
    ColumnReduce(Column{in, a.c}, rows, a.c, 1, a.partial, stream);
    BatchMeanKernel<<<WarpBlocks(a.c), kWarpThreads, 0, stream>>>(a, splits, count);
    ColumnReduce(SquaredDeviation{in, a.stats, a.c}, rows, a.c, 1, a.partial, stream);
    BatchVarianceKernel<<<WarpBlocks(a.c), kWarpThreads, 0, stream>>>(a, splits, count);
  } else {
    MovingStatisticsKernel<<<ChannelBlocks(a.c), 128, 0, stream>>>(a);
  }
  ScaleShiftRows(in, out, rows, a, stream);
}

void BatchNormBackward(const float* in, const float* dout, float* din, std::int64_t rows, const BatchNormArgs& a, cudaStream_t stream) {
  ColumnReduce(GradientSums{in, dout, a.stats, a.stats + a.c, a.c}, rows, a.c, 1, a.partial, stream);
  BatchGradientKernel<<<WarpBlocks(a.c), kWarpThreads, 0, stream>>>(a, static_cast<int>(ReduceSplits(rows)), 1.0f / static_cast<float>(rows));
  if (din != nullptr) InputGradientRows(in, dout, din, rows, a, stream);
}

void BatchNormSyncSums(const float* in, std::int64_t rows, const BatchNormArgs& a, cudaStream_t stream) {
  ColumnReduce(Column{in, a.c}, rows, a.c, 1, a.partial, stream);
  SyncTotalsKernel<<<WarpBlocks(a.c), kWarpThreads, 0, stream>>>(a, static_cast<int>(ReduceSplits(rows)), static_cast<float>(rows));
}

void BatchNormSyncDeviations(const float* in, std::int64_t rows, const BatchNormArgs& a, cudaStream_t stream) {
  SyncMeanKernel<<<ChannelBlocks(a.c), 128, 0, stream>>>(a);
  ColumnReduce(SquaredDeviation{in, a.stats, a.c}, rows, a.c, 1, a.partial, stream);
  SyncTotalsKernel<<<WarpBlocks(a.c), kWarpThreads, 0, stream>>>(a, static_cast<int>(ReduceSplits(rows)), -1.0f);
}

void BatchNormSyncOutput(const float* in, float* out, std::int64_t rows, const BatchNormArgs& a, cudaStream_t stream) {
  SyncVarianceKernel<<<ChannelBlocks(a.c), 128, 0, stream>>>(a);
  ScaleShiftRows(in, out, rows, a, stream);
}

void BatchNormSyncGradientSums(const float* in, const float* dout, std::int64_t rows, const BatchNormArgs& a, cudaStream_t stream) {
  ColumnReduce(GradientSums{in, dout, a.stats, a.stats + a.c, a.c}, rows, a.c, 1, a.partial, stream);
  SyncGradientTotalsKernel<<<WarpBlocks(a.c), kWarpThreads, 0, stream>>>(a, static_cast<int>(ReduceSplits(rows)));
}

void BatchNormSyncInputGradient(const float* in, const float* dout, float* din, std::int64_t rows, const BatchNormArgs& a,
                                cudaStream_t stream) {
  if (din == nullptr) return;
  SyncGradientMeansKernel<<<ChannelBlocks(a.c), 128, 0, stream>>>(a);
  InputGradientRows(in, dout, din, rows, a, stream);
}

void LayerNormForward(const float* in, float* out, std::int64_t rows, const LayerNormArgs& a, cudaStream_t stream) {
  LayerNormForwardKernel<<<Blocks(rows * 32), kThreads, 0, stream>>>(in, out, rows, a);
}

void LayerNormBackward(const float* in, const float* dout, float* din, std::int64_t rows, const LayerNormArgs& a, cudaStream_t stream) {
  LayerNormBackwardKernel<<<Blocks(rows * 32), kThreads, 0, stream>>>(in, dout, din, rows, a);
  ColumnReduce(RowGradientSums{in, dout, a.row_stats, a.c}, rows, a.c, 1, a.partial, stream);
  GammaBetaKernel<<<WarpBlocks(a.c), kWarpThreads, 0, stream>>>(a.partial, static_cast<int>(ReduceSplits(rows)), a.c, a.dgamma, a.dbeta);
}

void AddActivation(const float* a, const float* b, float* out, std::int64_t n, Activation act, float* pre, cudaStream_t stream) {
  AddActivationKernel<<<Blocks(n), kThreads, 0, stream>>>(a, b, out, n, act, pre);
}

void Accumulate(float* y, const float* x, std::int64_t n, cudaStream_t stream) { AccumulateKernel<<<Blocks(n), kThreads, 0, stream>>>(y, x, n); }

void DepthwiseForward(const float* in, const float* kernel, float* out, int batch, const WindowGeometry& g, int m, cudaStream_t stream) {
  const std::int64_t total = std::int64_t{batch} * g.oh * g.ow * g.in.c * m;
  DepthwiseForwardKernel<<<Blocks(total), kThreads, 0, stream>>>(in, kernel, out, total, g, m);
}

void DepthwiseBackward(const float* in, const float* dout, const float* kernel, float* dkernel, float* din, int batch,
                       const WindowGeometry& g, int m, double2* partial, cudaStream_t stream) {
  const std::int64_t rows = std::int64_t{batch} * g.oh * g.ow;
  const int cm = g.in.c * m, taps = g.k * g.k;
  ColumnReduce(DepthwiseKernelGradient{in, dout, g, m}, rows, cm, taps, partial, stream);
  DepthwiseKernelGradientKernel<<<WarpBlocks(cm * taps), kWarpThreads, 0, stream>>>(partial, static_cast<int>(ReduceSplits(rows)), cm, taps,
                                                                              dkernel);
  if (din == nullptr) return;
  const std::int64_t total = std::int64_t{batch} * g.in.size();
  DepthwiseInputGradientKernel<<<Blocks(total), kThreads, 0, stream>>>(dout, kernel, din, total, g, m);
}

void CategoricalForward(const float* in, const float* params, const CategoricalOutput* map, float* out, int batch, int in_size,
                        int width, cudaStream_t stream) {
  CategoricalForwardKernel<<<Blocks(std::int64_t{batch} * width), kThreads, 0, stream>>>(in, params, map, out, batch, in_size, width);
}

void CategoricalBackward(const float* in, const float* dout, const CategoricalOutput* map, float* grads, int batch, int in_size,
                         int width, cudaStream_t stream) {
  CategoricalBackwardKernel<<<(width + 127) / 128, 128, 0, stream>>>(in, dout, map, grads, batch, in_size, width);
}

}  // namespace tfd::cuda
