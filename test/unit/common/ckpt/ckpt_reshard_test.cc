// Restoring into another run: the optimizer check, whole tensors re-sharded onto other ps counts
// and back, and data cursors moved onto another worker count.
#include <catch2/catch.hpp>

#include <cstdint>
#include <set>
#include <vector>

#include "common/ckpt/checkpoint.h"
#include "common/ckpt/reshard.h"
#include "test/unit/common/ckpt/ckpt_fixtures.h"

namespace tfd::ckpt {
namespace {

using Catch::Matchers::Contains;
using namespace fixtures;  // MakeCheckpoint, RequireSame, Bytes, RecordStarts

TEST_CASE("CheckOptimizer refuses another optimizer or other hyper-parameters", "[unit][ckpt]") {
  const Checkpoint c = MakeCheckpoint();
  config::OptimizerSpec same = c.optimizer.spec;
  CHECK(CheckOptimizer(c, same, "x").ok());
  config::OptimizerSpec momentum;
  momentum.type = config::OptimizerSpec::Type::kMomentum;
  Status s = CheckOptimizer(c, momentum, "ckpt-1");
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK_THAT(s.message(), Contains("ckpt-1") && Contains("adam") && Contains("momentum"));
  config::OptimizerSpec lr = same;
  lr.learning_rate = 0.01;
  CHECK_FALSE(CheckOptimizer(c, lr, "x").ok());
  config::OptimizerSpec scheduled = same;
  scheduled.schedule.kind = config::LrSchedule::Kind::kCosineDecay;
  scheduled.schedule.decay_steps = 100;
  CHECK_THAT(CheckOptimizer(c, scheduled, "x").message(), Contains("cosine_decay(initial=0.001 decay_steps=100 alpha=0)"));
  config::OptimizerSpec decayed = same;
  decayed.weight_decay = 0.01;
  CHECK_FALSE(CheckOptimizer(c, decayed, "x").ok());
}

// The test model's variables in flat order: 12 + 5 + 7 = 24 floats.
std::vector<Variable> Variables() { return {{"dense/kernel", 0, 12}, {"dense/bias", 12, 5}, {"out/kernel", 17, 7}}; }
std::vector<std::vector<std::int64_t>> Shapes() { return {{3, 4}, {5}, {7}}; }

TEST_CASE("re-sharding 1 ps to 3 and 3 to 2 preserves every value and slot", "[unit][ckpt]") {
  const Checkpoint c = MakeCheckpoint();
  const std::vector<std::vector<FlatRange>> one = {{{0, 24}}};
  // balanced: ranges cut across variables
  const std::vector<std::vector<FlatRange>> three = {{{0, 8}}, {{8, 8}}, {{16, 8}}};
  // by variable, in a ps's own order
  const std::vector<std::vector<FlatRange>> two = {{{17, 7}, {0, 12}}, {{12, 5}}};

  auto s1 = Reshard(c, Variables(), one);
  REQUIRE(s1.ok());
  REQUIRE((*s1)[0].values.size() == 24);
  REQUIRE((*s1)[0].slots.size() == 48);
  CHECK((*s1)[0].values[12] == c.tensors[1].values[0]);
  CHECK((*s1)[0].slots[24 + 12] == c.tensors[1].slots[1].values[0]);  // slot v of dense/bias[0]

  auto s3 = Reshard(c, Variables(), three);
  REQUIRE(s3.ok());
  CHECK((*s3)[1].values[4] == c.tensors[1].values[0]);              // flat 12
  CHECK((*s3)[2].slots[8 + 1] == c.tensors[2].slots[1].values[0]);  // flat 17, slot v
  auto back3 = Assemble(Variables(), Shapes(), c.optimizer.slot_names, three, *s3);
  REQUIRE(back3.ok());
  Checkpoint c3 = c;
  c3.tensors = *back3;
  RequireSame(c, c3);

  auto s2 = Reshard(c3, Variables(), two);
  REQUIRE(s2.ok());
  CHECK((*s2)[0].values[0] == c.tensors[2].values[0]);
  CHECK((*s2)[0].values[7] == c.tensors[0].values[0]);
  auto back2 = Assemble(Variables(), Shapes(), c.optimizer.slot_names, two, *s2);
  REQUIRE(back2.ok());
  Checkpoint c2 = c;
  c2.tensors = *back2;
  RequireSame(c, c2);
}

TEST_CASE("re-sharding refuses a model the checkpoint does not hold", "[unit][ckpt]") {
  const Checkpoint c = MakeCheckpoint();
  std::vector<Variable> vars = Variables();
  vars[2].name = "other";
  auto got = Reshard(c, vars, {{{0, 24}}});
  REQUIRE_FALSE(got.ok());
  CHECK_THAT(got.status().message(), Contains("other"));
  vars = Variables();
  vars[1].size = 6;
  CHECK_FALSE(Reshard(c, vars, {{{0, 24}}}).ok());
  CHECK_FALSE(Reshard(c, Variables(), {{{0, 25}}}).ok());
  auto gap = Assemble(Variables(), Shapes(), c.optimizer.slot_names, {{{0, 20}}},
                      {ShardState{std::vector<float>(20), std::vector<float>(40)}});
  REQUIRE_FALSE(gap.ok());
  CHECK_THAT(gap.status().message(), Contains("out/kernel"));
}

// The permutation positions worker `d.rank` of `n` has finished.
std::set<std::uint64_t> Finished(const DataCursor& d, std::uint32_t n) {
  std::set<std::uint64_t> s;
  for (std::uint64_t j = 0; j < d.next; ++j) s.insert(d.base + d.rank + j * n);
  return s;
}

TEST_CASE("data cursors resume per rank, or from the lowest unfinished position on another worker count", "[unit][ckpt]") {
  Checkpoint c = MakeCheckpoint();
  auto same = ReshardCursors(c, 2);
  REQUIRE(same.ok());
  CHECK(same->at(1).next == 7);

  c.num_workers = 3;
  c.cursors = {{0, 4, 0, 10}, {1, 4, 0, 7}, {2, 4, 0, 9}};
  auto three_to_two = ReshardCursors(c, 2);
  REQUIRE(three_to_two.ok());
  REQUIRE(three_to_two->size() == 2);
  const std::uint64_t resume = three_to_two->at(0).base;
  CHECK(resume == 1 + 7 * 3);  // worker 1's next position
  std::set<std::uint64_t> done;
  for (const DataCursor& d : c.cursors)
    for (std::uint64_t p : Finished(d, 3)) done.insert(p);
  for (std::uint64_t p = 0; p < resume; ++p) CHECK(done.count(p) == 1);  // nothing before it is skipped
  for (const DataCursor& d : *three_to_two) {
    CHECK(d.epoch == 4);
    CHECK(d.next == 0);
    CHECK(d.base == resume);
  }

  // A worker already in the next epoch counts as done with this one.
  c.cursors = {{0, 5, 0, 1}, {1, 4, 0, 7}, {2, 4, 0, 9}};
  auto ahead = ReshardCursors(c, 4);
  REQUIRE(ahead.ok());
  CHECK(ahead->at(3).epoch == 4);
  CHECK(ahead->at(3).base == 1 + 7 * 3);

  CHECK_FALSE(ReshardCursors(c, 0).ok());
  c.cursors.pop_back();
  CHECK_FALSE(ReshardCursors(c, 2).ok());
}

}  // namespace
}  // namespace tfd::ckpt
