#pragma once
// TFRecord framing, as TensorFlow's record_writer.cc writes it and TensorBoard reads it:
//   u64 length | u32 masked CRC-32C of the 8 length bytes | data | u32 masked CRC-32C of data
// all little-endian; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 in 32-bit arithmetic.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace tfd::summary {

// A record longer than this is refused by the reader (ours never come near it: an event holds a
// few scalars or one histogram of at most kMaxBuckets buckets).
inline constexpr std::uint64_t kMaxRecordBytes = std::uint64_t{16} << 20;
inline constexpr std::size_t kRecordOverheadBytes = 16;

std::uint32_t MaskedCrc32c(std::span<const std::byte> data);

// Appends `data` framed as one record to `out`.
void AppendRecord(std::string_view data, std::string* out);

// The records of an event file's bytes, in order. A file whose writer was killed mid-record ends
// in an incomplete record: every complete record before it is returned and `truncated` is set.
struct ReadRecordsResult {
  std::vector<std::string> records;
  bool truncated = false;
};
// Corruption (naming the record's index and byte offset) when a CRC does not match or a length is
// over kMaxRecordBytes: bytes that were not written as records, rather than cut short.
Result<ReadRecordsResult> ReadRecords(std::string_view bytes);

}  // namespace tfd::summary
