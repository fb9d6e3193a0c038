// Depthwise convolution (declared in layers.h).
#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "common/base/check.h"
#include "common/tensor/elementwise.h"
#include "common/tensor/layers.h"

namespace tfd::tensor {
namespace {

// Direct loops, no im2col: each output pixel's C x M values are a sum over the window's pixels of
// an input pixel's channels times one kernel tap, both contiguous (kernel [k, k, C, M] puts tap
// (ky, kx)'s C x M weights in output-channel order), so the inner loop runs over C * M floats.
class DepthwiseConv2D final : public Layer {
 public:
  DepthwiseConv2D(ActShape in, DepthwiseOptions o, Activation act, InitSpec init)
      : in_(in), o_(o), act_(act), init_(init), y_(Window(in.h, o.kernel_size, o.stride, o.padding)),
        x_(Window(in.w, o.kernel_size, o.stride, o.padding)), out_{y_.out, x_.out, in.c * o.depth_multiplier} {
    TFD_CHECK(out_.h > 0 && out_.w > 0 && o.depth_multiplier >= 1);
    if (!o_.use_bias) zeros_.assign(static_cast<std::size_t>(out_.c), 0.0f);
  }

  std::string Describe() const override {
    return fmt::format("depthwise_conv2d {}x{}{}{}{}{}{}", o_.kernel_size, o_.kernel_size,
                       o_.depth_multiplier == 1 ? "" : fmt::format(" x{}", o_.depth_multiplier),
                       o_.stride == 1 ? "" : fmt::format(" stride {}", o_.stride), o_.padding == Padding::kSame ? " same" : "",
                       o_.use_bias ? "" : " no-bias", act_ == Activation::kNone ? "" : fmt::format(" {}", config::ActivationName(act_)));
  }
  ActShape output_shape() const override { return out_; }
  // Keras' fans for a [k, k, C, M] kernel: k * k * C in, k * k * M out.
  std::vector<ParamSpec> Params() const override {
    const std::int64_t k2 = std::int64_t{o_.kernel_size} * o_.kernel_size, fan_in = k2 * in_.c, fan_out = k2 * o_.depth_multiplier;
    std::vector<ParamSpec> p = {{"depthwise_kernel", {o_.kernel_size, o_.kernel_size, in_.c, o_.depth_multiplier}, init_, fan_in, fan_out}};
    if (o_.use_bias) p.push_back({"bias", {out_.c}, {config::InitKind::kZeros}, fan_in, fan_out});
    return p;
  }
  void Bind(std::span<const std::span<float>> params, std::span<const std::span<float>> grads) override {
    TFD_CHECK(params.size() == (o_.use_bias ? 2u : 1u) && grads.size() == params.size());
    kernel_ = params[0].data(), dkernel_ = grads[0].data();
    if (o_.use_bias) bias_ = params[1].data(), dbias_ = grads[1].data();
  }
  bool KeepsForwardState() const override { return NeedsPreActivation(act_); }
  bool PerImage() const override { return true; }
  std::int64_t ForwardScratchPerImage() const override { return NeedsPreActivation(act_) ? out_.size() : 0; }
  void Reserve(int max_batch) override {
    if (NeedsPreActivation(act_)) pre_.resize(static_cast<std::size_t>(out_.size() * max_batch));
  }

  void Forward(const float* in, float* out, int batch) override {
    const int cm = out_.c, m = o_.depth_multiplier;
    std::fill(out, out + out_.size() * batch, 0.0f);
    ForEachTap(batch, [&](std::int64_t in_pixel, std::int64_t out_pixel, int tap) {
      const float* __restrict x = in + in_pixel * in_.c;
      const float* __restrict w = kernel_ + std::int64_t{tap} * cm;
      float* __restrict o = out + out_pixel * cm;
      if (m == 1) {
        for (int c = 0; c < cm; ++c) o[c] += x[c] * w[c];
        return;
      }
      for (int c = 0; c < in_.c; ++c)
        for (int j = 0; j < m; ++j) o[c * m + j] += x[c] * w[c * m + j];
    });
    BiasActivation(out, o_.use_bias ? bias_ : zeros_.data(), std::int64_t{batch} * out_.h * out_.w, cm, act_,
                   pre_.empty() ? nullptr : pre_.data());
  }

  void Backward(const float* in, const float* out, float* dout, float* din, int batch) override {
    const int cm = out_.c, m = o_.depth_multiplier;
    ActivationGradBias(out, dout, std::int64_t{batch} * out_.h * out_.w, cm, act_, dbias_, pre_.empty() ? nullptr : pre_.data());
    std::fill(dkernel_, dkernel_ + std::int64_t{o_.kernel_size} * o_.kernel_size * cm, 0.0f);
    if (din != nullptr) std::fill(din, din + in_.size() * batch, 0.0f);
    ForEachTap(batch, [&](std::int64_t in_pixel, std::int64_t out_pixel, int tap) {
      const float* __restrict x = in + in_pixel * in_.c;
      const float* __restrict g = dout + out_pixel * cm;
      const float* __restrict w = kernel_ + std::int64_t{tap} * cm;
      float* __restrict dw = dkernel_ + std::int64_t{tap} * cm;
      for (int c = 0; c < in_.c; ++c)
        for (int j = 0; j < m; ++j) dw[c * m + j] += x[c] * g[c * m + j];
      if (din == nullptr) return;
      float* __restrict dx = din + in_pixel * in_.c;
      for (int c = 0; c < in_.c; ++c)
        for (int j = 0; j < m; ++j) dx[c] += w[c * m + j] * g[c * m + j];
    });
  }

 private:
  // Calls f(input pixel, output pixel, tap ky * k + kx) for every kernel tap of every output
  // pixel that falls inside the input (padding cells are zeros: they add nothing), pixels counted
  // over the whole batch.
  template <typename F>
  void ForEachTap(int batch, F&& f) const {
    const int k = o_.kernel_size, s = o_.stride;
    for (int n = 0; n < batch; ++n)
      for (int oy = 0; oy < out_.h; ++oy)
        for (int ox = 0; ox < out_.w; ++ox) {
          const std::int64_t out_pixel = (std::int64_t{n} * out_.h + oy) * out_.w + ox;
          for (int ky = 0; ky < k; ++ky) {
            const int iy = oy * s - y_.pad_before + ky;
            if (iy < 0 || iy >= in_.h) continue;
            for (int kx = 0; kx < k; ++kx) {
              const int ix = ox * s - x_.pad_before + kx;
              if (ix < 0 || ix >= in_.w) continue;
              f((std::int64_t{n} * in_.h + iy) * in_.w + ix, out_pixel, ky * k + kx);
            }
          }
        }
  }

  const ActShape in_;
  const DepthwiseOptions o_;
  const Activation act_;
  const InitSpec init_;
  const WindowAxis y_, x_;
  const ActShape out_;
  float *kernel_ = nullptr, *bias_ = nullptr, *dkernel_ = nullptr, *dbias_ = nullptr;
  std::vector<float> pre_, zeros_;  // gelu's pre-activations; the bias without use_bias
};

}  // namespace

std::unique_ptr<Layer> MakeDepthwiseConv2D(ActShape in, DepthwiseOptions options, Activation act, InitSpec init) {
  return std::make_unique<DepthwiseConv2D>(in, options, act, init);
}

}  // namespace tfd::tensor
