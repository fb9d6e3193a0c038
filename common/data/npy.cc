// The .npy reader (common/data/readers.h): numpy's format 1.0, 2.0 and 3.0, parsed here (the
// format is a 10- or 12-byte prefix and a Python dict literal); npz.cc reads .npz archives of them. An x file whose bytes the model can read as they are
// (uint8, or little-endian float32 in C order) is mapped read-only and shared, so the tasks of one
// host hold one copy of it in the page cache, as for IDX files; any other layout is converted.
#include "common/data/npy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/data/readers.h"

namespace tfd::data {
namespace {

static_assert(std::endian::native == std::endian::little, "the .npy reader takes '<' data as it is");

using config::DataSpec;

// A cursor over the header's dict literal; positions in errors are the file's byte offsets.
class Literal {
 public:
  Literal(std::string_view text, std::size_t offset) : s_(text), offset_(offset) {}
  void Space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool Eat(char c) {
    if (pos_ >= s_.size() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  bool Peek(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
  bool AtEnd() const { return pos_ == s_.size(); }
  // A quoted string without escapes (numpy writes repr() of plain ASCII).
  bool String(std::string* out) {
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) return false;
    const char quote = s_[pos_];
    const std::size_t end = s_.find_first_of(std::string{quote, '\\', '\n'}, pos_ + 1);
    if (end == std::string_view::npos || s_[end] != quote) return false;
    *out = std::string(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return true;
  }
  // A Python word (True, False) that no identifier character follows.
  bool Word(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    const std::size_t after = pos_ + w.size();
    if (after < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[after])) || s_[after] == '_')) return false;
    pos_ = after;
    return true;
  }
  // A non-negative decimal integer (Python 2's numpy wrote a trailing L); false on overflow.
  bool Integer(std::uint64_t* v) {
    const std::size_t start = pos_;
    *v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      if (__builtin_mul_overflow(*v, 10u, v) || __builtin_add_overflow(*v, static_cast<unsigned>(s_[pos_] - '0'), v)) return false;
      ++pos_;
    }
    if (pos_ == start) return false;
    Eat('L');
    return true;
  }
  std::string At() const {
    const std::string_view rest = s_.substr(pos_, 12);
    return fmt::format("at byte {} (\"{}{}\")", offset_ + pos_, rest, pos_ + rest.size() < s_.size() ? "..." : "");
  }

 private:
  std::string_view s_;
  std::size_t offset_;
  std::size_t pos_ = 0;
};

// The tuple of a 'shape' value: "(3, 4)", "(3,)", "()" (a tuple of one needs its comma, as in Python).
Status ParseShape(Literal& c, std::string_view source, std::vector<std::uint64_t>* shape) {
  if (!c.Eat('(')) return SourceError(source, fmt::format("npy header: 'shape' must be a tuple of integers {}", c.At()));
  bool comma = false;
  for (c.Space(); !c.Eat(')'); c.Space()) {
    std::uint64_t d = 0;
    if (shape->size() == static_cast<std::size_t>(kMaxNpyDims))
      return SourceError(source, fmt::format("npy header: 'shape' has more than {} dimensions", kMaxNpyDims));
    if (!c.Integer(&d)) return SourceError(source, fmt::format("npy header: expected a dimension (an integer below 2^64) {}", c.At()));
    shape->push_back(d);
    c.Space();
    comma = c.Eat(',');
    c.Space();
    if (!comma && !c.Peek(')')) return SourceError(source, fmt::format("npy header: expected ',' or ')' in 'shape' {}", c.At()));
  }
  if (shape->size() == 1 && !comma) return SourceError(source, "npy header: 'shape' (n) is not a tuple; a one-dimension shape is written (n,)");
  return Status::Ok();
}

// Why a dtype numpy can write is not one this reader takes.
std::string DtypeRefusal(const std::string& descr, char kind, int bytes) {
  std::string what;
  switch (kind) {
    case 'O': what = "Python objects"; break;
    case 'c': what = "complex numbers"; break;
    case 'b': what = "booleans"; break;
    case 'U': case 'S': case 'a': what = "strings"; break;
    case 'V': what = "raw bytes"; break;
    case 'M': case 'm': what = "dates or times"; break;
    case 'f': what = fmt::format("{}-bit floats", bytes * 8); break;
    default: what = "not a numeric dtype numpy writes"; break;
  }
  return fmt::format("dtype '{}' ({}) is not supported; expected uint8, int8 to int64, uint16 to uint64, float32 or float64", descr, what);
}

// A descr string: an optional byte order (< little, > big, | not applicable, = native) then a kind
// letter and an item size.
Status ParseDescr(const std::string& descr, std::string_view source, NpyHeader* h) {
  std::string_view d = descr;
  char order = '=';
  if (!d.empty() && std::string_view("<>|=").find(d.front()) != std::string_view::npos) order = d.front(), d.remove_prefix(1);
  const char kind = d.empty() ? '?' : d.front();
  int bytes = 0;
  const bool sized = d.size() == 2 && d[1] >= '1' && d[1] <= '9';
  if (sized) bytes = d[1] - '0';
  const bool ok = sized && ((kind == 'f' && (bytes == 4 || bytes == 8)) ||
                            ((kind == 'i' || kind == 'u') && (bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8)));
  if (!ok) return SourceError(source, DtypeRefusal(descr, kind, bytes));
  if (order == '|' && bytes > 1) return SourceError(source, fmt::format("npy header: dtype '{}' has no byte order ('|') but {} bytes per item", descr, bytes));
  h->descr = descr;
  h->kind = kind;
  h->item_bytes = bytes;
  h->swap = order == '>' && bytes > 1;
  return Status::Ok();
}

// The header dict: exactly 'descr', 'fortran_order' and 'shape', each once, in any order.
Status ParseDict(std::string_view text, std::size_t offset, std::string_view source, NpyHeader* h) {
  Literal c(text, offset);
  c.Space();
  if (!c.Eat('{')) return SourceError(source, fmt::format("npy header: expected a dict '{{' {}", c.At()));
  bool seen[3] = {false, false, false};
  static constexpr const char* kKeys[3] = {"descr", "fortran_order", "shape"};
  for (c.Space(); !c.Eat('}'); c.Space()) {
    std::string key;
    if (!c.String(&key)) return SourceError(source, fmt::format("npy header: expected a quoted key or '}}' {}", c.At()));
    const auto k = static_cast<std::size_t>(std::find(kKeys, kKeys + 3, key) - kKeys);
    if (k == 3) return SourceError(source, fmt::format("npy header: unexpected key '{}' (expected 'descr', 'fortran_order' and 'shape')", key));
    if (seen[k]) return SourceError(source, fmt::format("npy header: key '{}' appears twice", key));
    seen[k] = true;
    c.Space();
    if (!c.Eat(':')) return SourceError(source, fmt::format("npy header: expected ':' after '{}' {}", key, c.At()));
    c.Space();
    if (k == 0) {
      std::string descr;
      if (c.Peek('[')) return SourceError(source, "dtype is a structured (record) dtype; save one plain numeric array per file");
      if (!c.String(&descr)) return SourceError(source, fmt::format("npy header: 'descr' must be a quoted dtype string {}", c.At()));
      TFD_RETURN_IF_ERROR(ParseDescr(descr, source, h));
    } else if (k == 1) {
      if (c.Word("True")) h->fortran_order = true;
      else if (c.Word("False")) h->fortran_order = false;
      else return SourceError(source, fmt::format("npy header: 'fortran_order' must be True or False {}", c.At()));
    } else {
      TFD_RETURN_IF_ERROR(ParseShape(c, source, &h->shape));
    }
    c.Space();
    if (!c.Eat(',') && !c.Peek('}')) return SourceError(source, fmt::format("npy header: expected ',' or '}}' {}", c.At()));
  }
  c.Space();
  if (!c.AtEnd()) return SourceError(source, fmt::format("npy header: text after the dict {}", c.At()));
  for (std::size_t k = 0; k < 3; ++k)
    if (!seen[k]) return SourceError(source, fmt::format("npy header: no '{}' key", kKeys[k]));
  return Status::Ok();
}

std::uint32_t LittleEndian(const std::uint8_t* p, int bytes) {
  std::uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// The shape's element count, and the data's size against the file's.
Status CheckSize(std::uint64_t file_size, std::string_view source, NpyHeader* h) {
  if (h->shape.empty()) return SourceError(source, "shape () has no dimensions: expected (N, ...), one entry per example");
  std::uint64_t n = 1;
  for (std::uint64_t d : h->shape) {
    if (d == 0) return SourceError(source, fmt::format("shape {} holds no values", h->ShapeText()));
    if (__builtin_mul_overflow(n, d, &n) || n > file_size)
      return SourceError(source, fmt::format("truncated .npy file: shape {} of '{}' needs more than the file's {} bytes", h->ShapeText(), h->descr, file_size));
  }
  h->elements = n;
  const std::uint64_t have = file_size - h->data_offset, want = h->data_bytes();
  if (have < want)
    return SourceError(source, fmt::format("truncated .npy file: shape {} of '{}' is {} bytes of data, the file has {}", h->ShapeText(), h->descr, want, have));
  if (have > want)
    return SourceError(source, fmt::format("{} bytes after the data that shape {} of '{}' holds ({} bytes)", have - want, h->ShapeText(), h->descr, want));
  return Status::Ok();
}

}  // namespace

std::string NpyHeader::ShapeText() const {
  return shape.size() == 1 ? fmt::format("({},)", shape[0]) : fmt::format("({})", fmt::join(shape, ", "));
}

Result<NpyHeader> ParseNpyHeader(std::span<const std::uint8_t> head, std::uint64_t file_size, std::string_view source) {
  static constexpr std::uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  const std::size_t have = static_cast<std::size_t>(std::min<std::uint64_t>(head.size(), file_size));
  for (std::size_t i = 0; i < std::min<std::size_t>(have, 6); ++i)
    if (head[i] != kMagic[i]) return SourceError(source, "not an .npy file: it does not start with \\x93NUMPY");
  if (have < 8) return SourceError(source, fmt::format("truncated .npy file: {} bytes, shorter than its magic and version", file_size));
  const int major = head[6], minor = head[7];
  if (major < 1 || major > 3 || minor != 0)
    return SourceError(source, fmt::format("npy format version {}.{} is not supported (1.0, 2.0 or 3.0)", major, minor));
  const std::size_t prefix = major == 1 ? 10 : 12;
  if (have < prefix) return SourceError(source, fmt::format("truncated .npy file: {} bytes, shorter than the {}-byte start of its header", file_size, prefix));
  const std::uint32_t len = LittleEndian(head.data() + 8, major == 1 ? 2 : 4);
  if (len > kMaxNpyHeaderBytes) return SourceError(source, fmt::format("npy header of {} bytes; at most {} are read", len, kMaxNpyHeaderBytes));
  if (have < prefix + len) return SourceError(source, fmt::format("truncated .npy file: {} bytes, its header says it alone has {}", file_size, prefix + len));
  const std::string_view text(reinterpret_cast<const char*>(head.data() + prefix), len);
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto ch = static_cast<unsigned char>(text[i]);
    if (ch >= 0x7f || (ch < 0x20 && ch != '\n' && ch != '\t' && ch != '\r'))
      return SourceError(source, fmt::format("npy header: byte {} is 0x{:02x}, not printable ASCII", prefix + i, ch));
  }
  NpyHeader h;
  TFD_RETURN_IF_ERROR(ParseDict(text, prefix, source, &h));
  h.data_offset = prefix + len;
  TFD_RETURN_IF_ERROR(CheckSize(file_size, source, &h));
  return h;
}

namespace {

template <typename U>
U ByteSwap(U v) {
  if constexpr (sizeof(U) == 2) return __builtin_bswap16(v);
  else if constexpr (sizeof(U) == 4) return __builtin_bswap32(v);
  else return __builtin_bswap64(v);
}

template <typename T>
T Load(const std::uint8_t* p, bool swap) {
  if constexpr (sizeof(T) == 1) {
    return static_cast<T>(*p);
  } else {
    using U = std::conditional_t<sizeof(T) == 2, std::uint16_t, std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>;
    U u;
    std::memcpy(&u, p, sizeof u);
    return std::bit_cast<T>(swap ? ByteSwap(u) : u);
  }
}

template <typename T, typename Out>
void ConvertAs(const std::uint8_t* src, std::uint64_t n, bool swap, Out* dst) {
  for (std::uint64_t i = 0; i < n; ++i) dst[i] = static_cast<Out>(Load<T>(src + i * sizeof(T), swap));
}

// Every element of `h` (in file order) as Out.
template <typename Out>
void Convert(const NpyHeader& h, const std::uint8_t* src, Out* dst) {
  const std::uint64_t n = h.elements;
  const bool s = h.swap;
  if (h.kind == 'f') return h.item_bytes == 4 ? ConvertAs<float>(src, n, s, dst) : ConvertAs<double>(src, n, s, dst);
  if (h.kind == 'i') {
    switch (h.item_bytes) {
      case 1: return ConvertAs<std::int8_t>(src, n, s, dst);
      case 2: return ConvertAs<std::int16_t>(src, n, s, dst);
      case 4: return ConvertAs<std::int32_t>(src, n, s, dst);
      default: return ConvertAs<std::int64_t>(src, n, s, dst);
    }
  }
  switch (h.item_bytes) {
    case 1: return ConvertAs<std::uint8_t>(src, n, s, dst);
    case 2: return ConvertAs<std::uint16_t>(src, n, s, dst);
    case 4: return ConvertAs<std::uint32_t>(src, n, s, dst);
    default: return ConvertAs<std::uint64_t>(src, n, s, dst);
  }
}

// Fortran order differs from C order only when two or more dimensions exceed 1.
bool FortranMatters(const NpyHeader& h) {
  return h.fortran_order && std::count_if(h.shape.begin(), h.shape.end(), [](std::uint64_t d) { return d > 1; }) > 1;
}

// Writes `in` (Fortran order: the first index varies fastest) to `out` in C order.
template <typename T>
void FortranToC(const std::vector<std::uint64_t>& shape, const T* in, std::uint64_t n, T* out) {
  const std::size_t rank = shape.size();
  std::vector<std::uint64_t> stride(rank, 1), index(rank, 0);
  for (std::size_t d = rank - 1; d > 0; --d) stride[d - 1] = stride[d] * shape[d];
  std::uint64_t at = 0;
  for (std::uint64_t f = 0; f < n; ++f) {
    out[at] = in[f];
    for (std::size_t d = 0; d < rank; ++d) {
      if (++index[d] < shape[d]) {
        at += stride[d];
        break;
      }
      at -= (shape[d] - 1) * stride[d];
      index[d] = 0;
    }
  }
}

// Every element as Out, in C order.
template <typename Out>
void ConvertToC(const NpyHeader& h, const std::uint8_t* src, Out* dst) {
  if (!FortranMatters(h)) return Convert(h, src, dst);
  std::vector<Out> file_order(h.elements);
  Convert(h, src, file_order.data());
  FortranToC(h.shape, file_order.data(), h.elements, dst);
}

// The first value that is NaN or infinite, as an error naming the example and the value in it.
Status CheckFinite(const float* v, std::uint64_t n, std::uint64_t per_example, std::string_view source, std::string_view what) {
  constexpr std::uint64_t kBlock = 4096;
  for (std::uint64_t start = 0; start < n; start += kBlock) {
    const std::uint64_t end = std::min(n, start + kBlock);
    bool bad = false;  // a branch-free pass the compiler vectorises; the slow search only on a hit
    for (std::uint64_t i = start; i < end; ++i) bad |= (std::bit_cast<std::uint32_t>(v[i]) & 0x7f800000u) == 0x7f800000u;
    if (!bad) continue;
    for (std::uint64_t i = start; i < end; ++i)
      if (!std::isfinite(v[i]))
        return SourceError(source, fmt::format("example {}, value {} is {}; {} must be finite numbers", i / per_example, i % per_example, v[i], what));
  }
  return Status::Ok();
}

// The example shape of x (N, ...); bounded so that the counts fit the dataset's int and uint32 fields.
Status SetShape(const NpyHeader& h, std::string_view source, Examples* out) {
  const std::uint64_t per_example = h.elements / h.shape[0];
  if (h.shape[0] > UINT32_MAX) return SourceError(source, fmt::format("shape {}: more than {} examples", h.ShapeText(), UINT32_MAX));
  if (per_example > INT_MAX) return SourceError(source, fmt::format("shape {}: more than {} values per example", h.ShapeText(), INT_MAX));
  out->size = static_cast<std::int64_t>(h.shape[0]);
  out->height = 1, out->width = static_cast<int>(per_example), out->channels = 1;
  if (h.shape.size() == 3 || h.shape.size() == 4) out->height = static_cast<int>(h.shape[1]), out->width = static_cast<int>(h.shape[2]);
  if (h.shape.size() == 4) out->channels = static_cast<int>(h.shape[3]);
  out->dtype = h.kind == 'u' && h.item_bytes == 1 ? DType::kU8 : DType::kF32;
  return Status::Ok();
}

// Whether the model can read the data as it is: bytes, or little-endian float32 in C order.
bool AsIs(const NpyHeader& h) {
  return !FortranMatters(h) && ((h.kind == 'u' && h.item_bytes == 1) || (h.kind == 'f' && h.item_bytes == 4 && !h.swap));
}

// The features converted: bytes reordered, or every element as a float in C order.
Result<std::vector<std::uint8_t>> Converted(const NpyHeader& h, const std::uint8_t* data, std::string_view source) {
  if (h.kind == 'u' && h.item_bytes == 1) {
    std::vector<std::uint8_t> out(h.elements);
    FortranToC(h.shape, data, h.elements, out.data());
    return out;
  }
  std::vector<std::uint8_t> out(h.elements * sizeof(float));
  auto* floats = reinterpret_cast<float*>(out.data());
  ConvertToC(h, data, floats);
  TFD_RETURN_IF_ERROR(CheckFinite(floats, h.elements, h.elements / h.shape[0], source, "features"));
  return out;
}

// The file mapped read-only and shared; Unavailable when it cannot be (an empty or special file).
struct Mapping {
  std::shared_ptr<const std::uint8_t> base;
  std::size_t size = 0;
};
Result<Mapping> MapFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::NotFound(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
    close(fd);
    return Status::Unavailable(fmt::format("{}: not a regular file that can be mapped", path));
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  // Populated at once: the NaN check reads every page anyway, and one call saves a fault per page.
  void* base = mmap(nullptr, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int mmap_errno = errno;
  close(fd);  // the mapping stays
  if (base == MAP_FAILED) return Status::Unavailable(fmt::format("{}: mmap: {}", path, std::strerror(mmap_errno)));
  Mapping m;
  m.base = std::shared_ptr<const std::uint8_t>(static_cast<const std::uint8_t*>(base),
                                               [size](const std::uint8_t* p) { munmap(const_cast<std::uint8_t*>(p), size); });
  m.size = size;
  return m;
}

Result<std::vector<std::uint8_t>> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("{}: cannot open", path));
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::InvalidArgument(fmt::format("{}: read failed", path));
  return bytes;  // byte by byte: only for files that cannot be mapped (pipes, special files)
}

// The features of a mapped x file: a view of the mapping when they can be read as they are (and
// floats are aligned in it), else converted.
Status MappedFeatures(const Mapping& m, std::string_view source, Examples* out) {
  TFD_ASSIGN_OR_RETURN(NpyHeader h, ParseNpyHeader(std::span(m.base.get(), m.size), m.size, source));
  TFD_RETURN_IF_ERROR(SetShape(h, source, out));
  const std::uint8_t* data = m.base.get() + h.data_offset;
  if (!AsIs(h) || h.data_offset % static_cast<std::size_t>(h.item_bytes) != 0) {
    TFD_ASSIGN_OR_RETURN(std::vector<std::uint8_t> bytes, Converted(h, data, source));
    out->features = ByteArray(std::move(bytes));
    return Status::Ok();
  }
  if (h.kind == 'f') TFD_RETURN_IF_ERROR(CheckFinite(reinterpret_cast<const float*>(data), h.elements, h.elements / h.shape[0], source, "features"));
  out->features = ByteArray(std::shared_ptr<const std::uint8_t>(m.base, data), h.data_bytes());
  return Status::Ok();
}

}  // namespace

Status NpyFeatures(std::vector<std::uint8_t> file, std::string_view source, Examples* out) {
  TFD_ASSIGN_OR_RETURN(NpyHeader h, ParseNpyHeader(file, file.size(), source));
  TFD_RETURN_IF_ERROR(SetShape(h, source, out));
  if (!AsIs(h)) {
    TFD_ASSIGN_OR_RETURN(std::vector<std::uint8_t> bytes, Converted(h, file.data() + h.data_offset, source));
    out->features = ByteArray(std::move(bytes));
    return Status::Ok();
  }
  file.erase(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(h.data_offset));  // a vector's bytes are aligned for floats
  if (h.kind == 'f') TFD_RETURN_IF_ERROR(CheckFinite(reinterpret_cast<const float*>(file.data()), h.elements, h.elements / h.shape[0], source, "features"));
  out->features = ByteArray(std::move(file));
  return Status::Ok();
}

Status NpyLabels(const DataSpec& spec, std::span<const std::uint8_t> file, std::string_view source, std::int64_t examples,
                 std::string_view x_source, Examples* out) {
  TFD_ASSIGN_OR_RETURN(NpyHeader h, ParseNpyHeader(file, file.size(), source));
  const bool regression = spec.task == DataSpec::Task::kRegression;
  const char* what = regression ? "targets" : "labels";
  if (h.shape[0] != static_cast<std::uint64_t>(examples))
    return SourceError(source, fmt::format("{} {} (shape {}), but {} has {} examples", h.shape[0], what, h.ShapeText(), x_source, examples));
  const std::uint64_t per_example = h.elements / h.shape[0];
  const std::uint8_t* data = file.data() + h.data_offset;
  if (regression) {
    if (h.shape.size() > 2 || per_example > INT_MAX)
      return SourceError(source, fmt::format("targets of shape {}; expected (N,), or (N, k) for k targets", h.ShapeText()));
    out->targets.resize(h.elements);
    ConvertToC(h, data, out->targets.data());
    out->num_targets = static_cast<int>(per_example);
    return CheckFinite(out->targets.data(), h.elements, per_example, source, "targets");
  }
  if (per_example != 1)
    return SourceError(source, fmt::format("labels of shape {}; expected one class id per example, (N,) or (N, 1) (one-hot rows? save their argmax)", h.ShapeText()));
  std::vector<double> ids(h.elements);
  Convert(h, data, ids.data());
  out->label_ids.resize(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const double v = ids[i];
    if (!std::isfinite(v) || v != std::floor(v))
      return SourceError(source, fmt::format("example {} has label {}; class ids are whole numbers (for a numeric target set \"task\": \"regression\")", i, v));
    if (v < 0 || v > INT_MAX) return SourceError(source, fmt::format("example {} has label {}; class ids are 0 and up", i, v));
    out->label_ids[i] = static_cast<std::int64_t>(v);
  }
  return Status::Ok();
}

Result<Examples> ReadNpyPair(const DataSpec& spec, const std::string& x_path, const std::string& y_path) {
  Examples e;
  Result<Mapping> mapped = MapFile(x_path);
  if (mapped.ok()) {
    TFD_RETURN_IF_ERROR(MappedFeatures(*mapped, x_path, &e));
  } else if (mapped.status().code() == Code::kUnavailable) {
    TFD_ASSIGN_OR_RETURN(std::vector<std::uint8_t> bytes, ReadFile(x_path));
    TFD_RETURN_IF_ERROR(NpyFeatures(std::move(bytes), x_path, &e));
  } else {
    return mapped.status();
  }
  if (y_path.empty() && spec.unlabeled_width > 0) return e;  // predicting: features only
  Result<Mapping> y = MapFile(y_path);
  if (y.ok()) {
    TFD_RETURN_IF_ERROR(NpyLabels(spec, std::span(y->base.get(), y->size), y_path, e.size, x_path, &e));
  } else if (y.status().code() == Code::kUnavailable) {
    TFD_ASSIGN_OR_RETURN(std::vector<std::uint8_t> bytes, ReadFile(y_path));
    TFD_RETURN_IF_ERROR(NpyLabels(spec, bytes, y_path, e.size, x_path, &e));
  } else {
    return y.status();
  }
  return e;
}

std::string NpyFloat32(std::span<const float> values, const std::vector<std::uint64_t>& shape) {
  std::string dict = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}{}), }}", fmt::join(shape, ", "), shape.size() == 1 ? "," : "");
  constexpr std::size_t kPrefix = 10;  // magic, version, u16 header length
  while ((kPrefix + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>((dict.size() >> 8) & 0xff);
  out += dict;
  out.append(reinterpret_cast<const char*>(values.data()), values.size_bytes());  // little-endian host
  return out;
}

}  // namespace tfd::data
