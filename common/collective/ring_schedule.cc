#include "common/collective/ring_schedule.h"

#include <algorithm>

#include <fmt/format.h>

namespace tfd::collective {

const char* PhaseName(wire::RingPhase p) {
  switch (p) {
    case wire::RingPhase::kReduceScatter: return "reduce-scatter";
    case wire::RingPhase::kAllGather: return "all-gather";
    case wire::RingPhase::kBroadcast: return "broadcast";
  }
  return "?";
}

std::uint64_t SegmentBegin(std::uint64_t len, int c, int n) { return len * static_cast<std::uint64_t>(c) / static_cast<std::uint64_t>(n); }

std::vector<ChunkRange> SegmentChunks(std::uint64_t len, int c, int n, std::uint64_t chunk_floats) {
  const std::uint64_t b = SegmentBegin(len, c, n), size = SegmentBegin(len, c + 1, n) - b;
  const std::uint64_t k = std::max<std::uint64_t>(1, (size + chunk_floats - 1) / chunk_floats);
  std::vector<ChunkRange> out;
  for (std::uint64_t j = 0; j < k; ++j) {
    const std::uint64_t from = b + size * j / k, to = b + size * (j + 1) / k;
    if (to > from) out.push_back({from, to - from});
  }
  return out;
}

namespace {

int Seg(int c, int n) { return ((c % n) + n) % n; }

// The reduce-scatter's arrivals at rank r (at hop h, segment r - h - 1, added; after the last hop,
// n - 2, it holds the final sum of segment r + 1), each forwarded but those of the last hop, which
// go on as hop 0 of the all-gather when `then_all_gather`.
void AppendReduceScatter(CollectiveSchedule& s, int r, int n, std::uint64_t len, std::uint64_t chunk_floats, bool then_all_gather) {
  const auto last = static_cast<std::uint16_t>(n - 2);
  // Chunk by chunk: chunk k travels on while chunk k + 1 is reduced.
  for (int hop = 0; hop < n - 1; ++hop) {
    const int c = Seg(r - hop - 1, n);
    const auto h = static_cast<std::uint16_t>(hop);
    for (const auto& [o, count] : SegmentChunks(len, c, n, chunk_floats)) {
      const bool final_sum = h == last;
      s.expected.push_back({wire::RingPhase::kReduceScatter, h, static_cast<std::uint32_t>(c), o, count, true, !final_sum || then_all_gather,
                            final_sum ? wire::RingPhase::kAllGather : wire::RingPhase::kReduceScatter,
                            static_cast<std::uint16_t>(final_sum ? 0 : h + 1)});
    }
  }
}

// The all-gather's arrivals at rank r after a reduce-scatter: at hop h the final values of segment
// r - h, copied and passed on but at the last hop.
void AppendAllGather(CollectiveSchedule& s, int r, int n, std::uint64_t len, std::uint64_t chunk_floats) {
  const auto last = static_cast<std::uint16_t>(n - 2);
  for (int hop = 0; hop < n - 1; ++hop) {
    const int c = Seg(r - hop, n);
    const auto h = static_cast<std::uint16_t>(hop);
    for (const auto& [o, count] : SegmentChunks(len, c, n, chunk_floats))
      s.expected.push_back({wire::RingPhase::kAllGather, h, static_cast<std::uint32_t>(c), o, count, false, h != last,
                            wire::RingPhase::kAllGather, static_cast<std::uint16_t>(h + 1)});
  }
}

// A reduce-scatter from hop 0 (this member's own values of segment r), its last hop's sums
// forwarded as the all-gather's hop 0 when `then_all_gather`.
CollectiveSchedule ReduceScatterFirst(int rank, int n, std::uint64_t len, std::uint64_t chunk_floats, bool then_all_gather) {
  CollectiveSchedule s;
  s.first_phase = wire::RingPhase::kReduceScatter;
  if (n == 1) return s;
  AppendReduceScatter(s, rank, n, len, chunk_floats, then_all_gather);
  s.first_segment = static_cast<std::uint32_t>(Seg(rank, n));
  s.first_sends = SegmentChunks(len, Seg(rank, n), n, chunk_floats);
  return s;
}

}  // namespace

CollectiveSchedule AllReduceSchedule(int rank, int n, std::uint64_t len, std::uint64_t chunk_floats) {
  CollectiveSchedule s = ReduceScatterFirst(rank, n, len, chunk_floats, /*then_all_gather=*/true);
  if (n > 1) AppendAllGather(s, rank, n, len, chunk_floats);
  return s;
}

CollectiveSchedule ReduceScatterSchedule(int rank, int n, std::uint64_t len, std::uint64_t chunk_floats) {
  return ReduceScatterFirst(rank, n, len, chunk_floats, /*then_all_gather=*/false);
}

CollectiveSchedule AllGatherAfterReduceScatterSchedule(int rank, int n, std::uint64_t len, std::uint64_t chunk_floats) {
  CollectiveSchedule s;
  s.first_phase = wire::RingPhase::kAllGather;
  if (n == 1) return s;
  AppendAllGather(s, rank, n, len, chunk_floats);
  // Hop 0: the final sum of segment r + 1, which the reduce-scatter left here.
  s.first_segment = static_cast<std::uint32_t>(Seg(rank + 1, n));
  s.first_sends = SegmentChunks(len, Seg(rank + 1, n), n, chunk_floats);
  return s;
}

CollectiveSchedule AllGatherSchedule(int rank, int n, std::uint64_t len, std::uint64_t chunk_floats) {
  CollectiveSchedule s;
  s.first_phase = wire::RingPhase::kAllGather;
  if (n == 1) return s;
  auto seg = [&](int c) { return ((c % n) + n) % n; };
  const auto last = static_cast<std::uint16_t>(n - 2);
  for (int hop = 0; hop < n - 1; ++hop) {
    const int c = seg(rank - hop - 1);
    const auto h = static_cast<std::uint16_t>(hop);
    for (const auto& [o, count] : SegmentChunks(len, c, n, chunk_floats))
      s.expected.push_back({wire::RingPhase::kAllGather, h, static_cast<std::uint32_t>(c), o, count, false, h != last,
                            wire::RingPhase::kAllGather, static_cast<std::uint16_t>(h + 1)});
  }
  s.first_segment = static_cast<std::uint32_t>(rank);
  s.first_sends = SegmentChunks(len, rank, n, chunk_floats);
  return s;
}

CollectiveSchedule BroadcastSchedule(int rank, int n, std::uint64_t len, std::uint64_t chunk_floats) {
  CollectiveSchedule s;
  s.first_phase = wire::RingPhase::kBroadcast;
  if (n == 1) return s;
  for (std::uint64_t o = 0; o < len; o += chunk_floats) {
    const std::uint64_t count = std::min(chunk_floats, len - o);
    if (rank == 0) s.first_sends.push_back({o, count});
    else s.expected.push_back({wire::RingPhase::kBroadcast, 0, 0, o, count, false, rank != n - 1, wire::RingPhase::kBroadcast, 0});
  }
  return s;
}

Result<const ExpectedChunk*> MatchArrival(std::span<const ExpectedChunk> expected, std::size_t done, std::uint64_t collective,
                                          const wire::RingChunk& c, std::uint64_t count, std::string_view from, const char* what) {
  if (done == expected.size()) {
    return Status::Corruption(fmt::format("{} sent more {}s of collective {} than the schedule has: the members disagree on "
                                          "the buffer or the schedule", from, what, collective));
  }
  const ExpectedChunk& e = expected[done];
  if (c.phase != e.phase || c.hop != e.hop || c.segment != e.segment || c.offset != e.offset || count != e.count) {
    return Status::Corruption(fmt::format(
        "{} sent {} (collective {}, {} hop {}, segment {}, floats [{}, {})) where (collective {}, {} hop {}, segment {}, "
        "floats [{}, {})) was due: the members disagree on the buffer or the schedule",
        from, what, c.collective, PhaseName(c.phase), c.hop, c.segment, c.offset, c.offset + count, collective,
        PhaseName(e.phase), e.hop, e.segment, e.offset, e.offset + e.count));
  }
  return &e;
}

}  // namespace tfd::collective
