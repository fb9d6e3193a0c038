#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "common/base/mutex.h"
#include "common/data/dataset.h"
#include "common/model/model.h"

// A training loop's batches: step s of an epoch is the examples shard[s * batch, (s + 1) * batch)
// of that epoch's shard, gathered into floats and labels. With `prefetch`, a thread of its own
// gathers step s + 1 while the caller trains on step s (two buffers, swapped), so a step whose
// compute leaves the host idle (a GPU's) does not wait for the gather; the batches are the same
// bytes either way. Used from one thread (the loop's); the prefetch thread is internal.
namespace tfd::model {

class BatchInput {
 public:
  BatchInput(const data::Dataset& data, std::int64_t input_size, int batch, bool prefetch);
  ~BatchInput();
  BatchInput(const BatchInput&) = delete;
  BatchInput& operator=(const BatchInput&) = delete;

  // The epoch's shard (copied: a gather in flight never reads a freed one).
  void StartEpoch(std::span<const std::uint32_t> shard);
  // Step s's batch, valid until the next call: gathered now, or taken from the gather the
  // previous call started. With `next` (a step s + 1 follows), starts gathering it.
  struct Batch {
    const float* x;
    const BatchLabels* y;
  };
  Batch Take(std::int64_t s, bool next);

 private:
  struct Slot {
    std::vector<float> x;
    BatchLabels y;
  };
  void Gather(Slot& slot, std::int64_t s);
  void Wait();  // for the gather in flight, if any
  void Run();   // the prefetch thread

  const data::Dataset& data_;
  const int batch_;
  std::vector<std::uint32_t> shard_;
  Slot slots_[2];
  int front_ = 0;                      // the slot the caller holds
  std::optional<std::int64_t> ahead_;  // the step the other slot holds or is gathering
  Mutex mu_;
  CondVar cv_{&mu_};
  std::int64_t want_ TFD_GUARDED_BY(mu_) = -1;  // a step for the thread to gather into slot back_
  int back_ TFD_GUARDED_BY(mu_) = 1;
  bool busy_ TFD_GUARDED_BY(mu_) = false;
  bool stop_ TFD_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tfd::model
