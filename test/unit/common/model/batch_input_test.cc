// model::BatchInput: with and without its prefetch thread, every step's batch is the one a direct
// gather of the same shard gives, across jumps, a new epoch with a gather in flight, and teardown.
#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>
#include <vector>

#include "common/data/dataset.h"
#include "common/model/batch_input.h"
#include "test/test_util.h"

namespace tfd::testing::batch_input_test {
namespace {

constexpr int kBatch = 7;

// The batch of step `s` of `shard`, gathered directly.
std::vector<float> Direct(const data::Dataset& d, const std::vector<std::uint32_t>& shard, std::int64_t s, std::vector<ClassId>* ids) {
  std::vector<float> x(static_cast<std::size_t>(kBatch * d.pixels()));
  model::BatchLabels y(d, kBatch);
  y.Fill(d, std::span(shard).subspan(static_cast<std::size_t>(s * kBatch), kBatch), x.data());
  const tensor::Labels view = y.View(kBatch);
  ids->assign(view.ids.begin(), view.ids.end());
  return x;
}

void ExpectStep(model::BatchInput& input, const data::Dataset& d, const std::vector<std::uint32_t>& shard, std::int64_t s, bool next) {
  INFO("step " << s << (next ? ", the next one prefetched" : ""));
  const model::BatchInput::Batch got = input.Take(s, next);
  std::vector<ClassId> want_ids;
  const std::vector<float> want_x = Direct(d, shard, s, &want_ids);
  CHECK(std::memcmp(got.x, want_x.data(), sizeof(float) * want_x.size()) == 0);
  const tensor::Labels ids = got.y->View(kBatch);
  CHECK(std::vector<ClassId>(ids.ids.begin(), ids.ids.end()) == want_ids);
}

TEST_CASE("BatchInput gives each step the batch a direct gather gives, prefetching or not", "[unit][model]") {
  TempDir dir;
  WriteSyntheticMnist(dir.path(), 100, 10, 8, 4, 11);
  auto splits = data::LoadMnist(dir.path());
  REQUIRE(splits.ok());
  const data::Dataset& d = splits->train;
  std::vector<std::uint32_t> one(100), two(100);
  std::iota(one.begin(), one.end(), 0u);
  for (std::size_t i = 0; i < two.size(); ++i) two[i] = static_cast<std::uint32_t>((i * 37) % 100);
  for (const bool prefetch : {false, true}) {
    INFO((prefetch ? "prefetching" : "gathering in the caller"));
    model::BatchInput input(d, d.pixels(), kBatch, prefetch);
    input.StartEpoch(one);
    ExpectStep(input, d, one, 0, true);
    ExpectStep(input, d, one, 1, true);
    ExpectStep(input, d, one, 2, false);
    ExpectStep(input, d, one, 5, true);  // a jump: nothing prefetched for it
    ExpectStep(input, d, one, 3, true);  // back: step 6's gather is dropped
    ExpectStep(input, d, one, 4, true);
    input.StartEpoch(two);  // step 5's gather of `one` may be in flight
    ExpectStep(input, d, two, 0, true);
    ExpectStep(input, d, two, 1, true);
    ExpectStep(input, d, two, 13, false);  // the last whole batch of 100
    ExpectStep(input, d, two, 2, true);    // torn down with step 3's gather in flight
  }
}

}  // namespace
}  // namespace tfd::testing::batch_input_test
