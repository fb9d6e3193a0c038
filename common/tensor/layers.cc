#include "common/tensor/layers.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "common/base/check.h"
#include "common/base/random.h"
#include "common/tensor/conv_onednn.h"
#include "common/tensor/elementwise.h"

namespace tfd::tensor {
namespace {

std::string ActSuffix(Activation act) {
  return act == Activation::kNone ? std::string() : fmt::format(" {}", config::ActivationName(act));
}

// dst[0, n) = src[0, n). Im2col's runs are short (a first convolution's are k floats), and a
// memmove call per run cost more than its copy: runs up to 32 floats are copied inline, in
// fixed-size pieces the compiler turns into a few loads and stores.
inline void CopyRun(const float* src, int n, float* dst) {
  if (n > 32) {
    std::copy(src, src + n, dst);
    return;
  }
  for (; n >= 8; n -= 8, src += 8, dst += 8) std::memcpy(dst, src, 8 * sizeof(float));
  if (n & 4) std::memcpy(dst, src, 4 * sizeof(float)), src += 4, dst += 4;
  if (n & 2) std::memcpy(dst, src, 2 * sizeof(float)), src += 2, dst += 2;
  if (n & 1) *dst = *src;
}

// A layer with a kernel and a bias (dense, conv2d): binds the two parameters and their gradients,
// and runs its GEMMs on `gemm_`.
class KernelBiasLayer : public Layer {
 public:
  KernelBiasLayer(GemmConfig gemm, Activation act) : gemm_(gemm), act_(act) {}

  void Bind(std::span<const std::span<float>> params, std::span<const std::span<float>> grads) override {
    TFD_CHECK(params.size() == 2 && grads.size() == 2);
    kernel_ = params[0].data();
    bias_ = params[1].data();
    dkernel_ = grads[0].data();
    dbias_ = grads[1].data();
  }

 protected:
  // Room for `rows` pre-activations when the activation's derivative needs them (gelu).
  void ReservePre(std::int64_t rows, int cols) {
    if (NeedsPreActivation(act_)) pre_.resize(static_cast<std::size_t>(rows * cols));
  }
  float* pre() { return pre_.empty() ? nullptr : pre_.data(); }

  const GemmConfig gemm_;
  const Activation act_;
  float *kernel_ = nullptr, *bias_ = nullptr, *dkernel_ = nullptr, *dbias_ = nullptr;

 private:
  std::vector<float> pre_;
};

class Dense final : public KernelBiasLayer {
 public:
  Dense(ActShape in, int units, Activation act, InitSpec init, GemmConfig gemm)
      : KernelBiasLayer(gemm, act), in_(static_cast<int>(in.size())), units_(units), init_(init) {}

  std::string Describe() const override { return fmt::format("dense {}{}", units_, ActSuffix(act_)); }
  ActShape output_shape() const override { return {1, 1, units_}; }
  std::vector<ParamSpec> Params() const override {
    return {{"kernel", {in_, units_}, init_, in_, units_}, {"bias", {units_}, {config::InitKind::kZeros}, in_, units_}};
  }
  bool KeepsForwardState() const override { return NeedsPreActivation(act_); }
  void Reserve(int max_batch) override { ReservePre(max_batch, units_); }
  void Forward(const float* in, float* out, int batch) override {
    Gemm(gemm_, false, false, batch, units_, in_, 1.0f, in, in_, kernel_, units_, 0.0f, out, units_);
    BiasActivation(out, bias_, batch, units_, act_, pre());
  }
  void Backward(const float* in, const float* out, float* dout, float* din, int batch) override {
    ActivationGradBias(out, dout, batch, units_, act_, dbias_, pre());
    Gemm(gemm_, true, false, in_, units_, batch, 1.0f, in, in_, dout, units_, 0.0f, dkernel_, units_);
    if (din != nullptr) Gemm(gemm_, false, true, batch, in_, units_, 1.0f, dout, units_, kernel_, units_, 0.0f, din, in_);
  }

 private:
  int in_, units_;
  InitSpec init_;
};

// Convolution on oneDNN's convolution primitives where the GEMM backend is oneDNN (conv_onednn.h),
// else as im2col + one GEMM: every output pixel's k x k x c_in patch becomes a row of `cols_`
// ([batch*oh*ow, k*k*c_in]), so out = cols . kernel is already NHWC. Padding cells are zeros in the
// patch rows; a stride only changes which input pixels a row starts at. Either way the layer adds
// the bias and applies the activation itself, so both paths share that code.
class Conv2D final : public KernelBiasLayer {
 public:
  Conv2D(ActShape in, int filters, int k, int stride, Padding padding, Activation act, InitSpec init, GemmConfig gemm)
      : KernelBiasLayer(gemm, act), in_(in), y_(Window(in.h, k, stride, padding)), x_(Window(in.w, k, stride, padding)),
        out_{y_.out, x_.out, filters}, k_(k), stride_(stride), padding_(padding), init_(init) {
    TFD_CHECK(out_.h > 0 && out_.w > 0);
    onednn_ = MakeOneDnnConvolution({.in = in_, .out = out_, .k = k_, .stride = stride_, .y = y_, .x = x_}, gemm);
  }

  std::string Describe() const override {
    return fmt::format("conv2d {} {}x{}{}{}{}", out_.c, k_, k_, stride_ == 1 ? "" : fmt::format(" stride {}", stride_),
                       padding_ == Padding::kSame ? " same" : "", ActSuffix(act_));
  }
  ActShape output_shape() const override { return out_; }
  std::vector<ParamSpec> Params() const override {
    std::int64_t fan_in = std::int64_t{k_} * k_ * in_.c, fan_out = std::int64_t{k_} * k_ * out_.c;
    return {{"kernel", {k_, k_, in_.c, out_.c}, init_, fan_in, fan_out},
            {"bias", {out_.c}, {config::InitKind::kZeros}, fan_in, fan_out}};
  }
  // The im2col path's Backward reads Forward's patches; oneDNN's reads `in` itself.
  bool KeepsForwardState() const override { return onednn_ == nullptr || NeedsPreActivation(act_); }
  bool PerImage() const override { return true; }
  std::int64_t ForwardScratchPerImage() const override {
    return std::int64_t{out_.h} * out_.w * ((onednn_ ? 0 : patch()) + (NeedsPreActivation(act_) ? out_.c : 0));
  }
  void Reserve(int max_batch) override {
    if (onednn_) onednn_->Prepare(max_batch);
    else cols_.resize(static_cast<std::size_t>(max_batch) * out_.h * out_.w * patch());
    ReservePre(std::int64_t{max_batch} * out_.h * out_.w, out_.c);
  }
  void Forward(const float* in, float* out, int batch) override {
    int rows = batch * out_.h * out_.w;
    if (onednn_) {
      onednn_->Forward(in, kernel_, out, batch);
    } else {
      TFD_CHECK(cols_.size() >= static_cast<std::size_t>(batch) * out_.h * out_.w * patch());
      Im2Col(in, batch);
      Gemm(gemm_, false, false, rows, out_.c, patch(), 1.0f, cols_.data(), patch(), kernel_, out_.c, 0.0f, out, out_.c);
    }
    BiasActivation(out, bias_, rows, out_.c, act_, pre());
  }
  void Backward(const float* in, const float* out, float* dout, float* din, int batch) override {
    int rows = batch * out_.h * out_.w;
    ActivationGradBias(out, dout, rows, out_.c, act_, dbias_, pre());
    if (onednn_) {
      onednn_->BackwardWeights(in, dout, dkernel_, batch);
      if (din != nullptr) onednn_->BackwardData(dout, kernel_, din, batch);
      return;
    }
    // cols_ still holds Forward's patches.
    Gemm(gemm_, true, false, patch(), out_.c, rows, 1.0f, cols_.data(), patch(), dout, out_.c, 0.0f, dkernel_, out_.c);
    if (din == nullptr) return;
    // dcols = dout . kernel^T, then scatter-add each patch back (col2im). cols_ is free now.
    Gemm(gemm_, false, true, rows, patch(), out_.c, 1.0f, dout, out_.c, kernel_, out_.c, 0.0f, cols_.data(), patch());
    Col2Im(din, batch);
  }

 private:
  int patch() const { return k_ * k_ * in_.c; }

  // The kernel row `ky` of output pixel (oy, ox): the input row it reads (-1: padding) and the
  // kernel columns [lo, hi) that fall inside the input, starting at input column x0 + lo.
  struct Run {
    int iy, x0, lo, hi;
  };
  Run RunAt(int oy, int ox, int ky) const {
    const int iy = oy * stride_ - y_.pad_before + ky, x0 = ox * stride_ - x_.pad_before;
    if (iy < 0 || iy >= in_.h) return {-1, x0, 0, 0};
    const int lo = std::min(k_, std::max(0, -x0));
    return {iy, x0, lo, std::max(lo, std::min(k_, in_.w - x0))};
  }

  // Im2Col for "valid" padding; kRun: the run's length when known at compile time, else 0.
  template <int kRun>
  void Im2ColValid(const float* in, int batch) {
    // Locals, not members: the stores through dst could alias them, and the copies are short.
    const int c = in_.c, run = k_ * c, k = k_, oh = out_.h, ow = out_.w;
    const std::int64_t row = std::int64_t{in_.w} * c, step = std::int64_t{stride_} * c, down = stride_ * row;
    float* dst = cols_.data();
    for (int n = 0; n < batch; ++n) {
      const float* top = in + static_cast<std::int64_t>(n) * in_.size();
      for (int oy = 0; oy < oh; ++oy, top += down)
        for (int ox = 0; ox < ow; ++ox)
          for (int ky = 0; ky < k; ++ky, dst += run) {
            if constexpr (kRun > 0) std::memcpy(dst, top + ox * step + ky * row, kRun * sizeof(float));
            else CopyRun(top + ox * step + ky * row, run, dst);
          }
    }
  }

  void Im2Col(const float* in, int batch) {
    const int c = in_.c, run = k_ * c;  // one kernel row: k pixels x c_in, contiguous in NHWC
    float* dst = cols_.data();
    if (padding_ == Padding::kValid) {  // every window inside the input: plain copies
      // A first convolution's runs are k floats (one channel): a copy of known size is a move or two.
      if (run == 3) return Im2ColValid<3>(in, batch);
      if (run == 5) return Im2ColValid<5>(in, batch);
      return Im2ColValid<0>(in, batch);
    }
    for (int n = 0; n < batch; ++n) {
      const float* img = in + static_cast<std::int64_t>(n) * in_.size();
      for (int oy = 0; oy < out_.h; ++oy)
        for (int ox = 0; ox < out_.w; ++ox)
          for (int ky = 0; ky < k_; ++ky, dst += run) {
            const Run r = RunAt(oy, ox, ky);
            if (r.iy < 0) {
              std::fill(dst, dst + run, 0.0f);
              continue;
            }
            const float* src = img + (static_cast<std::int64_t>(r.iy) * in_.w + r.x0 + r.lo) * c;
            std::fill(dst, dst + r.lo * c, 0.0f);
            CopyRun(src, (r.hi - r.lo) * c, dst + r.lo * c);
            std::fill(dst + r.hi * c, dst + run, 0.0f);
          }
    }
  }

  void Col2Im(float* din, int batch) {
    const int c = in_.c, run = k_ * c;
    std::fill(din, din + static_cast<std::int64_t>(batch) * in_.size(), 0.0f);
    const float* src = cols_.data();
    if (padding_ == Padding::kValid) {  // as Im2Col's plain copies
      for (int n = 0; n < batch; ++n) {
        float* img = din + static_cast<std::int64_t>(n) * in_.size();
        for (int oy = 0; oy < out_.h; ++oy)
          for (int ox = 0; ox < out_.w; ++ox)
            for (int ky = 0; ky < k_; ++ky, src += run) {
              float* dst = img + (static_cast<std::int64_t>(oy * stride_ + ky) * in_.w + ox * stride_) * c;
              for (int i = 0; i < run; ++i) dst[i] += src[i];
            }
      }
      return;
    }
    for (int n = 0; n < batch; ++n) {
      float* img = din + static_cast<std::int64_t>(n) * in_.size();
      for (int oy = 0; oy < out_.h; ++oy)
        for (int ox = 0; ox < out_.w; ++ox)
          for (int ky = 0; ky < k_; ++ky, src += run) {
            const Run r = RunAt(oy, ox, ky);
            if (r.iy < 0) continue;
            float* dst = img + (static_cast<std::int64_t>(r.iy) * in_.w + r.x0 + r.lo) * c;
            const float* from = src + r.lo * c;
            for (int i = 0; i < (r.hi - r.lo) * c; ++i) dst[i] += from[i];
          }
    }
  }

  ActShape in_;
  WindowAxis y_, x_;
  ActShape out_;
  int k_, stride_;
  Padding padding_;
  InitSpec init_;
  std::unique_ptr<OneDnnConvolution> onednn_;  // null: im2col + Gemm
  std::vector<float> cols_;                    // im2col's patches; empty on oneDNN
};

// The mask is drawn whole in each training Forward from (seed, element index): one Rng stream
// per Forward, values in row-major order, so it depends on nothing but the seed and the batch.
class Dropout final : public Layer {
 public:
  Dropout(ActShape in, double rate) : shape_(in), rate_(rate), scale_(static_cast<float>(1.0 / (1.0 - rate))) {
    TFD_CHECK(rate >= 0 && rate < 1);
  }

  std::string Describe() const override { return fmt::format("dropout {}", rate_); }
  bool Stochastic() const override { return true; }
  bool PerImage() const override { return true; }
  ActShape output_shape() const override { return shape_; }
  void SetTraining(bool training, std::uint64_t seed) override {
    training_ = training;
    seed_ = seed;
  }
  bool KeepsForwardState() const override { return true; }
  void Reserve(int max_batch) override { mask_.resize(static_cast<std::size_t>(shape_.size() * max_batch)); }
  void Forward(const float* in, float* out, int batch) override {
    const auto n = static_cast<std::size_t>(shape_.size() * batch);
    if (!training_ || rate_ == 0) {
      std::copy(in, in + n, out);
      return;
    }
    TFD_CHECK(n <= mask_.size());
    Rng rng(seed_);
    for (std::size_t i = 0; i < n; ++i) mask_[i] = rng.Uniform() < rate_ ? 0.0f : scale_;
    for (std::size_t i = 0; i < n; ++i) out[i] = in[i] * mask_[i];
  }
  void Backward(const float*, const float*, float* dout, float* din, int batch) override {
    if (din == nullptr) return;
    const auto n = static_cast<std::size_t>(shape_.size() * batch);
    if (!training_ || rate_ == 0) {
      std::copy(dout, dout + n, din);
      return;
    }
    for (std::size_t i = 0; i < n; ++i) din[i] = dout[i] * mask_[i];
  }

 private:
  ActShape shape_;
  double rate_;
  float scale_;
  bool training_ = false;
  std::uint64_t seed_ = 0;
  std::vector<float> mask_;
};

}  // namespace

std::int64_t NumElements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    TFD_CHECK(d >= 0);
    n *= d;
  }
  return n;
}

std::unique_ptr<Layer> MakeDense(ActShape in, int units, Activation act, InitSpec init, GemmConfig gemm) {
  return std::make_unique<Dense>(in, units, act, init, gemm);
}
WindowAxis Window(int in, int k, int stride, Padding padding) {
  TFD_CHECK(in >= 1 && k >= 1 && stride >= 1);
  if (padding == Padding::kValid) return {in >= k ? (in - k) / stride + 1 : 0, 0, 0};
  const int out = (in + stride - 1) / stride;
  const int total = std::max((out - 1) * stride + k - in, 0);
  return {out, total / 2, total - total / 2};  // the odd cell after, as TensorFlow pads
}

std::unique_ptr<Layer> MakeConv2D(ActShape in, int filters, int kernel_size, Activation act, InitSpec init, GemmConfig gemm,
                                  int stride, Padding padding) {
  return std::make_unique<Conv2D>(in, filters, kernel_size, stride, padding, act, init, gemm);
}

std::unique_ptr<Layer> MakeDropout(ActShape in, double rate) { return std::make_unique<Dropout>(in, rate); }

}  // namespace tfd::tensor
