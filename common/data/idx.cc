#include "common/data/idx.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "common/data/readers.h"

namespace tfd::data {
namespace {

std::uint32_t BigEndian32(const std::byte* p) {
  return (std::to_integer<std::uint32_t>(p[0]) << 24) | (std::to_integer<std::uint32_t>(p[1]) << 16) |
         (std::to_integer<std::uint32_t>(p[2]) << 8) | std::to_integer<std::uint32_t>(p[3]);
}

// Validates the magic and dimensions in `head` (the file's first bytes) against a file of
// `file_size` bytes; returns the array with dims set and data still empty.
Result<IdxArray> ParseHeader(std::span<const std::byte> head, std::uint64_t file_size, int rank, std::string_view source) {
  const std::uint32_t expected_magic = 0x0800u | static_cast<std::uint32_t>(rank);
  if (head.size() < 4)
    return Status::Corruption(fmt::format("{}: truncated IDX file: {} bytes, too short for the 4-byte magic", source, file_size));
  const std::uint32_t magic = BigEndian32(head.data());
  if ((magic >> 16) != 0 || ((magic >> 8) & 0xff) != 0x08) {
    return Status::Corruption(fmt::format("{}: not an unsigned-byte IDX file: magic 0x{:08x}, expected 0x{:08x}", source,
                                          magic, expected_magic));
  }
  if (magic != expected_magic) {
    return Status::Corruption(fmt::format("{}: wrong dimensions: IDX magic 0x{:08x} says {} dimensions, expected {} (0x{:08x})",
                                          source, magic, magic & 0xff, rank, expected_magic));
  }
  const std::size_t header = IdxHeaderBytes(rank);
  if (head.size() < header)
    return Status::Corruption(fmt::format("{}: truncated IDX file: {} bytes, header needs {}", source, file_size, header));
  IdxArray out;
  std::uint64_t total = 1;
  for (int i = 0; i < rank; ++i) {
    std::uint32_t d = BigEndian32(head.data() + 4 + 4 * i);
    if (d == 0) return Status::Corruption(fmt::format("{}: wrong dimensions: dimension {} is 0", source, i));
    total *= d;
    if (total > kMaxIdxBytes)
      return Status::Corruption(fmt::format("{}: wrong dimensions: header claims more than {} bytes of data", source, kMaxIdxBytes));
    out.dims.push_back(d);
  }
  const std::uint64_t have = file_size - header;
  if (have < total) {
    return Status::Corruption(fmt::format("{}: truncated IDX file: header says {} bytes of data ({}), file has {}", source,
                                          total, fmt::join(out.dims, "x"), have));
  }
  if (have > total) {
    return Status::Corruption(fmt::format("{}: wrong dimensions: header says {} bytes of data ({}), file has {} more",
                                          source, total, fmt::join(out.dims, "x"), have - total));
  }
  return out;
}

}  // namespace

Result<IdxArray> ParseIdx(std::span<const std::byte> bytes, int rank, std::string_view source) {
  TFD_ASSIGN_OR_RETURN(IdxArray out, ParseHeader(bytes, bytes.size(), rank, source));
  const auto* begin = reinterpret_cast<const std::uint8_t*>(bytes.data());
  out.data.assign(begin + IdxHeaderBytes(rank), begin + bytes.size());
  return out;
}

Result<IdxArray> ReadIdxFile(const std::string& path, int rank) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Status::NotFound(fmt::format("{}: cannot open", path));
  const std::streamoff size = in.tellg();
  if (size < 0) return Status::NotFound(fmt::format("{}: cannot read", path));
  in.seekg(0);
  // Check the header first, then read the payload straight into the array: no second copy.
  std::vector<std::byte> head(std::min<std::size_t>(IdxHeaderBytes(rank), static_cast<std::size_t>(size)));
  if (!in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size())))
    return Status::NotFound(fmt::format("{}: read failed", path));
  TFD_ASSIGN_OR_RETURN(IdxArray out, ParseHeader(head, static_cast<std::uint64_t>(size), rank, path));
  out.data.resize(static_cast<std::size_t>(size) - head.size());
  if (!in.read(reinterpret_cast<char*>(out.data.data()), static_cast<std::streamsize>(out.data.size())))
    return Status::NotFound(fmt::format("{}: read failed", path));
  return out;
}

Result<MappedIdxArray> MapIdxFile(const std::string& path, int rank) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::NotFound(fmt::format("{}: cannot open", path));  // as ReadIdxFile says it
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
    close(fd);
    return Status::Unavailable(fmt::format("{}: not a regular file that can be mapped", path));
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* base = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  const int mmap_errno = errno;
  close(fd);  // the mapping stays
  if (base == MAP_FAILED) return Status::Unavailable(fmt::format("{}: mmap: {}", path, std::strerror(mmap_errno)));
  const auto* bytes = static_cast<const std::uint8_t*>(base);
  std::shared_ptr<const std::uint8_t> region(bytes, [size](const std::uint8_t* p) { munmap(const_cast<std::uint8_t*>(p), size); });
  const std::size_t header = std::min(IdxHeaderBytes(rank), size);
  TFD_ASSIGN_OR_RETURN(IdxArray parsed, ParseHeader(std::as_bytes(std::span(bytes, header)), size, rank, path));
  MappedIdxArray out;
  out.dims = std::move(parsed.dims);
  out.data = std::shared_ptr<const std::uint8_t>(region, bytes + header);  // shares the region's ownership
  out.size = size - header;
  return out;
}

namespace {

// The payload of a 16- or 32-bit IDX label file (`width` bytes a label) whose header is checked.
Result<std::vector<ClassId>> DecodeWideLabels(std::span<const std::byte> payload, std::uint32_t n, int width, const std::string& path) {
  std::vector<ClassId> out(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::byte* p = payload.data() + std::size_t{i} * static_cast<std::size_t>(width);
    const std::int32_t v = width == 4 ? static_cast<std::int32_t>(BigEndian32(p))
                                      : static_cast<std::int16_t>((std::to_integer<std::uint16_t>(p[0]) << 8) | std::to_integer<std::uint16_t>(p[1]));
    if (v < 0) return Status::Corruption(fmt::format("{}: label {} at index {} is negative", path, v, i));
    out[i] = v;
  }
  return out;
}

}  // namespace

Result<std::vector<ClassId>> ReadIdxLabels(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Status::NotFound(fmt::format("{}: cannot open", path));
  const std::streamoff size = in.tellg();
  in.seekg(0);
  std::byte head[8] = {};
  in.read(reinterpret_cast<char*>(head), 8);
  const std::uint32_t magic = in.gcount() >= 4 ? BigEndian32(head) : 0;
  const std::uint32_t type = (magic >> 8) & 0xff;
  if ((magic >> 16) != 0 || (type != 0x0B && type != 0x0C)) {  // bytes, or not IDX: ReadIdxFile says which
    TFD_ASSIGN_OR_RETURN(IdxArray bytes, ReadIdxFile(path, 1));
    return std::vector<ClassId>(bytes.data.begin(), bytes.data.end());
  }
  if ((magic & 0xff) != 1)
    return Status::Corruption(fmt::format("{}: wrong dimensions: IDX magic 0x{:08x} says {} dimensions, expected 1 (one label per example)",
                                          path, magic, magic & 0xff));
  if (in.gcount() < 8) return Status::Corruption(fmt::format("{}: truncated IDX file: its header needs 8 bytes", path));
  const std::uint32_t n = BigEndian32(head + 4);
  const int width = type == 0x0C ? 4 : 2;
  const std::uint64_t want = std::uint64_t{n} * static_cast<std::uint64_t>(width), have = static_cast<std::uint64_t>(size) - 8;
  if (have != want)  // checked before allocating: a header cannot ask for more than the file holds
    return Status::Corruption(fmt::format("{}: wrong length: the header says {} labels of {} bytes ({} bytes), the file has {} after it", path, n,
                                          width, want, have));
  std::vector<std::byte> payload(static_cast<std::size_t>(want));
  if (!in.read(reinterpret_cast<char*>(payload.data()), static_cast<std::streamsize>(payload.size())))
    return Status::NotFound(fmt::format("{}: read failed", path));
  return DecodeWideLabels(payload, n, width, path);
}

namespace {
// The rank an IDX file's magic declares (1 to 4).
Result<int> IdxRank(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("{}: cannot open", path));
  std::byte head[4] = {};
  in.read(reinterpret_cast<char*>(head), 4);
  const std::uint32_t magic = in.gcount() == 4 ? BigEndian32(head) : 0;
  const int rank = static_cast<int>(magic & 0xff);
  if ((magic >> 8) != 0x08 || rank < 1 || rank > 4)
    return Status::InvalidArgument(fmt::format("{}: not an unsigned-byte IDX file of 1 to 4 dimensions (magic 0x{:08x})", path, magic));
  return rank;
}
}  // namespace

Result<Examples> ReadIdxExamples(const std::string& x_path, const std::string& y_path) {
  TFD_ASSIGN_OR_RETURN(const int rank, IdxRank(x_path));
  if (rank < 2)
    return Status::InvalidArgument(fmt::format("{}: features of 1 dimension; expected N x features, N x H x W or N x H x W x C", x_path));
  Result<MappedIdxArray> mapped = MapIdxFile(x_path, rank);
  Examples e;
  std::vector<std::uint32_t> dims;
  if (mapped.ok()) {
    dims = mapped->dims;
    e.features = ByteArray(std::move(mapped->data), mapped->size);
  } else if (mapped.status().code() == Code::kUnavailable) {
    TFD_ASSIGN_OR_RETURN(IdxArray read, ReadIdxFile(x_path, rank));
    dims = read.dims;
    e.features = ByteArray(std::move(read.data));
  } else {
    return Status::InvalidArgument(mapped.status().message());
  }
  Result<std::vector<ClassId>> labels = ReadIdxLabels(y_path);
  if (!labels.ok()) return Status::InvalidArgument(labels.status().message());
  if (labels->size() != dims[0])
    return Status::InvalidArgument(fmt::format("{}: {} labels, but {} has {} examples", y_path, labels->size(), x_path, dims[0]));
  e.size = dims[0];
  e.dtype = DType::kU8;
  if (rank == 2) e.width = static_cast<int>(dims[1]);  // a table: 1 x D x 1
  if (rank >= 3) e.height = static_cast<int>(dims[1]), e.width = static_cast<int>(dims[2]);
  if (rank == 4) e.channels = static_cast<int>(dims[3]);
  e.label_ids.assign(labels->begin(), labels->end());
  return e;
}

}  // namespace tfd::data
