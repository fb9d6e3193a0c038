#include "common/summary/record.h"

#include <cstring>

#include <fmt/format.h>

#include "common/wire/crc32c.h"

namespace tfd::summary {
namespace {

std::span<const std::byte> Bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

void AppendU32(std::uint32_t v, std::string* out) { out->append(reinterpret_cast<const char*>(&v), 4); }

std::uint32_t LoadU32(const char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

std::uint32_t MaskedCrc32c(std::span<const std::byte> data) {
  const std::uint32_t c = wire::Crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

void AppendRecord(std::string_view data, std::string* out) {
  const std::uint64_t n = data.size();
  const std::size_t at = out->size();
  out->append(reinterpret_cast<const char*>(&n), 8);
  AppendU32(MaskedCrc32c(Bytes(std::string_view(*out).substr(at, 8))), out);
  out->append(data);
  AppendU32(MaskedCrc32c(Bytes(data)), out);
}

Result<ReadRecordsResult> ReadRecords(std::string_view bytes) {
  ReadRecordsResult r;
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::string_view rest = bytes.substr(at);
    if (rest.size() < 12) {
      r.truncated = true;
      break;
    }
    std::uint64_t n;
    std::memcpy(&n, rest.data(), 8);
    if (MaskedCrc32c(Bytes(rest.substr(0, 8))) != LoadU32(rest.data() + 8))
      return Status::Corruption(fmt::format("record {} at byte {}: the length's CRC does not match", r.records.size(), at));
    if (n > kMaxRecordBytes)
      return Status::Corruption(fmt::format("record {} at byte {}: length {} is over the limit of {}", r.records.size(), at, n, kMaxRecordBytes));
    if (rest.size() < kRecordOverheadBytes + n) {
      r.truncated = true;
      break;
    }
    const std::string_view data = rest.substr(12, n);
    if (MaskedCrc32c(Bytes(data)) != LoadU32(rest.data() + 12 + n))
      return Status::Corruption(fmt::format("record {} at byte {}: the data's CRC does not match", r.records.size(), at));
    r.records.emplace_back(data);
    at += kRecordOverheadBytes + n;
  }
  return r;
}

}  // namespace tfd::summary
