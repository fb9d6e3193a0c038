#include "daemon/allreduce/compressed_exchange.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "daemon/train/compression.h"

namespace tfd::allreduce {
namespace {

using Method = config::CompressionSpec::Method;

// A collective's buffer of `floats`, padded so each of the ring's members holds a float at least.
std::size_t Padded(std::size_t floats, int ring_size) { return std::max(floats, static_cast<std::size_t>(ring_size)); }

}  // namespace

std::unique_ptr<CompressedExchange> CompressedExchange::Make(const config::CompressionSpec& spec, const model::Model& model, std::uint64_t seed,
                                                             std::int64_t steps_per_epoch) {
  if (spec.method != Method::kTopK && spec.method != Method::kPowerSgd) return nullptr;
  std::unique_ptr<CompressedExchange> x(new CompressedExchange());
  x->spec_ = spec;
  x->n_ = model.params().size();
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<compress::TensorRun> runs = train::TrainableRuns(model, &shapes);
  if (spec.method == Method::kTopK) {
    x->topk_ = std::make_unique<compress::TopK>(std::move(runs), x->n_, spec.ratio, train::WarmupSteps(spec, steps_per_epoch));
    x->indices_.resize(x->topk_->max_kept());
    x->values_.resize(x->topk_->max_kept());
  } else {
    std::vector<compress::MatrixRun> matrices;
    std::vector<compress::TensorRun> whole;
    compress::SplitForPowerSgd(runs, shapes, spec.rank, &matrices, &whole);
    x->powersgd_ = std::make_unique<compress::PowerSgd>(std::move(matrices), std::move(whole), x->n_, spec.rank, seed);
  }
  return x;
}

std::size_t CompressedExchange::floats_per_step() const {
  if (topk_) return 2 * topk_->kept() + kControl;
  return powersgd_->p_size() + powersgd_->whole_size() + kControl + powersgd_->q_size();
}

std::string CompressedExchange::Describe() const {
  if (topk_)
    return fmt::format("topk ratio {}: {} of {} values (index and value) per step{}", spec_.ratio, topk_->kept(), n_,
                       topk_->warmup_stages() == 0 ? std::string()
                                                   : fmt::format(" after a warm-up of {} epochs in {} stages from 1/4 ({} values)",
                                                                 spec_.warmup_epochs, topk_->warmup_stages(), topk_->max_kept()));
  return fmt::format("powersgd rank {}: {} matrices as P and Q ({} + {} floats), {} floats of other tensors whole, of {} values",
                     spec_.rank, powersgd_->matrices().size(), powersgd_->p_size(), powersgd_->q_size(), powersgd_->whole_size(), n_);
}

std::span<const float> CompressedExchange::residual() const { return topk_ ? topk_->residual() : powersgd_->error(); }

std::span<const float> CompressedExchange::shared() const { return topk_ ? std::span<const float>() : powersgd_->q(); }

Status CompressedExchange::RestoreFeedback(std::span<const float> residual, std::span<const float> shared) {
  if (residual.size() != n_)
    return Status::InvalidArgument(fmt::format("error feedback of {} values for a gradient of {}", residual.size(), n_));
  if (topk_) {
    topk_->Restore(residual);
  } else {
    const std::vector<float> q = shared.size() == powersgd_->q_size() ? std::vector<float>(shared.begin(), shared.end())
                                                                       : std::vector<float>(powersgd_->q().begin(), powersgd_->q().end());
    powersgd_->Restore(residual, q);
  }
  return Status::Ok();
}

Status CompressedExchange::Run(collective::Collective& ring, std::span<const float> grads, bool contributes, std::span<float> buffer,
                               std::int64_t step) {
  return topk_ ? RunTopK(ring, grads, contributes, buffer, step) : RunPowerSgd(ring, grads, contributes, buffer);
}

Status CompressedExchange::RunTopK(collective::Collective& ring, std::span<const float> grads, bool contributes, std::span<float> buffer,
                                   std::int64_t step) {
  const std::size_t k = topk_->KeptAt(step), part = 2 * k + kControl;
  const auto members = static_cast<std::size_t>(ring.size()), rank = static_cast<std::size_t>(ring.rank());
  if (contributes) {
    topk_->Compress(grads, step, indices_, values_);
  } else {  // adds nothing: zeros at valid indices
    std::fill(indices_.begin(), indices_.end(), 0u);
    std::fill(values_.begin(), values_.end(), 0.0f);
  }
  gathered_.assign(part * members, 0.0f);
  float* mine = gathered_.data() + part * rank;
  std::memcpy(mine, indices_.data(), k * 4);  // the index's bits ride in a float slot; an all-gather only copies
  std::copy_n(values_.begin(), k, mine + k);
  std::copy_n(buffer.begin() + static_cast<std::ptrdiff_t>(n_), kControl, mine + 2 * k);
  TFD_RETURN_IF_ERROR(ring.AllGather(gathered_));
  std::fill(buffer.begin(), buffer.end(), 0.0f);
  std::vector<std::uint32_t> idx(k);
  for (std::size_t r = 0; r < members; ++r) {  // rank order: every worker adds in the same order
    const float* p = gathered_.data() + part * r;
    std::memcpy(idx.data(), p, k * 4);
    for (std::uint32_t i : idx)
      if (i >= n_) return Status::Corruption(fmt::format("topk: worker rank {} sent index {} for a gradient of {} values", r, i, n_));
    compress::AddSparse(idx, std::span<const float>(p + k, k), buffer.first(n_));
    for (std::size_t c = 0; c < kControl; ++c) buffer[n_ + c] += p[2 * k + c];
  }
  return Status::Ok();
}

Status CompressedExchange::RunPowerSgd(collective::Collective& ring, std::span<const float> grads, bool contributes, std::span<float> buffer) {
  compress::PowerSgd& ps = *powersgd_;
  const std::size_t np = ps.p_size(), nw = ps.whole_size();
  gathered_.assign(Padded(np + nw + kControl, ring.size()), 0.0f);
  const std::span<float> all(gathered_);
  ps.ComputeP(grads, contributes, all.first(np), all.subspan(np, nw));
  std::copy_n(buffer.begin() + static_cast<std::ptrdiff_t>(n_), kControl, all.begin() + static_cast<std::ptrdiff_t>(np + nw));
  TFD_RETURN_IF_ERROR(ring.AllReduce(all).WithContext("PowerSGD's P"));
  q_.assign(Padded(ps.q_size(), ring.size()), 0.0f);
  ps.ComputeQ(all.first(np), std::span<float>(q_).first(ps.q_size()));
  TFD_RETURN_IF_ERROR(ring.AllReduce(q_).WithContext("PowerSGD's Q"));
  const float contributors = all[np + nw];
  std::fill(buffer.begin(), buffer.end(), 0.0f);  // what no matrix or whole tensor covers (moving statistics) has no gradient
  ps.Decompress(all.first(np), std::span<const float>(q_).first(ps.q_size()), all.subspan(np, nw), contributors, buffer.first(n_));
  std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(np + nw), kControl, buffer.begin() + static_cast<std::ptrdiff_t>(n_));
  return Status::Ok();
}

}  // namespace tfd::allreduce
