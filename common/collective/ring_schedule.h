#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/wire/messages.h"

// The ring's schedule as pure functions of (rank, members, buffer length, chunk size): which
// chunks a member sends from its own values, and which chunks it expects from the previous member,
// in the order they arrive, with what to do with each. No sockets and no state, so the schedule is
// tested on its own (test/unit/common/collective/ring_schedule_test.cc); Ring (ring.h) follows it.
//
// AllReduce: the buffer is cut into n segments (segment c is floats [len * c / n, len * (c + 1) / n)),
// each cut into chunks of at most `chunk_floats`. Reduce-scatter: at hop h segment r - h - 1
// arrives at rank r, which adds its own values and passes the sum on at hop h + 1; after the last
// hop (n - 2) it holds the final sum of segment r + 1, which starts the all-gather. All-gather: at
// hop h the final values of segment r - h arrive, are copied and passed on. Broadcast: rank 0's
// chunks travel the ring once, copied by every other member and forwarded by all but the last.
namespace tfd::collective {

// Floats [offset, offset + count) of the caller's buffer.
struct ChunkRange {
  std::uint64_t offset = 0, count = 0;
  bool operator==(const ChunkRange&) const = default;
};

// One chunk the schedule expects from the previous member, and what to do with it.
struct ExpectedChunk {
  wire::RingPhase phase;
  std::uint16_t hop;
  std::uint32_t segment;
  std::uint64_t offset, count;
  bool add;      // add to this member's values (reduce-scatter), else copy over them
  bool forward;  // then send the result on to the next member as (forward_phase, forward_hop)
  wire::RingPhase forward_phase;
  std::uint16_t forward_hop;
};

// One member's part in one collective.
struct CollectiveSchedule {
  // Sent first, from this member's own values, as hop 0 of `first_phase`, segment `first_segment`;
  // queued before any arrival is applied, so frames leave in schedule order.
  wire::RingPhase first_phase = wire::RingPhase::kReduceScatter;
  std::uint32_t first_segment = 0;
  std::vector<ChunkRange> first_sends;
  std::vector<ExpectedChunk> expected;  // from the previous member, in arrival order
};

const char* PhaseName(wire::RingPhase p);

// The first float of segment c of n over `len` floats: len * c / n.
std::uint64_t SegmentBegin(std::uint64_t len, int c, int n);

// Segment c of n as chunks of at most `chunk_floats`, all of about the same size (the first chunk,
// which the pipeline waits for, is no larger than it must be); none for an empty segment.
std::vector<ChunkRange> SegmentChunks(std::uint64_t len, int c, int n, std::uint64_t chunk_floats);

// Rank `rank`'s schedule of an all-reduce (reduce-scatter, then all-gather) over `n` members.
// Empty for a ring of one, which has nothing to send.
CollectiveSchedule AllReduceSchedule(int rank, int n, std::uint64_t len, std::uint64_t chunk_floats);

// The two halves of an all-reduce as collectives of their own (the hierarchical all-reduce crosses
// hosts between them): after the reduce-scatter rank r holds the final sum of segment r + 1 (mod n)
// and the other segments' values are unspecified; the all-gather after it sends each member's
// final segment around, so every member ends with the all-reduce's bits. Empty for a ring of one.
CollectiveSchedule ReduceScatterSchedule(int rank, int n, std::uint64_t len, std::uint64_t chunk_floats);
CollectiveSchedule AllGatherAfterReduceScatterSchedule(int rank, int n, std::uint64_t len, std::uint64_t chunk_floats);

// Rank `rank`'s schedule of an all-gather: segment c (as an all-reduce cuts `len`) is rank c's, sent
// by it at hop 0 and copied by every other member, each forwarding it but the last (rank c - 1).
// Empty for a ring of one.
CollectiveSchedule AllGatherSchedule(int rank, int n, std::uint64_t len, std::uint64_t chunk_floats);

// Rank `rank`'s schedule of a broadcast of rank 0's values. Empty for a ring of one.
CollectiveSchedule BroadcastSchedule(int rank, int n, std::uint64_t len, std::uint64_t chunk_floats);

// The expected chunk that an arrival must be: expected[done] of collective `collective`, if `c`'s
// fields and `count` (floats) match it. Corruption naming `from` (the previous member), `what`
// (the frame type) and both chunks if not, or if the schedule expects nothing more.
Result<const ExpectedChunk*> MatchArrival(std::span<const ExpectedChunk> expected, std::size_t done, std::uint64_t collective,
                                          const wire::RingChunk& c, std::uint64_t count, std::string_view from, const char* what);

}  // namespace tfd::collective
