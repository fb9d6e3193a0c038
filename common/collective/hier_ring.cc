#include "common/collective/hier_ring.h"

#include <cstdlib>
#include <optional>
#include <string_view>

#include "common/collective/ring_schedule.h"

namespace tfd::collective {

namespace {

bool SplitAllowed() {
  const char* v = std::getenv("TFD_HIER_SPLIT");
  return v == nullptr || std::string_view(v) != "off";
}

}  // namespace

std::shared_ptr<HierarchicalRing> HierarchicalRing::Create(transport::asio::io_context& ioc, const RingOptions& flat) {
  return std::shared_ptr<HierarchicalRing>(new HierarchicalRing(ioc, flat));
}

HierarchicalRing::HierarchicalRing(transport::asio::io_context& ioc, const RingOptions& flat)
    : flat_(flat), plan_(PlanHierarchy(flat, SplitAllowed())), local_(Ring::Create(ioc, plan_.local)) {
  if ((plan_.leader || plan_.split) && plan_.leaders.members.size() > 1) {
    leaders_ = Ring::Create(ioc, plan_.leaders);
    // One port: the HELLO of the previous host's member in the ring across hosts goes to that ring.
    local_->ShareListenerWith(leaders_);
  }
}

Status HierarchicalRing::Failed(const Status& why) {
  local_->Close(why);
  if (leaders_ != nullptr) leaders_->Close(why);
  return why;
}

Status HierarchicalRing::Connect() {
  if (Status s = local_->Connect(); !s.ok()) return Failed(s);
  if (leaders_ != nullptr)
    if (Status s = leaders_->Connect(); !s.ok()) return Failed(s);
  return Status::Ok();
}

std::span<float> HierarchicalRing::CrossPart(std::span<float> data) const {
  if (!plan_.split) return data;
  // The segment the host's reduce-scatter left summed here: r + 1 of the host's members.
  const int members = static_cast<int>(plan_.local.members.size()), c = (plan_.local.rank + 1) % members;
  const std::uint64_t begin = SegmentBegin(data.size(), c, members), end = SegmentBegin(data.size(), c + 1, members);
  return data.subspan(begin, end - begin);
}

Result<std::uint64_t> HierarchicalRing::StartAllReduce(std::span<float> data) {
  Result<std::uint64_t> local = plan_.split ? local_->StartReduceScatter(data) : local_->StartAllReduce(data);
  if (!local.ok()) return Failed(local.status());
  pending_.push_back({.id = next_id_, .data = data, .local_id = *local});
  TFD_RETURN_IF_ERROR(Progress());
  return next_id_++;
}

Status HierarchicalRing::StartCrossHost() {
  for (Bucket& b : pending_) {
    if (b.crossing) continue;
    TFD_ASSIGN_OR_RETURN(bool summed, local_->Done(b.local_id));
    if (!summed) break;  // in order: the ring across hosts starts the buckets as every member of it does
    b.crossing = true;
    const std::span<float> part = CrossPart(b.data);
    if (part.empty()) continue;  // empty on every member of this ring (they cut the same lengths alike)
    TFD_ASSIGN_OR_RETURN(b.cross_id, leaders_->StartAllReduce(part));
    b.crossed = true;
  }
  return Status::Ok();
}

Status HierarchicalRing::Progress() {
  Status s = local_->Progress();
  if (s.ok() && leaders_ != nullptr) s = StartCrossHost();
  if (s.ok() && leaders_ != nullptr) s = leaders_->Progress();
  return s.ok() ? s : Failed(s);
}

Status HierarchicalRing::Wait(std::uint64_t id) {
  std::size_t n = 0;
  while (n < pending_.size() && pending_[n].id <= id) ++n;
  if (n == 0) return Status::Ok();
  Status s;
  if (leaders_ != nullptr) {
    // Every host sum started, not just those up to id: every bucket then starts across, and what
    // the sockets hold of the later ones crosses while the caller works on the results up to id
    // (every member starts and waits in the same order, so each of them has started these).
    s = local_->Wait(pending_.back().local_id);
    if (s.ok()) s = StartCrossHost();
    std::optional<std::uint64_t> cross;  // the last bucket that crossed (ids ascend)
    for (std::size_t i = 0; i < n; ++i)
      if (pending_[i].crossed) cross = pending_[i].cross_id;
    if (s.ok() && cross) s = leaders_->Wait(*cross);
  }
  std::uint64_t last = 0;
  for (std::size_t i = 0; s.ok() && i < n; ++i) {
    Result<std::uint64_t> b = plan_.split ? local_->StartAllGatherAfterReduceScatter(pending_[i].data) : local_->StartBroadcast(pending_[i].data);
    if (b.ok()) last = *b;
    else s = b.status();
  }
  if (s.ok()) s = local_->Wait(last);
  if (!s.ok()) return Failed(s);
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
  return Status::Ok();
}

Status HierarchicalRing::AllReduce(std::span<float> data) {
  TFD_ASSIGN_OR_RETURN(std::uint64_t id, StartAllReduce(data));
  return Wait(id);
}

Status HierarchicalRing::Broadcast(std::span<float> data) {
  // Rank 0 leads host 0 and is rank 0 of the leaders' ring: across hosts first, then inside each.
  if (!pending_.empty()) TFD_RETURN_IF_ERROR(Wait(pending_.back().id));
  Status s = leaders_ != nullptr && plan_.leader ? leaders_->Broadcast(data) : Status::Ok();
  if (s.ok()) s = local_->Broadcast(data);
  return s.ok() ? s : Failed(s);
}

Status HierarchicalRing::Finish() {
  Status s = leaders_ != nullptr ? leaders_->Finish() : Status::Ok();
  if (s.ok()) s = local_->Finish();
  return s.ok() ? s : Failed(s);
}

void HierarchicalRing::Close(const Status& why) { (void)Failed(why); }

}  // namespace tfd::collective
