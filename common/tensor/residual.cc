// Residual blocks (declared in layers.h).
#include <algorithm>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "common/base/check.h"
#include "common/base/random.h"
#include "common/tensor/aligned.h"
#include "common/tensor/elementwise.h"
#include "common/tensor/layers.h"

namespace tfd::tensor {
namespace {

// Inner layer j reads acts_[j - 1] (the block's input for j = 0) and writes acts_[j]; the sum of
// the last one and the shortcut goes to the caller's `out`, so Backward still has every inner
// output the inner layers' Backwards read.
class Residual final : public Layer {
 public:
  Residual(ActShape in, std::vector<BlockLayer> inner, ResidualOptions o) : in_(in), o_(o) {
    TFD_CHECK(!inner.empty());
    for (BlockLayer& b : inner) {
      names_.push_back(std::move(b.name));
      counts_.push_back(b.layer->Params().size());
      layers_.push_back(std::move(b.layer));
    }
    out_ = layers_.back()->output_shape();
    if (o_.projection_stride > 0) {
      projection_ = MakeConv2D(in, out_.c, 1, Activation::kNone, o_.projection_init, o_.gemm, o_.projection_stride, Padding::kValid);
      const ActShape p = projection_->output_shape();
      TFD_CHECK(p.h == out_.h && p.w == out_.w && p.c == out_.c);
    } else {
      TFD_CHECK(in.h == out_.h && in.w == out_.w && in.c == out_.c);
    }
    zeros_.assign(static_cast<std::size_t>(out_.c), 0.0f);
  }

  std::string Describe() const override {
    std::string inner;
    for (const auto& l : layers_) inner += (inner.empty() ? "" : " -> ") + l->Describe();
    return fmt::format("residual [{}]{}{}", inner,
                       projection_ ? fmt::format(" + projection{}", o_.projection_stride == 1 ? "" : fmt::format(" stride {}", o_.projection_stride))
                                   : "",
                       o_.activation == Activation::kNone ? "" : fmt::format(" {}", config::ActivationName(o_.activation)));
  }
  ActShape output_shape() const override { return out_; }
  std::span<const std::unique_ptr<Layer>> Inner() const override { return layers_; }

  std::vector<ParamSpec> Params() const override {
    std::vector<ParamSpec> all;
    for (std::size_t j = 0; j < layers_.size(); ++j) {
      std::vector<ParamSpec> p = layers_[j]->Params();
      for (ParamSpec& s : p) s.name = names_[j] + "/" + s.name;
      all.insert(all.end(), p.begin(), p.end());
    }
    if (projection_)
      for (ParamSpec s : projection_->Params()) all.push_back({"projection/" + s.name, s.shape, s.init, s.fan_in, s.fan_out, s.trainable});
    return all;
  }
  void Bind(std::span<const std::span<float>> params, std::span<const std::span<float>> grads) override {
    std::size_t at = 0;
    for (std::size_t j = 0; j < layers_.size(); ++j) {
      layers_[j]->Bind(params.subspan(at, counts_[j]), grads.subspan(at, counts_[j]));
      at += counts_[j];
    }
    if (projection_) {
      projection_->Bind(params.subspan(at, 2), grads.subspan(at, 2));
      at += 2;
    }
    TFD_CHECK(at == params.size() && at == grads.size());
  }
  // An inner dropout draws from its own stream of the block's seed.
  void SetTraining(bool training, std::uint64_t seed) override {
    for (std::size_t j = 0; j < layers_.size(); ++j) layers_[j]->SetTraining(training, layers_[j]->Stochastic() ? Rng(seed, j).Next() : 0);
  }
  bool Stochastic() const override {
    return std::any_of(layers_.begin(), layers_.end(), [](const auto& l) { return l->Stochastic(); });
  }
  // The inner outputs (and whatever state the inner layers keep) are the last Forward's.
  bool KeepsForwardState() const override { return true; }
  bool PerImage() const override {
    return std::all_of(layers_.begin(), layers_.end(), [](const auto& l) { return l->PerImage(); });
  }
  std::int64_t ForwardScratchPerImage() const override {
    std::int64_t n = out_.size() * (projection_ ? 1 : 0) + (projection_ ? projection_->ForwardScratchPerImage() : 0);
    for (const auto& l : layers_) n += l->ForwardScratchPerImage() + l->output_shape().size();
    return n;
  }
  void Reserve(int max_batch) override {
    std::int64_t widest = std::max(in_.size(), out_.size());
    acts_.resize(layers_.size());
    for (std::size_t j = 0; j < layers_.size(); ++j) {
      layers_[j]->Reserve(max_batch);
      acts_[j].resize(static_cast<std::size_t>(layers_[j]->output_shape().size() * max_batch));
      widest = std::max(widest, layers_[j]->output_shape().size());
    }
    for (auto& d : dbuf_) d.resize(static_cast<std::size_t>(widest * max_batch));
    dsum_.resize(static_cast<std::size_t>(out_.size() * max_batch));
    if (projection_) {
      projection_->Reserve(max_batch);
      shortcut_.resize(static_cast<std::size_t>(out_.size() * max_batch));
      dproj_.resize(static_cast<std::size_t>(in_.size() * max_batch));
    }
    if (NeedsPreActivation(o_.activation)) pre_.resize(static_cast<std::size_t>(out_.size() * max_batch));
  }

  void Forward(const float* in, float* out, int batch) override {
    const float* x = in;
    for (std::size_t j = 0; j < layers_.size(); ++j) {
      layers_[j]->Forward(x, acts_[j].data(), batch);
      x = acts_[j].data();
    }
    const float* shortcut = in;
    if (projection_) {
      projection_->Forward(in, shortcut_.data(), batch);
      shortcut = shortcut_.data();
    }
    const std::int64_t n = out_.size() * batch;
    for (std::int64_t i = 0; i < n; ++i) out[i] = x[i] + shortcut[i];
    BiasActivation(out, zeros_.data(), n / out_.c, out_.c, o_.activation, pre_.empty() ? nullptr : pre_.data());
  }

  // d = dL/d(sum) goes down both branches: the shortcut's share is taken (and a projection's
  // backward run) before the inner layers' Backwards use `dout` as scratch, and added into `din`
  // after them.
  void Backward(const float* in, const float* out, float* dout, float* din, int batch) override {
    const std::int64_t n = out_.size() * batch, in_n = in_.size() * batch;
    ActivationGradBias(out, dout, n / out_.c, out_.c, o_.activation, nullptr, pre_.empty() ? nullptr : pre_.data());
    std::copy(dout, dout + n, dsum_.data());
    if (projection_) projection_->Backward(in, shortcut_.data(), dsum_.data(), din == nullptr ? nullptr : dproj_.data(), batch);
    float* d = dout;
    for (std::size_t j = layers_.size(); j-- > 0;) {
      const float* layer_in = j == 0 ? in : acts_[j - 1].data();
      float* next = j == 0 ? din : dbuf_[j % 2].data();
      layers_[j]->Backward(layer_in, acts_[j].data(), d, next, batch);
      d = next;
    }
    if (din == nullptr) return;
    const float* share = projection_ ? dproj_.data() : dsum_.data();
    for (std::int64_t i = 0; i < in_n; ++i) din[i] += share[i];
  }

 private:
  const ActShape in_;
  ActShape out_;
  const ResidualOptions o_;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<Layer> projection_;
  std::vector<std::size_t> counts_;  // each inner layer's variables, as its Params() lists them
  std::vector<AlignedFloats> acts_;
  AlignedFloats dbuf_[2];
  AlignedFloats shortcut_, dsum_, dproj_;  // the projection's output; dL/d(sum); the projection's dL/d(in)
  std::vector<float> pre_, zeros_;              // the sum before a gelu; the activation's bias
};

}  // namespace

std::unique_ptr<Layer> MakeResidual(ActShape in, std::vector<BlockLayer> inner, ResidualOptions options) {
  return std::make_unique<Residual>(in, std::move(inner), options);
}

}  // namespace tfd::tensor
