// Max, average and global average pooling (declared in layers.h).
#include <algorithm>

#include <fmt/format.h>

#include "common/base/check.h"
#include "common/tensor/layers.h"

namespace tfd::tensor {
namespace {

// One input cell of max-pooling's backward pass over c channels: the window's gradient g goes to
// the first cell whose value equals the window's max (taken[ch] marks that it has been placed),
// added to what overlapping windows gave it (`Accumulate`), or stored where windows tile the input. Restrict pointers and branch-free selects so the
// loop vectorises.
template <bool Accumulate>
void MaxGrad(const float* __restrict v, const float* __restrict max, const float* __restrict g, float* __restrict d,
             float* __restrict taken, int c, bool first) {
  if (first) {
    for (int ch = 0; ch < c; ++ch) {
      const float hit = v[ch] == max[ch] ? 1.0f : 0.0f;
      d[ch] = (Accumulate ? d[ch] : 0.0f) + hit * g[ch];
      taken[ch] = hit;
    }
  } else {
    for (int ch = 0; ch < c; ++ch) {
      const float hit = (v[ch] == max[ch] ? 1.0f : 0.0f) * (1.0f - taken[ch]);
      d[ch] = (Accumulate ? d[ch] : 0.0f) + hit * g[ch];
      taken[ch] += hit;
    }
  }
}

// Where a pooling layer's windows lie: pool x pool cells moved by `stride`, starting `pad_y`,
// `pad_x` cells before the input. Each output pixel reads the window's cells inside the input.
struct PoolGeometry {
  ActShape in, out;
  int pool = 0, stride = 0, pad_y = 0, pad_x = 0;
};

// The cells of window (py, px) inside the input: [y0, y1) x [x0, x1).
struct Cells {
  int y0, y1, x0, x1;
  int count() const { return (y1 - y0) * (x1 - x0); }
};
inline Cells CellsOf(const PoolGeometry& g, int py, int px) {
  const int y = py * g.stride - g.pad_y, x = px * g.stride - g.pad_x;
  return {std::max(y, 0), std::min(y + g.pool, g.in.h), std::max(x, 0), std::min(x + g.pool, g.in.w)};
}

// out = max(a, v) (v where it is greater) or a + v, channel by channel; `out` may be `a`.
template <bool kMax>
inline void Fold(const float* a, const float* __restrict v, float* out, int c) {
  for (int ch = 0; ch < c; ++ch) {
    if constexpr (kMax) out[ch] = v[ch] > a[ch] ? v[ch] : a[ch];
    else out[ch] = a[ch] + v[ch];
  }
}

// The forward pass of max (kMax) or average pooling. Cells are folded in row-major order (out = the
// first, then max or sum with each next one); the second is folded straight into the first, so
// no window starts with a copy (a memmove call).
template <bool kMax>
inline void PoolForward(const PoolGeometry& g, const float* in, float* out, int batch) {
  const int c = g.in.c;
  for (int n = 0; n < batch; ++n) {
    const float* img = in + static_cast<std::int64_t>(n) * g.in.size();
    for (int py = 0; py < g.out.h; ++py)
      for (int px = 0; px < g.out.w; ++px, out += c) {
        const Cells w = CellsOf(g, py, px);
        const float* first = img + (static_cast<std::int64_t>(w.y0) * g.in.w + w.x0) * c;
        int cell = 0;
        for (int y = w.y0; y < w.y1; ++y)
          for (int x = w.x0; x < w.x1; ++x, ++cell) {
            const float* v = img + (static_cast<std::int64_t>(y) * g.in.w + x) * c;
            if (cell > 0) Fold<kMax>(cell == 1 ? first : out, v, out, c);
          }
        if (cell == 1) std::copy(first, first + c, out);
        if constexpr (!kMax) {
          const float inv = 1.0f / static_cast<float>(cell);
          for (int ch = 0; ch < c; ++ch) out[ch] *= inv;
        }
      }
  }
}

// One clone per machine level, as elementwise.cc's loops: the channel loops run 8 or 16 lanes
// wide where the CPU has them (the baseline's 4 made the cnn's pooling a fifth of its inference).
#define TFD_POOL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
TFD_POOL_CLONES void MaxPoolForward(const PoolGeometry& g, const float* in, float* out, int batch) { PoolForward<true>(g, in, out, batch); }
TFD_POOL_CLONES void AvgPoolForward(const PoolGeometry& g, const float* in, float* out, int batch) { PoolForward<false>(g, in, out, batch); }
#undef TFD_POOL_CLONES

// A pool x pool window moved by `stride` over an NHWC image. Each output pixel reads the window's
// cells inside the input, [y0, y1) x [x0, x1): padding cells take no part.
class Pool2D final : public Layer {
 public:
  enum class Mode { kMax, kAvg };
  Pool2D(Mode mode, ActShape in, int pool, int stride, Padding padding)
      : mode_(mode), in_(in), y_(Window(in.h, pool, stride, padding)), x_(Window(in.w, pool, stride, padding)),
        out_{y_.out, x_.out, in.c}, p_(pool), s_(stride), padding_(padding),
        tiles_(stride == pool && y_.pad_before == 0 && x_.pad_before == 0 && y_.out * pool == in.h && x_.out * pool == in.w) {
    TFD_CHECK(out_.h > 0 && out_.w > 0);
  }

  std::string Describe() const override {
    return fmt::format("{} {}x{}{}{}", mode_ == Mode::kMax ? "max_pool2d" : "avg_pool2d", p_, p_,
                       s_ == p_ ? "" : fmt::format(" stride {}", s_), padding_ == Padding::kSame ? " same" : "");
  }
  ActShape output_shape() const override { return out_; }
  bool PerImage() const override { return true; }
  // Max pooling keeps no arg-max: Backward finds each window's first input equal to its output
  // (the one Forward's strict ">" scan kept), so Forward is a plain vectorised max.
  void Forward(const float* in, float* out, int batch) override {
    if (mode_ == Mode::kMax) MaxPoolForward(geometry(), in, out, batch);
    else AvgPoolForward(geometry(), in, out, batch);
  }
  void Backward(const float* in, const float* out, float* dout, float* din, int batch) override {
    if (din == nullptr) return;
    if (mode_ == Mode::kAvg) return BackwardAs<Mode::kAvg, true>(in, out, dout, din, batch);
    // Windows that tile the input exactly (the seeds' 2x2 pools on even sizes) give each cell one
    // window's share: stored, with no zero fill first. Others may overlap (stride < pool) or leave
    // cells out (stride > pool, "valid" remainders, padding): every window adds its share.
    if (tiles_) return BackwardAs<Mode::kMax, false>(in, out, dout, din, batch);
    BackwardAs<Mode::kMax, true>(in, out, dout, din, batch);
  }

 private:
  // `Accumulate`: din is zeroed first and each window adds to it; else each cell is stored once.
  template <Mode M, bool Accumulate>
  void BackwardAs(const float* in, const float* out, const float* dout, float* din, int batch) {
    const int c = in_.c;
    if constexpr (Accumulate) std::fill(din, din + static_cast<std::int64_t>(batch) * in_.size(), 0.0f);
    taken_.resize(static_cast<std::size_t>(c));
    const PoolGeometry g = geometry();
    for (int n = 0; n < batch; ++n) {
      const std::int64_t base = static_cast<std::int64_t>(n) * in_.size();
      for (int py = 0; py < out_.h; ++py)
        for (int px = 0; px < out_.w; ++px, out += c, dout += c) {
          const Cells w = CellsOf(g, py, px);
          const float scale = 1.0f / static_cast<float>(w.count());
          for (int y = w.y0; y < w.y1; ++y)
            for (int x = w.x0; x < w.x1; ++x) {
              const std::int64_t at = base + (static_cast<std::int64_t>(y) * in_.w + x) * c;
              if constexpr (M == Mode::kMax) {
                MaxGrad<Accumulate>(in + at, out, dout, din + at, taken_.data(), c, /*first=*/y == w.y0 && x == w.x0);
              } else {
                for (int ch = 0; ch < c; ++ch) din[at + ch] += scale * dout[ch];
              }
            }
        }
    }
  }

  PoolGeometry geometry() const { return {in_, out_, p_, s_, y_.pad_before, x_.pad_before}; }

  Mode mode_;
  ActShape in_;
  WindowAxis y_, x_;
  ActShape out_;
  int p_, s_;
  Padding padding_;
  bool tiles_;  // every input cell in exactly one window
  std::vector<float> taken_;
};

class GlobalAvgPool2D final : public Layer {
 public:
  explicit GlobalAvgPool2D(ActShape in) : in_(in) {}

  std::string Describe() const override { return "global_avg_pool2d"; }
  bool PerImage() const override { return true; }
  ActShape output_shape() const override { return {1, 1, in_.c}; }
  void Forward(const float* in, float* out, int batch) override {
    const int c = in_.c, cells = in_.h * in_.w;
    const float inv = 1.0f / static_cast<float>(cells);
    for (int n = 0; n < batch; ++n, out += c) {
      const float* img = in + static_cast<std::int64_t>(n) * in_.size();
      std::copy(img, img + c, out);
      for (int p = 1; p < cells; ++p)
        for (int ch = 0; ch < c; ++ch) out[ch] += img[static_cast<std::int64_t>(p) * c + ch];
      for (int ch = 0; ch < c; ++ch) out[ch] *= inv;
    }
  }
  void Backward(const float*, const float*, float* dout, float* din, int batch) override {
    if (din == nullptr) return;
    const int c = in_.c, cells = in_.h * in_.w;
    const float inv = 1.0f / static_cast<float>(cells);
    for (int n = 0; n < batch; ++n, dout += c) {
      float* img = din + static_cast<std::int64_t>(n) * in_.size();
      for (int p = 0; p < cells; ++p)
        for (int ch = 0; ch < c; ++ch) img[static_cast<std::int64_t>(p) * c + ch] = dout[ch] * inv;
    }
  }

 private:
  ActShape in_;
};

}  // namespace

std::unique_ptr<Layer> MakeMaxPool2D(ActShape in, int pool, int stride, Padding padding) {
  return std::make_unique<Pool2D>(Pool2D::Mode::kMax, in, pool, stride > 0 ? stride : pool, padding);
}
std::unique_ptr<Layer> MakeAvgPool2D(ActShape in, int pool, int stride, Padding padding) {
  return std::make_unique<Pool2D>(Pool2D::Mode::kAvg, in, pool, stride > 0 ? stride : pool, padding);
}
std::unique_ptr<Layer> MakeGlobalAvgPool2D(ActShape in) { return std::make_unique<GlobalAvgPool2D>(in); }

}  // namespace tfd::tensor
