#pragma once
// The TFRecord reader's parts (common/data/tfrecord.cc), for its tests, benchmark and fuzz target;
// a job reads TFRecords through ReadTfrecords (common/data/readers.h).
//
// A TFRecord file is a sequence of records, each (little-endian, as TensorFlow's record_writer.cc
// writes them and common/summary/record.h describes):
//   u64 length | u32 masked CRC-32C of the 8 length bytes | data | u32 masked CRC-32C of data
// and each record's data here is a serialized tf.train.Example (common/data/proto/example.proto).
// A .gz file is the same, GZIP-compressed (TensorFlow's compression_type "GZIP").

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/config/data_spec.h"
#include "common/data/examples.h"

namespace tfd::data::tfrecord {

// A record longer than this is refused before anything is allocated for it.
inline constexpr std::uint64_t kMaxRecordBytes = std::uint64_t{64} << 20;
inline constexpr std::size_t kHeaderBytes = 12, kOverheadBytes = 16;

// A file's bytes, read in blocks.
class Input {
 public:
  virtual ~Input() = default;
  // Up to `n` bytes into `buf`; 0 at the end. InvalidArgument with the reason (a read error,
  // corrupt GZIP data); the caller names the file.
  virtual Result<std::size_t> Read(char* buf, std::size_t n) = 0;
  // The input's length where it is known before reading (a plain file, bytes in memory; not a
  // .gz): a record whose length runs past it is refused without reading on.
  virtual std::optional<std::uint64_t> size() const = 0;
};
// `path`, inflated through zlib when its name ends in .gz. NotFound when it cannot be opened.
Result<std::unique_ptr<Input>> OpenFile(const std::string& path);
// `bytes`, which must outlive the input.
std::unique_ptr<Input> MemoryInput(std::string_view bytes);

// One input's records, in order. Each is checked: its length's CRC, the length (at most
// kMaxRecordBytes and within the input's size), the data's CRC, and that the input does not end
// inside it. A failure is InvalidArgument "NAME: record I at byte B: what".
class RecordReader {
 public:
  RecordReader(std::string name, std::unique_ptr<Input> in);
  // The next record's data in `*record`, valid until the next call; false at the end of the input.
  Result<bool> Next(std::string_view* record);
  // The index and byte offset (in the inflated bytes, for a .gz) of the record Next returned last.
  std::int64_t index() const { return index_; }
  std::uint64_t offset() const { return offset_; }
  const std::string& name() const { return name_; }

 private:
  Result<std::size_t> Fill(std::size_t n);
  Status Fail(const std::string& what) const;

  std::string name_;
  std::unique_ptr<Input> in_;
  std::vector<char> buf_;
  std::size_t begin_ = 0, end_ = 0;  // buf_[begin_, end_) is read and not yet returned
  std::uint64_t base_ = 0;           // the input offset of buf_[0]
  bool at_end_ = false;
  std::int64_t index_ = -1;
  std::uint64_t offset_ = 0;
};

// Opens one of ReadAll's inputs by name.
using Opener = std::function<Result<std::unique_ptr<Input>>(const std::string& name)>;

// What ReadTfrecords does, over inputs opened one at a time by `open` (files for a job; bytes in
// memory for the fuzz target): every record of every input, in order, into one Examples.
// `size_hint`: the inputs' bytes in all where known, else 0; the features' room is reserved from it.
Result<Examples> ReadAll(const config::DataSpec& spec, const std::vector<std::string>& names, const Opener& open, std::uint64_t size_hint = 0);

}  // namespace tfd::data::tfrecord
