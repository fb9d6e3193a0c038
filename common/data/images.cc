// The image folder reader (common/data/readers.h, images.h): the folders listed in a fixed order,
// then every file read and decoded by stb_image (stb_image_impl.cc) on a pool of threads, each
// image written to its own slot of the features, so the result does not depend on the threads.
#include "common/data/images.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <stb/stb_image.h>
#include <zlib.h>
#include <stb/stb_image_resize.h>

#include "common/data/readers.h"

namespace tfd::data {
namespace {

namespace fs = std::filesystem;
using config::DataSpec;

// One example to be: its file and its class folder's name (an index into Listing::classes).
struct ImageFile {
  std::string path;
  std::size_t label = 0;
};

struct Listing {
  std::vector<std::string> classes;
  std::vector<ImageFile> files;  // by root, class folder, then path within the class folder
};

// PNG and JPEG by extension, any case, as Keras takes them; a hidden file (macOS's "._x.jpg"
// AppleDouble files are not images) is skipped.
bool IsImageName(const fs::path& p) {
  const std::string name = p.filename().string();
  if (name.empty() || name[0] == '.') return false;
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

// The image files anywhere under one class folder (subfolders included, as Keras and PyTorch
// walk them; symlinked folders not followed, so a link cycle cannot loop), sorted by path.
Status ListClass(const fs::path& dir, std::vector<std::string>* out) {
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code entry;  // an entry that cannot be stat'ed (a dangling link) is not an image
    if (it->path().filename().string().starts_with(".")) {
      if (it->is_directory(entry)) it.disable_recursion_pending();
      continue;
    }
    if (IsImageName(it->path()) && it->is_regular_file(entry)) out->push_back(it->path().string());
  }
  if (ec) return Status::InvalidArgument(fmt::format("{}: cannot list: {}", dir.string(), ec.message()));
  std::sort(out->begin(), out->end());
  return Status::Ok();
}

// Each root's class folders (hidden ones, such as .ipynb_checkpoints, skipped), sorted by name;
// a class named in several roots is one class.
Result<Listing> ListFolders(const std::vector<std::string>& roots) {
  Listing out;
  for (const std::string& root : roots) {
    std::error_code ec;
    if (!fs::is_directory(root, ec))
      return Status::InvalidArgument(fmt::format("{}: not a folder (image data is a folder with one subfolder of PNG/JPEG files per class)", root));
    std::vector<fs::path> classes;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code entry;
      if (it->is_directory(entry) && !it->path().filename().string().starts_with(".")) classes.push_back(it->path());
    }
    if (ec) return Status::InvalidArgument(fmt::format("{}: cannot list: {}", root, ec.message()));
    if (classes.empty()) return Status::InvalidArgument(fmt::format("{}: no class folders (expected one subfolder of PNG/JPEG files per class)", root));
    std::sort(classes.begin(), classes.end());
    for (const fs::path& dir : classes) {
      std::vector<std::string> files;
      TFD_RETURN_IF_ERROR(ListClass(dir, &files));
      if (files.empty()) return Status::InvalidArgument(fmt::format("{}: an empty class folder (no .png, .jpg or .jpeg file)", dir.string()));
      const std::string name = dir.filename().string();
      auto at = std::find(out.classes.begin(), out.classes.end(), name);
      const auto label = static_cast<std::size_t>(at - out.classes.begin());
      if (at == out.classes.end()) out.classes.push_back(name);
      for (std::string& f : files) out.files.push_back({std::move(f), label});
    }
  }
  return out;
}

// Reads a whole file into `buf` (reused from file to file), refusing one over kMaxImageFileBytes.
Status ReadBounded(const std::string& path, std::vector<std::uint8_t>* buf) {
  struct Fd {
    int fd;
    ~Fd() { if (fd >= 0) ::close(fd); }
  } file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  const int fd = file.fd;
  if (fd < 0) return Status::NotFound(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::InvalidArgument(fmt::format("{}: cannot stat: {}", path, std::strerror(errno)));
  if (st.st_size > kMaxImageFileBytes)
    return Status::InvalidArgument(fmt::format("{}: {} bytes; an image file may have at most {}", path, st.st_size, kMaxImageFileBytes));
  buf->resize(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < buf->size()) {
    const ssize_t n = ::read(fd, buf->data() + got, buf->size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::InvalidArgument(fmt::format("{}: read failed: {}", path, std::strerror(errno)));
    if (n == 0) break;  // shrank while read: decode what is there
    got += static_cast<std::size_t>(n);
  }
  buf->resize(got);
  return Status::Ok();
}

// An image's header: its size and the channels the file stores (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA).
struct Header {
  int height = 0, width = 0, channels = 0;
};

int Clamp(std::size_t n) { return static_cast<int>(std::min<std::size_t>(n, std::numeric_limits<int>::max())); }

// Whether every Huffman table of a JPEG's DHT segments holds at most 256 codes. stb_image 2.27
// (Debian 12's) writes past a table's arrays when the 16 code counts sum over 256 (fixed upstream
// in 2.28; found by test/fuzz/images_fuzz.cc), so such a file is refused before stb reads it. The
// markers are walked as stb walks them: fill bytes skipped, a segment's tables read while its
// length lasts (past the segment's end, as stb would), zeros past the end of the bytes.
bool JpegTablesFit(std::span<const std::uint8_t> b) {
  auto at = [&](std::size_t i) -> unsigned { return i < b.size() ? b[i] : 0u; };
  std::size_t p = 0;
  if (at(p) != 0xFF) return true;  // not a JPEG: not this check's business
  while (p < b.size() && b[p] == 0xFF) ++p;
  if (at(p) != 0xD8) return true;
  for (++p; p + 1 < b.size();) {
    const unsigned m = b[p + 1];
    if (b[p] != 0xFF || m == 0xFF) { ++p; continue; }  // entropy-coded data or a fill byte
    if (m == 0x00 || m == 0x01 || (m >= 0xD0 && m <= 0xD8)) { p += 2; continue; }  // stuffed zero, TEM, RSTn, SOI: no length
    if (m == 0xD9) return true;                                                     // EOI
    const long length = static_cast<long>(at(p + 2) << 8 | at(p + 3));
    if (m == 0xC4) {
      std::size_t q = p + 4;
      for (long left = length - 2; left > 0;) {
        long codes = 0;
        for (std::size_t i = 1; i <= 16; ++i) codes += at(q + i);
        if (codes > 256) return false;
        q += 17 + static_cast<std::size_t>(codes);
        left -= 17 + codes;
      }
    }
    p += 2 + static_cast<std::size_t>(length);
  }
  return true;
}

Result<Header> ReadHeader(std::span<const std::uint8_t> bytes, std::int64_t max_pixels) {
  if (!JpegTablesFit(bytes)) return Status::InvalidArgument("not a JPEG image stb_image can read (a Huffman table of over 256 codes)");
  Header h;
  if (stbi_info_from_memory(bytes.data(), Clamp(bytes.size()), &h.width, &h.height, &h.channels) == 0)
    return Status::InvalidArgument(fmt::format("not a PNG or JPEG image stb_image can read ({})", stbi_failure_reason()));
  if (std::int64_t{h.height} * h.width > max_pixels)
    return Status::InvalidArgument(fmt::format("{}x{} pixels (height x width) is over the {} an image may have", h.height, h.width, max_pixels));
  return h;
}

std::uint32_t BigEndian32(std::span<const std::uint8_t> b, std::size_t at) {
  return std::uint32_t{b[at]} << 24 | std::uint32_t{b[at + 1]} << 16 | std::uint32_t{b[at + 2]} << 8 | b[at + 3];
}

// Whether a zlib stream inflates to at most `limit` bytes (counted in a small buffer, never kept).
bool InflatesWithin(const std::vector<std::span<const std::uint8_t>>& parts, bool raw_deflate, std::uint64_t limit) {
  z_stream z{};
  if (inflateInit2(&z, raw_deflate ? -15 : 15) != Z_OK) return false;
  std::vector<std::uint8_t> sink(1 << 16);
  int rc = Z_OK;
  for (std::size_t i = 0; i < parts.size() && rc == Z_OK && z.total_out <= limit; ++i) {
    z.next_in = const_cast<std::uint8_t*>(parts[i].data());
    z.avail_in = static_cast<uInt>(parts[i].size());
    while (rc == Z_OK && z.avail_in > 0 && z.total_out <= limit) {
      z.next_out = sink.data();
      z.avail_out = static_cast<uInt>(sink.size());
      rc = inflate(&z, Z_NO_FLUSH);
    }
  }
  const bool within = z.total_out <= limit;
  inflateEnd(&z);
  return within;
}

// stb_image 2.27 sizes a PNG's image data buffer from each IDAT chunk's length before it checks the
// bytes are there, and inflates it into a buffer that grows as far as the stream goes (a 1 KB
// zlib bomb asks for gigabytes). So a PNG is walked first: every chunk must fit in the file, and
// image data over 256 KiB (below that the output is bounded anyway) must inflate to no more than
// the image's rows (`h` x `w` pixels, interlaced or not) can hold.
Status CheckPngChunks(std::span<const std::uint8_t> b, const Header& h) {
  static constexpr std::uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (b.size() < 8 || !std::equal(kSignature, kSignature + 8, b.begin())) return Status::Ok();  // not a PNG
  std::vector<std::span<const std::uint8_t>> idat;
  std::uint64_t idat_bytes = 0;
  bool cgbi = false;
  for (std::size_t p = 8; p + 8 <= b.size();) {
    const std::uint32_t length = BigEndian32(b, p);
    const std::string type(reinterpret_cast<const char*>(b.data() + p + 4), 4);
    if (length > b.size() - p - 8)
      return Status::InvalidArgument(fmt::format("not a PNG image stb_image can read (chunk at byte {} claims {} bytes; {} remain)", p, length,
                                                 b.size() - p - 8));
    if (type == "IEND") break;
    if (type == "CgBI") cgbi = true;  // Apple's PNGs: raw deflate, no zlib header
    if (type == "IDAT") idat.push_back(b.subspan(p + 8, length)), idat_bytes += length;
    p += 12 + std::size_t{length};
  }
  const std::uint64_t rows = static_cast<std::uint64_t>(h.height) * (1 + 8 * static_cast<std::uint64_t>(h.width) * 2);  // <= 4 channels x 16 bits
  const std::uint64_t limit = 2 * rows + 16 * static_cast<std::uint64_t>(h.height) + 1024;  // interlacing's extra filter bytes
  if (idat_bytes > (256u << 10) && !InflatesWithin(idat, cgbi, limit))
    return Status::InvalidArgument(fmt::format("not a PNG image stb_image can read (its image data inflates past the {} bytes {}x{} pixels need)",
                                               limit, h.height, h.width));
  return Status::Ok();
}

using StbPixels = std::unique_ptr<std::uint8_t, void (*)(void*)>;

// The pixels as `channels` bytes each; `h` is the header ReadHeader read from the same bytes.
Result<StbPixels> Decode(std::span<const std::uint8_t> bytes, const Header& h, int channels) {
  TFD_RETURN_IF_ERROR(CheckPngChunks(bytes, h));
  int w = 0, ht = 0, stored = 0;
  StbPixels px(stbi_load_from_memory(bytes.data(), Clamp(bytes.size()), &w, &ht, &stored, channels), stbi_image_free);
  if (px == nullptr) return Status::InvalidArgument(fmt::format("cannot decode the image ({})", stbi_failure_reason()));
  if (w != h.width || ht != h.height)  // the header was read twice from the same bytes: never, but cheap to know
    return Status::InvalidArgument(fmt::format("decoded as {}x{}, but its header says {}x{}", ht, w, h.height, h.width));
  return px;
}

// The shape every example gets and how each file is checked against it.
struct Plan {
  int height = 0, width = 0, channels = 0;
  bool resize = false;      // image_size set: every image resized to height x width
  std::string first;        // without image_size, the file whose size every other must have
  std::size_t bytes() const { return static_cast<std::size_t>(height) * width * channels; }
};

// Reads and decodes one file into `out` (plan.bytes()); errors name the file.
Status DecodeInto(const std::string& path, const Plan& plan, std::vector<std::uint8_t>* buf, std::uint8_t* out) {
  TFD_RETURN_IF_ERROR(ReadBounded(path, buf));
  auto named = [&](const Status& s) { return Status::InvalidArgument(fmt::format("{}: {}", path, s.message())); };
  Result<Header> h = ReadHeader(*buf, kMaxImagePixels);
  if (!h.ok()) return named(h.status());
  const bool same = h->height == plan.height && h->width == plan.width;
  if (!plan.resize && !same)
    return Status::InvalidArgument(fmt::format("{}: {}x{} pixels (height x width), but {} is {}x{}; set data.image_size to resize them all", path,
                                               h->height, h->width, plan.first, plan.height, plan.width));
  Result<StbPixels> px = Decode(*buf, *h, plan.channels);
  if (!px.ok()) return named(px.status());
  if (same) {
    std::memcpy(out, px->get(), plan.bytes());
    return Status::Ok();
  }
  if (stbir_resize_uint8(px->get(), h->width, h->height, 0, out, plan.width, plan.height, 0, plan.channels) == 0)
    return Status::InvalidArgument(fmt::format("{}: cannot resize {}x{} to {}x{}", path, h->height, h->width, plan.height, plan.width));
  return Status::Ok();
}

// The shape from the spec and the first file: image_size, else the first image's size; color,
// else the first image's channels (gray, with or without alpha, is 1; anything else 3).
Result<Plan> PlanShape(const DataSpec& spec, const std::string& first) {
  std::vector<std::uint8_t> buf;
  TFD_RETURN_IF_ERROR(ReadBounded(first, &buf));
  Result<Header> h = ReadHeader(buf, kMaxImagePixels);
  if (!h.ok()) return Status::InvalidArgument(fmt::format("{}: {}", first, h.status().message()));
  Plan plan;
  plan.first = first;
  plan.resize = spec.image_height > 0;
  plan.height = plan.resize ? spec.image_height : h->height;
  plan.width = plan.resize ? spec.image_width : h->width;
  plan.channels = spec.channels != 0 ? spec.channels : h->channels <= 2 ? 1 : 3;
  return plan;
}

// The threads this task may run on: its CPU affinity (taskset, a container's cpuset), which
// std::thread::hardware_concurrency ignores, else that.
int AvailableThreads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// Decodes every file into its slot of `out` on `threads` threads, each taking the next file in
// order. On an error no thread takes another file; every file before the failed one was already
// taken and finishes, so the error returned, the lowest-numbered file's, is the same on every run.
Status DecodeAll(const std::vector<ImageFile>& files, const Plan& plan, int threads, std::uint8_t* out) {
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  struct Failure {
    std::size_t index = SIZE_MAX;
    Status status;
  };
  std::vector<Failure> failures(static_cast<std::size_t>(threads));
  auto work = [&](Failure* mine) {
    std::vector<std::uint8_t> buf;
    while (!failed.load(std::memory_order_relaxed)) {
      const std::size_t i = next.fetch_add(1);
      if (i >= files.size()) return;
      Status s = DecodeInto(files[i].path, plan, &buf, out + i * plan.bytes());
      if (!s.ok()) {
        *mine = {i, std::move(s)};  // a thread's first failure is its lowest: it takes files in increasing order
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, &failures[static_cast<std::size_t>(t)]);
  work(&failures[0]);
  for (std::thread& t : pool) t.join();
  auto first = std::min_element(failures.begin(), failures.end(), [](const Failure& a, const Failure& b) { return a.index < b.index; });
  return first->index == SIZE_MAX ? Status::Ok() : first->status;
}

// Refuses, before allocating, decoded images that would not fit in this host's memory.
Status CheckFits(std::size_t n, const Plan& plan, const std::string& root) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const double need = static_cast<double>(n) * static_cast<double>(plan.bytes());
  const double have = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 1e300;
  if (need < have) return Status::Ok();
  return Status::InvalidArgument(fmt::format("{}: {} images of {}x{}x{} bytes need {:.1f} GiB, more than this host's {:.1f} GiB; set a "
                                             "smaller data.image_size",
                                             root, n, plan.height, plan.width, plan.channels, need / (1 << 30), have / (1 << 30)));
}

}  // namespace

bool IsPngOrJpeg(std::span<const std::uint8_t> bytes) {
  static constexpr std::uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (bytes.size() >= 8 && std::equal(kPng, kPng + 8, bytes.begin())) return true;
  return bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff;
}

Result<Image> DecodeImage(std::span<const std::uint8_t> bytes, int channels, std::int64_t max_pixels) {
  if (channels != 0 && channels != 1 && channels != 3) return Status::InvalidArgument(fmt::format("channels must be 0, 1 or 3, got {}", channels));
  if (!IsPngOrJpeg(bytes)) return Status::InvalidArgument("not a PNG or JPEG image");
  TFD_ASSIGN_OR_RETURN(Header h, ReadHeader(bytes, max_pixels));
  if (channels == 0) channels = h.channels <= 2 ? 1 : 3;
  TFD_ASSIGN_OR_RETURN(StbPixels px, Decode(bytes, h, channels));
  Image img{.height = h.height, .width = h.width, .channels = channels};
  img.pixels.assign(px.get(), px.get() + static_cast<std::size_t>(h.height) * h.width * channels);
  return img;
}

Status ResizeImage(const Image& in, int height, int width, std::uint8_t* out) {
  if (height < 1 || width < 1) return Status::InvalidArgument(fmt::format("cannot resize to {}x{}", height, width));
  if (stbir_resize_uint8(in.pixels.data(), in.width, in.height, 0, out, width, height, 0, in.channels) == 0)
    return Status::InvalidArgument(fmt::format("cannot resize {}x{} to {}x{}", in.height, in.width, height, width));
  return Status::Ok();
}

Result<Examples> ReadImageFolders(const DataSpec& spec, const std::vector<std::string>& paths, int threads) {
  if (spec.task == DataSpec::Task::kRegression)
    return Status::InvalidArgument(fmt::format("{}: data.task: image folders give each image a class (its folder); regression needs a "
                                               "number per example (npy, csv or tfrecord)",
                                               paths.empty() ? "data.train" : paths.front()));
  if (paths.empty()) return Status::InvalidArgument("data.train: names no folder of images");
  TFD_ASSIGN_OR_RETURN(Listing listing, ListFolders(paths));
  TFD_ASSIGN_OR_RETURN(Plan plan, PlanShape(spec, listing.files.front().path));
  const std::size_t n = listing.files.size();
  TFD_RETURN_IF_ERROR(CheckFits(n, plan, paths.front()));
  std::vector<std::uint8_t> features(n * plan.bytes());
  TFD_RETURN_IF_ERROR(DecodeAll(listing.files, plan, std::clamp<int>(threads, 1, static_cast<int>(std::min<std::size_t>(n, 1024))), features.data()));
  Examples out;
  out.size = static_cast<std::int64_t>(n);
  out.height = plan.height, out.width = plan.width, out.channels = plan.channels;
  out.dtype = DType::kU8;
  out.features = ByteArray(std::move(features));
  out.label_text.reserve(n);
  for (const ImageFile& f : listing.files) out.label_text.push_back(listing.classes[f.label]);
  return out;
}

Result<Examples> ReadImageFolders(const DataSpec& spec, const std::vector<std::string>& paths) {
  return ReadImageFolders(spec, paths, AvailableThreads());
}

}  // namespace tfd::data
