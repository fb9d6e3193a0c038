#include "common/tensor/layers.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "common/base/check.h"
#include "common/base/random.h"
#include "common/tensor/elementwise.h"

namespace tfd::tensor {
namespace {

// One window position of max-pooling's backward pass over c channels: the gradient goes to the
// first position whose value equals the window's max (taken[ch] marks that it has been placed).
// Restrict pointers and branch-free selects so the loop vectorises.
void PoolGrad(const float* __restrict v, const float* __restrict max, const float* __restrict g, float* __restrict d,
              float* __restrict taken, int c, bool first) {
  if (first) {
    for (int ch = 0; ch < c; ++ch) {
      const float hit = v[ch] == max[ch] ? 1.0f : 0.0f;
      d[ch] = hit * g[ch];
      taken[ch] = hit;
    }
  } else {
    for (int ch = 0; ch < c; ++ch) {
      const float hit = (v[ch] == max[ch] ? 1.0f : 0.0f) * (1.0f - taken[ch]);
      d[ch] = hit * g[ch];
      taken[ch] += hit;
    }
  }
}

std::string ActSuffix(Activation act) {
  return act == Activation::kNone ? std::string() : fmt::format(" {}", config::ActivationName(act));
}

// A layer with a kernel and a bias (dense, conv2d): binds the two parameters and their gradients,
// and runs its GEMMs on `gemm_`.
class KernelBiasLayer : public Layer {
 public:
  explicit KernelBiasLayer(GemmConfig gemm) : gemm_(gemm) {}

  void Bind(std::span<const std::span<float>> params, std::span<const std::span<float>> grads) override {
    TFD_CHECK(params.size() == 2 && grads.size() == 2);
    kernel_ = params[0].data();
    bias_ = params[1].data();
    dkernel_ = grads[0].data();
    dbias_ = grads[1].data();
  }

 protected:
  const GemmConfig gemm_;
  float *kernel_ = nullptr, *bias_ = nullptr, *dkernel_ = nullptr, *dbias_ = nullptr;
};

class Dense final : public KernelBiasLayer {
 public:
  Dense(ActShape in, int units, Activation act, InitSpec init, GemmConfig gemm)
      : KernelBiasLayer(gemm), in_(static_cast<int>(in.size())), units_(units), act_(act), init_(init) {}

  std::string Describe() const override { return fmt::format("dense {}{}", units_, ActSuffix(act_)); }
  ActShape output_shape() const override { return {1, 1, units_}; }
  std::vector<ParamSpec> Params() const override {
    return {{"kernel", {in_, units_}, init_, in_, units_}, {"bias", {units_}, {config::InitKind::kZeros}, in_, units_}};
  }
  void Forward(const float* in, float* out, int batch) override {
    Gemm(gemm_, false, false, batch, units_, in_, 1.0f, in, in_, kernel_, units_, 0.0f, out, units_);
    BiasActivation(out, bias_, batch, units_, act_);
  }
  void Backward(const float* in, const float* out, float* dout, float* din, int batch) override {
    ActivationGradBias(out, dout, batch, units_, act_, dbias_);
    Gemm(gemm_, true, false, in_, units_, batch, 1.0f, in, in_, dout, units_, 0.0f, dkernel_, units_);
    if (din != nullptr) Gemm(gemm_, false, true, batch, in_, units_, 1.0f, dout, units_, kernel_, units_, 0.0f, din, in_);
  }

 private:
  int in_, units_;
  Activation act_;
  InitSpec init_;
};

// Convolution as im2col + one GEMM: every output pixel's k x k x c_in patch becomes a row of
// `cols_` ([batch*oh*ow, k*k*c_in]), so out = cols . kernel is already NHWC.
class Conv2D final : public KernelBiasLayer {
 public:
  Conv2D(ActShape in, int filters, int k, Activation act, InitSpec init, GemmConfig gemm)
      : KernelBiasLayer(gemm), in_(in), out_{in.h - k + 1, in.w - k + 1, filters}, k_(k), act_(act), init_(init) {
    TFD_CHECK(out_.h > 0 && out_.w > 0);
  }

  std::string Describe() const override {
    return fmt::format("conv2d {} {}x{}{}", out_.c, k_, k_, ActSuffix(act_));
  }
  ActShape output_shape() const override { return out_; }
  std::vector<ParamSpec> Params() const override {
    std::int64_t fan_in = std::int64_t{k_} * k_ * in_.c, fan_out = std::int64_t{k_} * k_ * out_.c;
    return {{"kernel", {k_, k_, in_.c, out_.c}, init_, fan_in, fan_out},
            {"bias", {out_.c}, {config::InitKind::kZeros}, fan_in, fan_out}};
  }
  bool KeepsForwardState() const override { return true; }
  void Reserve(int max_batch) override {
    cols_.resize(static_cast<std::size_t>(max_batch) * out_.h * out_.w * patch());
  }
  void Forward(const float* in, float* out, int batch) override {
    TFD_CHECK(cols_.size() >= static_cast<std::size_t>(batch) * out_.h * out_.w * patch());
    Im2Col(in, batch);
    int rows = batch * out_.h * out_.w;
    Gemm(gemm_, false, false, rows, out_.c, patch(), 1.0f, cols_.data(), patch(), kernel_, out_.c, 0.0f, out, out_.c);
    BiasActivation(out, bias_, rows, out_.c, act_);
  }
  void Backward(const float* in, const float* out, float* dout, float* din, int batch) override {
    (void)in;  // cols_ still holds Forward's patches
    int rows = batch * out_.h * out_.w;
    ActivationGradBias(out, dout, rows, out_.c, act_, dbias_);
    Gemm(gemm_, true, false, patch(), out_.c, rows, 1.0f, cols_.data(), patch(), dout, out_.c, 0.0f, dkernel_, out_.c);
    if (din == nullptr) return;
    // dcols = dout . kernel^T, then scatter-add each patch back (col2im). cols_ is free now.
    Gemm(gemm_, false, true, rows, patch(), out_.c, 1.0f, dout, out_.c, kernel_, out_.c, 0.0f, cols_.data(), patch());
    Col2Im(din, batch);
  }

 private:
  int patch() const { return k_ * k_ * in_.c; }

  void Im2Col(const float* in, int batch) {
    const int run = k_ * in_.c;  // one kernel row: k pixels x c_in, contiguous in NHWC
    float* dst = cols_.data();
    for (int n = 0; n < batch; ++n) {
      const float* img = in + static_cast<std::int64_t>(n) * in_.size();
      for (int oy = 0; oy < out_.h; ++oy)
        for (int ox = 0; ox < out_.w; ++ox)
          for (int ky = 0; ky < k_; ++ky) {
            const float* src = img + (static_cast<std::int64_t>(oy + ky) * in_.w + ox) * in_.c;
            std::copy(src, src + run, dst);
            dst += run;
          }
    }
  }

  void Col2Im(float* din, int batch) {
    const int run = k_ * in_.c;
    std::fill(din, din + static_cast<std::int64_t>(batch) * in_.size(), 0.0f);
    const float* src = cols_.data();
    for (int n = 0; n < batch; ++n) {
      float* img = din + static_cast<std::int64_t>(n) * in_.size();
      for (int oy = 0; oy < out_.h; ++oy)
        for (int ox = 0; ox < out_.w; ++ox)
          for (int ky = 0; ky < k_; ++ky) {
            float* dst = img + (static_cast<std::int64_t>(oy + ky) * in_.w + ox) * in_.c;
            for (int i = 0; i < run; ++i) dst[i] += src[i];
            src += run;
          }
    }
  }

  ActShape in_, out_;
  int k_;
  Activation act_;
  InitSpec init_;
  std::vector<float> cols_;
};

// Max pooling keeps no arg-max: Backward finds each window's first input equal to its output
// (the one Forward's strict ">" scan kept), so Forward is a plain vectorised max.
class MaxPool2D final : public Layer {
 public:
  MaxPool2D(ActShape in, int pool) : in_(in), out_{in.h / pool, in.w / pool, in.c}, p_(pool) {
    TFD_CHECK(out_.h > 0 && out_.w > 0);
  }

  std::string Describe() const override { return fmt::format("max_pool2d {}x{}", p_, p_); }
  ActShape output_shape() const override { return out_; }
  void Forward(const float* in, float* out, int batch) override {
    const int c = in_.c;
    for (int n = 0; n < batch; ++n) {
      const float* img = in + static_cast<std::int64_t>(n) * in_.size();
      for (int py = 0; py < out_.h; ++py)
        for (int px = 0; px < out_.w; ++px) {
          const float* first = img + (static_cast<std::int64_t>(py * p_) * in_.w + px * p_) * c;
          std::copy(first, first + c, out);
          for (int dy = 0; dy < p_; ++dy)
            for (int dx = 0; dx < p_; ++dx) {
              const float* v = img + (static_cast<std::int64_t>(py * p_ + dy) * in_.w + px * p_ + dx) * c;
              for (int ch = 0; ch < c; ++ch) out[ch] = v[ch] > out[ch] ? v[ch] : out[ch];
            }
          out += c;
        }
    }
  }
  void Backward(const float* in, const float* out, float* dout, float* din, int batch) override {
    if (din == nullptr) return;
    const int c = in_.c;
    if (out_.h * p_ != in_.h || out_.w * p_ != in_.w)  // rows/columns no window covers get no gradient
      std::fill(din, din + static_cast<std::int64_t>(batch) * in_.size(), 0.0f);
    taken_.resize(static_cast<std::size_t>(c));
    float* taken = taken_.data();
    for (int n = 0; n < batch; ++n) {
      const std::int64_t base = static_cast<std::int64_t>(n) * in_.size();
      for (int py = 0; py < out_.h; ++py)
        for (int px = 0; px < out_.w; ++px) {
          for (int dy = 0; dy < p_; ++dy)
            for (int dx = 0; dx < p_; ++dx) {
              const std::int64_t at = base + (static_cast<std::int64_t>(py * p_ + dy) * in_.w + px * p_ + dx) * c;
              PoolGrad(in + at, out, dout, din + at, taken, c, /*first=*/dy == 0 && dx == 0);
            }
          out += c;
          dout += c;
        }
    }
  }

 private:
  ActShape in_, out_;
  int p_;
  std::vector<float> taken_;
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
std::unique_ptr<Layer> MakeConv2D(ActShape in, int filters, int kernel_size, Activation act, InitSpec init,
                                  GemmConfig gemm) {
  return std::make_unique<Conv2D>(in, filters, kernel_size, act, init, gemm);
}
std::unique_ptr<Layer> MakeMaxPool2D(ActShape in, int pool) { return std::make_unique<MaxPool2D>(in, pool); }

std::unique_ptr<Layer> MakeDropout(ActShape in, double rate) { return std::make_unique<Dropout>(in, rate); }

}  // namespace tfd::tensor
