#include "common/summary/writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "common/summary/record.h"

namespace tfd::summary {
namespace {

std::string ThisHost() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  std::string host = name;
  for (char& c : host)
    if (c == '/') c = '_';
  return host;
}

double UnixNow() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Unavailable(fmt::format("{}: cannot write: {}", path, n < 0 ? std::strerror(errno) : "no progress"));
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Writer>> Writer::Open(const std::string& logdir, const std::string& subdir, const WriterOptions& options) {
  const std::filesystem::path dir = std::filesystem::path(logdir) / subdir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::InvalidArgument(fmt::format("{}: cannot create the summaries folder: {}", dir.string(), ec.message()));
  const double now = options.wall_time > 0 ? options.wall_time : UnixNow();
  const std::string base = fmt::format("events.out.tfevents.{:010d}.{}", static_cast<std::int64_t>(std::floor(now)),
                                       options.hostname.empty() ? ThisHost() : options.hostname);
  int fd = -1;
  std::string path;
  for (int n = 1; fd < 0 && n <= 1000; ++n) {
    path = (dir / (n == 1 ? base : fmt::format("{}.{}", base, n))).string();
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) return Status::InvalidArgument(fmt::format("{}: cannot create the event file: {}", path, std::strerror(errno)));
  }
  if (fd < 0) return Status::InvalidArgument(fmt::format("{}: cannot create the event file: 1000 files of this name already", path));
  std::unique_ptr<Writer> w(new Writer(fd, std::move(path), options.flush_bytes));
  AppendRecord(EncodeFileVersionEvent(now), &w->buffer_);
  TFD_RETURN_IF_ERROR(w->Flush());
  return w;
}

Writer::~Writer() {
  (void)Flush();
  ::close(fd_);
}

Status Writer::Add(double wall_time, std::int64_t step, std::span<const Value> values) {
  if (!failed_.ok()) return failed_;
  AppendRecord(EncodeSummaryEvent(wall_time, step, values), &buffer_);
  if (buffer_.size() >= flush_bytes_) return Flush();
  return Status::Ok();
}

Status Writer::Scalar(std::string_view tag, std::int64_t step, double value, double wall_time) {
  const Value v{std::string(tag.substr(0, kMaxTagBytes)), static_cast<float>(value)};
  return Add(wall_time, step, std::span(&v, 1));
}

Status Writer::Scalars(std::int64_t step, std::span<const std::pair<std::string, double>> values, double wall_time) {
  std::vector<Value> vs;
  vs.reserve(values.size());
  for (const auto& [tag, x] : values) vs.push_back({tag.substr(0, kMaxTagBytes), static_cast<float>(x)});
  return Add(wall_time, step, vs);
}

Status Writer::Histogram(std::string_view tag, std::int64_t step, std::span<const float> values, double wall_time) {
  const Value v{std::string(tag.substr(0, kMaxTagBytes)), MakeHistogram(values)};
  return Add(wall_time, step, std::span(&v, 1));
}

Status Writer::Flush() {
  if (!failed_.ok()) return failed_;
  failed_ = WriteAll(fd_, buffer_, path_);
  buffer_.clear();
  return failed_;
}

}  // namespace tfd::summary
