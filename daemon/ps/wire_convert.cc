#include "daemon/ps/wire_convert.h"

#include <fmt/format.h>

#include "common/compress/half.h"
#include "common/compress/topk.h"

#include <cstring>
#include <tuple>
#include <utility>

namespace tfd::ps {
namespace {

config::OptimizerSpec::Type FromWire(wire::OptimizerKind kind) {
  switch (kind) {
    case wire::OptimizerKind::kSgd: return config::OptimizerSpec::Type::kSgd;
    case wire::OptimizerKind::kMomentum: return config::OptimizerSpec::Type::kMomentum;
    case wire::OptimizerKind::kAdam: return config::OptimizerSpec::Type::kAdam;
  }
  TFD_CHECK(false);  // the decoder admits no other code
  return config::OptimizerSpec::Type::kSgd;
}

config::UpdateSpec::Mode FromWire(wire::UpdateMode mode) {
  switch (mode) {
    case wire::UpdateMode::kAsync: return config::UpdateSpec::Mode::kAsync;
    case wire::UpdateMode::kSync: return config::UpdateSpec::Mode::kSync;
  }
  TFD_CHECK(false);
  return config::UpdateSpec::Mode::kAsync;
}

config::UpdateSpec::OnWorkerLoss FromWire(wire::WorkerLossPolicy policy) {
  switch (policy) {
    case wire::WorkerLossPolicy::kFail: return config::UpdateSpec::OnWorkerLoss::kFail;
    case wire::WorkerLossPolicy::kWait: return config::UpdateSpec::OnWorkerLoss::kWait;
    case wire::WorkerLossPolicy::kShrink: return config::UpdateSpec::OnWorkerLoss::kShrink;
  }
  TFD_CHECK(false);
  return config::UpdateSpec::OnWorkerLoss::kFail;
}

config::LrSchedule::Kind FromWire(wire::LrScheduleKind kind) {
  switch (kind) {
    case wire::LrScheduleKind::kConstant: return config::LrSchedule::Kind::kConstant;
    case wire::LrScheduleKind::kExponentialDecay: return config::LrSchedule::Kind::kExponentialDecay;
    case wire::LrScheduleKind::kPiecewiseConstant: return config::LrSchedule::Kind::kPiecewiseConstant;
    case wire::LrScheduleKind::kCosineDecay: return config::LrSchedule::Kind::kCosineDecay;
  }
  TFD_CHECK(false);
  return config::LrSchedule::Kind::kConstant;
}

wire::PushOutcome ToWire(PushOutcome outcome) {
  switch (outcome) {
    case PushOutcome::kApplied: return wire::PushOutcome::kApplied;
    case PushOutcome::kStale: return wire::PushOutcome::kStale;
    case PushOutcome::kDuplicate: return wire::PushOutcome::kDuplicate;
  }
  TFD_CHECK(false);
  return wire::PushOutcome::kApplied;
}

}  // namespace

StoreInit FromWire(const wire::Init& init) {
  StoreInit s;
  s.layout_hash = init.layout_hash;
  s.optimizer.type = FromWire(init.optimizer.type);
  s.optimizer.learning_rate = init.optimizer.learning_rate;
  s.optimizer.momentum = init.optimizer.momentum;
  s.optimizer.use_nesterov = init.optimizer.use_nesterov;
  s.optimizer.beta1 = init.optimizer.beta1;
  s.optimizer.beta2 = init.optimizer.beta2;
  s.optimizer.epsilon = init.optimizer.epsilon;
  s.optimizer.weight_decay = init.optimizer.weight_decay;
  config::LrSchedule& sc = s.optimizer.schedule;
  sc.kind = FromWire(init.optimizer.schedule);
  // The decoder bounds the step counts by 2^40.
  sc.warmup_steps = static_cast<std::int64_t>(init.optimizer.warmup_steps);
  sc.decay_steps = static_cast<std::int64_t>(init.optimizer.decay_steps);
  sc.decay_rate = init.optimizer.decay_rate;
  sc.staircase = init.optimizer.staircase;
  sc.alpha = init.optimizer.alpha;
  for (std::uint64_t b : init.optimizer.boundaries) sc.boundaries.push_back(static_cast<std::int64_t>(b));
  sc.values = init.optimizer.values;
  s.update.mode = FromWire(init.update.mode);
  s.update.scale_stale = init.update.scale_stale;
  s.update.replicas_to_aggregate = init.update.replicas_to_aggregate;
  s.update.total_num_replicas = init.update.total_num_replicas;
  s.update.num_workers = init.update.num_workers;
  s.update.on_worker_loss = FromWire(init.update.on_worker_loss);
  s.update.min_replicas = init.update.min_replicas;
  s.update.min_workers = init.update.min_workers;
  s.update.max_workers = init.update.max_workers;
  s.global_step = init.global_step;
  s.chunks.reserve(init.chunks.size());
  for (const wire::Chunk& c : init.chunks) s.chunks.push_back({c.name, c.length});
  s.values = init.values;
  s.has_state = init.has_state;
  s.updates = init.updates;
  s.resume_steps = init.resume_steps;
  s.slots = init.slots;
  return s;
}

PushRequest FromWire(const wire::Push& push) {
  return {.worker = push.worker,
          .incarnation = push.incarnation,
          .local_step = push.local_step,
          .based_on_step = push.based_on_step,
          .grads = push.grads};
}

wire::PushAck ToWire(const ParameterStore::PushResult& result) { return {result.global_step, ToWire(result.outcome)}; }

WorkerRoster::Progress FromWire(const wire::Progress& progress) {
  WorkerRoster::Progress p;
  p.done.assign(progress.done.begin(), progress.done.end());  // ranks below kMaxWorkers: they fit an int
  p.given_up.assign(progress.given_up.begin(), progress.given_up.end());
  return p;
}

wire::Progress ToWire(const WorkerRoster::Progress& progress, bool stop) {
  wire::Progress p;
  for (int r : progress.done) p.done.push_back(static_cast<std::uint32_t>(r));
  for (int r : progress.given_up) p.given_up.push_back(static_cast<std::uint32_t>(r));
  p.stop = stop;
  return p;
}

wire::OutFrame EncodeState(const ParameterStore::State& state, std::uint64_t request,
                           std::vector<std::pair<int, std::shared_ptr<const std::vector<float>>>> feedback, wire::Progress progress,
                           std::vector<std::uint32_t> absent) {
  wire::State m;
  m.progress = std::move(progress);
  m.absent = std::move(absent);
  m.global_step = state.params->global_step;
  m.updates = state.updates;
  m.resume_steps = state.resume_steps;
  m.feedback_request = request;
  for (const auto& [rank, values] : feedback)
    m.feedback.push_back({static_cast<std::uint32_t>(rank), std::as_bytes(std::span<const float>(*values))});
  wire::OutFrame f = wire::Encode(m, state.params->values, *state.slots);
  // The tail points into the snapshot, the slots, the deposits and the encoder's trailer: the frame owns them all.
  auto deposits = std::make_shared<decltype(feedback)>(std::move(feedback));
  f.keepalive = std::make_shared<std::tuple<std::shared_ptr<const void>, std::shared_ptr<const void>, std::shared_ptr<const void>,
                                            std::shared_ptr<const void>>>(std::move(f.keepalive), state.params, state.slots, deposits);
  return f;
}

wire::OutFrame EncodeParams(std::shared_ptr<const ParameterStore::Snapshot> snapshot, std::uint64_t feedback_request) {
  wire::OutFrame f = wire::Encode(wire::Params{.global_step = snapshot->global_step, .values = {}, .feedback_request = feedback_request},
                                  snapshot->values);
  // The frame's tail points into the snapshot (and the encoder's trailer, when it made one).
  f.keepalive = std::make_shared<std::pair<std::shared_ptr<const void>, std::shared_ptr<const void>>>(std::move(f.keepalive), std::move(snapshot));
  return f;
}

Result<std::vector<float>> DenseGradient(const wire::PushCompressed& m, std::uint64_t shard_size) {
  if (m.count != shard_size)
    return Status::InvalidArgument(fmt::format("PUSH_COMPRESSED of {} values to a shard of {}", m.count, shard_size));
  std::vector<float> dense(static_cast<std::size_t>(m.count), 0.0f);
  switch (m.encoding) {
    case wire::GradEncoding::kFp16: compress::DecodeHalf(compress::Half::kFp16, m.values, dense); break;
    case wire::GradEncoding::kBf16: compress::DecodeHalf(compress::Half::kBf16, m.values, dense); break;
    case wire::GradEncoding::kSparse: {
      const std::size_t pairs = m.indices.size() / 4;
      std::vector<std::uint32_t> indices(pairs);
      std::vector<float> values(pairs);
      if (pairs > 0) {
        std::memcpy(indices.data(), m.indices.data(), pairs * 4);
        std::memcpy(values.data(), m.values.data(), pairs * 4);
      }
      compress::AddSparse(indices, values, dense);
      break;
    }
  }
  return dense;
}

}  // namespace tfd::ps
