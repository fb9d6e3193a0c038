// Variable placement over ps tasks: every strategy covers every float exactly once, and each
// strategy's own promise (balanced sizes, round-robin order, greedy load balancing).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "daemon/worker/placement.h"

namespace tfd::worker {
namespace {

using config::Placement;
using Catch::Matchers::StartsWith;

// The mlp's variables, laid out contiguously in the flat buffer.
std::vector<VariableInfo> MlpVariables() {
  std::vector<VariableInfo> v = {{"dense/kernel", 0, 78400}, {"dense/bias", 0, 100}, {"dense_1/kernel", 0, 1000},
                                 {"dense_1/bias", 0, 10}};
  std::int64_t offset = 0;
  for (auto& x : v) {
    x.offset = offset;
    offset += x.size;
  }
  return v;
}
constexpr std::int64_t kTotal = 78400 + 100 + 1000 + 10;

// by_host without hosts: balanced's layout (its own cases below give it hosts).
const Placement kStrategies[] = {Placement::kBalanced, Placement::kRoundRobin, Placement::kGreedy, Placement::kByHost};
const char* Name(Placement s) {
  switch (s) {
    case Placement::kBalanced: return "balanced";
    case Placement::kRoundRobin: return "round_robin";
    case Placement::kGreedy: return "greedy";
    case Placement::kByHost: return "by_host";
  }
  return "?";
}

// The variable holding flat index `i`.
const VariableInfo& VariableAt(const std::vector<VariableInfo>& vars, std::int64_t i) {
  for (const auto& v : vars)
    if (i >= v.offset && i < v.offset + v.size) return v;
  FAIL("flat index " << i << " is in no variable");
  return vars.front();
}

// Every float of `vars` in exactly one slice of `p`, each slice within one variable and named for
// the part it holds, each shard's slices in flat order.
void ExpectEveryFloatOnce(const std::vector<VariableInfo>& vars, const worker::Placement& p) {
  std::vector<int> owners(static_cast<std::size_t>(kTotal), 0);
  std::int64_t sum = 0;
  for (std::size_t ps = 0; ps < p.shards.size(); ++ps) {
    std::int64_t shard = 0;
    for (const Slice& s : p.shards[ps]) {
      REQUIRE(s.length > 0);
      REQUIRE(s.flat_offset >= 0);
      REQUIRE(s.flat_offset + s.length <= kTotal);
      // A slice stays within one variable, and its name says which (and which part).
      const VariableInfo& v = VariableAt(vars, s.flat_offset);
      CHECK(s.flat_offset + s.length <= v.offset + v.size);
      if (s.length == v.size) {
        CHECK(s.name == v.name);
      } else {
        CHECK(s.name == v.name + "[" + std::to_string(s.flat_offset - v.offset) + ":" +
                            std::to_string(s.flat_offset - v.offset + s.length) + "]");
      }
      for (std::int64_t i = s.flat_offset; i < s.flat_offset + s.length; ++i) ++owners[static_cast<std::size_t>(i)];
      shard += s.length;
    }
    CHECK(p.ShardSize(ps) == shard);
    // Slices within a shard are in flat order.
    CHECK(std::is_sorted(p.shards[ps].begin(), p.shards[ps].end(),
                         [](const Slice& a, const Slice& b) { return a.flat_offset < b.flat_offset; }));
    sum += shard;
  }
  CHECK(sum == kTotal);
  // No float is held twice (no overlap) and none is left out (the union is everything).
  const auto bad = std::find_if(owners.begin(), owners.end(), [](int n) { return n != 1; });
  CHECK(bad == owners.end());
}

TEST_CASE("every strategy places every float on exactly one ps", "[unit][placement]") {
  const auto vars = MlpVariables();
  for (Placement strategy : kStrategies) {
    for (int num_ps = 1; num_ps <= 5; ++num_ps) {
      INFO(Name(strategy) << " over " << num_ps << " ps");
      const auto p = Place(vars, num_ps, strategy);
      REQUIRE(p.shards.size() == static_cast<std::size_t>(num_ps));
      ExpectEveryFloatOnce(vars, p);
    }
  }
}

TEST_CASE("by_host gives every host the same floats, and each of a host's ps tasks an equal part of them", "[unit][placement]") {
  const auto vars = MlpVariables();
  for (const std::vector<std::string>& hosts : std::vector<std::vector<std::string>>{
           {"a", "a", "b"}, {"a", "b", "a", "c"}, {"10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"}, {"a", "a"}}) {
    INFO(fmt::format("{}", fmt::join(hosts, ",")));
    const auto p = Place(vars, static_cast<int>(hosts.size()), Placement::kByHost, hosts);
    REQUIRE(p.shards.size() == hosts.size());
    ExpectEveryFloatOnce(vars, p);
    std::map<std::string, std::int64_t> per_host;
    std::map<std::string, int> tasks;
    for (std::size_t ps = 0; ps < hosts.size(); ++ps) per_host[hosts[ps]] += p.ShardSize(ps), ++tasks[hosts[ps]];
    const double host_share = static_cast<double>(kTotal) / static_cast<double>(per_host.size());
    for (const auto& [host, floats] : per_host) CHECK(std::abs(static_cast<double>(floats) - host_share) <= 1.0);
    for (std::size_t ps = 0; ps < hosts.size(); ++ps)
      CHECK(std::abs(static_cast<double>(p.ShardSize(ps)) - static_cast<double>(per_host[hosts[ps]]) / tasks[hosts[ps]]) <= 1.0);
  }
  // Two ps on host a and one on b: the busiest link carries half the floats, where balanced's
  // layout gives host a two thirds.
  const auto three = Place(vars, 3, Placement::kByHost, {"a", "a", "b"});
  CHECK(three.ShardSize(0) + three.ShardSize(1) == kTotal / 2);
  CHECK(three.ShardSize(2) == kTotal - kTotal / 2);
}

TEST_CASE("by_host with every ps on a host of its own is balanced's layout", "[unit][placement]") {
  const auto vars = MlpVariables();
  for (int num_ps = 1; num_ps <= 5; ++num_ps) {
    std::vector<std::string> hosts;
    for (int i = 0; i < num_ps; ++i) hosts.push_back("host" + std::to_string(i));
    const std::uint64_t balanced = Place(vars, num_ps, Placement::kBalanced).LayoutHash();
    CHECK(Place(vars, num_ps, Placement::kByHost, hosts).LayoutHash() == balanced);
    CHECK(Place(vars, num_ps, Placement::kByHost).LayoutHash() == balanced);  // no hosts known
  }
}

TEST_CASE("balanced gives each ps one contiguous range within one float of total / num_ps", "[unit][placement]") {
  const auto vars = MlpVariables();
  for (int num_ps = 1; num_ps <= 5; ++num_ps) {
    INFO(num_ps << " ps");
    const auto p = Place(vars, num_ps, Placement::kBalanced);
    const double even = static_cast<double>(kTotal) / num_ps;
    std::int64_t next = 0;  // shards follow each other through the flat buffer
    for (std::size_t ps = 0; ps < p.shards.size(); ++ps) {
      const auto& shard = p.shards[ps];
      REQUIRE_FALSE(shard.empty());
      CHECK(std::abs(static_cast<double>(p.ShardSize(ps)) - even) <= 1.0);
      CHECK(shard.front().flat_offset == next);
      for (std::size_t i = 1; i < shard.size(); ++i)
        CHECK(shard[i].flat_offset == shard[i - 1].flat_offset + shard[i - 1].length);
      next = shard.back().flat_offset + shard.back().length;
    }
    CHECK(next == kTotal);
  }
  // Two ps: the kernel is cut at 39755 = 79510 / 2.
  const auto two = Place(vars, 2, Placement::kBalanced);
  REQUIRE(two.shards[0].size() == 1);
  CHECK(two.shards[0][0].name == "dense/kernel[0:39755]");
  REQUIRE(two.shards[1].size() == 4);
  CHECK(two.shards[1][0].name == "dense/kernel[39755:78400]");
  CHECK(two.shards[1][1].name == "dense/bias");
  CHECK(two.shards[1][2].name == "dense_1/kernel");
  CHECK(two.shards[1][3].name == "dense_1/bias");
}

TEST_CASE("round_robin puts variable i, whole, on ps i % num_ps", "[unit][placement]") {
  const auto vars = MlpVariables();
  for (int num_ps = 1; num_ps <= 5; ++num_ps) {
    INFO(num_ps << " ps");
    const auto p = Place(vars, num_ps, Placement::kRoundRobin);
    std::map<std::string, std::size_t> where;
    for (std::size_t ps = 0; ps < p.shards.size(); ++ps) {
      for (const Slice& s : p.shards[ps]) {
        CHECK(where.emplace(s.name, ps).second);
      }
    }
    REQUIRE(where.size() == vars.size());
    for (std::size_t i = 0; i < vars.size(); ++i) {
      INFO(vars[i].name);
      REQUIRE(where.count(vars[i].name) == 1);
      CHECK(where[vars[i].name] == i % static_cast<std::size_t>(num_ps));
      const auto& shard = p.shards[where[vars[i].name]];
      auto it = std::find_if(shard.begin(), shard.end(), [&](const Slice& s) { return s.name == vars[i].name; });
      CHECK(it->flat_offset == vars[i].offset);
      CHECK(it->length == vars[i].size);
    }
  }
}

TEST_CASE("greedy puts the largest variable first onto the least-loaded ps", "[unit][placement]") {
  const auto vars = MlpVariables();
  // Two ps: dense/kernel (78400) -> ps 0; dense_1/kernel (1000) -> ps 1; dense/bias (100) -> ps 1
  // (1000 < 78400); dense_1/bias (10) -> ps 1 (1100 < 78400). Shards list slices in flat order.
  const auto p = Place(vars, 2, Placement::kGreedy);
  REQUIRE(p.shards.size() == 2);
  REQUIRE(p.shards[0].size() == 1);
  CHECK(p.shards[0][0].name == "dense/kernel");
  CHECK(p.shards[0][0].flat_offset == 0);
  CHECK(p.shards[0][0].length == 78400);
  REQUIRE(p.shards[1].size() == 3);
  CHECK(p.shards[1][0].name == "dense/bias");
  CHECK(p.shards[1][0].flat_offset == 78400);
  CHECK(p.shards[1][1].name == "dense_1/kernel");
  CHECK(p.shards[1][1].flat_offset == 78500);
  CHECK(p.shards[1][2].name == "dense_1/bias");
  CHECK(p.shards[1][2].flat_offset == 79500);
  CHECK(p.ShardSize(0) == 78400);
  CHECK(p.ShardSize(1) == 1110);

  // Three ps: kernel -> 0, dense_1/kernel -> 1, dense/bias -> 2, dense_1/bias -> 2 (100 < 1000).
  const auto three = Place(vars, 3, Placement::kGreedy);
  CHECK(three.ShardSize(0) == 78400);
  CHECK(three.ShardSize(1) == 1000);
  CHECK(three.ShardSize(2) == 110);

  // Variables of equal size keep their order; ties in load go to the lowest ps.
  const std::vector<VariableInfo> same = {{"a", 0, 5}, {"b", 5, 5}, {"c", 10, 5}};
  const auto t = Place(same, 2, Placement::kGreedy);
  REQUIRE(t.shards[0].size() == 2);
  CHECK(t.shards[0][0].name == "a");
  CHECK(t.shards[0][1].name == "c");
  REQUIRE(t.shards[1].size() == 1);
  CHECK(t.shards[1][0].name == "b");
}

TEST_CASE("LayoutHash is equal for equal placements and differs with the ps count or strategy", "[unit][placement]") {
  const auto vars = MlpVariables();
  std::set<std::uint64_t> hashes;
  for (Placement strategy : kStrategies) {
    for (int num_ps = 2; num_ps <= 4; ++num_ps) {
      INFO(Name(strategy) << " over " << num_ps << " ps");
      const auto a = Place(vars, num_ps, strategy), b = Place(vars, num_ps, strategy);
      CHECK(a.LayoutHash() == b.LayoutHash());
      hashes.insert(a.LayoutHash());
    }
  }
  // For 2..4 ps the nine (strategy, ps count) pairs give nine different layouts.
  CHECK(hashes.size() == 9);
  // On one ps every strategy gives the same layout (each variable whole, in order), so one hash.
  const auto one = Place(vars, 1, Placement::kBalanced).LayoutHash();
  CHECK(Place(vars, 1, Placement::kRoundRobin).LayoutHash() == one);
  CHECK(Place(vars, 1, Placement::kGreedy).LayoutHash() == one);
  CHECK(hashes.count(one) == 0);

  // The same variables under other names are another layout.
  auto renamed = vars;
  renamed[1].name = "dense/bias_1";
  CHECK(Place(renamed, 2, Placement::kBalanced).LayoutHash() != Place(vars, 2, Placement::kBalanced).LayoutHash());
}

// Shards that hold nothing leave no trace in the hash, so adding an empty ps leaves it unchanged.
TEST_CASE("LayoutHash differs when only the ps count changes and the extra ps is empty", "[unit][placement]") {
  const auto vars = MlpVariables();
  const auto four = Place(vars, 4, Placement::kRoundRobin), five = Place(vars, 5, Placement::kRoundRobin);
  REQUIRE(five.shards[4].empty());
  CHECK(four.LayoutHash() != five.LayoutHash());
}

TEST_CASE("Describe has one line per ps naming its floats and slices", "[unit][placement]") {
  const auto vars = MlpVariables();
  for (Placement strategy : kStrategies) {
    for (int num_ps = 1; num_ps <= 5; ++num_ps) {
      INFO(Name(strategy) << " over " << num_ps << " ps");
      const auto p = Place(vars, num_ps, strategy);
      const auto lines = p.Describe();
      REQUIRE(lines.size() == static_cast<std::size_t>(num_ps));
      for (std::size_t ps = 0; ps < lines.size(); ++ps) {
        CHECK_THAT(lines[ps], StartsWith("ps:" + std::to_string(ps) + " holds " + std::to_string(p.ShardSize(ps)) + " floats"));
        for (const Slice& s : p.shards[ps]) CHECK_THAT(lines[ps], Catch::Matchers::Contains(s.name));
        if (p.shards[ps].empty()) CHECK_THAT(lines[ps], Catch::Matchers::EndsWith(": nothing"));
      }
    }
  }
  const auto two = Place(vars, 2, Placement::kBalanced).Describe();
  CHECK(two[0] == "ps:0 holds 39755 floats (155.3 KiB): dense/kernel[0:39755]");
  CHECK(two[1] == "ps:1 holds 39755 floats (155.3 KiB): dense/kernel[39755:78400], dense/bias, dense_1/kernel, dense_1/bias");
}

}  // namespace
}  // namespace tfd::worker
