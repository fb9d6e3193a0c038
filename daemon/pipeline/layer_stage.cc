#include "daemon/pipeline/layer_stage.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/base/clock.h"

namespace tfd::pipeline {
namespace {

using Clock = std::chrono::steady_clock;
using Side = collective::Ring::Side;

}  // namespace

std::string StageStats::TakeNote(int stage, int stages, int microbatches, std::vector<EventField>* fields) {
  const double busy = forward_s + backward_s;
  const double bubble = schedule_s > 0 ? std::max(0.0, 1 - busy / schedule_s) : 0;
  const double theory = static_cast<double>(stages - 1) / (microbatches + stages - 1);
  std::string note = fmt::format("stage={}/{} forward_s={:.2f} backward_s={:.2f} sent_mb={:.1f} {}={:.3f}", stage, stages, forward_s,
                                 backward_s, static_cast<double>(bytes_sent) / 1e6, pipeline ? "bubble" : "waiting", bubble);
  if (pipeline) note += fmt::format(" theory={:.3f} peak_in_flight={} peak_activation_kb={}", theory, peak_in_flight, peak_activation_bytes / 1024);
  if (replicas_s >= 0) note += fmt::format(" replicas_allreduce_s={:.2f}", replicas_s);
  if (fields != nullptr) {
    *fields = {{"stage", std::int64_t{stage}}, {"stages", std::int64_t{stages}}, {"forward_s", forward_s}, {"backward_s", backward_s},
               {"busy", schedule_s > 0 ? busy / schedule_s : 0.0}, {"sent_bytes", static_cast<std::int64_t>(bytes_sent)}};
    if (pipeline) {
      fields->push_back({"bubble", bubble});
      fields->push_back({"bubble_theory", theory});
      fields->push_back({"peak_activation_bytes", peak_activation_bytes});
    }
    if (replicas_s >= 0) fields->push_back({"replicas_allreduce_s", replicas_s});
  }
  forward_s = backward_s = schedule_s = 0;
  if (replicas_s > 0) replicas_s = 0;
  bytes_sent = 0;
  return note;
}

LayerStage::LayerStage(collective::Ring& ring, model::Model& model, std::size_t first, std::size_t last, int stage, int stages,
                       int replica, const config::ModelParallelSpec& spec, int batch_size)
    : ring_(ring),
      model_(model),
      first_(first),
      last_(last),
      stage_(stage),
      stages_(stages),
      replica_(replica),
      microbatches_(spec.microbatches),
      mb_(batch_size / spec.microbatches),
      one_f_one_b_(spec.schedule == config::ModelParallelSpec::Schedule::kOneFOneB),
      in_width_(static_cast<std::size_t>(first == 0 ? model.input_size() : model.layer_output_shape(first - 1).size())),
      out_width_(static_cast<std::size_t>(model.layer_output_shape(last - 1).size())),
      param_begin_(model.layer_starts()[first]),
      param_end_(model.layer_starts()[last]) {
  for (std::size_t i = first; i < last; ++i) keeps_state_ = keeps_state_ || model.layer_keeps_state(i);
  if (stage > 0) inputs_.resize(in_width_ * static_cast<std::size_t>(batch_size));
  grad_out_.resize(out_width_ * static_cast<std::size_t>(mb_));
  din_.resize(in_width_ * static_cast<std::size_t>(mb_));
  acc_.resize(param_end_ - param_begin_);
}

const float* LayerStage::Input(int m, const float* x) const {
  const std::size_t offset = static_cast<std::size_t>(m) * static_cast<std::size_t>(mb_) * in_width_;
  return stage_ == 0 ? x + offset : inputs_.data() + offset;
}

Status LayerStage::Refuse(const Status& why) {
  ring_.Close(why);
  return why;
}

Result<wire::InFrame> LayerStage::ReceiveChecked(Side side, wire::MessageType type, int from_stage, int m, std::size_t width,
                                                 wire::PipeTensor* out) {
  TFD_ASSIGN_OR_RETURN(wire::InFrame frame, ring_.Receive(side));
  const std::string from = ring_.NeighbourName(side);
  if (frame.header.type != type)
    return Refuse(Status::Corruption(fmt::format("{} sent {} where {} was due", from, wire::MessageTypeName(frame.header.type),
                                                 wire::MessageTypeName(type))));
  if (Status s = wire::Decode(frame.payload, out); !s.ok()) return Refuse(Status::Corruption(fmt::format("{}: {}", from, s.message())));
  if (out->replica != replica_ || out->stage != from_stage || out->step != step_ || out->microbatch != static_cast<std::uint32_t>(m) ||
      out->rows != static_cast<std::uint32_t>(mb_) || out->values.size() != width * static_cast<std::size_t>(mb_) * 4) {
    return Refuse(Status::Corruption(fmt::format(
        "refused {} from {}: stage {} of replica {}, micro-batch {} of step {} ({} rows of {} floats), where stage {} of replica {}, "
        "micro-batch {} of step {} ({} rows of {} floats) was due: that stage does not belong to this replica or that micro-batch is "
        "not in flight",
        wire::MessageTypeName(type), from, out->stage, out->replica, out->microbatch, out->step, out->rows,
        out->rows == 0 ? 0 : out->values.size() / 4 / out->rows, from_stage, replica_, m, step_, mb_, width)));
  }
  return frame;
}

Status LayerStage::Forward(int m, const float* x, std::uint64_t seed) {
  if (stage_ > 0) {
    wire::PipeTensor t;
    TFD_ASSIGN_OR_RETURN(wire::InFrame frame, ReceiveChecked(Side::kPrev, wire::MessageType::kPipeActivation, stage_ - 1, m, in_width_, &t));
    std::memcpy(inputs_.data() + static_cast<std::size_t>(m) * mb_ * in_width_, t.values.data(), t.values.size());
  }
  const Clock::time_point start = Clock::now();
  model_.SetDropoutSeed(model::MicrobatchSeed(seed, m));
  const float* out = model_.ForwardLayers(first_, last_, Input(m, x), m * mb_, mb_, /*training=*/true);
  last_forward_ = m;
  stats_.forward_s += SecondsSince(start);
  ++in_flight_;
  stats_.peak_in_flight = std::max(stats_.peak_in_flight, in_flight_);
  if (stage_ + 1 < stages_) {
    const wire::PipeTensor t{.step = step_, .microbatch = static_cast<std::uint32_t>(m), .stage = static_cast<std::uint16_t>(stage_),
                             .replica = static_cast<std::uint16_t>(replica_), .rows = static_cast<std::uint32_t>(mb_)};
    wire::OutFrame f = wire::Encode(wire::MessageType::kPipeActivation, t, std::span(out, out_width_ * static_cast<std::size_t>(mb_)));
    stats_.bytes_sent += f.payload_size();
    TFD_RETURN_IF_ERROR(ring_.Send(Side::kNext, std::move(f)));
  }
  return Status::Ok();
}

Status LayerStage::Backward(int m, const float* x, const tensor::Labels& y, std::uint64_t seed) {
  const float* dout = nullptr;
  tensor::LossResult r;  // the last stage's on micro-batch m, computed here or sent back to this stage
  Clock::time_point start;
  if (stage_ + 1 < stages_) {
    wire::PipeTensor t;
    TFD_ASSIGN_OR_RETURN(wire::InFrame frame, ReceiveChecked(Side::kNext, wire::MessageType::kPipeGradient, stage_ + 1, m, out_width_, &t));
    std::memcpy(grad_out_.data(), t.values.data(), t.values.size());
    dout = grad_out_.data();
    r = {.loss = t.loss, .correct = static_cast<int>(t.correct), .abs_error = t.abs_error, .squared_error = t.squared_error};
    start = Clock::now();
  } else {
    start = Clock::now();
    r = model_.LossGradient(m * mb_, y.Rows(static_cast<std::size_t>(m * mb_), static_cast<std::size_t>(mb_)));
  }
  if (keeps_state_ && last_forward_ != m) {  // the layers' state is another micro-batch's: recompute this one's
    model_.SetDropoutSeed(model::MicrobatchSeed(seed, m));
    model_.RecomputeLayers(first_, last_, Input(m, x), m * mb_, mb_);
    last_forward_ = m;
  }
  model_.BackwardLayers(first_, last_, Input(m, x), m * mb_, dout, stage_ > 0 ? din_.data() : nullptr, mb_);
  if (microbatches_ > 1)
    model::AccumulateGradients(acc_, model_.grads().subspan(param_begin_, param_end_ - param_begin_), m == 0);
  stats_.backward_s += std::chrono::duration<double>(Clock::now() - start).count();
  --in_flight_;
  loss_sum_ += r.loss;
  metrics_.correct += r.correct;
  metrics_.abs_error += r.abs_error;
  metrics_.squared_error += r.squared_error;
  if (stage_ > 0) {
    const wire::PipeTensor t{.step = step_, .microbatch = static_cast<std::uint32_t>(m), .stage = static_cast<std::uint16_t>(stage_),
                             .replica = static_cast<std::uint16_t>(replica_), .rows = static_cast<std::uint32_t>(mb_),
                             .correct = static_cast<std::uint32_t>(r.correct), .loss = r.loss, .abs_error = r.abs_error,
                             .squared_error = r.squared_error};
    wire::OutFrame f = wire::Encode(wire::MessageType::kPipeGradient, t, din_);
    stats_.bytes_sent += f.payload_size();
    TFD_RETURN_IF_ERROR(ring_.Send(Side::kPrev, std::move(f)));
  }
  return Status::Ok();
}

Result<tensor::LossResult> LayerStage::Step(const float* x, const tensor::Labels& y, std::uint64_t dropout_seed) {
  ++step_;
  loss_sum_ = 0;
  metrics_ = {};
  const Clock::time_point start = Clock::now();
  const int m_count = microbatches_;
  if (!one_f_one_b_) {
    for (int m = 0; m < m_count; ++m) TFD_RETURN_IF_ERROR(Forward(m, x, dropout_seed));
    for (int m = 0; m < m_count; ++m) TFD_RETURN_IF_ERROR(Backward(m, x, y, dropout_seed));
  } else {
    const int warm = std::min(stages_ - 1 - stage_, m_count);
    int f = 0, b = 0;
    for (; f < warm; ++f) TFD_RETURN_IF_ERROR(Forward(f, x, dropout_seed));
    for (; f < m_count; ++f, ++b) {
      TFD_RETURN_IF_ERROR(Forward(f, x, dropout_seed));
      TFD_RETURN_IF_ERROR(Backward(b, x, y, dropout_seed));
    }
    for (; b < m_count; ++b) TFD_RETURN_IF_ERROR(Backward(b, x, y, dropout_seed));
  }
  if (microbatches_ > 1) model::ScaleGradients(model_.grads().subspan(param_begin_, param_end_ - param_begin_), acc_, microbatches_);
  stats_.schedule_s += SecondsSince(start);
  std::int64_t act_bytes = static_cast<std::int64_t>(in_width_ + out_width_) * 4 * mb_;
  for (std::size_t i = first_; i + 1 < last_; ++i) act_bytes += model_.layer_output_shape(i).size() * 4 * mb_;
  stats_.peak_activation_bytes = act_bytes * stats_.peak_in_flight;
  tensor::LossResult r = metrics_;
  r.loss = loss_sum_ / m_count;
  return r;
}

}  // namespace tfd::pipeline
