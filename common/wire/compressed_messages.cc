#include "common/wire/compressed_messages.h"

#include <cstring>

#include <fmt/format.h>

#include "common/wire/bytes.h"
#include "common/wire/payload.h"

namespace tfd::wire {

using payload::Short;
using payload::Start;
using payload::Trailing;

OutFrame Encode(const PushCompressed& m, std::shared_ptr<const void> keepalive) {
  OutFrame f = Start(MessageType::kPushCompressed);
  ByteWriter w(&f.head);
  w.U32(m.push.worker);
  w.U64(m.push.incarnation);
  w.U64(m.push.local_step);
  w.U64(m.push.based_on_step);
  w.U8(static_cast<std::uint8_t>(m.encoding));
  w.U64(m.count);
  if (m.encoding == GradEncoding::kSparse) {
    w.U64(m.indices.size() / 4);
    f.tail.push_back(m.indices);
  }
  f.tail.push_back(m.values);
  auto trailer = std::make_shared<std::vector<std::byte>>();
  {
    ByteWriter t(trailer.get());
    if (m.push.epoch != 0) t.U8(1), t.U32(m.push.epoch);  // after the gradient, as PUSH's
    if (m.save_request != 0) t.U8(2), t.U64(m.save_request);
    if (m.deposit_request != 0) t.U8(3), t.U64(m.deposit_request);
  }
  if (!trailer->empty()) f.tail.push_back(*trailer);
  if (m.deposit_request != 0) f.tail.push_back(m.deposit);
  f.keepalive = std::make_shared<std::pair<std::shared_ptr<const void>, std::shared_ptr<const void>>>(std::move(trailer), std::move(keepalive));
  return f;
}

namespace {

// Sparse indices: strictly increasing and below `count`, so each names one value of the shard.
Status CheckIndices(std::span<const std::byte> bytes, std::uint64_t count) {
  std::uint64_t prev = 0;
  for (std::size_t i = 0; i < bytes.size() / 4; ++i) {
    std::uint32_t v = 0;
    std::memcpy(&v, bytes.data() + 4 * i, 4);
    if (v >= count || (i > 0 && v <= prev))
      return Status::Corruption(fmt::format("PUSH_COMPRESSED: index {} at pair {} is {} (expected increasing indices below {})", v, i,
                                            v >= count ? "out of range" : "not increasing", count));
    prev = v;
  }
  return Status::Ok();
}

}  // namespace

Status Decode(std::span<const std::byte> p, PushCompressed* m) {
  ByteReader r(p);
  std::uint8_t encoding = 0;
  if (!r.U32(&m->push.worker) || !r.U64(&m->push.incarnation) || !r.U64(&m->push.local_step) || !r.U64(&m->push.based_on_step) ||
      !r.U8(&encoding) || !r.U64(&m->count))
    return Short("PUSH_COMPRESSED");
  if (encoding < 1 || encoding > 3) return Status::Corruption(fmt::format("PUSH_COMPRESSED: unknown encoding {}", encoding));
  m->encoding = static_cast<GradEncoding>(encoding);
  m->indices = {};
  if (m->encoding == GradEncoding::kSparse) {
    std::uint64_t pairs = 0;
    if (!r.U64(&pairs)) return Short("PUSH_COMPRESSED");
    if (pairs > m->count) return Status::Corruption(fmt::format("PUSH_COMPRESSED: {} pairs for a gradient of {} values", pairs, m->count));
    if (!r.ElementBytes(pairs, 4, &m->indices) || !r.ElementBytes(pairs, 4, &m->values)) return Short("PUSH_COMPRESSED");
    TFD_RETURN_IF_ERROR(CheckIndices(m->indices, m->count));
  } else if (!r.ElementBytes(m->count, 2, &m->values)) {
    return Short("PUSH_COMPRESSED");
  }
  m->push.epoch = 0;
  m->save_request = m->deposit_request = 0;
  m->deposit = {};
  // The optional sections, each at most once and in order; anything else is trailing bytes.
  for (std::uint8_t last = 0; r.remaining() != 0;) {
    const auto tag = static_cast<std::uint8_t>(p[p.size() - r.remaining()]);
    if (tag <= last || tag > 3) break;
    (void)r.U8(&last);
    const bool read = tag == 1   ? r.U32(&m->push.epoch)
                      : tag == 2 ? r.U64(&m->save_request)
                                 : r.U64(&m->deposit_request) && r.FloatBytes(m->count, &m->deposit);
    if (!read) return Short("PUSH_COMPRESSED");
  }
  return Trailing("PUSH_COMPRESSED", r);
}

OutFrame EncodeRingChunk16(const RingChunk& m, std::span<const std::uint16_t> values, std::shared_ptr<const void> keepalive) {
  // RING_CHUNK's head with another type; its bytes are the same 32.
  OutFrame f = Encode(m, std::span<const float>());
  f.header.type = MessageType::kRingChunk16;
  f.head.resize(f.head.size() - 8);
  ByteWriter w(&f.head);
  w.U64(values.size());
  f.tail.clear();
  f.tail.push_back(std::as_bytes(values));
  f.keepalive = std::move(keepalive);
  return f;
}

Status DecodeRingChunk16(std::span<const std::byte> p, RingChunk* m) {
  // RING_CHUNK's head: decoded from its first 32 bytes with an empty float count.
  if (p.size() < kRingChunkHeadBytes) return Short("RING_CHUNK16");
  std::vector<std::byte> head(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(kRingChunkHeadBytes));
  std::uint64_t count = 0;
  std::memcpy(&count, head.data() + kRingChunkHeadBytes - 8, 8);
  std::memset(head.data() + kRingChunkHeadBytes - 8, 0, 8);
  Status s = Decode(head, m);
  if (!s.ok()) return Status::Corruption(fmt::format("RING_CHUNK16: {}", s.message()));
  ByteReader r(p.subspan(kRingChunkHeadBytes));
  if (!r.ElementBytes(count, 2, &m->values)) return Short("RING_CHUNK16");
  return Trailing("RING_CHUNK16", r);
}

}  // namespace tfd::wire
