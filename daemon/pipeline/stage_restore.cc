#include "daemon/pipeline/stage_restore.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/ckpt/file.h"
#include "common/ckpt/reshard.h"
#include "common/optim/optimizer.h"

namespace tfd::pipeline {
namespace {

// A 48-bit count as three floats of 16 bits each (exact), and back.
void PutCount(std::uint64_t v, float* out) {
  for (int i = 0; i < 3; ++i) out[i] = static_cast<float>((v >> (16 * i)) & 0xffff);
}
std::uint64_t GetCount(const float* in) {
  std::uint64_t v = 0;
  for (int i = 0; i < 3; ++i) v |= static_cast<std::uint64_t>(in[i]) << (16 * i);
  return v;
}

// Broadcast from rank 0 of `replicas` (when set), then of `stages`.
Status Share(collective::Ring& stages, collective::Ring* replicas, std::span<float> data) {
  if (replicas != nullptr) TFD_RETURN_IF_ERROR(replicas->Broadcast(data));
  return stages.Broadcast(data);
}

}  // namespace

Result<StageRestore> LoadStageRestore(const config::JobSpec& job, const model::Model& model, const exporting::ModelCard& card, int replicas,
                                      std::int64_t steps_per_epoch) {
  StageRestore out;
  if (job.checkpoint.dir.empty()) return out;
  Result<ckpt::Loaded> loaded = ckpt::LoadNewestValid(job.checkpoint.dir);
  if (!loaded.ok()) {
    if (loaded.status().code() != Code::kNotFound) return loaded.status().WithContext("checkpoint.dir");
    return out;
  }
  const ckpt::Checkpoint& ck = loaded->checkpoint;
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
  return out;
}

Status ShareStageRestore(collective::Ring& stages, collective::Ring* replicas, std::size_t num_params, int num_slots,
                         StageRestore* restore) {
  // found, global_step, resume_step, updates
  float header[10] = {};
  header[0] = restore->found ? 1.0f : 0.0f;
  PutCount(restore->global_step, header + 1);
  PutCount(restore->resume_step, header + 4);
  PutCount(static_cast<std::uint64_t>(std::max<std::int64_t>(restore->updates, 0)), header + 7);
  TFD_RETURN_IF_ERROR(Share(stages, replicas, header).WithContext("restore: sharing the chief's checkpoint"));
  restore->found = header[0] != 0.0f;
  if (!restore->found) return Status::Ok();
  restore->global_step = GetCount(header + 1);
  restore->resume_step = GetCount(header + 4);
  restore->updates = static_cast<std::int64_t>(GetCount(header + 7));
  restore->params.resize(num_params);
  restore->slots.resize(num_params * static_cast<std::size_t>(num_slots));
  TFD_RETURN_IF_ERROR(Share(stages, replicas, restore->params).WithContext("restore: sharing the chief's parameters"));
  if (!restore->slots.empty())
    TFD_RETURN_IF_ERROR(Share(stages, replicas, restore->slots).WithContext("restore: sharing the chief's optimizer slots"));
  return Status::Ok();
}

}  // namespace tfd::pipeline
