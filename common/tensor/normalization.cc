// Batch and layer normalisation (declared in layers.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "common/base/check.h"
#include "common/tensor/batch_norm_passes.h"
#include "common/tensor/layers.h"

namespace tfd::tensor {
namespace {

using config::InitKind;

// Binds the optional gamma and beta (in that order, as Params lists them) and any trailing
// variables, with their gradients.
struct NormVariables {
  float *gamma = nullptr, *beta = nullptr, *dgamma = nullptr, *dbeta = nullptr;
  std::size_t Bind(const NormOptions& o, std::span<const std::span<float>> params, std::span<const std::span<float>> grads) {
    std::size_t i = 0;
    if (o.scale) gamma = params[i].data(), dgamma = grads[i].data(), ++i;
    if (o.center) beta = params[i].data(), dbeta = grads[i].data(), ++i;
    return i;
  }
  float Gamma(int c) const { return gamma == nullptr ? 1.0f : gamma[c]; }
  float Beta(int c) const { return beta == nullptr ? 0.0f : beta[c]; }
};

std::vector<ParamSpec> GammaBeta(const NormOptions& o, int c) {
  std::vector<ParamSpec> p;
  if (o.scale) p.push_back({"gamma", {c}, {InitKind::kOnes}, c, c});
  if (o.center) p.push_back({"beta", {c}, {InitKind::kZeros}, c, c});
  return p;
}

std::string Describe(std::string_view kind, const NormOptions& o, bool batch) {
  return fmt::format("{}{}{}{}", kind, batch && o.sync ? " sync" : "", o.scale ? "" : " no-scale", o.center ? "" : " no-center");
}

class BatchNorm final : public Layer {
 public:
  BatchNorm(ActShape in, NormOptions o) : shape_(in), c_(in.c), o_(o), passes_(BatchNormPassesFor(WidestCpuLevel())) {}

  std::string Describe() const override { return tensor::Describe("batch_norm", o_, true); }
  ActShape output_shape() const override { return shape_; }
  std::vector<ParamSpec> Params() const override {
    std::vector<ParamSpec> p = GammaBeta(o_, c_);
    p.push_back({"moving_mean", {c_}, {InitKind::kZeros}, c_, c_, /*trainable=*/false});
    p.push_back({"moving_variance", {c_}, {InitKind::kOnes}, c_, c_, /*trainable=*/false});
    return p;
  }
  void Bind(std::span<const std::span<float>> params, std::span<const std::span<float>> grads) override {
    const std::size_t i = v_.Bind(o_, params, grads);
    TFD_CHECK(params.size() == i + 2 && grads.size() == i + 2);
    moving_mean_ = params[i], moving_var_ = params[i + 1];
    dmoving_mean_ = grads[i], dmoving_var_ = grads[i + 1];
  }
  void SetTraining(bool training, std::uint64_t) override { training_ = training; }
  // Backward reads the mean and 1/std the last Forward normalised with.
  bool KeepsForwardState() const override { return true; }
  void Reserve(int) override {
    mean_.resize(c_), var_.resize(c_), inv_std_.resize(c_), scale_.resize(c_), shift_.resize(c_), pivot_.resize(c_);
    pivot_sum_.resize(c_), redo_.assign(c_, 1);
    acc_.resize(2 * static_cast<std::size_t>(c_)), sums_.resize(2 * static_cast<std::size_t>(c_) + 1);
  }
  void SetSum(CrossReplicaSum* sum) { sum_ = o_.sync ? sum : nullptr; }
  void SetRecomputing(bool recomputing) { recomputing_ = recomputing; }
  // The sums a training Forward or Backward makes, with no rows of this replica's. Forward's are
  // BatchStatistics' own over zero rows: each sum then starts from zeros (not from the previous
  // sum's result, which would add the others' sum of x into their sum of squares), and this
  // replica moves its moving statistics with the same bits as the replicas that had rows.
  void JoinSums(bool forward) {
    if (sum_ == nullptr) return;
    if (forward) {
      BatchStatistics(nullptr, 0);
      return;
    }
    std::fill(sums_.begin(), sums_.end(), 0.0f);
    sum_->Sum(std::span(sums_).first(2 * c_));
  }

  void Forward(const float* in, float* out, int batch) override {
    const std::int64_t rows = std::int64_t{batch} * shape_.h * shape_.w;
    last_training_ = training_;
    if (training_) BatchStatistics(in, rows);
    else
      for (int c = 0; c < c_; ++c) mean_[c] = moving_mean_[c], inv_std_[c] = InvStd(moving_var_[c]);
    for (int c = 0; c < c_; ++c) scale_[c] = v_.Gamma(c) * inv_std_[c], shift_[c] = v_.Beta(c) - mean_[c] * scale_[c];
    passes_.scale_shift(in, rows, c_, scale_.data(), shift_.data(), out, BatchNormKeepFloats(rows * c_));
  }

  // With g = dout and xhat = (x - mean) / std over the n rows the statistics came from (every
  // replica's when synchronised): dgamma = sum g xhat, dbeta = sum g over this replica's rows, and
  // din = gamma / std (g - sum g / n - xhat sum g xhat / n) with the sums over the same n rows.
  void Backward(const float* in, const float*, float* dout, float* din, int batch) override {
    const std::int64_t rows = std::int64_t{batch} * shape_.h * shape_.w;
    const double* sg = acc_.data();
    const double* sgx = acc_.data() + c_;
    std::fill(acc_.begin(), acc_.end(), 0.0);
    passes_.grad_sums(in, dout, rows, c_, mean_.data(), inv_std_.data(), acc_.data(), acc_.data() + c_);
    for (int c = 0; c < c_; ++c) {
      if (v_.dgamma != nullptr) v_.dgamma[c] = static_cast<float>(sgx[c]);
      if (v_.dbeta != nullptr) v_.dbeta[c] = static_cast<float>(sg[c]);
      dmoving_mean_[c] = dmoving_var_[c] = 0.0f;
    }
    if (!last_training_) {  // the moving statistics are constants: din = g gamma / std
      if (din != nullptr)
        for (std::int64_t r = 0; r < rows; ++r)
          for (int c = 0; c < c_; ++c) din[r * c_ + c] = dout[r * c_ + c] * scale_[c];
      return;
    }
    float* red = sums_.data();
    for (int c = 0; c < 2 * c_; ++c) red[c] = static_cast<float>(acc_[c]);
    if (sum_ != nullptr) sum_->Sum(std::span(sums_).first(2 * c_));  // every replica, din or not: the calls must pair up
    if (din == nullptr) return;
    const float inv_n = 1.0f / count_;
    for (int c = 0; c < c_; ++c) red[c] *= inv_n, red[c_ + c] *= inv_n;  // mean g, mean g xhat
    passes_.input_grad(in, dout, rows, c_, mean_.data(), inv_std_.data(), scale_.data(), red, red + c_, din,
                        BatchNormKeepFloats(rows * c_));
  }

 private:
  float InvStd(float var) const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(var) + o_.epsilon)); }

  // The batch's mean and biased variance per channel, and the moving statistics moved toward them
  // as Keras does. Over every replica's rows when synchronised: two sums, of x with the row count,
  // then of (x - mean)², so no replica subtracts large squares. One replica's alone: one pass
  // (OnePassStatistics), and the two for the channels it cannot take exactly enough.
  void BatchStatistics(const float* in, std::int64_t rows) {
    const double* acc = acc_.data();
    if (sum_ == nullptr && rows > 0 && OnePassStatistics(in, rows)) return MoveAverages();
    std::fill(acc_.begin(), acc_.end(), 0.0);
    passes_.sum(in, rows, c_, acc_.data());
    for (int c = 0; c < c_; ++c) sums_[c] = static_cast<float>(acc[c]);
    sums_[c_] = static_cast<float>(rows);
    if (sum_ != nullptr) sum_->Sum(std::span(sums_).first(c_ + 1));
    count_ = sums_[c_];
    const bool all = sum_ != nullptr || rows == 0;  // else only the channels OnePassStatistics left
    for (int c = 0; c < c_; ++c)
      if (all || redo_[c]) mean_[c] = sums_[c] / count_;
    std::fill(acc_.begin(), acc_.end(), 0.0);
    passes_.sum_squared_deviations(in, rows, c_, mean_.data(), acc_.data());
    for (int c = 0; c < c_; ++c) sums_[c] = static_cast<float>(acc[c]);
    if (sum_ != nullptr) sum_->Sum(std::span(sums_).first(c_));
    for (int c = 0; c < c_; ++c)
      if (all || redo_[c]) var_[c] = sums_[c] / count_;
    MoveAverages();
  }

  // The mean and variance from the sums of d = x - k and d² in one pass, k per channel the mean of
  // the rows BatchNormShiftRow picks (a function of the batch alone, so a recomputed Forward gets
  // the same bits), then var = mean(d²) - mean(d)². The float sums of d² carry a relative
  // error e (as the two-pass sum of (x - mean)² does), which the subtraction scales by
  // (mean(d)² + var) / var: a channel's result is taken while mean(d)² <= kMaxShiftRatio var, so
  // the error stays within (1 + kMaxShiftRatio) e. The others are marked in redo_ and the function
  // returns false: the caller takes the two passes for them (a channel's bits never depend on
  // another's).
  bool OnePassStatistics(const float* in, std::int64_t rows) {
    const std::int64_t samples = std::min(rows, kBatchNormShiftRows);
    std::fill(pivot_sum_.begin(), pivot_sum_.end(), 0.0);
    for (std::int64_t i = 0; i < samples; ++i) {
      const float* row = in + BatchNormShiftRow(i, rows) * c_;
      for (int c = 0; c < c_; ++c) pivot_sum_[c] += row[c];  // in double: equal values give themselves back
    }
    for (int c = 0; c < c_; ++c) pivot_[c] = static_cast<float>(pivot_sum_[c] / static_cast<double>(samples));
    std::fill(acc_.begin(), acc_.end(), 0.0);
    passes_.shifted_sums(in, rows, c_, pivot_.data(), acc_.data(), acc_.data() + c_);
    const double n = static_cast<double>(rows);
    bool every = true;
    for (int c = 0; c < c_; ++c) {
      const double d = acc_[c] / n, var = acc_[c_ + c] / n - d * d;
      // Not for NaN or Inf either: the two passes say what those are.
      const bool close_enough = std::isfinite(var) && d * d <= kMaxShiftRatio * var && (var > 0.0 || d == 0.0);
      redo_[c] = !close_enough;
      every = every && close_enough;
      if (!close_enough) continue;
      mean_[c] = static_cast<float>(pivot_[c] + d);
      var_[c] = static_cast<float>(std::max(0.0, var));
    }
    count_ = static_cast<float>(rows);
    return every;
  }

  // From var_ and mean_: inv_std_, and the moving statistics unless this Forward is a recompute.
  void MoveAverages() {
    const auto keep = static_cast<float>(1.0 - o_.momentum);
    for (int c = 0; c < c_; ++c) {
      const float var = var_[c];
      inv_std_[c] = InvStd(var);
      if (recomputing_) continue;  // this batch moved them when it first ran
      moving_mean_[c] -= (moving_mean_[c] - mean_[c]) * keep;
      moving_var_[c] -= (moving_var_[c] - var) * keep;
    }
  }

  static constexpr double kMaxShiftRatio = 8.0;

  const ActShape shape_;
  const int c_;
  const NormOptions o_;
  const BatchNormPasses& passes_;
  NormVariables v_;
  std::span<float> moving_mean_, moving_var_, dmoving_mean_, dmoving_var_;
  CrossReplicaSum* sum_ = nullptr;
  bool training_ = false, last_training_ = false, recomputing_ = false;
  float count_ = 0;  // rows the last training Forward's statistics came from
  std::vector<float> mean_, var_, inv_std_, scale_, shift_, sums_;
  std::vector<float> pivot_;       // OnePassStatistics' shift
  std::vector<double> pivot_sum_;  // its sum
  std::vector<char> redo_;         // the channels it leaves to the two passes
  std::vector<double> acc_;
};

class LayerNorm final : public Layer {
 public:
  LayerNorm(ActShape in, NormOptions o) : shape_(in), c_(in.c), o_(o) {}

  std::string Describe() const override { return tensor::Describe("layer_norm", o_, false); }
  ActShape output_shape() const override { return shape_; }
  std::vector<ParamSpec> Params() const override { return GammaBeta(o_, c_); }
  void Bind(std::span<const std::span<float>> params, std::span<const std::span<float>> grads) override {
    TFD_CHECK(v_.Bind(o_, params, grads) == params.size());
  }
  void Reserve(int) override { acc_.resize(2 * static_cast<std::size_t>(c_)); }

  void Forward(const float* in, float* out, int batch) override {
    const std::int64_t rows = std::int64_t{batch} * shape_.h * shape_.w;
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* x = in + r * c_;
      const auto [mean, inv] = Moments(x);
      for (int c = 0; c < c_; ++c) out[r * c_ + c] = (x[c] - mean) * inv * v_.Gamma(c) + v_.Beta(c);
    }
  }
  // Per row, with g' = g gamma: din = (g' - mean g' - xhat mean(g' xhat)) / std. The row's moments
  // are computed again from `in`, so Forward leaves no state.
  void Backward(const float* in, const float*, float* dout, float* din, int batch) override {
    const std::int64_t rows = std::int64_t{batch} * shape_.h * shape_.w;
    double* sg = acc_.data();
    double* sgx = acc_.data() + c_;
    std::fill(acc_.begin(), acc_.end(), 0.0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* x = in + r * c_;
      float* g = dout + r * c_;
      const auto [mean, inv] = Moments(x);
      double mg = 0, mgx = 0;
      for (int c = 0; c < c_; ++c) {
        const float xhat = (x[c] - mean) * inv;
        sg[c] += g[c];
        sgx[c] += static_cast<double>(g[c]) * xhat;
        g[c] *= v_.Gamma(c);
        mg += g[c];
        mgx += static_cast<double>(g[c]) * xhat;
      }
      if (din == nullptr) continue;
      const auto a = static_cast<float>(mg / c_), b = static_cast<float>(mgx / c_);
      for (int c = 0; c < c_; ++c) din[r * c_ + c] = inv * (g[c] - a - (x[c] - mean) * inv * b);
    }
    for (int c = 0; c < c_; ++c) {
      if (v_.dgamma != nullptr) v_.dgamma[c] = static_cast<float>(sgx[c]);
      if (v_.dbeta != nullptr) v_.dbeta[c] = static_cast<float>(sg[c]);
    }
  }

 private:
  struct RowMoments {
    float mean, inv_std;
  };
  RowMoments Moments(const float* x) const {
    double sum = 0, sq = 0;
    for (int c = 0; c < c_; ++c) sum += x[c];
    const double mean = sum / c_;
    for (int c = 0; c < c_; ++c) sq += (x[c] - mean) * (x[c] - mean);
    return {static_cast<float>(mean), static_cast<float>(1.0 / std::sqrt(sq / c_ + o_.epsilon))};
  }

  const ActShape shape_;
  const int c_;
  const NormOptions o_;
  NormVariables v_;
  std::vector<double> acc_;
};

}  // namespace

std::unique_ptr<Layer> MakeBatchNorm(ActShape in, NormOptions options) { return std::make_unique<BatchNorm>(in, options); }
std::unique_ptr<Layer> MakeLayerNorm(ActShape in, NormOptions options) { return std::make_unique<LayerNorm>(in, options); }

// A block's batch norms are reached through its Inner() layers.
bool SetCrossReplicaSum(Layer& layer, CrossReplicaSum* sum) {
  bool any = false;
  for (const std::unique_ptr<Layer>& inner : layer.Inner()) any = SetCrossReplicaSum(*inner, sum) || any;
  auto* bn = dynamic_cast<BatchNorm*>(&layer);
  if (bn != nullptr) bn->SetSum(sum);
  return any || bn != nullptr;
}

bool SetRecomputing(Layer& layer, bool recomputing) {
  bool any = false;
  for (const std::unique_ptr<Layer>& inner : layer.Inner()) any = SetRecomputing(*inner, recomputing) || any;
  auto* bn = dynamic_cast<BatchNorm*>(&layer);
  if (bn != nullptr) bn->SetRecomputing(recomputing);
  return any || bn != nullptr;
}

// A block's Forward runs its inner layers in order and its Backward in reverse: so do the joins.
bool JoinCrossReplicaSums(Layer& layer, bool forward) {
  bool any = false;
  const auto inner = layer.Inner();
  for (std::size_t j = 0; j < inner.size(); ++j) any = JoinCrossReplicaSums(*inner[forward ? j : inner.size() - 1 - j], forward) || any;
  auto* bn = dynamic_cast<BatchNorm*>(&layer);
  if (bn != nullptr) bn->JoinSums(forward);
  return any || bn != nullptr;
}

}  // namespace tfd::tensor
