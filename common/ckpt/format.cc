#include "common/ckpt/format.h"

#include <cstring>

#include <fmt/format.h>

#include "common/wire/bytes.h"
#include "common/wire/crc32c.h"

namespace tfd::ckpt {
namespace {

using wire::ByteReader;
using wire::ByteWriter;

constexpr std::size_t kFileHeaderBytes = 8;    // magic u32 | version u16 | reserved u16
constexpr std::size_t kRecordHeaderBytes = 8;  // type u16 | reserved u16 | length u32
constexpr std::size_t kRecordCrcBytes = 4;

enum class RecordType : std::uint16_t { kMeta = 1, kOptimizer = 2, kCursors = 3, kTensor = 4, kEnd = 5, kCard = 6, kEarlyStopping = 7,
                                      kFeedback = 8 };

const char* RecordName(std::uint16_t type) {
  switch (static_cast<RecordType>(type)) {
    case RecordType::kMeta: return "META";
    case RecordType::kOptimizer: return "OPTIMIZER";
    case RecordType::kCursors: return "CURSORS";
    case RecordType::kTensor: return "TENSOR";
    case RecordType::kEnd: return "END";
    case RecordType::kCard: return "CARD";
    case RecordType::kEarlyStopping: return "EARLY_STOPPING";
    case RecordType::kFeedback: return "FEEDBACK";
  }
  return "unknown";
}

// The file's optimizer code (its own numbers, not the wire's), both ways; false for an unknown code.
std::uint8_t OptimizerCode(config::OptimizerSpec::Type t) {
  switch (t) {
    case config::OptimizerSpec::Type::kSgd: return 0;
    case config::OptimizerSpec::Type::kMomentum: return 1;
    case config::OptimizerSpec::Type::kAdam: return 2;
  }
  return 0;
}
bool OptimizerFromCode(std::uint8_t code, config::OptimizerSpec::Type* t) {
  for (auto candidate : {config::OptimizerSpec::Type::kSgd, config::OptimizerSpec::Type::kMomentum, config::OptimizerSpec::Type::kAdam}) {
    if (OptimizerCode(candidate) != code) continue;
    *t = candidate;
    return true;
  }
  return false;
}

// The file's code of an error-feedback method (1 topk, 2 powersgd), both ways; 0 / false for others.
std::uint8_t FeedbackCode(config::CompressionSpec::Method m) {
  switch (m) {
    case config::CompressionSpec::Method::kTopK: return 1;
    case config::CompressionSpec::Method::kPowerSgd: return 2;
    default: return 0;
  }
}
bool FeedbackFromCode(std::uint8_t code, config::CompressionSpec::Method* m) {
  if (code == 1) *m = config::CompressionSpec::Method::kTopK;
  else if (code == 2) *m = config::CompressionSpec::Method::kPowerSgd;
  return code == 1 || code == 2;
}

// Little-endian floats from the file into `out` (memcpy of zero bytes from an empty vector's null
// data() is undefined, so an empty tensor copies nothing).
void CopyFloats(std::span<const std::byte> raw, std::vector<float>* out) {
  out->resize(raw.size() / 4);
  if (!raw.empty()) std::memcpy(out->data(), raw.data(), raw.size());
}

// --- Serialize -------------------------------------------------------------------------------

class RecordWriter {
 public:
  explicit RecordWriter(std::vector<std::byte>* out) : out_(out) {}
  // Starts a record; its fields go through writer() until End().
  ByteWriter& Begin(RecordType type) {
    start_ = out_->size();
    ByteWriter w(out_);
    w.U16(static_cast<std::uint16_t>(type));
    w.U16(0);
    w.U32(0);  // length, patched by End()
    writer_ = ByteWriter(out_);
    return writer_;
  }
  Status End() {
    const std::size_t len = out_->size() - start_ - kRecordHeaderBytes;
    if (len > 0xffffffffu) return Status::InvalidArgument(fmt::format("a record of {} bytes is over the 4 GiB limit", len));
    const auto len32 = static_cast<std::uint32_t>(len);
    std::memcpy(out_->data() + start_ + 4, &len32, 4);
    const std::uint32_t crc = wire::Crc32c(std::span<const std::byte>(*out_).subspan(start_));
    ByteWriter(out_).U32(crc);
    ++records_;
    return Status::Ok();
  }
  std::uint32_t records() const { return records_; }

 private:
  std::vector<std::byte>* out_;
  ByteWriter writer_{nullptr};
  std::size_t start_ = 0;
  std::uint32_t records_ = 0;
};

Status CheckConsistent(const Checkpoint& c) {
  if (c.optimizer.slot_names.size() > kMaxSlots)
    return Status::InvalidArgument(fmt::format("{} optimizer slots (at most {})", c.optimizer.slot_names.size(), kMaxSlots));
  for (const std::string& s : c.optimizer.slot_names)
    if (s.size() > kMaxNameBytes) return Status::InvalidArgument("an optimizer slot name is over 1024 bytes");
  if (c.optimizer.updates < 0) return Status::InvalidArgument(fmt::format("negative optimizer update count {}", c.optimizer.updates));
  if (c.cursors.size() > kMaxCursors) return Status::InvalidArgument(fmt::format("{} data cursors (at most {})", c.cursors.size(), kMaxCursors));
  if (c.tensors.size() > kMaxTensors) return Status::InvalidArgument(fmt::format("{} tensors (at most {})", c.tensors.size(), kMaxTensors));
  if (c.feedback) {
    const ErrorFeedback& f = *c.feedback;
    if (FeedbackCode(f.method) == 0) return Status::InvalidArgument("error feedback of a method that keeps none (topk or powersgd)");
    if (f.residuals.empty() || f.residuals.size() > kMaxCursors)
      return Status::InvalidArgument(fmt::format("error feedback of {} workers (1 to {})", f.residuals.size(), kMaxCursors));
    for (const std::vector<float>& r : f.residuals)
      if (r.size() != f.residuals[0].size())
        return Status::InvalidArgument(fmt::format("error feedback residuals of {} and {} values", f.residuals[0].size(), r.size()));
    if (f.residuals.size() * f.residuals[0].size() + f.shared.size() > kMaxFeedbackFloats)
      return Status::InvalidArgument(fmt::format("error feedback of {} workers x {} values is over a record's 4 GiB", f.residuals.size(),
                                                 f.residuals[0].size()));
  }
  for (const NamedTensor& t : c.tensors) {
    if (t.name.empty() || t.name.size() > kMaxNameBytes)
      return Status::InvalidArgument(fmt::format("tensor \"{}\": a name must have 1 to {} bytes", t.name.substr(0, 64), kMaxNameBytes));
    if (t.shape.size() > kMaxRank) return Status::InvalidArgument(fmt::format("tensor {}: rank {} (at most {})", t.name, t.shape.size(), kMaxRank));
    std::uint64_t n = 1;
    for (std::int64_t d : t.shape) {
      if (d < 0) return Status::InvalidArgument(fmt::format("tensor {}: negative dimension {}", t.name, d));
      if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n))
        return Status::InvalidArgument(fmt::format("tensor {}: shape overflows", t.name));
    }
    if (n != t.values.size())
      return Status::InvalidArgument(fmt::format("tensor {}: shape holds {} values, has {}", t.name, n, t.values.size()));
    if (t.slots.size() != c.optimizer.slot_names.size())
      return Status::InvalidArgument(fmt::format("tensor {}: {} slots, the optimizer keeps {}", t.name, t.slots.size(),
                                                 c.optimizer.slot_names.size()));
    for (std::size_t k = 0; k < t.slots.size(); ++k) {
      if (t.slots[k].name != c.optimizer.slot_names[k])
        return Status::InvalidArgument(fmt::format("tensor {}: slot {} is \"{}\", the optimizer's is \"{}\"", t.name, k,
                                                   t.slots[k].name.substr(0, 64), c.optimizer.slot_names[k]));
      if (t.slots[k].values.size() != t.values.size())
        return Status::InvalidArgument(fmt::format("tensor {}: slot {} has {} values, the tensor {}", t.name, t.slots[k].name,
                                                   t.slots[k].values.size(), t.values.size()));
    }
  }
  return Status::Ok();
}

// --- Parse -----------------------------------------------------------------------------------

struct RecordView {
  std::uint16_t type = 0;
  std::size_t index = 0;   // 0-based record number
  std::size_t offset = 0;  // of the record header in the file
  std::span<const std::byte> payload;
};

class Parser {
 public:
  Parser(std::span<const std::byte> bytes, std::string_view source) : bytes_(bytes), source_(source) {}

  Result<Checkpoint> Run() {
    TFD_RETURN_IF_ERROR(ParseFileHeader());
    Checkpoint c;
    std::uint32_t num_tensors = 0;
    RecordView r;
    TFD_RETURN_IF_ERROR(Expect(RecordType::kMeta, &r));
    {
      ByteReader in(r.payload);
      if (!in.U64(&c.global_step) || !in.U32(&c.num_workers) || !in.U32(&num_tensors)) return Fault(r, "payload too short");
      if (in.remaining() > 0) {  // the optional flags word
        std::uint32_t flags = 0;
        if (!in.U32(&flags)) return Fault(r, "payload too short for its flags");
        if ((flags & ~kMetaFlagFinal) != 0) return Fault(r, fmt::format("unknown flags 0x{:08x}", flags & ~kMetaFlagFinal));
        c.final = (flags & kMetaFlagFinal) != 0;
      }
      TFD_RETURN_IF_ERROR(Finish(r, in));
      if (num_tensors > kMaxTensors) return Fault(r, fmt::format("{} tensors is over the limit of {}", num_tensors, kMaxTensors));
      if (c.num_workers > kMaxCursors) return Fault(r, fmt::format("{} workers is over the limit of {}", c.num_workers, kMaxCursors));
    }
    TFD_RETURN_IF_ERROR(Expect(RecordType::kOptimizer, &r));
    TFD_RETURN_IF_ERROR(ParseOptimizer(r, &c.optimizer));
    TFD_RETURN_IF_ERROR(Expect(RecordType::kCursors, &r));
    TFD_RETURN_IF_ERROR(ParseCursors(r, c.num_workers, &c.cursors));
    if (NextType() == static_cast<std::uint16_t>(RecordType::kCard)) {  // optional: files before it have none
      TFD_RETURN_IF_ERROR(Expect(RecordType::kCard, &r));
      if (r.payload.size() > kMaxCardBytes) return Fault(r, fmt::format("{} bytes is over the limit of {}", r.payload.size(), kMaxCardBytes));
      c.model_card.assign(reinterpret_cast<const char*>(r.payload.data()), r.payload.size());
    }
    if (NextType() == static_cast<std::uint16_t>(RecordType::kEarlyStopping)) {  // optional, as CARD
      TFD_RETURN_IF_ERROR(Expect(RecordType::kEarlyStopping, &r));
      TFD_RETURN_IF_ERROR(ParseEarlyStopping(r, &c.early_stopping.emplace()));
    }
    if (NextType() == static_cast<std::uint16_t>(RecordType::kFeedback)) {  // optional, as CARD
      TFD_RETURN_IF_ERROR(Expect(RecordType::kFeedback, &r));
      TFD_RETURN_IF_ERROR(ParseFeedback(r, &c.feedback.emplace()));
    }
    for (std::uint32_t i = 0; i < num_tensors; ++i) {
      TFD_RETURN_IF_ERROR(Expect(RecordType::kTensor, &r));
      NamedTensor t;
      TFD_RETURN_IF_ERROR(ParseTensor(r, c.optimizer.slot_names, &t));
      c.tensors.push_back(std::move(t));
    }
    TFD_RETURN_IF_ERROR(Expect(RecordType::kEnd, &r));
    {
      ByteReader in(r.payload);
      std::uint32_t records = 0;
      if (!in.U32(&records)) return Fault(r, "payload too short");
      TFD_RETURN_IF_ERROR(Finish(r, in));
      if (records != r.index) return Fault(r, fmt::format("counts {} records before it, the file has {}", records, r.index));
    }
    if (pos_ != bytes_.size())
      return Status::Corruption(fmt::format("{}: {} bytes after the END record at offset {}", source_, bytes_.size() - pos_, pos_));
    return c;
  }

 private:
  Status ParseFileHeader() {
    if (bytes_.size() < kFileHeaderBytes)
      return Status::Corruption(fmt::format("{}: {} bytes is too short for the {}-byte file header", source_, bytes_.size(), kFileHeaderBytes));
    ByteReader in(bytes_.first(kFileHeaderBytes));
    std::uint32_t magic = 0;
    std::uint16_t version = 0, reserved = 0;
    (void)(in.U32(&magic) && in.U16(&version) && in.U16(&reserved));
    if (magic != kFileMagic)
      return Status::Corruption(fmt::format("{}: bad magic 0x{:08x} (expected 0x{:08x}, \"TFDK\"): not a tfd checkpoint", source_, magic, kFileMagic));
    if (version != kFormatVersion)
      return Status::Corruption(fmt::format("{}: format version {} (this tfd reads version {})", source_, version, kFormatVersion));
    if (reserved != 0) return Status::Corruption(fmt::format("{}: reserved header field is {}, expected 0", source_, reserved));
    pos_ = kFileHeaderBytes;
    return Status::Ok();
  }

  // The type of the record at pos_, or 0 when too few bytes remain to say (Expect then reports it).
  std::uint16_t NextType() const {
    if (bytes_.size() - pos_ < 2) return 0;
    std::uint16_t type = 0;
    std::memcpy(&type, bytes_.data() + pos_, 2);
    return type;
  }

  // Reads the next record, checks its bounds, CRC and type.
  Status Expect(RecordType want, RecordView* r) {
    r->index = index_;
    r->offset = pos_;
    r->type = static_cast<std::uint16_t>(want);
    const std::size_t left = bytes_.size() - pos_;
    if (left == 0)
      return Status::Corruption(fmt::format("{}: truncated: ends at offset {} where record {} ({}) should start", source_, pos_, index_,
                                            RecordName(r->type)));
    if (left < kRecordHeaderBytes)
      return Status::Corruption(fmt::format("{}: truncated: record {} header at offset {} needs {} bytes, {} remain", source_, index_, pos_,
                                            kRecordHeaderBytes, left));
    ByteReader in(bytes_.subspan(pos_, kRecordHeaderBytes));
    std::uint16_t type = 0, reserved = 0;
    std::uint32_t length = 0;
    (void)(in.U16(&type) && in.U16(&reserved) && in.U32(&length));
    r->type = type;
    if (std::uint64_t{length} + kRecordCrcBytes > left - kRecordHeaderBytes)
      return Fault(*r, fmt::format("length {} and the CRC need {} bytes, {} are left in the file (truncated?)", length,
                                   std::uint64_t{length} + kRecordCrcBytes, left - kRecordHeaderBytes));
    const auto whole = bytes_.subspan(pos_, kRecordHeaderBytes + length);
    std::uint32_t stored = 0;
    std::memcpy(&stored, bytes_.data() + pos_ + kRecordHeaderBytes + length, 4);
    const std::uint32_t actual = wire::Crc32c(whole);
    if (stored != actual) return Fault(*r, fmt::format("CRC 0x{:08x} does not match the stored 0x{:08x}", actual, stored));
    if (reserved != 0) return Fault(*r, fmt::format("reserved field is {}, expected 0", reserved));
    if (type != static_cast<std::uint16_t>(want))
      return Fault(*r, fmt::format("unexpected record type {} here (expected {})", type, RecordName(static_cast<std::uint16_t>(want))));
    r->payload = whole.subspan(kRecordHeaderBytes);
    pos_ += kRecordHeaderBytes + length + kRecordCrcBytes;
    ++index_;
    return Status::Ok();
  }

  Status ParseOptimizer(const RecordView& r, OptimizerInfo* o) {
    ByteReader in(r.payload);
    std::uint8_t type = 0, nesterov = 0, slots = 0;
    std::uint64_t updates = 0;
    config::OptimizerSpec& s = o->spec;
    if (!in.U8(&type) || !in.U8(&nesterov) || !in.F64(&s.learning_rate) || !in.F64(&s.momentum) || !in.F64(&s.beta1) ||
        !in.F64(&s.beta2) || !in.F64(&s.epsilon) || !in.U64(&updates) || !in.U8(&slots))
      return Fault(r, "payload too short");
    if (!OptimizerFromCode(type, &s.type)) return Fault(r, fmt::format("unknown optimizer type {}", type));
    if (nesterov > 1) return Fault(r, fmt::format("use_nesterov is {}, expected 0 or 1", nesterov));
    if (updates > static_cast<std::uint64_t>(INT64_MAX)) return Fault(r, "update count out of range");
    if (slots > kMaxSlots) return Fault(r, fmt::format("{} slots is over the limit of {}", slots, kMaxSlots));
    s.use_nesterov = nesterov == 1;
    o->updates = static_cast<std::int64_t>(updates);
    for (int k = 0; k < slots; ++k) {
      std::string name;
      if (!in.Str(&name, kMaxNameBytes)) return Fault(r, fmt::format("slot name {} is short or over {} bytes", k, kMaxNameBytes));
      o->slot_names.push_back(std::move(name));
    }
    if (in.remaining() != 0) TFD_RETURN_IF_ERROR(ParseSchedule(r, in, &s));
    return Finish(r, in);
  }

  // The optional tail of the OPTIMIZER record: weight decay and learning-rate schedule.
  Status ParseSchedule(const RecordView& r, ByteReader& in, config::OptimizerSpec* s) {
    config::LrSchedule& sc = s->schedule;
    std::uint8_t kind = 0, staircase = 0;
    std::uint64_t warmup = 0, decay_steps = 0;
    std::uint32_t count = 0;
    if (!in.F64(&s->weight_decay) || !in.U8(&kind) || !in.U64(&warmup) || !in.U64(&decay_steps) || !in.F64(&sc.decay_rate) ||
        !in.U8(&staircase) || !in.F64(&sc.alpha) || !in.U32(&count))
      return Fault(r, "schedule too short");
    if (kind > static_cast<std::uint8_t>(config::LrSchedule::Kind::kCosineDecay)) return Fault(r, fmt::format("unknown schedule {}", kind));
    if (staircase > 1) return Fault(r, fmt::format("staircase is {}, expected 0 or 1", staircase));
    constexpr std::uint64_t kMaxSteps = std::uint64_t{1} << 40;
    if (warmup > kMaxSteps || decay_steps > kMaxSteps) return Fault(r, "schedule step count out of range");
    if (count > in.remaining() / 16) return Fault(r, fmt::format("{} schedule boundaries is more than the payload holds", count));
    sc.kind = static_cast<config::LrSchedule::Kind>(kind);
    sc.staircase = staircase == 1;
    sc.warmup_steps = static_cast<std::int64_t>(warmup);
    sc.decay_steps = static_cast<std::int64_t>(decay_steps);
    for (std::uint32_t i = 0; i < count; ++i) {
      std::uint64_t b = 0;
      if (!in.U64(&b) || b > kMaxSteps) return Fault(r, "schedule boundary short or out of range");
      sc.boundaries.push_back(static_cast<std::int64_t>(b));
    }
    for (std::uint32_t i = 0; count > 0 && i <= count; ++i) {
      double v = 0;
      if (!in.F64(&v)) return Fault(r, "schedule values too short");
      sc.values.push_back(v);
    }
    return Status::Ok();
  }

  Status ParseCursors(const RecordView& r, std::uint32_t num_workers, std::vector<DataCursor>* out) {
    ByteReader in(r.payload);
    std::uint32_t count = 0;
    if (!in.U32(&count)) return Fault(r, "payload too short");
    if (count != num_workers) return Fault(r, fmt::format("{} cursors for {} workers", count, num_workers));
    if (count > in.remaining() / 24) return Fault(r, fmt::format("{} cursors is more than the payload holds", count));
    out->resize(count);
    for (std::uint32_t i = 0; i < count; ++i) {
      DataCursor& d = (*out)[i];
      if (!in.U32(&d.rank) || !in.U32(&d.epoch) || !in.U64(&d.base) || !in.U64(&d.next)) return Fault(r, "payload too short");
      if (d.rank != i) return Fault(r, fmt::format("cursor {} is for rank {}", i, d.rank));
    }
    return Finish(r, in);
  }

  Status ParseEarlyStopping(const RecordView& r, EarlyStopping* e) {
    ByteReader in(r.payload);
    std::uint8_t have_best = 0;
    if (!in.U32(&e->epoch) || !in.U8(&have_best) || !in.F64(&e->best) || !in.U32(&e->best_epoch) || !in.U32(&e->wait))
      return Fault(r, "payload too short");
    if (have_best > 1) return Fault(r, fmt::format("have_best is {}, expected 0 or 1", have_best));
    e->have_best = have_best == 1;
    if (e->best_epoch > e->epoch || e->wait > e->epoch)
      return Fault(r, fmt::format("best epoch {} and wait {} after epoch {}: neither can be past it", e->best_epoch, e->wait, e->epoch));
    return Finish(r, in);
  }

  Status ParseFeedback(const RecordView& r, ErrorFeedback* f) {
    ByteReader in(r.payload);
    std::uint8_t method = 0;
    std::uint32_t workers = 0;
    std::uint64_t count = 0, shared = 0;
    if (!in.U8(&method) || !in.U32(&f->rank) || !in.U32(&workers) || !in.U64(&count) || !in.U64(&shared)) return Fault(r, "payload too short");
    if (!FeedbackFromCode(method, &f->method)) return Fault(r, fmt::format("unknown method {} (1 topk, 2 powersgd)", method));
    if (workers == 0 || workers > kMaxCursors) return Fault(r, fmt::format("{} workers (1 to {})", workers, kMaxCursors));
    // Bound the claimed sizes by the bytes present before allocating.
    const std::uint64_t floats = in.remaining() / 4;
    if (count > floats / workers || shared > floats - count * workers)
      return Fault(r, fmt::format("{} workers of {} values and {} shared are more than the {} payload bytes hold", workers, count, shared,
                                  r.payload.size()));
    std::span<const std::byte> raw;
    f->residuals.resize(workers);
    for (std::vector<float>& residual : f->residuals) {
      (void)in.FloatBytes(count, &raw);
      CopyFloats(raw, &residual);
    }
    (void)in.FloatBytes(shared, &raw);
    CopyFloats(raw, &f->shared);
    return Finish(r, in);
  }

  Status ParseTensor(const RecordView& r, const std::vector<std::string>& slot_names, NamedTensor* t) {
    ByteReader in(r.payload);
    if (!in.Str(&t->name, kMaxNameBytes) || t->name.empty()) return Fault(r, fmt::format("name is empty, short or over {} bytes", kMaxNameBytes));
    std::uint8_t rank = 0;
    std::uint64_t count = 0, product = 1;
    if (!in.U8(&rank)) return Fault(r, fmt::format("tensor {}: payload too short", t->name));
    if (rank > kMaxRank) return Fault(r, fmt::format("tensor {}: rank {} is over the limit of {}", t->name, rank, kMaxRank));
    for (int i = 0; i < rank; ++i) {
      std::uint64_t d = 0;
      if (!in.U64(&d)) return Fault(r, fmt::format("tensor {}: payload too short", t->name));
      if (d > static_cast<std::uint64_t>(INT64_MAX) || __builtin_mul_overflow(product, d, &product))
        return Fault(r, fmt::format("tensor {}: shape overflows", t->name));
      t->shape.push_back(static_cast<std::int64_t>(d));
    }
    if (!in.U64(&count)) return Fault(r, fmt::format("tensor {}: payload too short", t->name));
    if (count != product) return Fault(r, fmt::format("tensor {}: shape holds {} values, the record says {}", t->name, product, count));
    // Bound the claimed size by the bytes present before allocating.
    if (count > in.remaining() / 4 / (1 + slot_names.size()))
      return Fault(r, fmt::format("tensor {}: {} values and {} slots are more than the {} payload bytes hold", t->name, count,
                                  slot_names.size(), r.payload.size()));
    std::span<const std::byte> raw;
    (void)in.FloatBytes(count, &raw);
    CopyFloats(raw, &t->values);
    for (const std::string& want : slot_names) {
      Slot slot;
      if (!in.Str(&slot.name, kMaxNameBytes)) return Fault(r, fmt::format("tensor {}: slot name short or over {} bytes", t->name, kMaxNameBytes));
      if (slot.name != want)
        return Fault(r, fmt::format("tensor {}: slot \"{}\" where the optimizer keeps \"{}\"", t->name, slot.name.substr(0, 64), want));
      if (!in.FloatBytes(count, &raw)) return Fault(r, fmt::format("tensor {}: slot {} is short", t->name, want));
      CopyFloats(raw, &slot.values);
      t->slots.push_back(std::move(slot));
    }
    return Finish(r, in);
  }

  Status Finish(const RecordView& r, const ByteReader& in) {
    if (in.remaining() != 0) return Fault(r, fmt::format("{} unexpected bytes at the end of the payload", in.remaining()));
    return Status::Ok();
  }

  Status Fault(const RecordView& r, std::string_view what) const {
    return Status::Corruption(fmt::format("{}: record {} ({}) at offset {}: {}", source_, r.index, RecordName(r.type), r.offset, what));
  }

  std::span<const std::byte> bytes_;
  std::string_view source_;
  std::size_t pos_ = 0;
  std::size_t index_ = 0;
};

}  // namespace

Result<std::vector<std::byte>> Serialize(const Checkpoint& c) {
  TFD_RETURN_IF_ERROR(CheckConsistent(c));
  std::vector<std::byte> out;
  {
    ByteWriter h(&out);
    h.U32(kFileMagic);
    h.U16(kFormatVersion);
    h.U16(0);
  }
  RecordWriter rw(&out);
  {
    ByteWriter& w = rw.Begin(RecordType::kMeta);
    w.U64(c.global_step);
    w.U32(c.num_workers);
    w.U32(static_cast<std::uint32_t>(c.tensors.size()));
    if (c.final) w.U32(kMetaFlagFinal);
    TFD_RETURN_IF_ERROR(rw.End());
  }
  {
    const config::OptimizerSpec& s = c.optimizer.spec;
    ByteWriter& w = rw.Begin(RecordType::kOptimizer);
    w.U8(OptimizerCode(s.type));
    w.U8(s.use_nesterov ? 1 : 0);
    w.F64(s.learning_rate);
    w.F64(s.momentum);
    w.F64(s.beta1);
    w.F64(s.beta2);
    w.F64(s.epsilon);
    w.U64(static_cast<std::uint64_t>(c.optimizer.updates));
    w.U8(static_cast<std::uint8_t>(c.optimizer.slot_names.size()));
    for (const std::string& n : c.optimizer.slot_names) w.Str(n);
    const config::LrSchedule& sc = s.schedule;
    if (s.weight_decay != 0 || sc.kind != config::LrSchedule::Kind::kConstant || sc.warmup_steps != 0) {
      w.F64(s.weight_decay);
      w.U8(static_cast<std::uint8_t>(sc.kind));
      w.U64(static_cast<std::uint64_t>(sc.warmup_steps));
      w.U64(static_cast<std::uint64_t>(sc.decay_steps));
      w.F64(sc.decay_rate);
      w.U8(sc.staircase ? 1 : 0);
      w.F64(sc.alpha);
      w.U32(static_cast<std::uint32_t>(sc.boundaries.size()));
      for (std::int64_t b : sc.boundaries) w.U64(static_cast<std::uint64_t>(b));
      if (!sc.boundaries.empty())
        for (double v : sc.values) w.F64(v);
    }
    TFD_RETURN_IF_ERROR(rw.End());
  }
  {
    ByteWriter& w = rw.Begin(RecordType::kCursors);
    if (c.cursors.size() != c.num_workers)
      return Status::InvalidArgument(fmt::format("{} data cursors for {} workers", c.cursors.size(), c.num_workers));
    w.U32(static_cast<std::uint32_t>(c.cursors.size()));
    for (std::size_t i = 0; i < c.cursors.size(); ++i) {
      const DataCursor& d = c.cursors[i];
      if (d.rank != i) return Status::InvalidArgument(fmt::format("data cursor {} is for rank {}", i, d.rank));
      w.U32(d.rank);
      w.U32(d.epoch);
      w.U64(d.base);
      w.U64(d.next);
    }
    TFD_RETURN_IF_ERROR(rw.End());
  }
  if (!c.model_card.empty()) {
    if (c.model_card.size() > kMaxCardBytes)
      return Status::InvalidArgument(fmt::format("a model card of {} bytes is over the limit of {}", c.model_card.size(), kMaxCardBytes));
    ByteWriter& w = rw.Begin(RecordType::kCard);
    w.Raw(c.model_card.data(), c.model_card.size());
    TFD_RETURN_IF_ERROR(rw.End());
  }
  if (c.early_stopping) {
    const EarlyStopping& e = *c.early_stopping;
    ByteWriter& w = rw.Begin(RecordType::kEarlyStopping);
    w.U32(e.epoch);
    w.U8(e.have_best ? 1 : 0);
    w.F64(e.best);
    w.U32(e.best_epoch);
    w.U32(e.wait);
    TFD_RETURN_IF_ERROR(rw.End());
  }
  if (c.feedback) {
    const ErrorFeedback& f = *c.feedback;
    ByteWriter& w = rw.Begin(RecordType::kFeedback);
    w.U8(FeedbackCode(f.method));
    w.U32(f.rank);
    w.U32(static_cast<std::uint32_t>(f.residuals.size()));
    w.U64(f.residuals[0].size());
    w.U64(f.shared.size());
    for (const std::vector<float>& residual : f.residuals) w.Floats(residual);
    w.Floats(f.shared);
    TFD_RETURN_IF_ERROR(rw.End());
  }
  for (const NamedTensor& t : c.tensors) {
    ByteWriter& w = rw.Begin(RecordType::kTensor);
    w.Str(t.name);
    w.U8(static_cast<std::uint8_t>(t.shape.size()));
    for (std::int64_t d : t.shape) w.U64(static_cast<std::uint64_t>(d));
    w.U64(t.values.size());
    w.Floats(t.values);
    for (const Slot& s : t.slots) {
      w.Str(s.name);
      w.Floats(s.values);
    }
    TFD_RETURN_IF_ERROR(rw.End());
  }
  {
    const std::uint32_t records = rw.records();
    ByteWriter& w = rw.Begin(RecordType::kEnd);
    w.U32(records);
    TFD_RETURN_IF_ERROR(rw.End());
  }
  return out;
}

Result<Checkpoint> Parse(std::span<const std::byte> bytes, std::string_view source) { return Parser(bytes, source).Run(); }

}  // namespace tfd::ckpt
