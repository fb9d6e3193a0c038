#pragma once
// Two replicas of a synchronised batch norm as two threads: each Sum adds both replicas' values in
// rank order, so each gets the same bits (as the ring's all-reduce gives every worker). A replica
// left waiting 60 s for the other (the two made different calls) gives up, keeps its values and
// marks the summer failed, so a test that pairs the calls wrongly fails instead of hanging.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <span>
#include <vector>

#include "common/tensor/layers.h"

namespace tfd::testing {

class TwoReplicaSum {
 public:
  class Member final : public tensor::CrossReplicaSum {
   public:
    Member(TwoReplicaSum& s, int rank) : s_(s), rank_(rank) {}
    void Sum(std::span<float> v) override { s_.Sum(rank_, v); }

   private:
    TwoReplicaSum& s_;
    int rank_;
  };

  // Whether a replica gave up waiting, or the two summed vectors of different lengths.
  bool failed() const {
    std::lock_guard lock(mu_);
    return failed_;
  }
  // The sums made so far (each pair counted once).
  int sums() const {
    std::lock_guard lock(mu_);
    return rounds_;
  }

  void Sum(int rank, std::span<float> v) {
    std::unique_lock lock(mu_);
    if (failed_) return;
    // Phase 1: both replicas' values in; rank 0's arrival or rank 1's completes the pair.
    const int round = rounds_;
    slot_[rank] = v;
    ++arrived_;
    if (arrived_ == 2) {
      if (slot_[0].size() != slot_[1].size()) {
        failed_ = true;
      } else {
        sum_.resize(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) sum_[i] = slot_[0][i] + slot_[1][i];
        std::copy(sum_.begin(), sum_.end(), slot_[0].begin());
        std::copy(sum_.begin(), sum_.end(), slot_[1].begin());
      }
      arrived_ = 0;
      ++rounds_;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(lock, std::chrono::seconds(60), [&] { return rounds_ != round || failed_; })) {
      failed_ = true;
      arrived_ = 0;
      cv_.notify_all();
    }
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::span<float> slot_[2];
  std::vector<float> sum_;
  int arrived_ = 0, rounds_ = 0;
  bool failed_ = false;
};

}  // namespace tfd::testing
