#include "daemon/pipeline/stage_updater.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/ckpt/checkpoint.h"
#include "common/ckpt/file.h"
#include "daemon/pipeline/stage_plan.h"

namespace tfd::pipeline {
namespace {

bool IsKernel(const model::Variable& v) { return optim::IsDecayed(v.name); }

}  // namespace

std::vector<OwnedRange> LayerRanges(const model::Model& model, std::size_t first, std::size_t last) {
  const std::size_t begin = model.layer_starts()[first], end = model.layer_starts()[last];
  std::vector<OwnedRange> out;
  for (const model::Variable& v : model.variables()) {
    const auto b = static_cast<std::size_t>(v.offset), e = static_cast<std::size_t>(v.offset + v.size);
    if (b >= begin && e <= end && e > b) out.push_back({b, e, IsKernel(v)});
  }
  return out;
}

std::vector<OwnedRange> UnitRanges(const model::Model& model, int stage, int stages) {
  std::vector<OwnedRange> out;
  for (const model::Variable& v : model.variables()) {
    const auto units = static_cast<int>(v.shape.back());
    const auto [c0, c1] = UnitSlice(units, stage, stages);
    const std::int64_t rows = v.size / units;  // a kernel's [in, units]; a bias has one row
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto b = static_cast<std::size_t>(v.offset + r * units);
      if (c1 > c0) out.push_back({b + static_cast<std::size_t>(c0), b + static_cast<std::size_t>(c1), IsKernel(v)});
    }
  }
  return out;
}

StageUpdater::StageUpdater(collective::Ring& ring, const optim::Optimizer& optimizer, std::vector<OwnedRange> owned,
                           std::function<std::string()> note, StageCheckpointing checkpointing)
    : ring_(ring), owned_(std::move(owned)), note_(std::move(note)), checkpointing_(std::move(checkpointing)),
      slot_names_(optimizer.SlotNames()) {
  for (const OwnedRange& r : owned_) {
    std::vector<optim::Range> decayed;
    if (r.decayed) decayed.push_back({0, r.end - r.begin});
    states_.push_back(std::make_unique<optim::OptimizerState>(optimizer, r.end - r.begin, std::move(decayed)));
  }
}

Status StageUpdater::Restore(std::span<const float> slots, std::int64_t updates, std::int64_t local_step) {
  const std::size_t k = slot_names_.size(), n = k == 0 ? 0 : slots.size() / k;
  for (std::size_t i = 0; i < owned_.size(); ++i) {
    const std::size_t len = owned_[i].end - owned_[i].begin;
    std::vector<float> mine(k * len);
    for (std::size_t j = 0; j < k; ++j) {
      const auto from = slots.begin() + static_cast<std::ptrdiff_t>(j * n + owned_[i].begin);
      std::copy(from, from + static_cast<std::ptrdiff_t>(len), mine.begin() + static_cast<std::ptrdiff_t>(j * len));
    }
    TFD_RETURN_IF_ERROR(states_[i]->Restore(mine, updates));
  }
  updates_ = updates;
  last_local_step_ = local_step;
  return Status::Ok();
}

Status StageUpdater::CombineReplicas(model::Model& model, std::int64_t local_step) {
  const auto start = std::chrono::steady_clock::now();
  std::size_t n = 0;
  for (const OwnedRange& r : owned_) n += r.end - r.begin;
  combined_.resize(n);
  std::size_t at = 0;
  const std::span<float> grads = model.grads();
  for (const OwnedRange& r : owned_) {
    std::copy(grads.begin() + static_cast<std::ptrdiff_t>(r.begin), grads.begin() + static_cast<std::ptrdiff_t>(r.end),
              combined_.begin() + static_cast<std::ptrdiff_t>(at));
    at += r.end - r.begin;
  }
  TFD_RETURN_IF_ERROR(replicas_->AllReduce(combined_).WithContext(
      fmt::format("all-reduce of step {}'s gradient among the replicas' stage {}", local_step, ring_.rank())));
  // The ring leaves the same bits on every replica, and so does the scale.
  const float scale = 1.0f / static_cast<float>(replicas_->size());
  at = 0;
  for (const OwnedRange& r : owned_) {
    for (std::size_t i = r.begin; i < r.end; ++i) grads[i] = combined_[at++] * scale;
  }
  if (stats_ != nullptr) stats_->replicas_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::Ok();
}

Result<std::int64_t> StageUpdater::Step(model::Model& model, std::int64_t local_step) {
  if (replicas_ != nullptr && replicas_->size() > 1) TFD_RETURN_IF_ERROR(CombineReplicas(model, local_step));
  for (std::size_t i = 0; i < owned_.size(); ++i) {
    const OwnedRange& r = owned_[i];
    states_[i]->Apply(model.params().subspan(r.begin, r.end - r.begin), model.grads().subspan(r.begin, r.end - r.begin), updates_);
  }
  ++updates_;
  const std::int64_t every = checkpointing_.whole.spec.every_steps;
  last_local_step_ = local_step;
  if (!checkpointing_.whole.spec.dir.empty() && every > 0 && local_step % every == 0) TFD_RETURN_IF_ERROR(SaveCheckpoint(model, local_step, false));
  return updates_;  // the global step: updates applied (more than local steps after a restore that started an epoch again)
}

Result<std::int64_t> StageUpdater::Finish(model::Model& model) {
  if (!checkpointing_.whole.spec.dir.empty()) TFD_RETURN_IF_ERROR(SaveCheckpoint(model, last_local_step_, /*final=*/true));
  TFD_RETURN_IF_ERROR(GatherParams(ring_, model.params(), owned_).WithContext("gathering the stages' parameters"));
  return updates_;
}

Status StageUpdater::SaveCheckpoint(const model::Model& model, std::int64_t local_step, bool final) {
  const std::int64_t step = updates_;
  const std::size_t n = model.params().size();
  std::vector<float> params(model.params().begin(), model.params().end());
  TFD_RETURN_IF_ERROR(GatherParams(ring_, params, owned_).WithContext("checkpoint: gathering the stages' parameters"));
  std::vector<std::vector<float>> slots(slot_names_.size(), std::vector<float>(n, -0.0f));
  for (std::size_t k = 0; k < slots.size(); ++k) {
    for (std::size_t i = 0; i < owned_.size(); ++i) {
      const std::size_t len = owned_[i].end - owned_[i].begin;
      const std::span<const float> own = states_[i]->slots().subspan(k * len, len);
      std::copy(own.begin(), own.end(), slots[k].begin() + static_cast<std::ptrdiff_t>(owned_[i].begin));
    }
    TFD_RETURN_IF_ERROR(ring_.AllReduce(slots[k]).WithContext("checkpoint: gathering the stages' optimizer slots"));
  }
  if (!checkpointing_.writer) return Status::Ok();
  std::vector<float> flat;
  flat.reserve(n * slots.size());
  for (const std::vector<float>& slot : slots) flat.insert(flat.end(), slot.begin(), slot.end());
  // A write error is logged, and training goes on.
  const std::int64_t steps = std::max<std::int64_t>(checkpointing_.steps_per_epoch, 1);
  (void)train::WriteWholeCheckpoint(checkpointing_.whole, model,
                                    {.global_step = static_cast<std::uint64_t>(step),
                                     .updates = updates_,
                                     .replicas = checkpointing_.replicas,
                                     .epoch = static_cast<int>(local_step / steps + 1),
                                     .epoch_steps = local_step % steps,
                                     .final = final,
                                     .params = std::move(params),
                                     .slots = std::move(flat),
                                     .early_stopping = early_stopping_},
                                    fmt::format("the whole network gathered from {} stages", ring_.size()));
  return Status::Ok();
}

Status GatherParams(collective::Ring& ring, std::span<float> params, const std::vector<OwnedRange>& owned) {
  std::vector<OwnedRange> sorted = owned;
  std::sort(sorted.begin(), sorted.end(), [](const OwnedRange& a, const OwnedRange& b) { return a.begin < b.begin; });
  std::size_t at = 0;
  for (const OwnedRange& r : sorted) {
    std::fill(params.begin() + static_cast<std::ptrdiff_t>(at), params.begin() + static_cast<std::ptrdiff_t>(r.begin), -0.0f);
    at = r.end;
  }
  std::fill(params.begin() + static_cast<std::ptrdiff_t>(at), params.end(), -0.0f);
  return ring.AllReduce(params);
}

}  // namespace tfd::pipeline
