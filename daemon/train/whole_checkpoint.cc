#include "daemon/train/whole_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/ckpt/file.h"
#include "common/ckpt/reshard.h"

namespace tfd::train {

namespace {

// A checkpoint's error feedback as `replicas` resume it (WholeRestore::feedback), or none (logged)
// when the job compresses otherwise or the residuals are not the model's size.
std::optional<ckpt::ErrorFeedback> FeedbackToResume(const config::JobSpec& job, ckpt::ErrorFeedback saved, std::size_t num_params,
                                                    int replicas, const std::string& path) {
  const config::CompressionSpec::Method method = job.update.compression.method;
  const std::size_t saved_workers = saved.residuals.size();
  if (method != saved.method) {
    spdlog::info("{}: its {} error feedback is not restored: this job's update.compression is {}", path,
                 config::CompressionName(saved.method), config::CompressionName(method));
    return std::nullopt;
  }
  if (method == config::CompressionSpec::Method::kPowerSgd && saved.rank != static_cast<std::uint32_t>(job.update.compression.rank)) {
    spdlog::info("{}: its powersgd Q is of rank {}, this job's rank is {}: the error resumes, Q starts afresh", path, saved.rank,
                 job.update.compression.rank);
    saved.shared.clear();
  }
  if (saved.residuals[0].size() != num_params) {
    spdlog::warn("{}: its error feedback holds {} values, the model {} parameters: not restored", path, saved.residuals[0].size(), num_params);
    return std::nullopt;
  }
  if (saved_workers != static_cast<std::size_t>(replicas)) {
    // The average update owes (1/saved) of their sum; each of `replicas` taking the mean owes as much.
    std::vector<float> mean(num_params, 0.0f);
    for (const std::vector<float>& r : saved.residuals)
      for (std::size_t i = 0; i < num_params; ++i) mean[i] += r[i];
    const float scale = 1.0f / static_cast<float>(saved_workers);
    for (float& v : mean) v *= scale;
    saved.residuals = {std::move(mean)};
    spdlog::info("{}: error feedback of {} workers, averaged, seeds each of this run's {}", path, saved_workers, replicas);
  }
  return saved;
}

}  // namespace

Result<WholeRestore> LoadWholeRestore(const config::JobSpec& job, const model::Model& model, const exporting::ModelCard& card, int replicas,
                                      std::int64_t steps_per_epoch) {
  WholeRestore out;
  if (job.checkpoint.dir.empty()) return out;
  Result<ckpt::Loaded> loaded = ckpt::LoadNewestValid(job.checkpoint.dir);
  if (!loaded.ok()) {
    if (loaded.status().code() != Code::kNotFound) return loaded.status().WithContext("checkpoint.dir");
    return out;
  }
  ckpt::Checkpoint& ck = loaded->checkpoint;
  const std::string& path = loaded->path;
  if (Status s = ckpt::CheckOptimizer(ck, job.optimizer, path); !s.ok())
    return Status::InvalidArgument(fmt::format("optimizer: {}", s.message()));
  TFD_RETURN_IF_ERROR(exporting::CheckSameData(ck.model_card, card, path));
  std::vector<ckpt::Variable> variables;
  for (const model::Variable& v : model.variables()) variables.push_back({v.name, v.offset, v.size});
  if (ck.tensors.size() != variables.size())
    return Status::InvalidArgument(fmt::format("model: {} holds {} tensors, the job's model has {} variables", path, ck.tensors.size(),
                                               variables.size()));
  const auto n = static_cast<std::int64_t>(model.params().size());
  Result<std::vector<ckpt::ShardState>> whole = ckpt::Reshard(ck, variables, {{{0, n}}});
  if (!whole.ok()) return Status::InvalidArgument(fmt::format("model: {}: {}", path, whole.status().message()));
  Result<std::vector<ckpt::DataCursor>> cursors = ckpt::ReshardCursors(ck, static_cast<std::uint32_t>(replicas));
  if (!cursors.ok()) return cursors.status().WithContext(path);
  const bool same = ck.num_workers == static_cast<std::uint32_t>(replicas);
  const auto steps = static_cast<std::uint64_t>(std::max<std::int64_t>(steps_per_epoch, 1));
  std::uint64_t resume = UINT64_MAX;
  for (const ckpt::DataCursor& c : *cursors) {
    const std::uint64_t epoch_start = (c.epoch > 0 ? c.epoch - 1 : 0) * steps;
    const std::uint64_t batches = same && c.base == 0 ? c.next / static_cast<std::uint64_t>(job.batch_size) : 0;
    resume = std::min(resume, epoch_start + batches);
  }
  out.found = true;
  out.path = path;
  out.global_step = ck.global_step;
  out.resume_step = resume == UINT64_MAX ? 0 : resume;
  out.updates = ck.optimizer.updates;
  out.params = std::move((*whole)[0].values);
  out.slots = std::move((*whole)[0].slots);
  out.early_stopping = ck.early_stopping;
  if (ck.feedback) out.feedback = FeedbackToResume(job, std::move(*ck.feedback), model.params().size(), replicas, path);
  return out;
}

std::span<const float> FeedbackFor(const WholeRestore& restore, int rank) {
  const std::vector<std::vector<float>>& r = restore.feedback->residuals;
  if (r.size() == 1) return r[0];
  return rank >= 0 && static_cast<std::size_t>(rank) < r.size() ? r[static_cast<std::size_t>(rank)] : std::span<const float>();
}

Result<std::string> WriteWholeCheckpoint(const WholeCheckpointing& c, const model::Model& model, WholeState state, const std::string& how) {
  ckpt::Checkpoint ck;
  ck.global_step = state.global_step;
  ck.final = state.final;
  ck.num_workers = static_cast<std::uint32_t>(std::max(state.replicas, 1));
  ck.optimizer.spec = c.optimizer;
  ck.optimizer.updates = state.updates;
  ck.optimizer.slot_names = c.slot_names;
  ck.model_card = c.model_card;
  ck.early_stopping = state.early_stopping;
  ck.feedback = std::move(state.feedback);
  for (std::uint32_t r = 0; r < ck.num_workers; ++r)  // every replica is at the same step of its shard
    ck.cursors.push_back({.rank = r, .epoch = static_cast<std::uint32_t>(std::max(state.epoch, 1)), .base = 0,
                          .next = static_cast<std::uint64_t>(std::max<std::int64_t>(state.epoch_steps, 0)) * static_cast<std::uint64_t>(c.batch_size)});
  const std::size_t n = model.params().size();
  for (const model::Variable& v : model.variables()) {
    ckpt::NamedTensor t{.name = v.name, .shape = v.shape, .values = {}, .slots = {}};
    const auto b = state.params.begin() + static_cast<std::ptrdiff_t>(v.offset);
    t.values.assign(b, b + static_cast<std::ptrdiff_t>(v.size));
    for (std::size_t k = 0; k < c.slot_names.size(); ++k) {
      const auto sb = state.slots.begin() + static_cast<std::ptrdiff_t>(k * n + v.offset);
      t.slots.push_back({c.slot_names[k], std::vector<float>(sb, sb + static_cast<std::ptrdiff_t>(v.size))});
    }
    ck.tensors.push_back(std::move(t));
  }
  std::error_code ec;
  std::filesystem::create_directories(c.spec.dir, ec);
  Result<std::string> path = ckpt::Write(c.spec.dir, ck, c.spec.keep);
  if (!path.ok()) {
    spdlog::warn("checkpoint not written: {}", path.status().message());
    return path.status();
  }
  spdlog::info("checkpoint: {} (global_step {}, {}){}", *path, state.global_step, how, state.final ? " final" : "");
  if (c.events != nullptr)
    c.events->Emit("checkpoint", {{"global_step", static_cast<std::int64_t>(state.global_step)}, {"path", *path}, {"final", state.final}});
  return path;
}

WholeSaver::WholeSaver(WholeCheckpointing c, const model::Model& model, std::uint64_t start_step)
    : c_(std::move(c)), model_(model), schedule_(c_.spec, start_step, ckpt::Schedule::Clock::now()) {}

WholeSaver::~WholeSaver() { (void)Collect(/*wait=*/true); }

Status WholeSaver::Collect(bool wait) {
  if (!writing_.valid()) return Status::Ok();
  if (!wait && writing_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return Status::Ok();
  return writing_.get().status();
}

bool WholeSaver::Due(std::uint64_t global_step, bool wait) {
  if (!wait && writing_.valid() && writing_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
  (void)Collect(wait);  // its failure was logged by the write
  return ScheduleDue(global_step);
}

bool WholeSaver::ScheduleDue(std::uint64_t global_step) const {
  return global_step != last_saved_ && schedule_.Due(global_step, ckpt::Schedule::Clock::now());
}

Status WholeSaver::Save(WholeState state, std::string how) {
  TFD_RETURN_IF_ERROR(Collect(/*wait=*/true).WithContext("the checkpoint before"));
  if (!state.final && state.global_step == last_saved_) return Status::Ok();
  state.early_stopping = early_stopping_;
  last_saved_ = state.global_step;
  schedule_.Saved(state.global_step, ckpt::Schedule::Clock::now());
  const bool final = state.final;
  writing_ = std::async(std::launch::async, [this, state = std::move(state), how = std::move(how)]() mutable {
    return WriteWholeCheckpoint(c_, model_, std::move(state), how);
  });
  return final ? Collect(/*wait=*/true) : Status::Ok();
}

}  // namespace tfd::train
