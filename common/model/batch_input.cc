#include "common/model/batch_input.h"

#include <utility>

#include "common/base/check.h"

namespace tfd::model {

BatchInput::BatchInput(const data::Dataset& data, std::int64_t input_size, int batch, bool prefetch)
    : data_(data), batch_(batch),
      slots_{{std::vector<float>(static_cast<std::size_t>(batch * input_size)), BatchLabels(data, batch)},
             {std::vector<float>(prefetch ? static_cast<std::size_t>(batch * input_size) : 0), BatchLabels(data, prefetch ? batch : 0)}} {
  if (prefetch) thread_ = std::thread([this] { Run(); });
}

BatchInput::~BatchInput() {
  if (!thread_.joinable()) return;
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  thread_.join();
}

void BatchInput::StartEpoch(std::span<const std::uint32_t> shard) {
  Wait();
  ahead_.reset();
  shard_.assign(shard.begin(), shard.end());
}

void BatchInput::Gather(Slot& slot, std::int64_t s) {
  TFD_CHECK(static_cast<std::size_t>((s + 1) * batch_) <= shard_.size());
  slot.y.Fill(data_, std::span(shard_).subspan(static_cast<std::size_t>(s * batch_), static_cast<std::size_t>(batch_)), slot.x.data());
}

void BatchInput::Wait() {
  if (!thread_.joinable()) return;
  MutexLock lock(&mu_);
  while (busy_) cv_.Wait();
}

BatchInput::Batch BatchInput::Take(std::int64_t s, bool next) {
  if (ahead_ == s) {
    Wait();
    front_ ^= 1;
  } else {
    Wait();  // a gather of another step (the loop jumped): let it finish, then gather this one here
    Gather(slots_[front_], s);
  }
  ahead_.reset();
  if (next && thread_.joinable()) {
    MutexLock lock(&mu_);
    want_ = s + 1;
    back_ = front_ ^ 1;
    busy_ = true;
    ahead_ = s + 1;
    cv_.SignalAll();
  }
  return {slots_[front_].x.data(), &slots_[front_].y};
}

void BatchInput::Run() {
  for (;;) {
    std::int64_t s = -1;
    int slot = 0;
    {
      MutexLock lock(&mu_);
      while (!stop_ && want_ < 0) cv_.Wait();
      if (stop_) return;
      s = std::exchange(want_, -1);
      slot = back_;
    }
    Gather(slots_[slot], s);  // the caller holds the other slot until its next Take, which waits for this
    MutexLock lock(&mu_);
    busy_ = false;
    cv_.SignalAll();
  }
}

}  // namespace tfd::model
