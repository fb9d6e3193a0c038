#include "daemon/ring_restore.h"

#include <algorithm>

namespace tfd {
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

Status Share(collective::Collective* first, collective::Collective& ring, std::span<float> data) {
  if (first != nullptr) TFD_RETURN_IF_ERROR(first->Broadcast(data));
  return ring.Broadcast(data);
}

}  // namespace

Status ShareWholeRestore(collective::Collective* first, collective::Collective& ring, std::size_t num_params, int num_slots,
                         train::WholeRestore* restore) {
  // found, global_step, resume_step, updates; the error feedback's method (0: none), residuals and
  // shared floats
  float header[17] = {};
  header[0] = restore->found ? 1.0f : 0.0f;
  PutCount(restore->global_step, header + 1);
  PutCount(restore->resume_step, header + 4);
  PutCount(static_cast<std::uint64_t>(std::max<std::int64_t>(restore->updates, 0)), header + 7);
  if (restore->feedback) {
    header[10] = static_cast<float>(restore->feedback->method);
    PutCount(restore->feedback->residuals.size(), header + 11);
    PutCount(restore->feedback->shared.size(), header + 14);
  }
  TFD_RETURN_IF_ERROR(Share(first, ring, header).WithContext("restore: sharing the chief's checkpoint"));
  restore->found = header[0] != 0.0f;
  if (!restore->found) return Status::Ok();
  restore->global_step = GetCount(header + 1);
  restore->resume_step = GetCount(header + 4);
  restore->updates = static_cast<std::int64_t>(GetCount(header + 7));
  restore->params.resize(num_params);
  restore->slots.resize(num_params * static_cast<std::size_t>(num_slots));
  TFD_RETURN_IF_ERROR(Share(first, ring, restore->params).WithContext("restore: sharing the chief's parameters"));
  if (!restore->slots.empty())
    TFD_RETURN_IF_ERROR(Share(first, ring, restore->slots).WithContext("restore: sharing the chief's optimizer slots"));
  if (header[10] == 0.0f) return Status::Ok();
  ckpt::ErrorFeedback& f = restore->feedback ? *restore->feedback : restore->feedback.emplace();
  f.method = static_cast<config::CompressionSpec::Method>(static_cast<int>(header[10]));
  // Every residual goes round the ring, and each member keeps the one FeedbackFor picks for it (the
  // one of its rank, or the single mean): a member holds two residuals at most, not every worker's.
  // `ring`'s rank is the worker's rank in allreduce mode, the only one with error feedback (a
  // pipeline's `ring` is a replica's stages, and compression is refused with model_parallel).
  const std::size_t count = GetCount(header + 11);
  const std::size_t mine = count == 1 ? 0 : static_cast<std::size_t>(ring.rank());
  const bool chief = f.residuals.size() == count;  // the chief's are loaded; it sends them
  std::vector<float> kept, passing;
  for (std::size_t i = 0; i < count; ++i) {
    std::vector<float>& r = chief ? f.residuals[i] : i == mine ? kept : passing;
    r.resize(num_params);
    TFD_RETURN_IF_ERROR(Share(first, ring, r).WithContext("restore: sharing the error feedback"));
    if (chief && i == mine) kept = std::move(r);
    if (chief) std::vector<float>().swap(r);
  }
  f.residuals.clear();
  if (mine < count) f.residuals.push_back(std::move(kept));
  f.shared.resize(GetCount(header + 14));
  if (!f.shared.empty()) TFD_RETURN_IF_ERROR(Share(first, ring, f.shared).WithContext("restore: sharing the error feedback"));
  return Status::Ok();
}

}  // namespace tfd
