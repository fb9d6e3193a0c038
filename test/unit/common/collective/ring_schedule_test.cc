// The ring's schedule (collective/ring_schedule.h) without sockets: n members pass chunks by their
// schedules alone, each link in order, the members taking turns in a seeded order; every element
// must end holding each member's value exactly once, and every arrival must be the chunk its
// receiver expects.
#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "common/base/random.h"
#include "common/collective/ring_schedule.h"

namespace tfd::collective {
namespace {

constexpr int kMaxMembers = 5;
// How many times each member's value is in an element: a sum is all ones.
using Tally = std::array<int, kMaxMembers>;

struct Frame {
  wire::RingPhase phase;
  std::uint16_t hop;
  std::uint32_t segment;
  ChunkRange range;
  std::vector<Tally> values;
};

struct Member {
  CollectiveSchedule schedule;
  std::vector<Tally> data;
  std::size_t applied = 0;
  std::deque<Frame> inbox;  // from the previous member, in the order it sent them
  std::vector<int> adds, copies;  // per element: times a chunk was added into it, copied over it
};

struct SimulatedRing {
  std::vector<Member> members;
  std::string error;  // the first arrival that was not the expected chunk
};

void SendTo(Member& next, const Member& from, wire::RingPhase phase, std::uint16_t hop, std::uint32_t segment, ChunkRange r) {
  const auto begin = from.data.begin() + static_cast<std::ptrdiff_t>(r.offset);
  next.inbox.push_back({phase, hop, segment, r, std::vector<Tally>(begin, begin + static_cast<std::ptrdiff_t>(r.count))});
}

// One collective over `n` members whose schedules `make` gives; member m starts with its own value.
template <typename MakeSchedule>
SimulatedRing Simulate(int n, std::uint64_t len, std::uint64_t chunk, std::uint64_t seed, MakeSchedule make) {
  SimulatedRing ring;
  ring.members.resize(static_cast<std::size_t>(n));
  for (int m = 0; m < n; ++m) {
    Member& mem = ring.members[static_cast<std::size_t>(m)];
    mem.schedule = make(m, n, len, chunk);
    mem.data.assign(len, Tally{});
    for (Tally& t : mem.data) t[static_cast<std::size_t>(m)] = 1;
    mem.adds.assign(len, 0);
    mem.copies.assign(len, 0);
  }
  auto next_of = [&](int m) -> Member& { return ring.members[static_cast<std::size_t>((m + 1) % n)]; };
  for (int m = 0; m < n; ++m) {
    const Member& mem = ring.members[static_cast<std::size_t>(m)];
    for (const ChunkRange& r : mem.schedule.first_sends) SendTo(next_of(m), mem, mem.schedule.first_phase, 0, mem.schedule.first_segment, r);
  }
  Rng rng(seed);
  for (;;) {
    std::vector<int> ready;
    for (int m = 0; m < n; ++m)
      if (!ring.members[static_cast<std::size_t>(m)].inbox.empty()) ready.push_back(m);
    if (ready.empty()) return ring;
    const int m = ready[rng.Below(ready.size())];
    Member& mem = ring.members[static_cast<std::size_t>(m)];
    const Frame f = mem.inbox.front();
    mem.inbox.pop_front();
    const wire::RingChunk c{.collective = 7, .phase = f.phase, .hop = f.hop, .segment = f.segment, .offset = f.range.offset};
    Result<const ExpectedChunk*> e = MatchArrival(mem.schedule.expected, mem.applied, 7, c, f.range.count, "the previous member", "RING_CHUNK");
    if (!e.ok()) {
      ring.error = e.status().message();
      return ring;
    }
    for (std::uint64_t i = 0; i < f.range.count; ++i) {
      const std::size_t at = static_cast<std::size_t>(f.range.offset + i);
      if ((*e)->add) {
        for (std::size_t k = 0; k < kMaxMembers; ++k) mem.data[at][k] += f.values[static_cast<std::size_t>(i)][k];
        ++mem.adds[at];
      } else {
        mem.data[at] = f.values[static_cast<std::size_t>(i)];
        ++mem.copies[at];
      }
    }
    ++mem.applied;
    if ((*e)->forward) SendTo(next_of(m), mem, (*e)->forward_phase, (*e)->forward_hop, (*e)->segment, f.range);
  }
}

// The segment (of n) that float i of a buffer of `len` floats belongs to.
int SegmentOf(std::uint64_t i, std::uint64_t len, int n) {
  int c = 0;
  while (SegmentBegin(len, c + 1, n) <= i) ++c;
  return c;
}

constexpr std::uint64_t kLengths[] = {0, 1, 2, 3, 4, 5, 7, 13, 64, 100, 257};
constexpr std::uint64_t kChunks[] = {1, 2, 3, 7, 64, 1 << 16};

TEST_CASE("ring schedule: an all-reduce sums every member's value into every element exactly once, 1 to 5 members", "[unit][ring]") {
  int runs = 0, wrong = 0;
  std::string first_wrong;
  for (int n = 1; n <= kMaxMembers; ++n) {
    for (std::uint64_t len : kLengths) {
      for (std::uint64_t chunk : kChunks) {
        for (std::uint64_t seed : {1, 2}) {
          SimulatedRing ring = Simulate(n, len, chunk, seed, AllReduceSchedule);
          ++runs;
          const std::string where = fmt::format("n={} len={} chunk={} seed={}", n, len, chunk, seed);
          INFO(where);
          REQUIRE(ring.error == "");
          for (int m = 0; m < n; ++m) {
            const Member& mem = ring.members[static_cast<std::size_t>(m)];
            REQUIRE(mem.applied == mem.schedule.expected.size());
            for (std::uint64_t i = 0; i < len; ++i) {
              const int c = SegmentOf(i, len, n);
              // Each member but the segment's first adds once; each but the one that completes the sum copies once.
              const int adds = m == c ? 0 : 1, copies = m == (c + n - 1) % n ? 0 : 1;
              bool ok = mem.adds[static_cast<std::size_t>(i)] == adds && mem.copies[static_cast<std::size_t>(i)] == copies;
              for (int k = 0; k < kMaxMembers; ++k) ok = ok && mem.data[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)] == (k < n ? 1 : 0);
              if (!ok && wrong++ == 0) first_wrong = fmt::format("{}: member {} float {}", where, m, i);
            }
          }
        }
      }
    }
  }
  INFO(first_wrong);
  CHECK(wrong == 0);
  CHECK(runs == kMaxMembers * 11 * 6 * 2);
}

TEST_CASE("ring schedule: a reduce-scatter leaves member m the whole sum of segment m + 1; the all-gather after it makes an all-reduce",
          "[unit][ring]") {
  int wrong = 0;
  std::string first_wrong;
  for (int n = 1; n <= kMaxMembers; ++n) {
    for (std::uint64_t len : kLengths) {
      for (std::uint64_t chunk : kChunks) {
        const std::string where = fmt::format("n={} len={} chunk={}", n, len, chunk);
        INFO(where);
        SimulatedRing rs = Simulate(n, len, chunk, 5, ReduceScatterSchedule);
        REQUIRE(rs.error == "");
        // Every member's final segment holds every member's value once; nothing is copied.
        for (int m = 0; m < n; ++m) {
          const Member& mem = rs.members[static_cast<std::size_t>(m)];
          REQUIRE(mem.applied == mem.schedule.expected.size());
          for (std::uint64_t i = 0; i < len; ++i) {
            if (mem.copies[static_cast<std::size_t>(i)] != 0 && wrong++ == 0) first_wrong = fmt::format("{}: member {} copied {}", where, m, i);
            if (SegmentOf(i, len, n) != (m + 1) % n) continue;
            bool ok = true;
            for (int k = 0; k < kMaxMembers; ++k) ok = ok && mem.data[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)] == (k < n ? 1 : 0);
            if (!ok && wrong++ == 0) first_wrong = fmt::format("{}: member {} float {}", where, m, i);
          }
        }
        // The all-gather alone, each member starting from its final segment as a whole sum: every
        // member ends with every float's whole sum, each float copied in by all but its owner.
        SimulatedRing ag = Simulate(n, len, chunk, 6, [](int rank, int members, std::uint64_t l, std::uint64_t c) {
          return AllGatherAfterReduceScatterSchedule(rank, members, l, c);
        });
        REQUIRE(ag.error == "");
        for (int m = 0; m < n; ++m) {
          const Member& mem = ag.members[static_cast<std::size_t>(m)];
          REQUIRE(mem.applied == mem.schedule.expected.size());
          for (std::uint64_t i = 0; i < len; ++i) {
            const int owner = (SegmentOf(i, len, n) + n - 1) % n;
            const int copies = m == owner ? 0 : 1;
            const bool ok = mem.copies[static_cast<std::size_t>(i)] == copies &&
                            mem.data[static_cast<std::size_t>(i)] == ag.members[static_cast<std::size_t>(owner)].data[static_cast<std::size_t>(i)];
            if (!ok && wrong++ == 0) first_wrong = fmt::format("{} all-gather: member {} float {}", where, m, i);
          }
        }
      }
    }
  }
  INFO(first_wrong);
  CHECK(wrong == 0);
}

TEST_CASE("ring schedule: a broadcast copies rank 0's values to every member once, and to none for one member", "[unit][ring]") {
  int wrong = 0;
  for (int n = 1; n <= kMaxMembers; ++n) {
    for (std::uint64_t len : kLengths) {
      for (std::uint64_t chunk : kChunks) {
        SimulatedRing ring = Simulate(n, len, chunk, 3, BroadcastSchedule);
        INFO(fmt::format("n={} len={} chunk={}", n, len, chunk));
        REQUIRE(ring.error == "");
        for (int m = 0; m < n; ++m) {
          const Member& mem = ring.members[static_cast<std::size_t>(m)];
          REQUIRE(mem.applied == mem.schedule.expected.size());
          for (std::uint64_t i = 0; i < len; ++i) {
            const Tally want = [] { Tally t{}; t[0] = 1; return t; }();
            if (mem.data[static_cast<std::size_t>(i)] != want || mem.copies[static_cast<std::size_t>(i)] != (m == 0 ? 0 : 1)) ++wrong;
          }
        }
      }
    }
  }
  CHECK(wrong == 0);
  CHECK(BroadcastSchedule(0, 1, 10, 4).first_sends.empty());
}

TEST_CASE("ring schedule: segments are cut into near-equal chunks that cover the buffer in order, none when empty", "[unit][ring]") {
  for (int n = 1; n <= kMaxMembers; ++n) {
    for (std::uint64_t len : kLengths) {
      for (std::uint64_t chunk : kChunks) {
        INFO(fmt::format("n={} len={} chunk={}", n, len, chunk));
        std::uint64_t at = 0;
        for (int c = 0; c < n; ++c) {
          const std::vector<ChunkRange> pieces = SegmentChunks(len, c, n, chunk);
          const std::uint64_t size = SegmentBegin(len, c + 1, n) - SegmentBegin(len, c, n);
          CHECK(pieces.empty() == (size == 0));
          std::uint64_t smallest = chunk, largest = 0;
          for (const ChunkRange& r : pieces) {
            CHECK(r.offset == at);
            at += r.count;
            smallest = std::min(smallest, r.count);
            largest = std::max(largest, r.count);
          }
          CHECK(largest <= chunk);
          if (!pieces.empty()) CHECK(largest - smallest <= 1);
        }
        CHECK(at == len);
      }
    }
  }
  for (int n = 2; n <= kMaxMembers; ++n) {
    for (int r = 0; r < n; ++r) {
      const CollectiveSchedule s = AllReduceSchedule(r, n, 0, 8);
      CHECK(s.first_sends.empty());
      CHECK(s.expected.empty());
    }
  }
  // Three floats over five members: two segments are empty and have no chunk at all.
  CHECK(AllReduceSchedule(0, 5, 3, 8).first_sends.empty());
  CHECK(AllReduceSchedule(1, 5, 3, 8).first_sends == std::vector<ChunkRange>{{0, 1}});
}

TEST_CASE("ring schedule: an arrival that is not the expected chunk is refused, naming both", "[unit][ring]") {
  const CollectiveSchedule s = AllReduceSchedule(2, 4, 2000, 500);
  // Rank 2's first arrival: rank 1's own segment at hop 0, floats [500, 1000).
  wire::RingChunk c{.collective = 3, .phase = wire::RingPhase::kReduceScatter, .hop = 0, .segment = 1, .offset = 500};
  Result<const ExpectedChunk*> ok = MatchArrival(s.expected, 0, 3, c, 500, "worker:1 (h:1)", "RING_CHUNK");
  REQUIRE(ok.ok());
  CHECK(*ok == &s.expected[0]);
  CHECK((*ok)->add);
  CHECK((*ok)->forward_phase == wire::RingPhase::kReduceScatter);
  CHECK((*ok)->forward_hop == 1);

  c.offset = 499;
  Result<const ExpectedChunk*> off = MatchArrival(s.expected, 0, 3, c, 500, "worker:1 (h:1)", "RING_CHUNK");
  REQUIRE(!off.ok());
  CHECK(off.status().code() == Code::kCorruption);
  CHECK(off.status().message() ==
        "worker:1 (h:1) sent RING_CHUNK (collective 3, reduce-scatter hop 0, segment 1, floats [499, 999)) where (collective 3, "
        "reduce-scatter hop 0, segment 1, floats [500, 1000)) was due: the members disagree on the buffer or the schedule");
  c.offset = 500;
  CHECK(!MatchArrival(s.expected, 0, 3, c, 499, "worker:1 (h:1)", "RING_CHUNK").ok());  // a count that differs

  Result<const ExpectedChunk*> more = MatchArrival(s.expected, s.expected.size(), 3, c, 500, "worker:1 (h:1)", "RING_CHUNK_SHM");
  REQUIRE(!more.ok());
  CHECK(more.status().message() ==
        "worker:1 (h:1) sent more RING_CHUNK_SHMs of collective 3 than the schedule has: the members disagree on the buffer or the schedule");
}

}  // namespace
}  // namespace tfd::collective
