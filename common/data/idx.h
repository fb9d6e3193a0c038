#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/class_id.h"
#include "common/base/status.h"

namespace tfd::data {

// An IDX array of unsigned bytes (type code 0x08), as the MNIST files store images and labels.
struct IdxArray {
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> data;  // row-major, product(dims) bytes
};

// Largest IDX payload accepted (bytes); a header claiming more is rejected before allocating.
inline constexpr std::uint64_t kMaxIdxBytes = std::uint64_t{1} << 32;

// Bytes before the data: magic and one u32 per dimension.
inline constexpr std::size_t IdxHeaderBytes(int rank) { return 4 + 4 * static_cast<std::size_t>(rank); }

// Parses IDX bytes that must hold a ubyte array of `rank` dimensions. `source` names the bytes in
// errors. Corruption (message "SOURCE: ...") on a wrong magic, type or rank, a zero dimension, a
// size over kMaxIdxBytes, and a file shorter or longer than its header says.
Result<IdxArray> ParseIdx(std::span<const std::byte> bytes, int rank, std::string_view source);
// Reads and parses the file at `path`; NotFound when it cannot be opened.
Result<IdxArray> ReadIdxFile(const std::string& path, int rank);

// An IDX file of one label per example (rank 1): unsigned bytes (type 0x08, as MNIST's), or
// big-endian signed 16- or 32-bit integers (0x0B, 0x0C: legal IDX, for more than 256 classes).
// ReadIdxFile's errors for a byte file; for a wider one, Corruption naming the file on a wrong
// magic or rank, a length other than the header's, or a negative label (naming its index).
Result<std::vector<ClassId>> ReadIdxLabels(const std::string& path);

// An IDX ubyte array whose bytes are a read-only shared mapping of the file: every process that maps
// the same file reads the same page-cache pages, so N tasks on a host hold one copy. `data` keeps
// the mapping alive (it is unmapped with the last copy of the pointer).
struct MappedIdxArray {
  std::vector<std::uint32_t> dims;
  std::shared_ptr<const std::uint8_t> data;  // product(dims) bytes
  std::size_t size = 0;
};
// ReadIdxFile's checks, then mmap(PROT_READ, MAP_SHARED) of the whole file. NotFound when it cannot
// be opened, Corruption as ParseIdx, Unavailable when it cannot be mapped (not a regular file, a
// file system without mmap): the caller may read it instead. The file must not be rewritten while
// mapped (a truncated file would fault the reader), as for any dataset a run reads.
Result<MappedIdxArray> MapIdxFile(const std::string& path, int rank);

}  // namespace tfd::data
