#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/wire/frame.h"
#include "common/wire/messages.h"

namespace tfd::wire {

// A worker joining a running elastic allreduce ring (docs/protocol.md, "Joining a ring"): after
// HELLO/WELCOME with the ring's rank 0 the joiner sends RING_JOIN; rank 0 answers, at the commit
// the ring grows at, with RING_JOIN_ACCEPT (or an ERROR naming why it is refused). Decode returns
// Corruption on any short, oversize or trailing field: a joiner's frames are untrusted.

inline constexpr std::size_t kMaxHostBytes = 255;
inline constexpr std::size_t kMaxTaskNameBytes = 64;
inline constexpr std::uint32_t kMaxRingMembers = 4096;

struct RingJoin {  // joiner -> rank 0
  std::uint32_t index = 0;        // its worker index (its HELLO's)
  std::uint16_t port = 0;         // where it listens for its previous member
  std::uint64_t job = 0;          // the job's fingerprint (JobFingerprint): the ring's must match
  std::string host;               // the host the ring dials it at (<= kMaxHostBytes)
};

struct RingJoinMember {
  TaskKind kind = TaskKind::kWorker;  // chief or worker
  std::uint32_t index = 0;
  std::uint16_t port = 0;
  std::string task;  // "worker:2" (<= kMaxTaskNameBytes)
  std::string host;  // (<= kMaxHostBytes)
};

struct RingJoinAccept {  // rank 0 -> joiner: the ring it joins
  std::uint64_t cluster_id = 0;       // the new ring's HELLOs carry it
  std::uint32_t rank = 0;             // the joiner's rank in it
  std::int64_t commit_step = 0;       // the commit the ring grows at
  std::vector<RingJoinMember> members;  // in rank order, 2 ..= kMaxRingMembers, `rank` among them
};

OutFrame Encode(const RingJoin& m);
OutFrame Encode(const RingJoinAccept& m);
Status Decode(std::span<const std::byte> payload, RingJoin* m);
Status Decode(std::span<const std::byte> payload, RingJoinAccept* m);

}  // namespace tfd::wire
