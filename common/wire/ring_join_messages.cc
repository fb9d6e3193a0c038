#include "common/wire/ring_join_messages.h"

#include <fmt/format.h>

#include "common/wire/bytes.h"
#include "common/wire/payload.h"

namespace tfd::wire {
namespace {

using payload::Short;
using payload::Start;
using payload::Trailing;

bool ReadMember(ByteReader& r, RingJoinMember* m) {
  std::uint8_t kind = 0;
  if (!r.U8(&kind) || (kind != static_cast<std::uint8_t>(TaskKind::kChief) && kind != static_cast<std::uint8_t>(TaskKind::kWorker)))
    return false;
  m->kind = static_cast<TaskKind>(kind);
  return r.U32(&m->index) && r.U16(&m->port) && r.Str(&m->task, kMaxTaskNameBytes) && r.Str(&m->host, kMaxHostBytes) && !m->host.empty();
}

}  // namespace

OutFrame Encode(const RingJoin& m) {
  OutFrame f = Start(MessageType::kRingJoin);
  ByteWriter w(&f.head);
  w.U32(m.index);
  w.U16(m.port);
  w.U64(m.job);
  w.Str(m.host);
  return f;
}

Status Decode(std::span<const std::byte> p, RingJoin* m) {
  ByteReader r(p);
  if (!r.U32(&m->index) || !r.U16(&m->port) || !r.U64(&m->job) || !r.Str(&m->host, kMaxHostBytes) || m->host.empty())
    return Short("RING_JOIN");
  return Trailing("RING_JOIN", r);
}

OutFrame Encode(const RingJoinAccept& m) {
  OutFrame f = Start(MessageType::kRingJoinAccept);
  ByteWriter w(&f.head);
  w.U64(m.cluster_id);
  w.U32(m.rank);
  w.U64(static_cast<std::uint64_t>(m.commit_step));
  w.U32(static_cast<std::uint32_t>(m.members.size()));
  for (const RingJoinMember& x : m.members) {
    w.U8(static_cast<std::uint8_t>(x.kind));
    w.U32(x.index);
    w.U16(x.port);
    w.Str(x.task);
    w.Str(x.host);
  }
  return f;
}

Status Decode(std::span<const std::byte> p, RingJoinAccept* m) {
  ByteReader r(p);
  std::uint64_t commit = 0;
  std::uint32_t n = 0;
  if (!r.U64(&m->cluster_id) || !r.U32(&m->rank) || !r.U64(&commit) || !r.U32(&n)) return Short("RING_JOIN_ACCEPT");
  if (n < 2 || n > kMaxRingMembers || m->rank >= n || commit > (std::uint64_t{1} << 62))
    return Status::Corruption(fmt::format("RING_JOIN_ACCEPT: rank {} of {} members at commit {} is out of range", m->rank, n, commit));
  m->commit_step = static_cast<std::int64_t>(commit);
  m->members.clear();
  for (std::uint32_t i = 0; i < n; ++i) {
    if (!ReadMember(r, &m->members.emplace_back())) return Short("RING_JOIN_ACCEPT");
  }
  return Trailing("RING_JOIN_ACCEPT", r);
}

}  // namespace tfd::wire
