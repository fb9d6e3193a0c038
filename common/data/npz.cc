// The .npz reader (common/data/readers.h): zip archives of .npy members (np.savez and
// np.savez_compressed), read with libzip; each member is inflated into memory and parsed by npy.cc.
#include <zip.h>

#include <memory>

#include <fmt/format.h>

#include "common/data/npy.h"
#include "common/data/readers.h"

namespace tfd::data {
namespace {

using config::DataSpec;

// Deflate expands at most 1032:1; an entry claiming more than this is corrupt, refused before allocating.
constexpr std::uint64_t kMaxExpansion = 1100;

struct ZipCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
};
struct ZipFileCloser {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};

// The names of the archive's arrays, for an error about a missing one.
std::string ArrayNames(zip_t* z) {
  std::vector<std::string> names;
  const zip_int64_t n = zip_get_num_entries(z, 0);
  for (zip_int64_t i = 0; i < n && names.size() < 8; ++i) {
    const char* name = zip_get_name(z, static_cast<zip_uint64_t>(i), 0);
    std::string s = name == nullptr ? "?" : name;
    if (s.size() > 4 && s.compare(s.size() - 4, 4, ".npy") == 0) s.resize(s.size() - 4);
    names.push_back(std::move(s));
  }
  return names.empty() ? "none" : fmt::format("{}{}", fmt::join(names, ", "), n > 8 ? ", ..." : "");
}

// The bytes of the archive's array `name` (its member name.npy, or name as given).
Result<std::vector<std::uint8_t>> ReadMember(zip_t* z, const std::string& path, const std::string& name, const std::string& field) {
  zip_int64_t index = zip_name_locate(z, (name + ".npy").c_str(), 0);
  if (index < 0) index = zip_name_locate(z, name.c_str(), 0);
  if (index < 0) return SourceError(path, fmt::format("no array \"{}\" ({}; the arrays: {})", name, field, ArrayNames(z)));
  const std::string source = fmt::format("{}: array \"{}\"", path, name);
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat_index(z, static_cast<zip_uint64_t>(index), 0, &st) != 0 || (st.valid & ZIP_STAT_SIZE) == 0 || (st.valid & ZIP_STAT_COMP_SIZE) == 0)
    return SourceError(source, fmt::format("cannot read its zip entry: {}", zip_strerror(z)));
  const bool stored = (st.valid & ZIP_STAT_COMP_METHOD) != 0 && st.comp_method == ZIP_CM_STORE;
  if (stored ? st.size != st.comp_size : st.size / kMaxExpansion > st.comp_size)
    return SourceError(source, fmt::format("zip entry claims {} bytes from {} compressed (a corrupt archive)", st.size, st.comp_size));
  std::unique_ptr<zip_file_t, ZipFileCloser> f(zip_fopen_index(z, static_cast<zip_uint64_t>(index), 0));
  if (f == nullptr) return SourceError(source, fmt::format("cannot open its zip entry: {}", zip_strerror(z)));
  std::vector<std::uint8_t> bytes(st.size);
  std::uint64_t got = 0;
  while (got < st.size) {
    const zip_int64_t n = zip_fread(f.get(), bytes.data() + got, st.size - got);
    if (n < 0) return SourceError(source, fmt::format("zip entry unreadable at byte {}: {}", got, zip_file_strerror(f.get())));
    if (n == 0) return SourceError(source, fmt::format("zip entry ends at byte {} of the {} it claims", got, st.size));
    got += static_cast<std::uint64_t>(n);
  }
  std::uint8_t extra = 0;  // reading past the end makes libzip check the CRC
  if (zip_fread(f.get(), &extra, 1) != 0) return SourceError(source, fmt::format("zip entry longer than the {} bytes it claims, or a bad CRC: {}", st.size, zip_file_strerror(f.get())));
  return bytes;
}

Result<Examples> ReadNpzFile(const DataSpec& spec, const std::string& path) {
  int error = 0;
  std::unique_ptr<zip_t, ZipCloser> z(zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &error));
  if (z == nullptr) {
    zip_error_t e;
    zip_error_init_with_code(&e, error);
    Status s = SourceError(path, fmt::format("not a readable .npz (zip) archive: {}", zip_error_strerror(&e)));
    zip_error_fini(&e);
    return s;
  }
  Examples out;
  TFD_ASSIGN_OR_RETURN(std::vector<std::uint8_t> x, ReadMember(z.get(), path, spec.npz_x, "data.arrays.x"));
  const std::string x_source = fmt::format("{}: array \"{}\"", path, spec.npz_x);
  TFD_RETURN_IF_ERROR(NpyFeatures(std::move(x), x_source, &out));
  const bool has_y = zip_name_locate(z.get(), (spec.npz_y + ".npy").c_str(), 0) >= 0 || zip_name_locate(z.get(), spec.npz_y.c_str(), 0) >= 0;
  if (!has_y && spec.unlabeled_width > 0) return out;  // predicting: features only
  TFD_ASSIGN_OR_RETURN(std::vector<std::uint8_t> y, ReadMember(z.get(), path, spec.npz_y, "data.arrays.y"));
  TFD_RETURN_IF_ERROR(NpyLabels(spec, y, fmt::format("{}: array \"{}\"", path, spec.npz_y), out.size, x_source, &out));
  return out;
}

// The archives' examples one after the other; every archive's examples must have the first's shape and dtype.
Result<Examples> Concatenate(std::vector<Examples> parts, const std::vector<std::string>& paths) {
  Examples out = std::move(parts.front());
  if (parts.size() == 1) return out;
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const Examples& p = i == 0 ? out : parts[i];
    if (p.height != out.height || p.width != out.width || p.channels != out.channels || p.dtype != out.dtype || p.num_targets != out.num_targets)
      return SourceError(paths[i], fmt::format("examples are {}x{}x{} {}, but {}'s are {}x{}x{} {}", p.height, p.width, p.channels,
                                        p.dtype == DType::kU8 ? "bytes" : "floats", paths[0], out.height, out.width, out.channels,
                                        out.dtype == DType::kU8 ? "bytes" : "floats"));
    bytes += p.features.size();
  }
  std::vector<std::uint8_t> features;
  features.reserve(bytes);
  features.insert(features.end(), out.features.begin(), out.features.end());
  for (std::size_t i = 1; i < parts.size(); ++i) {
    Examples& p = parts[i];
    features.insert(features.end(), p.features.begin(), p.features.end());
    p.features = ByteArray();
    out.size += p.size;
    out.label_ids.insert(out.label_ids.end(), p.label_ids.begin(), p.label_ids.end());
    out.targets.insert(out.targets.end(), p.targets.begin(), p.targets.end());
  }
  out.features = ByteArray(std::move(features));
  return out;
}

}  // namespace

Result<Examples> ReadNpz(const DataSpec& spec, const std::vector<std::string>& paths) {
  std::vector<Examples> parts;
  for (const std::string& path : paths) {
    TFD_ASSIGN_OR_RETURN(Examples e, ReadNpzFile(spec, path));
    parts.push_back(std::move(e));
  }
  if (parts.empty()) return Status::InvalidArgument("data: no .npz archive to read");
  return Concatenate(std::move(parts), paths);
}

}  // namespace tfd::data
