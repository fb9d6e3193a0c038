#include <thread>

#include <catch2/catch.hpp>

#include "daemon/serve/batcher.h"

namespace tfd::serve {
namespace {

using namespace std::chrono_literals;

// A Servable is only a grouping key to the queue: these never run a model.
std::shared_ptr<const Servable> Key(std::uint64_t version) {
  return std::make_shared<const Servable>(version, exporting::LoadedModel{}, 8);
}

Job JobOf(std::shared_ptr<const Servable> s, int rows) {
  Job j;
  j.servable = std::move(s);
  j.request.rows = rows;
  j.enqueued = Clock::now();
  j.deadline = j.enqueued + 10s;
  return j;
}

TEST_CASE("serve: the queue batches up to batch_max rows of one version and refuses beyond queue_max", "[serve]") {
  BatchQueue q({.batch_max = 8, .timeout = 0us, .queue_max = 5});
  auto v1 = Key(1), v2 = Key(2);
  for (int rows : {3, 4, 2}) REQUIRE(q.Push(JobOf(v1, rows)));
  REQUIRE(q.Push(JobOf(v2, 1)));
  REQUIRE(q.Push(JobOf(v2, 1)));
  CHECK_FALSE(q.Push(JobOf(v2, 1)));  // five wait already
  CHECK(q.depth() == 5);
  std::vector<Job> b = q.NextBatch();
  REQUIRE(b.size() == 2);  // 3 + 4; the 2 would make 9
  CHECK(b[0].request.rows + b[1].request.rows == 7);
  b = q.NextBatch();
  REQUIRE(b.size() == 1);  // the 2-row job; the next is another version's
  CHECK(b[0].servable == v1);
  b = q.NextBatch();
  CHECK(b.size() == 2);
  CHECK(b[0].servable == v2);
  q.Close();
  CHECK(q.NextBatch().empty());
  CHECK_FALSE(q.Push(JobOf(v1, 1)));
}

TEST_CASE("serve: a partial batch waits for the timeout, a full one goes at once", "[serve]") {
  BatchQueue q({.batch_max = 4, .timeout = 200ms, .queue_max = 10});
  auto v = Key(1);
  REQUIRE(q.Push(JobOf(v, 1)));
  std::thread late([&] {
    std::this_thread::sleep_for(20ms);
    REQUIRE(q.Push(JobOf(v, 3)));
  });
  const auto start = Clock::now();
  std::vector<Job> b = q.NextBatch();
  late.join();
  CHECK(b.size() == 2);  // the late job joined the batch that was waiting for it
  CHECK(Clock::now() - start >= 15ms);
  REQUIRE(q.Push(JobOf(v, 1)));
  b = q.NextBatch();  // alone: comes out when its 200 ms have passed
  CHECK(b.size() == 1);
  CHECK(Clock::now() - b[0].enqueued >= 200ms);
}

TEST_CASE("serve: the batcher answers a job past its deadline 504 and stopping drains the queue", "[serve]") {
  std::vector<int> statuses;
  Mutex mu;
  {
    Batcher batcher({.batch_max = 4, .timeout = 50ms, .queue_max = 10}, [](int) {});
    Job j = JobOf(Key(1), 1);
    j.deadline = j.enqueued - 1ms;
    j.done = [&](int status, std::string body) {
      MutexLock lock(&mu);
      statuses.push_back(status);
      CHECK(body.find("deadline exceeded") != std::string::npos);
    };
    REQUIRE(batcher.queue().Push(std::move(j)));
    batcher.Stop();
    CHECK_FALSE(batcher.queue().Push(JobOf(Key(1), 1)));
  }
  MutexLock lock(&mu);
  CHECK(statuses == std::vector<int>{504});
}

}  // namespace
}  // namespace tfd::serve
