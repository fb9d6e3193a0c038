#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp forgets it

#include <cstdint>
#include <deque>
#include <memory>
#include <span>

#include "common/collective/collective.h"
#include "common/collective/hierarchy.h"
#include "common/collective/ring.h"

namespace tfd::collective {

// The hierarchical all-reduce: when several workers share a host, the traffic between hosts is
// what limits a step, and a flat ring sends each host's share of it once per worker on the host.
// Here each host sums its workers' buffers in a ring of its own (through the shared slots, on one
// host), the sums cross hosts in rings of one member per host, and each host's ring hands the
// result to all its workers. Between hosts each host sends 2 (H - 1) / H of the buffer per
// all-reduce over H hosts, against the flat ring's 2 (N - 1) / N over N workers through the same
// host links. Two shapes (HierarchyPlan::split):
//
// - Split, when every host has the same number W >= 2 of workers: the host's ring reduce-scatters
//   each bucket (local rank k ends with the host sum of segment k + 1 of W), local rank k of every
//   host all-reduces that segment in the ring of local rank k across hosts, and the host's ring
//   all-gathers the segments. Each worker sends a W-th of the host's traffic, and a bucket starts
//   across after one phase inside the host, not two.
// - Else the host's ring all-reduces each bucket, the host's leader (its lowest rank) all-reduces
//   the host sums in the ring of the leaders, and broadcasts the result in its host's ring.
//
// Summation order, fixed: an element is first summed inside each host in that host's ring order
// (ring.h: segment c starts at the host's local rank c and ends at c - 1), then the host sums are
// summed in the ring across hosts' order the same way (split: over the segment as that ring's
// buffer); the all-gather or broadcast copies those bits to every worker. So every worker ends with
// the same bits, run after run; they differ from the flat ring's (a different order of float
// additions), within float rounding.
//
// Overlap: StartAllReduce starts the sum inside the host at once; Progress starts a bucket's sum
// across hosts as soon as its host sum is done, so buckets travel between hosts while backprop
// computes the earlier layers. Wait(id) waits for the host sums of every bucket started (so each
// starts across), then for the buckets up to id across hosts, and then starts and ends their
// all-gathers or broadcasts, on every worker in the same order (the host ring's collectives are its
// reduce-scatters or all-reduces in start order, then its all-gathers or broadcasts as Waits reach
// them): a caller that waits for one bucket at a time (AllreduceUpdater) works on the first
// buckets' results while what the sockets hold of the later ones crosses.
//
// Threads and errors as Ring's. After an error in either ring both are closed with it, so every
// worker of the host hears of a loss between hosts (as "MEMBER reports: ...", which Blamed
// follows to the member that was lost).
class HierarchicalRing final : public Collective {
 public:
  // `flat`: the options of the flat ring of every worker (PlanHierarchy splits them).
  static std::shared_ptr<HierarchicalRing> Create(transport::asio::io_context& ioc, const RingOptions& flat);

  void Accept(transport::tcp::socket socket) override { local_->Accept(std::move(socket)); }
  // The host's ring first, then (a leader) the leaders' ring.
  Status Connect() override;
  Status AllReduce(std::span<float> data) override;
  Result<std::uint64_t> StartAllReduce(std::span<float> data) override;
  Status Progress() override;
  Status Wait(std::uint64_t id) override;
  Status Broadcast(std::span<float> data) override;
  Status Finish() override;
  Result<std::uint64_t> StartAllReduceHalf(std::span<float>, compress::Half) override { return Unsupported(); }
  Status AllGather(std::span<float>) override { return Unsupported(); }
  std::uint64_t value_bytes_sent() const override { return 0; }
  void Close(const Status& why) override;

  int rank() const override { return flat_.rank; }
  int size() const override { return static_cast<int>(flat_.members.size()); }
  const RingOptions& options() const override { return flat_; }
  bool closed() const override { return local_->closed() || (leaders_ != nullptr && leaders_->closed()); }
  int Blamed(const Status& error) const override { return BlamedMember(flat_.members, flat_.rank, error); }
  const HierarchyPlan& plan() const { return plan_; }

 private:
  HierarchicalRing(transport::asio::io_context& ioc, const RingOptions& flat);
  // Starts the sums across hosts of the buckets whose host sums are done, in order (a member of a
  // ring across hosts).
  Status StartCrossHost();
  // What of a bucket this member sums across hosts: split, the segment its host's reduce-scatter
  // left summed here; else the whole bucket.
  std::span<float> CrossPart(std::span<float> data) const;
  static Status Unsupported() { return Status::FailedPrecondition("update.compression runs on a flat ring only"); }
  // Closes both rings with `why` and returns it.
  Status Failed(const Status& why);

  struct Bucket {
    std::uint64_t id = 0;  // this object's
    std::span<float> data;
    std::uint64_t local_id = 0, cross_id = 0;
    bool crossing = false;  // its host sum is done and its part has gone to the ring across hosts
    bool crossed = false;   // ... and that part was not empty (cross_id is its collective)
  };
  const RingOptions flat_;
  const HierarchyPlan plan_;
  std::shared_ptr<Ring> local_;
  std::shared_ptr<Ring> leaders_;  // the ring across hosts; null with one host, and for a non-leader unless split
  std::deque<Bucket> pending_;     // started, not yet waited for (collective thread only)
  std::uint64_t next_id_ = 0;
};

}  // namespace tfd::collective
