#pragma once

// The parts of the NumPy reader (common/data/npy.cc) that tests and the fuzz target call directly;
// jobs reach them through ReadNpyPair and ReadNpz (common/data/readers.h).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/config/data_spec.h"
#include "common/data/examples.h"

namespace tfd::data {

// Largest header numpy itself reads without being told it is safe (numpy.lib.format's
// max_header_size), and the most dimensions an array may have (numpy's NPY_MAXDIMS).
inline constexpr std::size_t kMaxNpyHeaderBytes = 10000;
inline constexpr int kMaxNpyDims = 32;

// An .npy array's description: numpy's format 1.0, 2.0 or 3.0 header ("\x93NUMPY", version, header
// length, then a Python dict literal with exactly 'descr', 'fortran_order' and 'shape').
struct NpyHeader {
  std::string descr;          // as written ('<f4'), for messages
  char kind = 'f';            // 'f' float, 'i' signed or 'u' unsigned integer
  int item_bytes = 4;         // f: 4 or 8; i, u: 1, 2, 4 or 8
  bool swap = false;          // the elements are big-endian (this host is little-endian)
  bool fortran_order = false;
  std::vector<std::uint64_t> shape;  // 1 to kMaxNpyDims dimensions, each >= 1
  std::size_t data_offset = 0;       // bytes before the data
  std::uint64_t elements = 0;        // product(shape)

  std::uint64_t data_bytes() const { return elements * static_cast<std::uint64_t>(item_bytes); }
  std::string ShapeText() const;  // "(60000, 28, 28)"
};

// Parses the header at the start of `head`, the first bytes (or all) of a file of `file_size`
// bytes that `source` names. InvalidArgument "SOURCE: ..." (one line) on a wrong magic or version,
// a header longer than kMaxNpyHeaderBytes or than the file, a dict that is not exactly the three
// keys with values of their types, a dtype other than the ones above (complex, object, strings,
// structured), a shape with no dimension, a zero or overflowing dimension, and a file shorter
// (truncated) or longer than the header says. Reads no byte of `head` past the header.
Result<NpyHeader> ParseNpyHeader(std::span<const std::uint8_t> head, std::uint64_t file_size, std::string_view source);

// Sets `out`'s shape, dtype and features from the array in `file` (a whole .npy file), taking the
// bytes as they are when they are uint8 (then kU8) or little-endian float32 in C order, else
// converting every element to float32 in C order (kF32). (N, d) is a table row of d values,
// (N, H, W) an H x W image, (N, H, W, C) one of C channels; (N,) one value and more dimensions a
// row of their product. InvalidArgument naming `source` as ParseNpyHeader, and for a NaN or
// infinite value.
Status NpyFeatures(std::vector<std::uint8_t> file, std::string_view source, Examples* out);

// Sets `out`'s labels (classification: integer class ids; floats only when every one is a whole
// number) or targets (regression) from the .npy file `file`, which must hold `examples` entries
// ((N,), or (N, 1); regression also (N, k): k targets). `x_source` names the features' file in
// the error for a different count.
Status NpyLabels(const config::DataSpec& spec, std::span<const std::uint8_t> file, std::string_view source, std::int64_t examples,
                 std::string_view x_source, Examples* out);

// An .npy file (format 1.0, '<f4', C order) of `values` with `shape` (its product values.size()),
// as numpy.save writes one: `tfd predict --out FILE.npy`. The bytes, to be written by the caller.
std::string NpyFloat32(std::span<const float> values, const std::vector<std::uint64_t>& shape);

}  // namespace tfd::data
