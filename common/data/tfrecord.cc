// The TFRecord reader (common/data/readers.h, common/data/tfrecord.h): the record framing checked
// with summary's masked CRC-32C, each record parsed as a tf.train.Example by libprotobuf, the
// features and label laid out as the spec names them. The first record fixes the layout (keys,
// kinds, lengths); every later record, in every file, must repeat it.
#include "common/data/tfrecord.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "common/data/images.h"
#include "common/data/proto/example.pb.h"
#include "common/data/readers.h"
#include "common/summary/record.h"

namespace tfd::data::tfrecord {
namespace {

using config::DataSpec;
using Kind = tensorflow::Feature::KindCase;

constexpr std::size_t kBlock = std::size_t{1} << 20;

class FileInput final : public Input {
 public:
  FileInput(std::FILE* f, std::uint64_t size) : file_(f), size_(size) {}
  ~FileInput() override { std::fclose(file_); }
  Result<std::size_t> Read(char* buf, std::size_t n) override {
    const std::size_t got = std::fread(buf, 1, n, file_);
    if (got == 0 && std::ferror(file_)) return Status::InvalidArgument("read failed");
    return got;
  }
  std::optional<std::uint64_t> size() const override { return size_; }

 private:
  std::FILE* file_;
  std::uint64_t size_;
};

class GzInput final : public Input {
 public:
  explicit GzInput(gzFile f) : file_(f) { gzbuffer(file_, 1 << 18); }
  ~GzInput() override { gzclose(file_); }
  Result<std::size_t> Read(char* buf, std::size_t n) override {
    const int got = gzread(file_, buf, static_cast<unsigned>(std::min<std::size_t>(n, 1u << 30)));
    if (got < 0) {
      int code = 0;
      return Status::InvalidArgument(fmt::format("corrupt GZIP data: {}", gzerror(file_, &code)));
    }
    return static_cast<std::size_t>(got);
  }
  std::optional<std::uint64_t> size() const override { return std::nullopt; }

 private:
  gzFile file_;
};

class BytesInput final : public Input {
 public:
  explicit BytesInput(std::string_view bytes) : bytes_(bytes) {}
  Result<std::size_t> Read(char* buf, std::size_t n) override {
    const std::size_t got = std::min(n, bytes_.size() - at_);
    std::memcpy(buf, bytes_.data() + at_, got);
    at_ += got;
    return got;
  }
  std::optional<std::uint64_t> size() const override { return bytes_.size(); }

 private:
  std::string_view bytes_;
  std::size_t at_ = 0;
};

std::span<const std::byte> Bytes(const char* p, std::size_t n) { return std::as_bytes(std::span(p, n)); }

std::uint32_t LoadU32(const char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

Result<std::unique_ptr<Input>> OpenFile(const std::string& path) {
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (f == nullptr) return Status::NotFound(fmt::format("{}: cannot open", path));
    return std::unique_ptr<Input>(new GzInput(f));
  }
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  std::FILE* f = ec ? nullptr : std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Status::NotFound(fmt::format("{}: cannot open", path));
  return std::unique_ptr<Input>(new FileInput(f, size));
}

std::unique_ptr<Input> MemoryInput(std::string_view bytes) { return std::make_unique<BytesInput>(bytes); }

RecordReader::RecordReader(std::string name, std::unique_ptr<Input> in)
    : name_(std::move(name)), in_(std::move(in)), buf_(std::min<std::uint64_t>(kBlock, in_->size().value_or(kBlock)) + 1) {}

Status RecordReader::Fail(const std::string& what) const {
  return Status::InvalidArgument(fmt::format("{}: record {} at byte {}: {}", name_, index_, offset_, what));
}

// Makes `n` bytes available at buf_[begin_] (n <= kMaxRecordBytes + kOverheadBytes), or as many
// as remain at the end of the input; returns how many are available.
Result<std::size_t> RecordReader::Fill(std::size_t n) {
  if (end_ - begin_ >= n || at_end_) return end_ - begin_;
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    base_ += begin_;
    begin_ = 0;
  }
  if (buf_.size() < n) buf_.resize(n);
  while (end_ < n && !at_end_) {
    Result<std::size_t> got = in_->Read(buf_.data() + end_, buf_.size() - end_);
    if (!got.ok()) return Status::InvalidArgument(fmt::format("{}: at byte {}: {}", name_, base_ + end_, got.status().message()));
    at_end_ = *got == 0;
    end_ += *got;
  }
  return end_;
}

Result<bool> RecordReader::Next(std::string_view* record) {
  offset_ = base_ + begin_;
  TFD_ASSIGN_OR_RETURN(std::size_t have, Fill(kHeaderBytes));
  if (have == 0) return false;
  ++index_;
  const char* head = buf_.data() + begin_;
  if (have < kHeaderBytes) return Fail(fmt::format("the file ends inside the record's header ({} of {} bytes; a truncated file?)", have, kHeaderBytes));
  std::uint64_t n;
  std::memcpy(&n, head, 8);
  if (summary::MaskedCrc32c(Bytes(head, 8)) != LoadU32(head + 8)) {
    const bool gzip = offset_ == 0 && static_cast<unsigned char>(head[0]) == 0x1f && static_cast<unsigned char>(head[1]) == 0x8b;
    return Fail(gzip ? "the length's CRC does not match: the file is GZIP-compressed; name it .gz" : "the length's CRC does not match (not a TFRecord file?)");
  }
  if (n > kMaxRecordBytes) return Fail(fmt::format("length {} is over the limit of {} bytes", n, kMaxRecordBytes));
  const std::optional<std::uint64_t> size = in_->size();
  if (size.has_value() && n + kOverheadBytes > *size - offset_)
    return Fail(fmt::format("length {} runs past the end of the file ({} bytes; a truncated file?)", n, *size));
  TFD_ASSIGN_OR_RETURN(have, Fill(kOverheadBytes + n));
  if (have < kOverheadBytes + n) return Fail(fmt::format("the file ends inside the record ({} of its {} bytes; a truncated file?)", have, kOverheadBytes + n));
  const char* data = buf_.data() + begin_ + kHeaderBytes;
  if (summary::MaskedCrc32c(Bytes(data, n)) != LoadU32(data + n)) return Fail("the data's CRC does not match");
  *record = std::string_view(data, n);
  begin_ += kOverheadBytes + n;
  return true;
}

namespace {

std::string_view KindName(Kind k) {
  switch (k) {
    case tensorflow::Feature::kBytesList: return "a bytes_list";
    case tensorflow::Feature::kFloatList: return "a float_list";
    case tensorflow::Feature::kInt64List: return "an int64_list";
    case tensorflow::Feature::KIND_NOT_SET: break;
  }
  return "an empty feature";
}

int LengthOf(const tensorflow::Feature& f) {
  switch (f.kind_case()) {
    case tensorflow::Feature::kBytesList: return f.bytes_list().value_size();
    case tensorflow::Feature::kFloatList: return f.float_list().value_size();
    case tensorflow::Feature::kInt64List: return f.int64_list().value_size();
    case tensorflow::Feature::KIND_NOT_SET: break;
  }
  return 0;
}

std::string Listed(const std::vector<std::string>& keys) {
  const auto shown = static_cast<std::ptrdiff_t>(std::min<std::size_t>(keys.size(), 8));
  return fmt::format("{}{}", fmt::join(keys.begin(), keys.begin() + shown, ", "), keys.size() > 8 ? ", ..." : "");
}

// One key of the layout: its kind and how many values every record holds under it.
struct Slot {
  std::string key;
  Kind kind = tensorflow::Feature::KIND_NOT_SET;
  int length = 0;
};

// Lays out the examples of the records: the first record fixes the plan, every record is checked
// against it and appended. Errors name the record by the reader's name, index and offset.
class ExampleBuilder {
 public:
  // `size_hint`: the inputs' bytes in all, where known (else 0), to reserve the features' room once.
  ExampleBuilder(const DataSpec& spec, std::uint64_t size_hint) : spec_(spec), size_hint_(size_hint), arena_(ArenaOptions(&first_block_)) {}

  Status Add(std::string_view record, const RecordReader& at) {
    arena_.Reset();
    auto* example = google::protobuf::Arena::CreateMessage<tensorflow::Example>(&arena_);
    if (!example->ParseFromArray(record.data(), static_cast<int>(record.size())))
      return Fail(at, "not a tf.train.Example (protobuf cannot parse it)");
    const auto& map = example->features().feature();
    if (!planned_) {
      TFD_RETURN_IF_ERROR(Plan(map, at));
      Reserve(record.size());
    }
    TFD_RETURN_IF_ERROR(CheckKeys(map, at));
    if (image_ != Image::kNone) TFD_RETURN_IF_ERROR(AddImage(map.at(features_[0].key), at));
    else
      for (const Slot& s : features_) TFD_RETURN_IF_ERROR(AddFloats(map.at(s.key), s, at));
    TFD_RETURN_IF_ERROR(AddLabel(map.at(label_.key), at));
    ++out_.size;
    return Status::Ok();
  }

  Examples Finish() && {
    out_.features = ByteArray(std::move(bytes_));
    return std::move(out_);
  }

 private:
  using Map = google::protobuf::Map<std::string, tensorflow::Feature>;
  enum class Image { kNone, kRaw, kEncoded };

  static google::protobuf::ArenaOptions ArenaOptions(std::vector<char>* block) {
    google::protobuf::ArenaOptions o;
    o.initial_block = block->data();
    o.initial_block_size = block->size();
    return o;
  }

  Status Fail(const RecordReader& at, const std::string& what) const {
    return Status::InvalidArgument(fmt::format("{}: record {} at byte {}: {}", at.name(), at.index(), at.offset(), what));
  }

  // Growing the features by doubling would copy them about twice over and touch twice the pages;
  // the first record's size says about how many records the inputs hold.
  void Reserve(std::size_t first_record_bytes) {
    const std::uint64_t records = size_hint_ / (first_record_bytes + kOverheadBytes);
    const std::uint64_t bytes = records * static_cast<std::uint64_t>(out_.values()) * DTypeBytes(out_.dtype);
    if (bytes <= std::max<std::uint64_t>(4 * size_hint_, 1 << 20)) bytes_.reserve(bytes);
  }

  Status Plan(const Map& map, const RecordReader& at) {
    planned_ = true;
    first_ = at.name();
    if (spec_.label.empty() && spec_.label_index >= 0)
      return Status::InvalidArgument(fmt::format("data.label: a TFRecord's label is named by its key, not by index ({})", spec_.label_index));
    if (!spec_.feature_indices.empty())
      return Status::InvalidArgument("data.features: a TFRecord's features are named by their keys, not by index");
    for (const auto& [key, feature] : map) keys_.push_back(key);
    std::sort(keys_.begin(), keys_.end());
    const std::string label = spec_.label.empty() ? "label" : spec_.label;
    if (map.find(label) == map.end())
      return Fail(at, fmt::format("data.label: no feature \"{}\" (the record's features: {})", label, Listed(keys_)));
    label_ = SlotOf(map, label);
    TFD_RETURN_IF_ERROR(PlanLabel(at));
    std::vector<std::string> names = spec_.feature_names;
    if (names.empty())
      for (const std::string& k : keys_)
        if (k != label) names.push_back(k);
    if (names.empty()) return Fail(at, fmt::format("holds only the label \"{}\"; there are no features", label));
    for (const std::string& name : names) {
      if (name == label) return Fail(at, fmt::format("data.features: includes the label \"{}\"", label));
      if (map.find(name) == map.end())
        return Fail(at, fmt::format("data.features: no feature \"{}\" (the record's features: {})", name, Listed(keys_)));
      features_.push_back(SlotOf(map, name));
      if (features_.back().kind == tensorflow::Feature::kBytesList) image_ = Image::kRaw;
    }
    if (image_ != Image::kNone) return PlanImage(map.at(features_[0].key), at);
    return PlanFloats(at);
  }

  static Slot SlotOf(const Map& map, const std::string& key) {
    const tensorflow::Feature& f = map.at(key);
    return Slot{key, f.kind_case(), LengthOf(f)};
  }

  Status PlanLabel(const RecordReader& at) {
    const bool regression = spec_.task == DataSpec::Task::kRegression;
    const std::string head = fmt::format("label \"{}\"", label_.key);
    switch (label_.kind) {
      case tensorflow::Feature::kBytesList:
        if (regression) return Fail(at, head + " is a bytes_list; a regression target is a float_list or an int64_list");
        break;
      case tensorflow::Feature::kFloatList:
        if (!regression) return Fail(at, head + " is a float_list; a class label is an int64_list or a bytes_list (or set \"task\": \"regression\")");
        break;
      case tensorflow::Feature::kInt64List: break;
      case tensorflow::Feature::KIND_NOT_SET: return Fail(at, head + " holds no list");
    }
    if (label_.length < 1 || (!regression && label_.length != 1))
      return Fail(at, fmt::format("{} holds {} values; expected {}", head, label_.length, regression ? "at least 1" : "1"));
    out_.num_targets = regression ? label_.length : 0;
    return Status::Ok();
  }

  Status PlanFloats(const RecordReader& at) {
    std::int64_t width = 0;
    for (const Slot& s : features_) {
      if (s.kind == tensorflow::Feature::KIND_NOT_SET) return Fail(at, fmt::format("feature \"{}\" holds no list", s.key));
      width += s.length;
      for (int i = 0; i < s.length; ++i) out_.feature_names.push_back(s.length == 1 ? s.key : fmt::format("{}[{}]", s.key, i));
    }
    if (width == 0) return Fail(at, fmt::format("the features ({}) hold no values", features_.size()));
    out_.dtype = DType::kF32;
    out_.height = out_.channels = 1;
    out_.width = static_cast<int>(width);  // under a record's 64 MiB
    return Status::Ok();
  }

  // One bytes feature: raw pixels when data.image_size (and color) give its length, else a PNG or JPEG.
  Status PlanImage(const tensorflow::Feature& f, const RecordReader& at) {
    const Slot& s = features_[0];
    if (features_.size() > 1)
      return Fail(at, fmt::format("feature \"{}\" is a bytes_list (an image), so it must be the only feature, but {} are named", s.key, features_.size()));
    if (s.length != 1) return Fail(at, fmt::format("feature \"{}\" holds {} byte strings; an image feature holds 1", s.key, s.length));
    const std::string& v = f.bytes_list().value(0);
    const auto bytes = std::span(reinterpret_cast<const std::uint8_t*>(v.data()), v.size());
    const std::int64_t h = spec_.image_height, w = spec_.image_width, area = h * w;
    int c = spec_.channels;
    if (c == 0 && area > 0) c = static_cast<std::int64_t>(v.size()) == 3 * area ? 3 : 1;
    out_.dtype = DType::kU8;
    if (area > 0 && static_cast<std::int64_t>(v.size()) == area * c) {
      image_ = Image::kRaw;
      out_.height = static_cast<int>(h), out_.width = static_cast<int>(w), out_.channels = c;
      return Status::Ok();
    }
    if (!IsPngOrJpeg(bytes)) {
      if (area > 0)
        return Fail(at, fmt::format("feature \"{}\": {} bytes are neither a PNG or JPEG nor {}x{}x{} raw pixels (data.image_size, data.color)", s.key,
                                    v.size(), h, w, c));
      return Fail(at, fmt::format("feature \"{}\": {} bytes are not a PNG or JPEG; for raw pixels set data.image_size [height, width] and data.color",
                                  s.key, v.size()));
    }
    image_ = Image::kEncoded;
    Result<data::Image> img = DecodeImage(bytes, spec_.channels);
    if (!img.ok()) return Fail(at, fmt::format("feature \"{}\": {}", s.key, img.status().message()));
    if (area > 0 && (img->height != h || img->width != w))
      return Fail(at, fmt::format("feature \"{}\": the image is {}x{}, data.image_size is {}x{} (TFRecord images are not resized)", s.key, img->height,
                                  img->width, h, w));
    out_.height = img->height, out_.width = img->width, out_.channels = img->channels;
    return Status::Ok();
  }

  // The record has exactly the first record's keys.
  Status CheckKeys(const Map& map, const RecordReader& at) const {
    for (const auto& [key, feature] : map)
      if (!std::binary_search(keys_.begin(), keys_.end(), key))
        return Fail(at, fmt::format("has feature \"{}\", which the first record (in {}) has not", key, first_));
    if (map.size() == keys_.size()) return Status::Ok();
    for (const std::string& key : keys_)
      if (map.find(key) == map.end()) return Fail(at, fmt::format("feature \"{}\" is missing; the first record (in {}) has it", key, first_));
    return Status::Ok();
  }

  Status Same(const tensorflow::Feature& f, const Slot& s, const RecordReader& at) const {
    if (f.kind_case() != s.kind)
      return Fail(at, fmt::format("feature \"{}\" is {}; the first record's is {}", s.key, KindName(f.kind_case()), KindName(s.kind)));
    if (LengthOf(f) != s.length) return Fail(at, fmt::format("feature \"{}\" holds {} values; the first record's holds {}", s.key, LengthOf(f), s.length));
    return Status::Ok();
  }

  Status AddFloats(const tensorflow::Feature& f, const Slot& s, const RecordReader& at) {
    TFD_RETURN_IF_ERROR(Same(f, s, at));
    const std::size_t start = bytes_.size();
    bytes_.resize(start + sizeof(float) * static_cast<std::size_t>(s.length));
    float* dst = reinterpret_cast<float*>(bytes_.data() + start);
    if (s.kind == tensorflow::Feature::kFloatList) std::memcpy(dst, f.float_list().value().data(), sizeof(float) * static_cast<std::size_t>(s.length));
    else
      for (int i = 0; i < s.length; ++i) dst[i] = static_cast<float>(f.int64_list().value(i));
    return Status::Ok();
  }

  Status AddImage(const tensorflow::Feature& f, const RecordReader& at) {
    const Slot& s = features_[0];
    TFD_RETURN_IF_ERROR(Same(f, s, at));
    const std::string& v = f.bytes_list().value(0);
    const auto expected = static_cast<std::size_t>(out_.values());
    if (image_ == Image::kRaw) {
      if (v.size() != expected) return Fail(at, fmt::format("feature \"{}\" holds {} bytes; the first record's raw image has {}", s.key, v.size(), expected));
      bytes_.insert(bytes_.end(), v.begin(), v.end());
      return Status::Ok();
    }
    Result<data::Image> img = DecodeImage(std::span(reinterpret_cast<const std::uint8_t*>(v.data()), v.size()), out_.channels);
    if (!img.ok()) return Fail(at, fmt::format("feature \"{}\": {}", s.key, img.status().message()));
    if (img->height != out_.height || img->width != out_.width)
      return Fail(at, fmt::format("feature \"{}\": the image is {}x{}; the first record's is {}x{}", s.key, img->height, img->width, out_.height, out_.width));
    bytes_.insert(bytes_.end(), img->pixels.begin(), img->pixels.end());
    return Status::Ok();
  }

  Status AddLabel(const tensorflow::Feature& f, const RecordReader& at) {
    TFD_RETURN_IF_ERROR(Same(f, label_, at));
    switch (label_.kind) {
      case tensorflow::Feature::kBytesList:
        if (f.bytes_list().value(0).empty()) return Fail(at, fmt::format("label \"{}\" is empty", label_.key));
        out_.label_text.push_back(f.bytes_list().value(0));
        break;
      case tensorflow::Feature::kFloatList:
        out_.targets.insert(out_.targets.end(), f.float_list().value().begin(), f.float_list().value().end());
        break;
      case tensorflow::Feature::kInt64List:
        if (out_.num_targets > 0)
          for (std::int64_t v : f.int64_list().value()) out_.targets.push_back(static_cast<float>(v));
        else
          out_.label_ids.push_back(f.int64_list().value(0));
        break;
      case tensorflow::Feature::KIND_NOT_SET: break;  // refused by PlanLabel
    }
    return Status::Ok();
  }

  const DataSpec& spec_;
  std::uint64_t size_hint_;
  // Each record's Example lives on the arena, which is reset for the next: a record's strings and
  // lists cost no malloc or free while they fit the first block (5-10% on MNIST-like records).
  std::vector<char> first_block_ = std::vector<char>(std::size_t{64} << 10);
  google::protobuf::Arena arena_;
  bool planned_ = false;
  std::string first_;             // the file of the first record
  std::vector<std::string> keys_;  // the first record's keys, sorted
  std::vector<Slot> features_;
  Slot label_;
  Image image_ = Image::kNone;
  Examples out_;
  std::vector<std::uint8_t> bytes_;  // the features so far
};

}  // namespace

Result<Examples> ReadAll(const DataSpec& spec, const std::vector<std::string>& names, const Opener& open, std::uint64_t size_hint) {
  ExampleBuilder builder(spec, size_hint);
  for (const std::string& name : names) {
    TFD_ASSIGN_OR_RETURN(std::unique_ptr<Input> in, open(name));
    RecordReader reader(name, std::move(in));
    std::string_view record;
    for (;;) {
      TFD_ASSIGN_OR_RETURN(bool more, reader.Next(&record));
      if (!more) break;
      TFD_RETURN_IF_ERROR(builder.Add(record, reader));
    }
    if (reader.index() < 0) return Status::InvalidArgument(fmt::format("{}: no records", name));
  }
  return std::move(builder).Finish();
}

}  // namespace tfd::data::tfrecord

namespace tfd::data {

Result<Examples> ReadTfrecords(const config::DataSpec& spec, const std::vector<std::string>& paths) {
  std::uint64_t size = 0;
  for (const std::string& p : paths) {
    std::error_code ec;
    const bool gz = p.size() > 3 && p.compare(p.size() - 3, 3, ".gz") == 0;
    const std::uint64_t n = gz ? 0 : std::filesystem::file_size(p, ec);
    size += ec ? 0 : n;
  }
  return tfrecord::ReadAll(spec, paths, tfrecord::OpenFile, size);
}

}  // namespace tfd::data
