#pragma once

// Batching as TensorFlow Serving's (docs/serving.md, "Batching"): predict requests wait in a
// bounded queue; one thread takes up to batch_max rows of requests for the same model version,
// waiting at most batch_timeout after the oldest for more, runs one forward pass over them, and
// hands each request its rows back.
//
// Threads: Push and Close from any thread (the HTTP thread, the signal handler's); NextBatch from
// the batcher thread only. Batcher owns that thread; a Job's `done` runs on it.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/base/mutex.h"
#include "daemon/serve/request.h"
#include "daemon/serve/servable.h"

namespace tfd::serve {

using Clock = std::chrono::steady_clock;

struct Job {
  std::shared_ptr<const Servable> servable;  // the version the request resolved; jobs batch with their own version's only
  PredictRequest request;
  Clock::time_point enqueued, deadline;
  std::function<void(int status, std::string body)> done;  // called once
};

struct BatchOptions {
  int batch_max = 64;                        // rows per forward pass
  std::chrono::microseconds timeout{1000};   // how long the oldest waits for more rows
  int queue_max = 1024;                      // requests waiting; more are refused
};

class BatchQueue {
 public:
  explicit BatchQueue(BatchOptions options) : options_(options), ready_(&mu_) {}

  // False (the caller answers 503) when queue_max requests wait already or the queue is closed.
  bool Push(Job job) TFD_EXCLUDES(mu_);
  // The next batch: jobs from the front, of one servable, at most batch_max rows in all (a job
  // never holds more). Blocks until it is full, or the oldest has waited `timeout`, or the queue
  // is closed (then what is left comes out at once). Empty when closed and drained.
  std::vector<Job> NextBatch() TFD_EXCLUDES(mu_);
  void Close() TFD_EXCLUDES(mu_);
  int depth() const TFD_EXCLUDES(mu_);

 private:
  // Rows of the jobs at the front that can go in one batch, and whether the next one cannot.
  int FrontRowsLocked(bool* full) const TFD_REQUIRES(mu_);

  const BatchOptions options_;
  mutable Mutex mu_;
  CondVar ready_;
  std::deque<Job> jobs_ TFD_GUARDED_BY(mu_);
  bool closed_ TFD_GUARDED_BY(mu_) = false;
};

// The batcher thread: NextBatch, drop what is past its deadline (504), Predict, answer.
class Batcher {
 public:
  // `observe_batch(rows)` is called per forward pass (the batch-size histogram).
  Batcher(BatchOptions options, std::function<void(int rows)> observe_batch);
  ~Batcher() { Stop(); }
  // Closes the queue (Push refuses from now on), answers what waits, joins. Call it before the
  // HTTP server holding the requests' connections is destroyed.
  void Stop();

  BatchQueue& queue() { return queue_; }

 private:
  void Run();
  void Process(std::vector<Job>& batch);

  BatchQueue queue_;
  std::function<void(int)> observe_batch_;
  std::vector<float> rows_, outputs_, probabilities_;  // the batcher thread's
  std::thread thread_;
};

}  // namespace tfd::serve
