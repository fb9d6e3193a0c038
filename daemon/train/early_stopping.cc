#include "daemon/train/early_stopping.h"

#include <fmt/format.h>

namespace tfd::train {

using Monitor = config::EarlyStoppingSpec::Monitor;

EarlyStopper::EarlyStopper(const config::JobSpec& job)
    : spec_(job.early_stopping), stop_at_(job.stop_at_accuracy) {}

std::optional<std::string> EarlyStopper::Update(int epoch, const EpochMetrics& m) {
  epoch_ = epoch;
  if (stop_at_ > 0 && m.val_accuracy >= stop_at_)
    return fmt::format("val_accuracy {:.4f} reached stop_at_accuracy {} at epoch {}", m.val_accuracy, stop_at_, epoch);
  if (spec_.monitor == Monitor::kNone) return std::nullopt;
  double value = -1;
  switch (spec_.monitor) {
    case Monitor::kValAccuracy: value = m.val_accuracy; break;
    case Monitor::kValLoss: value = m.val_loss; break;
    case Monitor::kLoss: value = m.loss; break;
    case Monitor::kValMae: value = m.val_mae; break;
    case Monitor::kNone: break;
  }
  if (value < 0) return std::nullopt;  // not measured this epoch
  const bool lower_is_better = spec_.monitor != Monitor::kValAccuracy;
  const bool improved = !have_best_ || (lower_is_better ? value < best_ - spec_.min_delta : value > best_ + spec_.min_delta);
  if (improved) {
    have_best_ = true;
    best_ = value;
    best_epoch_ = epoch;
    wait_ = 0;
    return std::nullopt;
  }
  if (++wait_ < spec_.patience) return std::nullopt;
  return fmt::format("{} did not improve by {} for {} epoch{} (best {:.4f} at epoch {})", config::MonitorName(spec_.monitor), spec_.min_delta,
                     wait_, wait_ == 1 ? "" : "s", best_, best_epoch_);
}

ckpt::EarlyStopping EarlyStopper::State() const {
  return {.epoch = static_cast<std::uint32_t>(epoch_),
          .have_best = have_best_,
          .best = best_,
          .best_epoch = static_cast<std::uint32_t>(best_epoch_),
          .wait = static_cast<std::uint32_t>(wait_)};
}

void EarlyStopper::Restore(const ckpt::EarlyStopping& state) {
  epoch_ = static_cast<int>(state.epoch);
  have_best_ = state.have_best;
  best_ = state.best;
  best_epoch_ = static_cast<int>(state.best_epoch);
  wait_ = static_cast<int>(state.wait);
}

}  // namespace tfd::train
