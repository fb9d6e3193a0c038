#include "common/ckpt/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/optim/optimizer.h"
#include "common/wire/bytes.h"
#include "common/wire/crc32c.h"

namespace tfd::ckpt {
namespace {

namespace fs = std::filesystem;
using wire::ByteReader;
using wire::ByteWriter;

constexpr std::size_t kFileHeaderBytes = 8;    // magic u32 | version u16 | reserved u16
constexpr std::size_t kRecordHeaderBytes = 8;  // type u16 | reserved u16 | length u32
constexpr std::size_t kRecordCrcBytes = 4;
constexpr std::string_view kPrefix = "ckpt-";
constexpr std::string_view kSuffix = ".tfdckpt";
constexpr std::string_view kTempSuffix = ".tfdckpt.tmp";

enum class RecordType : std::uint16_t { kMeta = 1, kOptimizer = 2, kCursors = 3, kTensor = 4, kEnd = 5 };

const char* RecordName(std::uint16_t type) {
  switch (static_cast<RecordType>(type)) {
    case RecordType::kMeta: return "META";
    case RecordType::kOptimizer: return "OPTIMIZER";
    case RecordType::kCursors: return "CURSORS";
    case RecordType::kTensor: return "TENSOR";
    case RecordType::kEnd: return "END";
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

std::string ErrnoText(int err) { return std::generic_category().message(err); }

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
      TFD_RETURN_IF_ERROR(Finish(r, in));
      if (num_tensors > kMaxTensors) return Fault(r, fmt::format("{} tensors is over the limit of {}", num_tensors, kMaxTensors));
      if (c.num_workers > kMaxCursors) return Fault(r, fmt::format("{} workers is over the limit of {}", c.num_workers, kMaxCursors));
    }
    TFD_RETURN_IF_ERROR(Expect(RecordType::kOptimizer, &r));
    TFD_RETURN_IF_ERROR(ParseOptimizer(r, &c.optimizer));
    TFD_RETURN_IF_ERROR(Expect(RecordType::kCursors, &r));
    TFD_RETURN_IF_ERROR(ParseCursors(r, c.num_workers, &c.cursors));
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
    return Finish(r, in);
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

// --- Files -----------------------------------------------------------------------------------

bool ParseFileStep(std::string_view name, std::uint64_t* step) {
  if (name.size() != kPrefix.size() + 12 + kSuffix.size() || !name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return false;
  std::uint64_t v = 0;
  for (char ch : name.substr(kPrefix.size(), 12)) {
    if (ch < '0' || ch > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(ch - '0');
  }
  *step = v;
  return true;
}

Status WriteAll(int fd, std::span<const std::byte> data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Internal(fmt::format("{}: write: {}", path, ErrnoText(errno)));
    }
    data = data.subspan(static_cast<std::size_t>(n));
  }
  return Status::Ok();
}

Status FsyncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return Status::Internal(fmt::format("{}: open for fsync: {}", path, ErrnoText(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return Status::Internal(fmt::format("{}: fsync: {}", path, ErrnoText(err)));
  return Status::Ok();
}

Status WriteFileDurably(const std::string& dir, const std::string& final_path, const std::string& tmp_path,
                        std::span<const std::byte> bytes) {
  const int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Internal(fmt::format("{}: create: {}", tmp_path, ErrnoText(errno)));
  Status s = WriteAll(fd, bytes, tmp_path);
  if (s.ok() && ::fsync(fd) != 0) s = Status::Internal(fmt::format("{}: fsync: {}", tmp_path, ErrnoText(errno)));
  if (::close(fd) != 0 && s.ok()) s = Status::Internal(fmt::format("{}: close: {}", tmp_path, ErrnoText(errno)));
  if (s.ok() && ::rename(tmp_path.c_str(), final_path.c_str()) != 0)
    s = Status::Internal(fmt::format("{}: rename to {}: {}", tmp_path, final_path, ErrnoText(errno)));
  if (!s.ok()) {
    ::unlink(tmp_path.c_str());
    return s;
  }
  return FsyncPath(dir, O_RDONLY | O_DIRECTORY);
}

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

std::string FileName(std::uint64_t global_step) { return fmt::format("{}{:012}{}", kPrefix, global_step, kSuffix); }

Result<std::vector<std::string>> List(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return Status::NotFound(fmt::format("{}: cannot list the checkpoint folder: {}", dir, ec.message()));
  std::vector<std::pair<std::uint64_t, std::string>> found;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return Status::Internal(fmt::format("{}: listing: {}", dir, ec.message()));
    std::uint64_t step = 0;
    if (ParseFileStep(it->path().filename().string(), &step)) found.emplace_back(step, it->path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> paths;
  for (auto& f : found) paths.push_back(std::move(f.second));
  return paths;
}

Result<std::string> Write(const std::string& dir, const Checkpoint& ckpt, int keep_last) {
  if (keep_last < 1) return Status::InvalidArgument(fmt::format("{}: keep_last must be at least 1, got {}", dir, keep_last));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    return Status::NotFound(fmt::format("{}: checkpoint folder: {}", dir, ErrnoText(errno)));
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(fmt::format("{}: checkpoint folder is not a folder", dir));
  auto bytes = Serialize(ckpt);
  if (!bytes.ok()) return bytes.status().WithContext(fmt::format("{}: checkpoint at step {}", dir, ckpt.global_step));
  const std::string name = FileName(ckpt.global_step);
  const std::string path = (fs::path(dir) / name).string();
  const std::string tmp = (fs::path(dir) / fmt::format("{}{:012}{}", kPrefix, ckpt.global_step, kTempSuffix)).string();
  TFD_RETURN_IF_ERROR(WriteFileDurably(dir, path, tmp, *bytes));

  // Keep the newest `keep_last`; a failed delete costs disk space, not the checkpoint just written.
  auto all = List(dir);
  if (all.ok()) {
    for (std::size_t i = static_cast<std::size_t>(keep_last); i < all->size(); ++i) {
      if (::unlink((*all)[i].c_str()) != 0) spdlog::warn("{}: cannot delete an old checkpoint: {}", (*all)[i], ErrnoText(errno));
    }
  } else {
    spdlog::warn("{}", all.status().message());
  }
  // Temporary files left by a writer that died mid-save are never read; remove them.
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.starts_with(kPrefix) && n.ends_with(kTempSuffix) && ::unlink(it->path().c_str()) != 0)
      spdlog::warn("{}: cannot delete a stale temporary checkpoint: {}", it->path().string(), ErrnoText(errno));
  }
  return path;
}

Result<Checkpoint> Load(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::NotFound(fmt::format("{}: cannot open the checkpoint: {}", path, ErrnoText(errno)));
  std::vector<std::byte> bytes;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) bytes.reserve(static_cast<std::size_t>(st.st_size));
  std::byte buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return Status::Internal(fmt::format("{}: read: {}", path, ErrnoText(err)));
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), buf, buf + n);
  }
  ::close(fd);
  return Parse(bytes, path);
}

Result<Loaded> LoadNewestValid(const std::string& dir) {
  TFD_ASSIGN_OR_RETURN(std::vector<std::string> paths, List(dir));
  Loaded out;
  for (const std::string& p : paths) {
    auto c = Load(p);
    if (c.ok()) {
      out.path = p;
      out.checkpoint = std::move(c).value();
      if (!out.skipped.empty()) spdlog::info("{}: restoring the newest valid checkpoint", p);
      return out;
    }
    spdlog::warn("skipping checkpoint {}", c.status().message());
    out.skipped.push_back(c.status().message());
  }
  if (paths.empty()) return Status::NotFound(fmt::format("{}: no checkpoint files (ckpt-<step>.tfdckpt)", dir));
  return Status::NotFound(fmt::format("{}: none of the {} checkpoint files is valid (newest: {})", dir, paths.size(), out.skipped.front()));
}

Status CheckOptimizer(const Checkpoint& ckpt, const config::OptimizerSpec& wanted, std::string_view source) {
  const auto saved = optim::MakeOptimizer(ckpt.optimizer.spec);
  const auto now = optim::MakeOptimizer(wanted);
  const std::string a = saved->Describe(), b = now->Describe();
  if (a != b)
    return Status::FailedPrecondition(
        fmt::format("{}: saved with optimizer \"{}\", the job asks for \"{}\": refusing to restore its slots", source, a, b));
  if (ckpt.optimizer.slot_names != now->SlotNames())
    return Status::FailedPrecondition(fmt::format("{}: holds {} optimizer slots, \"{}\" keeps {}", source,
                                                  ckpt.optimizer.slot_names.size(), b, now->num_slots()));
  return Status::Ok();
}

Schedule::Schedule(const config::CheckpointSpec& spec, std::uint64_t start_step, Clock::time_point start)
    : every_steps_(spec.every_steps), every_secs_(spec.every_secs), last_step_(start_step), last_time_(start) {}

bool Schedule::Due(std::uint64_t global_step, Clock::time_point now) const {
  if (every_steps_ > 0 && global_step >= last_step_ + static_cast<std::uint64_t>(every_steps_)) return true;
  return every_secs_ > 0 && std::chrono::duration<double>(now - last_time_).count() >= every_secs_;
}

void Schedule::Saved(std::uint64_t global_step, Clock::time_point now) {
  last_step_ = global_step;
  last_time_ = now;
}

// --- Re-sharding -----------------------------------------------------------------------------

namespace {

// The variables sorted by flat offset, each with its tensor; InvalidArgument on overlaps.
struct Span {
  std::int64_t begin = 0, end = 0;
  std::size_t index = 0;  // into variables
};
Result<std::vector<Span>> SortVariables(const std::vector<Variable>& variables) {
  std::vector<Span> spans;
  for (std::size_t i = 0; i < variables.size(); ++i) {
    const Variable& v = variables[i];
    if (v.flat_offset < 0 || v.size < 0) return Status::InvalidArgument(fmt::format("variable {}: negative offset or size", v.name));
    spans.push_back({v.flat_offset, v.flat_offset + v.size, i});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i].begin < spans[i - 1].end)
      return Status::InvalidArgument(fmt::format("variables {} and {} overlap", variables[spans[i - 1].index].name,
                                                 variables[spans[i].index].name));
  return spans;
}

// Calls fn(variable index, offset in variable, offset in shard, count) for each piece of `ranges`.
template <typename Fn>
Status ForEachPiece(const std::vector<Span>& spans, const std::vector<Variable>& variables, const std::vector<FlatRange>& ranges,
                    std::size_t ps, Fn fn) {
  std::int64_t q = 0;
  for (const FlatRange& r : ranges) {
    if (r.flat_offset < 0 || r.length < 0) return Status::InvalidArgument(fmt::format("ps {}: negative range", ps));
    std::int64_t p = r.flat_offset;
    const std::int64_t end = r.flat_offset + r.length;
    while (p < end) {
      auto it = std::upper_bound(spans.begin(), spans.end(), p, [](std::int64_t x, const Span& s) { return x < s.begin; });
      if (it == spans.begin() || (it - 1)->end <= p)
        return Status::InvalidArgument(fmt::format("ps {}: flat offset {} is in no variable", ps, p));
      const Span& s = *(it - 1);
      const std::int64_t n = std::min(end, s.end) - p;
      fn(s.index, p - variables[s.index].flat_offset, q, n);
      p += n;
      q += n;
    }
  }
  return Status::Ok();
}

std::int64_t TotalLength(const std::vector<FlatRange>& ranges) {
  std::int64_t n = 0;
  for (const FlatRange& r : ranges) n += r.length;
  return n;
}

}  // namespace

Result<std::vector<ShardState>> Reshard(const Checkpoint& ckpt, const std::vector<Variable>& variables,
                                        const std::vector<std::vector<FlatRange>>& shards) {
  std::map<std::string, const NamedTensor*, std::less<>> by_name;
  for (const NamedTensor& t : ckpt.tensors) by_name[t.name] = &t;
  const std::size_t num_slots = ckpt.optimizer.slot_names.size();
  std::vector<const NamedTensor*> tensor(variables.size());
  for (std::size_t i = 0; i < variables.size(); ++i) {
    const Variable& v = variables[i];
    auto it = by_name.find(v.name);
    if (it == by_name.end()) return Status::InvalidArgument(fmt::format("variable {} is not in the checkpoint", v.name));
    const NamedTensor& t = *it->second;
    if (static_cast<std::int64_t>(t.values.size()) != v.size)
      return Status::InvalidArgument(fmt::format("variable {}: the model has {} values, the checkpoint {}", v.name, v.size, t.values.size()));
    if (t.slots.size() != num_slots) return Status::InvalidArgument(fmt::format("variable {}: slots do not match the optimizer's", v.name));
    tensor[i] = &t;
  }
  TFD_ASSIGN_OR_RETURN(std::vector<Span> spans, SortVariables(variables));
  std::vector<ShardState> out(shards.size());
  for (std::size_t ps = 0; ps < shards.size(); ++ps) {
    const std::int64_t size = TotalLength(shards[ps]);
    ShardState& st = out[ps];
    st.values.resize(static_cast<std::size_t>(size));
    st.slots.resize(static_cast<std::size_t>(size) * num_slots);
    TFD_RETURN_IF_ERROR(ForEachPiece(spans, variables, shards[ps], ps, [&](std::size_t vi, std::int64_t at, std::int64_t q, std::int64_t n) {
      const NamedTensor& t = *tensor[vi];
      std::copy_n(t.values.begin() + at, n, st.values.begin() + q);
      for (std::size_t k = 0; k < num_slots; ++k)
        std::copy_n(t.slots[k].values.begin() + at, n, st.slots.begin() + static_cast<std::int64_t>(k) * size + q);
    }));
  }
  return out;
}

Result<std::vector<NamedTensor>> Assemble(const std::vector<Variable>& variables, const std::vector<std::vector<std::int64_t>>& shapes,
                                          const std::vector<std::string>& slot_names, const std::vector<std::vector<FlatRange>>& shards,
                                          const std::vector<ShardState>& states) {
  if (shapes.size() != variables.size()) return Status::InvalidArgument("one shape per variable expected");
  if (states.size() != shards.size()) return Status::InvalidArgument(fmt::format("{} shard states for {} shards", states.size(), shards.size()));
  const std::size_t num_slots = slot_names.size();
  std::vector<NamedTensor> out(variables.size());
  std::vector<std::int64_t> filled(variables.size(), 0);
  for (std::size_t i = 0; i < variables.size(); ++i) {
    std::int64_t n = 1;
    for (std::int64_t d : shapes[i]) n *= d;
    if (n != variables[i].size)
      return Status::InvalidArgument(fmt::format("variable {}: shape holds {} values, size is {}", variables[i].name, n, variables[i].size));
    out[i].name = variables[i].name;
    out[i].shape = shapes[i];
    out[i].values.resize(static_cast<std::size_t>(n));
    for (const std::string& s : slot_names) out[i].slots.push_back({s, std::vector<float>(static_cast<std::size_t>(n))});
  }
  TFD_ASSIGN_OR_RETURN(std::vector<Span> spans, SortVariables(variables));
  for (std::size_t ps = 0; ps < shards.size(); ++ps) {
    const std::int64_t size = TotalLength(shards[ps]);
    const ShardState& st = states[ps];
    if (static_cast<std::int64_t>(st.values.size()) != size || static_cast<std::int64_t>(st.slots.size()) != size * static_cast<std::int64_t>(num_slots))
      return Status::InvalidArgument(fmt::format("ps {}: state holds {} values and {} slot floats, its ranges {} values", ps,
                                                 st.values.size(), st.slots.size(), size));
    TFD_RETURN_IF_ERROR(ForEachPiece(spans, variables, shards[ps], ps, [&](std::size_t vi, std::int64_t at, std::int64_t q, std::int64_t n) {
      NamedTensor& t = out[vi];
      std::copy_n(st.values.begin() + q, n, t.values.begin() + at);
      for (std::size_t k = 0; k < num_slots; ++k)
        std::copy_n(st.slots.begin() + static_cast<std::int64_t>(k) * size + q, n, t.slots[k].values.begin() + at);
      filled[vi] += n;
    }));
  }
  for (std::size_t i = 0; i < variables.size(); ++i)
    if (filled[i] != variables[i].size)
      return Status::InvalidArgument(fmt::format("variable {}: the ranges cover {} of its {} values", variables[i].name, filled[i], variables[i].size));
  return out;
}

Result<std::vector<DataCursor>> ReshardCursors(const Checkpoint& ckpt, std::uint32_t new_workers) {
  if (new_workers == 0) return Status::InvalidArgument("re-sharding data cursors onto 0 workers");
  const std::uint32_t old = ckpt.num_workers;
  if (ckpt.cursors.size() != old || old == 0)
    return Status::InvalidArgument(fmt::format("the checkpoint has {} data cursors for {} workers", ckpt.cursors.size(), old));
  for (std::uint32_t i = 0; i < old; ++i)
    if (ckpt.cursors[i].rank != i) return Status::InvalidArgument(fmt::format("data cursor {} is for rank {}", i, ckpt.cursors[i].rank));
  if (new_workers == old) return ckpt.cursors;
  std::uint32_t epoch = UINT32_MAX;
  for (const DataCursor& d : ckpt.cursors) epoch = std::min(epoch, d.epoch);
  // Every permutation position below the lowest next position (among workers still in `epoch`)
  // has been finished by its worker: position p = base + r + j * old with j < next_r.
  std::uint64_t resume = UINT64_MAX;
  for (const DataCursor& d : ckpt.cursors) {
    if (d.epoch != epoch) continue;
    std::uint64_t pos = 0;
    if (__builtin_mul_overflow(d.next, std::uint64_t{old}, &pos) || __builtin_add_overflow(pos, d.base, &pos) ||
        __builtin_add_overflow(pos, std::uint64_t{d.rank}, &pos))
      pos = UINT64_MAX;
    resume = std::min(resume, pos);
  }
  std::vector<DataCursor> out(new_workers);
  for (std::uint32_t r = 0; r < new_workers; ++r) out[r] = {r, epoch, resume, 0};
  return out;
}

}  // namespace tfd::ckpt
