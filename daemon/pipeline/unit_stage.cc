#include "daemon/pipeline/unit_stage.h"

#include <algorithm>
#include <chrono>

#include "common/base/clock.h"
#include "common/tensor/elementwise.h"
#include "common/tensor/gemm.h"
#include "common/tensor/layers.h"
#include "daemon/pipeline/stage_plan.h"

namespace tfd::pipeline {
namespace {

using Clock = std::chrono::steady_clock;
using config::LayerSpec;

}  // namespace

UnitStage::UnitStage(collective::Ring& ring, model::Model& model, int stage, int stages, int microbatches, int batch_size)
    : ring_(ring), model_(model), stage_(stage), stages_(stages), microbatches_(microbatches), mb_(batch_size / microbatches) {
  std::int64_t widest = model.input_size();
  for (std::size_t i = 0; i < model.num_layers(); ++i) {
    const std::int64_t w = model.layer_output_shape(i).size();
    widest = std::max(widest, w);
    out_.emplace_back(static_cast<std::size_t>(w * mb_));
  }
  for (auto& d : dbuf_) d.resize(static_cast<std::size_t>(widest * mb_));
  acc_.resize(model.params().size());
  stats_.pipeline = false;
}

Status UnitStage::AllReduce(std::span<float> data) {
  stats_.bytes_sent += 2 * (static_cast<std::uint64_t>(stages_) - 1) * data.size_bytes() / static_cast<std::uint64_t>(stages_);
  return ring_.AllReduce(data);
}

Status UnitStage::ForwardLayer(std::size_t i, const float* in, int row) {
  const LayerSpec& l = model_.layer_spec(i);
  float* out = out_[i].data();
  if (l.kind != LayerSpec::Kind::kDense) {  // dropout: elementwise, the same on every task
    const float* o = model_.ForwardLayers(i, i + 1, in, row, mb_, /*training=*/true);
    std::copy(o, o + out_[i].size(), out);
    return Status::Ok();
  }
  const int k = static_cast<int>(i == 0 ? model_.input_size() : model_.layer_output_shape(i - 1).size()), units = l.units;
  const auto [c0, c1] = UnitSlice(units, stage_, stages_);
  const float* kernel = model_.params().data() + model_.layer_starts()[i];
  const float* bias = kernel + static_cast<std::ptrdiff_t>(k) * units;
  const Clock::time_point start = Clock::now();
  std::fill(out_[i].begin(), out_[i].end(), -0.0f);
  if (c1 > c0) tensor::Gemm(model_.gemm(), false, false, mb_, c1 - c0, k, 1.0f, in, k, kernel + c0, units, 0.0f, out + c0, units);
  for (int r = 0; r < mb_; ++r) tensor::BiasActivation(out + static_cast<std::ptrdiff_t>(r) * units + c0, bias + c0, 1, c1 - c0, l.activation);
  stats_.forward_s += SecondsSince(start);
  return AllReduce(out_[i]);  // the all-gather: every other column is -0.0 here
}

Status UnitStage::BackwardLayer(std::size_t i, const float* in, int row, float* dout, float* din) {
  const LayerSpec& l = model_.layer_spec(i);
  if (l.kind != LayerSpec::Kind::kDense) {
    if (din != nullptr) model_.BackwardLayers(i, i + 1, in, row, dout, din, mb_);
    return Status::Ok();
  }
  const int k = static_cast<int>(i == 0 ? model_.input_size() : model_.layer_output_shape(i - 1).size()), units = l.units;
  const auto [c0, c1] = UnitSlice(units, stage_, stages_);
  const int n = c1 - c0;
  const std::size_t kernel_at = model_.layer_starts()[i];
  const float* kernel = model_.params().data() + kernel_at;
  float* dkernel = model_.grads().data() + kernel_at;
  float* dbias = dkernel + static_cast<std::ptrdiff_t>(k) * units;
  const float* y = out_[i].data();
  const Clock::time_point start = Clock::now();
  for (int r = 0; r < mb_; ++r) {
    const std::ptrdiff_t at = static_cast<std::ptrdiff_t>(r) * units + c0;
    tensor::ActivationGradBias(y + at, dout + at, 1, n, l.activation, nullptr);
  }
  if (n > 0) tensor::Gemm(model_.gemm(), true, false, k, n, mb_, 1.0f, in, k, dout + c0, units, 0.0f, dkernel + c0, units);
  for (int c = c0; c < c1; ++c) {
    float s = 0;
    for (int r = 0; r < mb_; ++r) s += dout[static_cast<std::ptrdiff_t>(r) * units + c];
    dbias[c] = s;
  }
  if (din == nullptr) {
    stats_.backward_s += SecondsSince(start);
    return Status::Ok();
  }
  if (n > 0) {
    tensor::Gemm(model_.gemm(), false, true, mb_, k, n, 1.0f, dout + c0, units, kernel + c0, units, 0.0f, din, k);
  } else {  // none of this layer's units here (an output narrower than the stages): no share of the sum
    std::fill(din, din + static_cast<std::ptrdiff_t>(mb_) * k, -0.0f);
  }
  stats_.backward_s += SecondsSince(start);
  return AllReduce(std::span(din, static_cast<std::size_t>(mb_) * static_cast<std::size_t>(k)));  // the input gradient's shares summed
}

Result<tensor::LossResult> UnitStage::Step(const float* x, const tensor::Labels& y, std::uint64_t dropout_seed) {
  const Clock::time_point start = Clock::now();
  const std::size_t layers = model_.num_layers();
  const std::int64_t in_width = model_.input_size();
  double loss_sum = 0;
  tensor::LossResult total;
  for (int m = 0; m < microbatches_; ++m) {
    const float* xm = x + static_cast<std::int64_t>(m) * mb_ * in_width;
    const int row = m * mb_;
    model_.SetDropoutSeed(model::MicrobatchSeed(dropout_seed, m));
    for (std::size_t i = 0; i < layers; ++i) TFD_RETURN_IF_ERROR(ForwardLayer(i, i == 0 ? xm : out_[i - 1].data(), row));
    const tensor::LossResult r = tensor::ComputeLoss(model_.loss(), out_[layers - 1].data(), y.Rows(static_cast<std::size_t>(row), mb_),
                                                     model_.classes(), dbuf_[0].data());
    loss_sum += r.loss;
    total.correct += r.correct;
    total.abs_error += r.abs_error;
    total.squared_error += r.squared_error;
    float* dout = dbuf_[0].data();
    for (std::size_t i = layers; i-- > 0;) {
      float* din = i == 0 ? nullptr : dbuf_[(layers - i) % 2].data();
      TFD_RETURN_IF_ERROR(BackwardLayer(i, i == 0 ? xm : out_[i - 1].data(), row, dout, din));
      dout = din;
    }
    if (microbatches_ > 1) model::AccumulateGradients(acc_, model_.grads(), m == 0);
  }
  if (microbatches_ > 1) model::ScaleGradients(model_.grads(), acc_, microbatches_);
  stats_.schedule_s += SecondsSince(start);
  stats_.peak_in_flight = 1;
  total.loss = loss_sum / microbatches_;
  return total;
}

}  // namespace tfd::pipeline
