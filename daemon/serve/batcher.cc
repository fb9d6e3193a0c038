#include "daemon/serve/batcher.h"

namespace tfd::serve {

bool BatchQueue::Push(Job job) {
  MutexLock lock(&mu_);
  if (closed_ || std::ssize(jobs_) >= options_.queue_max) return false;
  jobs_.push_back(std::move(job));
  ready_.Signal();
  return true;
}

int BatchQueue::FrontRowsLocked(bool* full) const {
  int rows = 0;
  *full = false;
  for (const Job& j : jobs_) {
    if (j.servable != jobs_.front().servable || rows + j.request.rows > options_.batch_max) {
      *full = true;
      break;
    }
    rows += j.request.rows;
  }
  if (rows == options_.batch_max) *full = true;
  return rows;
}

std::vector<Job> BatchQueue::NextBatch() {
  MutexLock lock(&mu_);
  while (jobs_.empty() && !closed_) ready_.Wait();
  if (jobs_.empty()) return {};
  const Clock::time_point until = jobs_.front().enqueued + options_.timeout;
  bool full = false;
  FrontRowsLocked(&full);
  while (!full && !closed_ && Clock::now() < until) {
    ready_.WaitUntil(until);
    FrontRowsLocked(&full);
  }
  std::vector<Job> batch;
  int rows = 0;
  while (!jobs_.empty() && jobs_.front().servable == (batch.empty() ? jobs_.front().servable : batch.front().servable) &&
         rows + jobs_.front().request.rows <= options_.batch_max) {
    rows += jobs_.front().request.rows;
    batch.push_back(std::move(jobs_.front()));
    jobs_.pop_front();
  }
  return batch;
}

void BatchQueue::Close() {
  MutexLock lock(&mu_);
  closed_ = true;
  ready_.SignalAll();
}

int BatchQueue::depth() const {
  MutexLock lock(&mu_);
  return static_cast<int>(jobs_.size());
}

Batcher::Batcher(BatchOptions options, std::function<void(int rows)> observe_batch)
    : queue_(options), observe_batch_(std::move(observe_batch)), thread_([this] { Run(); }) {}

void Batcher::Stop() {
  queue_.Close();
  if (thread_.joinable()) thread_.join();
}

void Batcher::Run() {
  for (std::vector<Job> batch = queue_.NextBatch(); !batch.empty(); batch = queue_.NextBatch()) Process(batch);
}

void Batcher::Process(std::vector<Job>& batch) {
  const Clock::time_point now = Clock::now();
  std::vector<Job*> live;
  for (Job& j : batch) {
    if (now > j.deadline) {
      j.done(504, ErrorJson("deadline exceeded while queued (--deadline-ms)"));
    } else {
      live.push_back(&j);
    }
  }
  if (live.empty()) return;
  const Servable& servable = *live.front()->servable;
  rows_.clear();
  int rows = 0;
  for (Job* j : live) {
    rows_.insert(rows_.end(), j->request.values.begin(), j->request.values.end());
    rows += j->request.rows;
  }
  observe_batch_(rows);
  servable.Predict(rows_, rows, &outputs_, &probabilities_);
  const Signature& sig = servable.signature();
  std::size_t offset = 0;
  for (Job* j : live) {
    const std::size_t n = static_cast<std::size_t>(j->request.rows) * sig.outputs;
    const std::span<const float> probs = sig.regression ? std::span<const float>() : std::span<const float>(probabilities_).subspan(offset, n);
    j->done(200, FormatPredict(j->request, sig, std::span<const float>(outputs_).subspan(offset, n), probs));
    offset += n;
  }
}

}  // namespace tfd::serve
