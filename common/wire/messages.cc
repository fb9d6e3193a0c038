#include "common/wire/messages.h"

// Every message's encoder and decoder in one file (about 690 lines, over the 600 a file should hold): each pair sits next to
// the others in the order of docs/protocol.md's table, so a layout change is reviewed in one place.

#include <algorithm>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "common/wire/bytes.h"
#include "common/wire/payload.h"

namespace tfd::wire {
namespace {

using payload::ReadBool;
using payload::Short;
using payload::Start;
using payload::Trailing;

// A one-byte code read from the wire becomes its enum here and nowhere else: `last` is the enum's
// highest value (codes are dense from 0); anything above it is Corruption naming the field.
template <typename E>
Status ToCode(std::uint8_t v, E last, const char* what, const char* field, E* out) {
  if (v > static_cast<std::uint8_t>(last)) return Status::Corruption(fmt::format("{}: unknown {} {}", what, field, v));
  *out = static_cast<E>(v);
  return Status::Ok();
}

// A u64 float count followed by that many floats, the count bounded by the bytes that remain.
bool ReadFloats(ByteReader& r, std::span<const std::byte>* out) {
  std::uint64_t n = 0;
  return r.U64(&n) && r.FloatBytes(n, out);
}

}  // namespace

void CopyFloats(std::span<const std::byte> bytes, std::span<float> out) {
  TFD_CHECK(bytes.size() == out.size_bytes());
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());  // an empty span's data() may be null
}

OutFrame Encode(const Hello& m) {
  OutFrame f = Start(MessageType::kHello);
  ByteWriter w(&f.head);
  w.U16(m.version);
  w.U8(static_cast<std::uint8_t>(m.kind));
  w.U32(m.index);
  w.U64(m.incarnation);
  w.U64(m.cluster_id);
  return f;
}

Status Decode(std::span<const std::byte> p, Hello* m) {
  ByteReader r(p);
  std::uint8_t kind = 0;
  if (!r.U16(&m->version) || !r.U8(&kind) || !r.U32(&m->index) || !r.U64(&m->incarnation) || !r.U64(&m->cluster_id))
    return Short("HELLO");
  TFD_RETURN_IF_ERROR(ToCode(kind, TaskKind::kCoordinator, "HELLO", "task kind", &m->kind));
  return Trailing("HELLO", r);
}

OutFrame Encode(const Welcome& m) {
  OutFrame f = Start(MessageType::kWelcome);
  ByteWriter w(&f.head);
  w.U8(static_cast<std::uint8_t>(m.kind));
  w.U32(m.index);
  w.U64(m.incarnation);
  w.U8(m.initialized ? 1 : 0);
  w.U64(m.global_step);
  w.U64(m.resume_step);
  return f;
}

Status Decode(std::span<const std::byte> p, Welcome* m) {
  ByteReader r(p);
  std::uint8_t kind = 0;
  if (!r.U8(&kind) || !r.U32(&m->index) || !r.U64(&m->incarnation) || !ReadBool(r, &m->initialized) ||
      !r.U64(&m->global_step) || !r.U64(&m->resume_step))
    return Short("WELCOME");
  TFD_RETURN_IF_ERROR(ToCode(kind, TaskKind::kCoordinator, "WELCOME", "task kind", &m->kind));
  return Trailing("WELCOME", r);
}

std::string_view TaskKindName(TaskKind k) {
  switch (k) {
    case TaskKind::kChief: return "chief";
    case TaskKind::kWorker: return "worker";
    case TaskKind::kPs: return "ps";
    case TaskKind::kEvaluator: return "evaluator";
    case TaskKind::kCoordinator: return "coordinator";
  }
  return "unknown";
}

int SlotsPerValue(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return 0;
    case OptimizerKind::kMomentum: return 1;
    case OptimizerKind::kAdam: return 2;
  }
  return 0;
}

bool OptimizerParams::HasScheduleSection() const {
  return weight_decay != 0 || schedule != LrScheduleKind::kConstant || warmup_steps != 0 || decay_steps != 0 || decay_rate != 0 ||
         alpha != 0 || staircase || !boundaries.empty() || !values.empty();
}

namespace {

void EncodeSchedule(const OptimizerParams& o, ByteWriter& w) {
  w.U8(2);
  w.F64(o.weight_decay);
  w.U8(static_cast<std::uint8_t>(o.schedule));
  w.U64(o.warmup_steps);
  w.U64(o.decay_steps);
  w.F64(o.decay_rate);
  w.U8(o.staircase ? 1 : 0);
  w.F64(o.alpha);
  w.U32(static_cast<std::uint32_t>(o.boundaries.size()));
  for (std::uint64_t b : o.boundaries) w.U64(b);
  for (double v : o.values) w.F64(v);
}

Status DecodeSchedule(ByteReader& r, OptimizerParams* o) {
  std::uint8_t tag = 0, kind = 0;
  std::uint32_t count = 0;
  if (!r.U8(&tag) || !r.F64(&o->weight_decay) || !r.U8(&kind) || !r.U64(&o->warmup_steps) || !r.U64(&o->decay_steps) ||
      !r.F64(&o->decay_rate) || !ReadBool(r, &o->staircase) || !r.F64(&o->alpha) || !r.U32(&count))
    return Short("INIT");
  TFD_RETURN_IF_ERROR(ToCode(kind, LrScheduleKind::kCosineDecay, "INIT", "learning-rate schedule", &o->schedule));
  // Each boundary takes 16 bytes with its value: bound the count by the payload before allocating.
  if (count > kMaxBoundaries || count > r.remaining() / 16)
    return Status::Corruption(fmt::format("INIT: {} schedule boundaries is more than the payload can hold", count));
  if ((o->schedule == LrScheduleKind::kPiecewiseConstant) != (count > 0))
    return Status::Corruption(fmt::format("INIT: {} schedule boundaries for schedule {}", count, kind));
  o->boundaries.resize(count);
  for (std::uint64_t& b : o->boundaries)
    if (!r.U64(&b)) return Short("INIT");
  o->values.resize(count == 0 ? 0 : count + 1);
  for (double& v : o->values)
    if (!r.F64(&v)) return Short("INIT");
  for (std::size_t i = 1; i < o->boundaries.size(); ++i)
    if (o->boundaries[i] <= o->boundaries[i - 1]) return Status::Corruption("INIT: schedule boundaries do not increase");
  const bool decays = o->schedule == LrScheduleKind::kExponentialDecay || o->schedule == LrScheduleKind::kCosineDecay;
  if (decays && (o->decay_steps == 0 || o->decay_steps > (std::uint64_t{1} << 40)))
    return Status::Corruption(fmt::format("INIT: decay_steps {} out of range", o->decay_steps));
  if (o->warmup_steps > (std::uint64_t{1} << 40)) return Status::Corruption(fmt::format("INIT: warmup_steps {} out of range", o->warmup_steps));
  return Status::Ok();
}

void EncodeMembership(std::uint8_t tag, const Membership& m, ByteWriter& w) {
  w.U8(tag);
  w.U32(m.index);
  w.U32(m.count);
  w.U32(m.run_epoch);
}

// After its tag byte.
Status DecodeMembership(const char* what, ByteReader& r, std::optional<Membership>* out) {
  std::uint8_t tag = 0;
  Membership m;
  if (!r.U8(&tag) || !r.U32(&m.index) || !r.U32(&m.count) || !r.U32(&m.run_epoch)) return Short(what);
  if (m.count == 0 || m.count > kMaxWorkers || m.index >= m.count)
    return Status::Corruption(fmt::format("{}: member {} of {} workers", what, m.index, m.count));
  *out = m;
  return Status::Ok();
}

void EncodeProgress(std::uint8_t tag, const Progress& p, ByteWriter& w) {
  if (p.empty()) return;
  w.U8(tag);
  w.U8(p.stop ? 1 : 0);
  for (const std::vector<std::uint32_t>* ranks : {&p.done, &p.given_up}) {
    w.U32(static_cast<std::uint32_t>(ranks->size()));
    for (std::uint32_t r : *ranks) w.U32(r);
  }
}

// A rank list of the progress section: bounded by the bytes that remain, increasing, each below kMaxWorkers.
Status DecodeRanks(const char* what, const char* field, ByteReader& r, std::vector<std::uint32_t>* out) {
  std::uint32_t n = 0;
  if (!r.U32(&n)) return Short(what);
  if (n > kMaxProgressRanks || n > r.remaining() / 4)
    return Status::Corruption(fmt::format("{}: {} {} ranks is more than the payload can hold", what, n, field));
  out->resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (!r.U32(&(*out)[i])) return Short(what);
    if ((*out)[i] >= kMaxWorkers || (i > 0 && (*out)[i] <= (*out)[i - 1]))
      return Status::Corruption(fmt::format("{}: {} ranks must increase and stay below {}", what, field, kMaxWorkers));
  }
  return Status::Ok();
}

// One optional section after a frame's tail, in a trailer the frame owns: its tag, then what
// `write` puts there.
template <typename Write>
void AppendSection(OutFrame& f, std::uint8_t tag, Write write) {
  auto trailer = std::make_shared<std::vector<std::byte>>();
  ByteWriter t(trailer.get());
  t.U8(tag);
  write(t);
  f.tail.push_back(*trailer);
  f.keepalive = trailer;
}

// After its tag byte.
Status DecodeProgress(const char* what, ByteReader& r, Progress* out) {
  std::uint8_t tag = 0, flags = 0;
  if (!r.U8(&tag) || !r.U8(&flags)) return Short(what);
  if (flags > 1) return Status::Corruption(fmt::format("{}: progress flags {}", what, flags));
  out->stop = flags == 1;
  TFD_RETURN_IF_ERROR(DecodeRanks(what, "done", r, &out->done));
  TFD_RETURN_IF_ERROR(DecodeRanks(what, "given-up", r, &out->given_up));
  for (std::uint32_t g : out->given_up)
    if (std::binary_search(out->done.begin(), out->done.end(), g))
      return Status::Corruption(fmt::format("{}: worker rank {} both done and given up on", what, g));
  return Status::Ok();
}

}  // namespace

OutFrame Encode(const Init& m, std::span<const float> values, std::span<const float> slots) {
  OutFrame f = Start(MessageType::kInit);
  ByteWriter w(&f.head);
  w.U64(m.layout_hash);
  w.U8(static_cast<std::uint8_t>(m.optimizer.type));
  w.F64(m.optimizer.learning_rate);
  w.F64(m.optimizer.momentum);
  w.F64(m.optimizer.beta1);
  w.F64(m.optimizer.beta2);
  w.F64(m.optimizer.epsilon);
  w.U8(m.optimizer.use_nesterov ? 1 : 0);
  w.U8(static_cast<std::uint8_t>(m.update.mode));
  w.U8(m.update.scale_stale ? 1 : 0);
  w.U32(m.update.replicas_to_aggregate);
  w.U32(m.update.total_num_replicas);
  w.U32(m.update.num_workers);
  w.U8(static_cast<std::uint8_t>(m.update.on_worker_loss));
  w.U32(m.update.min_replicas);
  w.U64(m.global_step);
  w.U32(static_cast<std::uint32_t>(m.chunks.size()));
  for (const Chunk& c : m.chunks) {
    w.Str(c.name);
    w.U64(c.length);
  }
  w.U64(values.size());
  f.tail.push_back(AsBytes(values));
  // The optional sections, written whole into one trailer before any span of it is taken.
  auto trailer = std::make_shared<std::vector<std::byte>>();
  ByteWriter t(trailer.get());
  if (m.has_state) {
    t.U8(1);
    t.U64(m.updates);
    t.U32(static_cast<std::uint32_t>(m.resume_steps.size()));
    for (std::uint64_t s : m.resume_steps) t.U64(s);
    t.U64(slots.size());
  }
  const std::size_t state_head = trailer->size();
  if (m.optimizer.HasScheduleSection()) EncodeSchedule(m.optimizer, t);
  if (m.update.max_workers > 0) {
    t.U8(3);
    t.U32(m.update.min_workers);
    t.U32(m.update.max_workers);
  }
  EncodeProgress(4, m.progress, t);
  if (trailer->empty()) return f;
  const std::span<const std::byte> bytes(*trailer);
  if (m.has_state) {
    f.tail.push_back(bytes.first(state_head));
    f.tail.push_back(AsBytes(slots));
  }
  if (bytes.size() > state_head) f.tail.push_back(bytes.subspan(state_head));
  f.keepalive = trailer;
  return f;
}

Status Decode(std::span<const std::byte> p, Init* m) {
  ByteReader r(p);
  std::uint32_t chunks = 0;
  std::uint8_t optimizer = 0, mode = 0, on_worker_loss = 0;
  if (!r.U64(&m->layout_hash) || !r.U8(&optimizer) || !r.F64(&m->optimizer.learning_rate) ||
      !r.F64(&m->optimizer.momentum) || !r.F64(&m->optimizer.beta1) || !r.F64(&m->optimizer.beta2) ||
      !r.F64(&m->optimizer.epsilon) || !ReadBool(r, &m->optimizer.use_nesterov) || !r.U8(&mode) ||
      !ReadBool(r, &m->update.scale_stale) ||
      !r.U32(&m->update.replicas_to_aggregate) || !r.U32(&m->update.total_num_replicas) || !r.U32(&m->update.num_workers) ||
      !r.U8(&on_worker_loss) || !r.U32(&m->update.min_replicas) || !r.U64(&m->global_step) || !r.U32(&chunks))
    return Short("INIT");
  TFD_RETURN_IF_ERROR(ToCode(optimizer, OptimizerKind::kAdam, "INIT", "optimizer type", &m->optimizer.type));
  TFD_RETURN_IF_ERROR(ToCode(mode, UpdateMode::kSync, "INIT", "update mode", &m->update.mode));
  TFD_RETURN_IF_ERROR(ToCode(on_worker_loss, WorkerLossPolicy::kShrink, "INIT", "worker-loss policy", &m->update.on_worker_loss));
  if (m->update.num_workers == 0 || m->update.num_workers > kMaxWorkers ||
      m->update.replicas_to_aggregate > m->update.total_num_replicas ||
      m->update.min_replicas < 1 || m->update.min_replicas > m->update.num_workers)
    return Status::Corruption("INIT: inconsistent worker counts or worker-loss policy");
  // Each chunk takes at least 10 bytes, so this bounds the count by the payload before reserving.
  if (chunks > kMaxChunks || chunks > r.remaining() / 10) return Status::Corruption(fmt::format("INIT: {} chunks is more than the payload can hold", chunks));
  m->chunks.resize(chunks);
  std::uint64_t total = 0;
  for (Chunk& c : m->chunks) {
    if (!r.Str(&c.name, kMaxNameBytes) || !r.U64(&c.length)) return Short("INIT");
    if (c.length > kMaxPayloadBytes / 4) return Status::Corruption("INIT: a chunk is longer than any payload");
    total += c.length;
  }
  std::uint64_t n = 0;
  if (!r.U64(&n) || n != total) return Status::Corruption("INIT: value count does not match the chunks' lengths");
  if (!r.FloatBytes(n, &m->values)) return Short("INIT");
  // Then optional sections, each starting with its tag byte, in this order: 1 state, 2 schedule.
  const auto next_tag = [&] { return r.remaining() == 0 ? std::byte{0} : p[p.size() - r.remaining()]; };
  m->has_state = next_tag() == std::byte{1};
  // The elastic section (tag 3), then the progress section (tag 4), come last.
  const auto elastic = [&]() -> Status {
    if (next_tag() == std::byte{3}) {
      std::uint8_t tag = 0;
      if (!r.U8(&tag) || !r.U32(&m->update.min_workers) || !r.U32(&m->update.max_workers)) return Short("INIT");
      if (m->update.min_workers < 1 || m->update.max_workers < m->update.min_workers || m->update.max_workers > kMaxWorkers)
        return Status::Corruption(fmt::format("INIT: elastic min_workers {} max_workers {}", m->update.min_workers, m->update.max_workers));
    }
    if (next_tag() == std::byte{4}) TFD_RETURN_IF_ERROR(DecodeProgress("INIT", r, &m->progress));
    return Trailing("INIT", r);
  };
  if (!m->has_state) {
    if (next_tag() == std::byte{2}) TFD_RETURN_IF_ERROR(DecodeSchedule(r, &m->optimizer));
    return elastic();
  }
  std::uint8_t flag = 0;
  std::uint32_t resume = 0;
  if (!r.U8(&flag) || !r.U64(&m->updates) || !r.U32(&resume)) return Short("INIT");
  if ((resume != 0 && resume != m->update.num_workers) || resume > r.remaining() / 8)
    return Status::Corruption(fmt::format("INIT: {} resume steps for {} workers", resume, m->update.num_workers));
  m->resume_steps.resize(resume);
  for (std::uint64_t& s : m->resume_steps)
    if (!r.U64(&s)) return Short("INIT");
  std::uint64_t slots = 0;
  if (!r.U64(&slots)) return Short("INIT");
  if (slots != n * static_cast<std::uint64_t>(SlotsPerValue(m->optimizer.type)))
    return Status::Corruption(fmt::format("INIT: {} slot floats for {} values and optimizer type {}", slots, n, optimizer));
  if (!r.FloatBytes(slots, &m->slots)) return Short("INIT");
  if (next_tag() == std::byte{2}) TFD_RETURN_IF_ERROR(DecodeSchedule(r, &m->optimizer));
  return elastic();
}

OutFrame Encode(const WaitReady& m) {
  OutFrame f = Start(MessageType::kWaitReady);
  ByteWriter(&f.head).U64(m.layout_hash);
  return f;
}

Status Decode(std::span<const std::byte> p, WaitReady* m) {
  ByteReader r(p);
  if (!r.U64(&m->layout_hash)) return Short("WAIT_READY");
  return Trailing("WAIT_READY", r);
}

OutFrame Encode(const Ready& m) {
  OutFrame f = Start(MessageType::kReady);
  ByteWriter w(&f.head);
  w.U64(m.global_step);
  w.U64(m.resume_step);
  if (m.membership) EncodeMembership(1, *m.membership, w);
  EncodeProgress(2, m.progress, w);
  return f;
}

Status Decode(std::span<const std::byte> p, Ready* m) {
  ByteReader r(p);
  if (!r.U64(&m->global_step)) return Short("READY");
  m->resume_step = 0;
  if (r.remaining() != 0 && !r.U64(&m->resume_step)) return Short("READY");
  if (r.remaining() != 0 && p[p.size() - r.remaining()] == std::byte{1}) TFD_RETURN_IF_ERROR(DecodeMembership("READY", r, &m->membership));
  if (r.remaining() != 0 && p[p.size() - r.remaining()] == std::byte{2}) TFD_RETURN_IF_ERROR(DecodeProgress("READY", r, &m->progress));
  return Trailing("READY", r);
}

OutFrame Encode(const StatePull& m) {
  OutFrame f = Start(MessageType::kStatePull);
  if (m.feedback_request != 0) ByteWriter(&f.head).U64(m.feedback_request);
  return f;
}

Status Decode(std::span<const std::byte> p, StatePull* m) {
  ByteReader r(p);
  m->feedback_request = 0;
  if (r.remaining() == 8) (void)r.U64(&m->feedback_request);
  return Trailing("STATE_PULL", r);
}

OutFrame Encode(const State& m, std::span<const float> values, std::span<const float> slots) {
  OutFrame f = Start(MessageType::kState);
  ByteWriter w(&f.head);
  w.U64(m.global_step);
  w.U64(m.updates);
  w.U32(static_cast<std::uint32_t>(m.resume_steps.size()));
  for (std::uint64_t s : m.resume_steps) w.U64(s);
  w.U64(values.size());
  f.tail.push_back(AsBytes(values));
  // The slot count goes with the slots: a second head is not possible, so it is the first 8 bytes
  // of a small trailer owned by the frame.
  auto count = std::make_shared<std::vector<std::byte>>();
  ByteWriter(count.get()).U64(slots.size());
  // The feedback section's heads (tag, request, count; each deposit's worker) in the same buffer,
  // written before any span into it is taken.
  const std::size_t slot_count_bytes = count->size();
  if (m.feedback_request != 0) {
    ByteWriter w(count.get());
    w.U8(1);
    w.U64(m.feedback_request);
    w.U32(static_cast<std::uint32_t>(m.feedback.size()));
    for (const Deposit& d : m.feedback) w.U32(d.worker);
    EncodeProgress(2, m.progress, w);
    if (!m.absent.empty()) {
      w.U8(3);
      w.U32(static_cast<std::uint32_t>(m.absent.size()));
      for (std::uint32_t r : m.absent) w.U32(r);
    }
  }
  const std::span<const std::byte> heads(*count);
  f.tail.push_back(heads.first(slot_count_bytes));
  f.tail.push_back(AsBytes(slots));
  if (m.feedback_request != 0) {
    std::size_t at = slot_count_bytes;
    f.tail.push_back(heads.subspan(at, 13));
    at += 13;
    for (const Deposit& d : m.feedback) {
      f.tail.push_back(heads.subspan(at, 4));
      at += 4;
      f.tail.push_back(d.values);
    }
    f.tail.push_back(heads.subspan(at));  // the progress and the absent ranks, when any
  }
  f.keepalive = count;
  return f;
}

Status Decode(std::span<const std::byte> p, State* m) {
  ByteReader r(p);
  std::uint32_t workers = 0;
  if (!r.U64(&m->global_step) || !r.U64(&m->updates) || !r.U32(&workers)) return Short("STATE");
  if (workers > kMaxWorkers || workers > r.remaining() / 8) return Status::Corruption(fmt::format("STATE: {} resume steps is more than the payload can hold", workers));
  m->resume_steps.resize(workers);
  for (std::uint64_t& s : m->resume_steps)
    if (!r.U64(&s)) return Short("STATE");
  std::uint64_t n = 0, slots = 0;
  if (!r.U64(&n) || !r.FloatBytes(n, &m->values) || !r.U64(&slots)) return Short("STATE");
  if ((n == 0 ? slots != 0 : slots % n != 0 || slots / n > kMaxSlotsPerValue))
    return Status::Corruption(fmt::format("STATE: {} slot floats for {} values", slots, n));
  if (!r.FloatBytes(slots, &m->slots)) return Short("STATE");
  m->feedback_request = 0;
  m->feedback.clear();
  m->progress = {};
  m->absent.clear();
  if (r.remaining() != 0 && p[p.size() - r.remaining()] == std::byte{1}) {
    std::uint8_t tag = 0;
    std::uint32_t deposits = 0;
    if (!r.U8(&tag) || !r.U64(&m->feedback_request) || !r.U32(&deposits)) return Short("STATE");
    // Each deposit is a worker and the shard's values: bounded by the payload before any is kept.
    if (deposits > kMaxWorkers || deposits > r.remaining() / (4 + n * 4))
      return Status::Corruption(fmt::format("STATE: {} error feedback deposits is more than the payload can hold", deposits));
    for (std::uint32_t i = 0; i < deposits; ++i) {
      Deposit& d = m->feedback.emplace_back();
      if (!r.U32(&d.worker) || !r.FloatBytes(n, &d.values)) return Short("STATE");
      if (d.worker >= kMaxWorkers) return Status::Corruption(fmt::format("STATE: error feedback of worker {}", d.worker));
    }
    const auto next_tag = [&] { return r.remaining() != 0 ? p[p.size() - r.remaining()] : std::byte{0}; };
    if (next_tag() == std::byte{2}) TFD_RETURN_IF_ERROR(DecodeProgress("STATE", r, &m->progress));
    if (next_tag() == std::byte{3}) {
      (void)r.U8(&tag);
      TFD_RETURN_IF_ERROR(DecodeRanks("STATE", "absent", r, &m->absent));
    }
  }
  return Trailing("STATE", r);
}

OutFrame Encode(const Pull& m) {
  OutFrame f = Start(MessageType::kPull);
  ByteWriter(&f.head).U64(m.min_step);
  return f;
}

Status Decode(std::span<const std::byte> p, Pull* m) {
  ByteReader r(p);
  if (!r.U64(&m->min_step)) return Short("PULL");
  return Trailing("PULL", r);
}

OutFrame Encode(const Params& m, std::span<const float> values) {
  OutFrame f = Start(MessageType::kParams);
  ByteWriter w(&f.head);
  w.U64(m.global_step);
  w.U64(values.size());
  f.tail.push_back(AsBytes(values));
  if (m.feedback_request != 0) AppendSection(f, 1, [&](ByteWriter& t) { t.U64(m.feedback_request); });  // after the values
  return f;
}

Status Decode(std::span<const std::byte> p, Params* m) {
  ByteReader r(p);
  if (!r.U64(&m->global_step) || !ReadFloats(r, &m->values)) return Short("PARAMS");
  m->feedback_request = 0;
  if (r.remaining() != 0 && p[p.size() - r.remaining()] == std::byte{1}) {
    std::uint8_t tag = 0;
    if (!r.U8(&tag) || !r.U64(&m->feedback_request)) return Short("PARAMS");
  }
  return Trailing("PARAMS", r);
}

OutFrame Encode(const Push& m, std::span<const std::span<const float>> grads) {
  OutFrame f = Start(MessageType::kPush);
  ByteWriter w(&f.head);
  w.U32(m.worker);
  w.U64(m.incarnation);
  w.U64(m.local_step);
  w.U64(m.based_on_step);
  std::uint64_t n = 0;
  for (const auto& g : grads) {
    n += g.size();
    f.tail.push_back(AsBytes(g));
  }
  w.U64(n);
  if (m.epoch != 0) AppendSection(f, 1, [&](ByteWriter& t) { t.U32(m.epoch); });  // after the gradient
  return f;
}

Status Decode(std::span<const std::byte> p, Push* m) {
  ByteReader r(p);
  if (!r.U32(&m->worker) || !r.U64(&m->incarnation) || !r.U64(&m->local_step) || !r.U64(&m->based_on_step) ||
      !ReadFloats(r, &m->grads))
    return Short("PUSH");
  m->epoch = 0;
  if (r.remaining() != 0 && p[p.size() - r.remaining()] == std::byte{1}) {
    std::uint8_t tag = 0;
    if (!r.U8(&tag) || !r.U32(&m->epoch)) return Short("PUSH");
  }
  return Trailing("PUSH", r);
}

OutFrame Encode(const PushAck& m) {
  OutFrame f = Start(MessageType::kPushAck);
  ByteWriter w(&f.head);
  w.U64(m.global_step);
  w.U8(static_cast<std::uint8_t>(m.outcome));
  if (m.stop) w.U8(1);
  if (m.membership) EncodeMembership(2, *m.membership, w);
  EncodeProgress(3, m.progress, w);
  return f;
}

Status Decode(std::span<const std::byte> p, PushAck* m) {
  ByteReader r(p);
  std::uint8_t outcome = 0;
  if (!r.U64(&m->global_step) || !r.U8(&outcome)) return Short("PUSH_ACK");
  TFD_RETURN_IF_ERROR(ToCode(outcome, PushOutcome::kDuplicate, "PUSH_ACK", "outcome", &m->outcome));
  // The optional stop byte is 1 when present; anything else is trailing bytes.
  m->stop = r.remaining() != 0 && p[p.size() - r.remaining()] == std::byte{1};
  std::uint8_t flag = 0;
  if (m->stop) (void)r.U8(&flag);
  if (r.remaining() != 0 && p[p.size() - r.remaining()] == std::byte{2}) TFD_RETURN_IF_ERROR(DecodeMembership("PUSH_ACK", r, &m->membership));
  if (r.remaining() != 0 && p[p.size() - r.remaining()] == std::byte{3}) TFD_RETURN_IF_ERROR(DecodeProgress("PUSH_ACK", r, &m->progress));
  return Trailing("PUSH_ACK", r);
}

OutFrame Encode(const Done& m) {
  OutFrame f = Start(MessageType::kDone);
  ByteWriter w(&f.head);
  w.U32(m.worker);
  if (m.stop) w.U8(1);
  return f;
}

Status Decode(std::span<const std::byte> p, Done* m) {
  ByteReader r(p);
  if (!r.U32(&m->worker)) return Short("DONE");
  m->stop = r.remaining() != 0 && p[p.size() - r.remaining()] == std::byte{1};
  std::uint8_t flag = 0;
  if (m->stop) (void)r.U8(&flag);
  return Trailing("DONE", r);
}

OutFrame EncodeDoneAck() { return Start(MessageType::kDoneAck); }
OutFrame EncodeHeartbeat() { return Start(MessageType::kHeartbeat); }

OutFrame Encode(const ErrorMessage& m) {
  OutFrame f = Start(MessageType::kError);
  ByteWriter w(&f.head);
  w.U16(m.code);
  w.Str(m.message);
  return f;
}

Status Decode(std::span<const std::byte> p, ErrorMessage* m) {
  ByteReader r(p);
  if (!r.U16(&m->code) || !r.Str(&m->message, 0xffff)) return Short("ERROR");
  return Trailing("ERROR", r);
}

OutFrame Encode(const AuthHello& m) {
  OutFrame f = Start(MessageType::kAuthHello);
  ByteWriter(&f.head).Raw(m.nonce.data(), m.nonce.size());
  return f;
}

Status Decode(std::span<const std::byte> p, AuthHello* m) {
  ByteReader r(p);
  if (!r.Bytes(m->nonce)) return Short("AUTH_HELLO");
  return Trailing("AUTH_HELLO", r);
}

OutFrame Encode(const AuthChallenge& m) {
  OutFrame f = Start(MessageType::kAuthChallenge);
  ByteWriter w(&f.head);
  w.Raw(m.nonce.data(), m.nonce.size());
  w.Raw(m.proof.data(), m.proof.size());
  return f;
}

Status Decode(std::span<const std::byte> p, AuthChallenge* m) {
  ByteReader r(p);
  if (!r.Bytes(m->nonce) || !r.Bytes(m->proof)) return Short("AUTH_CHALLENGE");
  return Trailing("AUTH_CHALLENGE", r);
}

OutFrame Encode(const AuthProof& m) {
  OutFrame f = Start(MessageType::kAuthProof);
  ByteWriter(&f.head).Raw(m.proof.data(), m.proof.size());
  return f;
}

Status Decode(std::span<const std::byte> p, AuthProof* m) {
  ByteReader r(p);
  if (!r.Bytes(m->proof)) return Short("AUTH_PROOF");
  return Trailing("AUTH_PROOF", r);
}

namespace {

// RING_CHUNK's fields before its count, which RING_CHUNK_SHM shares.
void WriteRingHead(ByteWriter& w, const RingChunk& m) {
  w.U64(m.collective);
  w.U8(static_cast<std::uint8_t>(m.phase));
  w.U8(0);
  w.U16(m.hop);
  w.U32(m.segment);
  w.U64(m.offset);
}

Status ReadRingHead(ByteReader& r, RingChunk* m, const char* what) {
  std::uint8_t phase = 0, reserved = 0;
  if (!r.U64(&m->collective) || !r.U8(&phase) || !r.U8(&reserved) || reserved != 0 || !r.U16(&m->hop) || !r.U32(&m->segment) ||
      !r.U64(&m->offset))
    return Short(what);
  return ToCode(phase, RingPhase::kBroadcast, what, "phase", &m->phase);
}

}  // namespace

OutFrame Encode(const RingChunk& m, std::span<const float> values) {
  OutFrame f = Start(MessageType::kRingChunk);
  ByteWriter w(&f.head);
  WriteRingHead(w, m);
  w.U64(values.size());  // the 32-byte head keeps the floats 4-byte aligned in the payload
  f.tail.push_back(AsBytes(values));
  return f;
}

Status Decode(std::span<const std::byte> p, RingChunk* m) {
  ByteReader r(p);
  TFD_RETURN_IF_ERROR(ReadRingHead(r, m, "RING_CHUNK"));
  if (!ReadFloats(r, &m->values)) return Short("RING_CHUNK");
  return Trailing("RING_CHUNK", r);
}

OutFrame Encode(const RingChunkShm& m) {
  OutFrame f = Start(MessageType::kRingChunkShm);
  ByteWriter w(&f.head);
  WriteRingHead(w, m.chunk);
  w.U64(m.count);
  w.U32(m.slot);
  w.U32(m.crc);
  return f;
}

Status Decode(std::span<const std::byte> p, RingChunkShm* m) {
  ByteReader r(p);
  TFD_RETURN_IF_ERROR(ReadRingHead(r, &m->chunk, "RING_CHUNK_SHM"));
  if (!r.U64(&m->count) || !r.U32(&m->slot) || !r.U32(&m->crc)) return Short("RING_CHUNK_SHM");
  return Trailing("RING_CHUNK_SHM", r);
}

OutFrame Encode(const RingShmOffer& m) {
  OutFrame f = Start(MessageType::kRingShmOffer);
  ByteWriter w(&f.head);
  w.U32(m.fd);
  w.U32(m.slots);
  w.U64(m.slot_bytes);
  w.U64(m.nonce);
  return f;
}

Status Decode(std::span<const std::byte> p, RingShmOffer* m) {
  ByteReader r(p);
  if (!r.U32(&m->fd) || !r.U32(&m->slots) || !r.U64(&m->slot_bytes) || !r.U64(&m->nonce)) return Short("RING_SHM_OFFER");
  return Trailing("RING_SHM_OFFER", r);
}

OutFrame Encode(const RingShmAccept& m) {
  OutFrame f = Start(MessageType::kRingShmAccept);
  ByteWriter(&f.head).U64(m.nonce);
  return f;
}

Status Decode(std::span<const std::byte> p, RingShmAccept* m) {
  ByteReader r(p);
  if (!r.U64(&m->nonce)) return Short("RING_SHM_ACCEPT");
  return Trailing("RING_SHM_ACCEPT", r);
}

OutFrame Encode(const RingSlotFree& m) {
  OutFrame f = Start(MessageType::kRingSlotFree);
  ByteWriter(&f.head).U64(m.freed);
  return f;
}

Status Decode(std::span<const std::byte> p, RingSlotFree* m) {
  ByteReader r(p);
  if (!r.U64(&m->freed)) return Short("RING_SLOT_FREE");
  return Trailing("RING_SLOT_FREE", r);
}

OutFrame Encode(MessageType type, const PipeTensor& m, std::span<const float> values) {
  OutFrame f = Start(type);
  ByteWriter w(&f.head);
  w.U64(m.step);
  w.U32(m.microbatch);
  w.U16(m.stage);
  w.U16(m.replica);
  w.U32(m.rows);
  w.U32(m.correct);
  w.F64(m.loss);
  w.F64(m.abs_error);
  w.F64(m.squared_error);
  w.U64(values.size());  // the 56-byte head keeps the floats 4-byte aligned in the payload
  f.tail.push_back(AsBytes(values));
  return f;
}

Status Decode(std::span<const std::byte> p, PipeTensor* m) {
  ByteReader r(p);
  if (!r.U64(&m->step) || !r.U32(&m->microbatch) || !r.U16(&m->stage) || !r.U16(&m->replica) || !r.U32(&m->rows) ||
      !r.U32(&m->correct) || !r.F64(&m->loss) || !r.F64(&m->abs_error) ||
      !r.F64(&m->squared_error) || !ReadFloats(r, &m->values))
    return Short("PIPE tensor");
  if (m->stage >= kMaxStages) return Status::Corruption(fmt::format("PIPE tensor: stage {} is not below {}", m->stage, kMaxStages));
  if (m->rows == 0 || m->values.size() % (std::size_t{4} * m->rows) != 0)
    return Status::Corruption(fmt::format("PIPE tensor: {} floats are not {} rows of equal width", m->values.size() / 4, m->rows));
  return Trailing("PIPE tensor", r);
}

}  // namespace tfd::wire
