#pragma once
// .npy files for the benchmarks of the NumPy reader, written as np.save writes them.

#include <string>

#include <fmt/format.h>

namespace tfd::testing {

// A format 1.0 .npy header for `descr` ('<f4', '|u1') and `shape` ("(60000, 28, 28)"), C order,
// padded with spaces to a multiple of 64 bytes as numpy pads it.
inline std::string NpyHeader(const std::string& descr, const std::string& shape) {
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape);
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(dict.size() & 0xff) + static_cast<char>(dict.size() >> 8) + dict;
}

}  // namespace tfd::testing
