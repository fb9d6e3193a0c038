#include "common/ckpt/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/ckpt/format.h"

namespace tfd::ckpt {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kPrefix = "ckpt-";
constexpr std::string_view kSuffix = ".tfdckpt";
constexpr std::string_view kTempSuffix = ".tfdckpt.tmp";

std::string ErrnoText(int err) { return std::generic_category().message(err); }

}  // namespace

bool StepOfFileName(std::string_view name, std::uint64_t* step) {
  if (name.size() != kPrefix.size() + 12 + kSuffix.size() || !name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return false;
  std::uint64_t v = 0;
  for (char ch : name.substr(kPrefix.size(), 12)) {
    if (ch < '0' || ch > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(ch - '0');
  }
  *step = v;
  return true;
}

namespace {

Status WriteAll(int fd, std::span<const std::byte> data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Internal(fmt::format("{}: write: {}", path, ErrnoText(errno)));
    }
    data = data.subspan(static_cast<std::size_t>(n));
  }
  return Status::Ok();
}

Status FsyncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return Status::Internal(fmt::format("{}: open for fsync: {}", path, ErrnoText(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return Status::Internal(fmt::format("{}: fsync: {}", path, ErrnoText(err)));
  return Status::Ok();
}

}  // namespace

Status WriteSynced(const std::string& path, std::span<const std::byte> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Internal(fmt::format("{}: create: {}", path, ErrnoText(errno)));
  Status s = WriteAll(fd, bytes, path);
  if (s.ok() && ::fsync(fd) != 0) s = Status::Internal(fmt::format("{}: fsync: {}", path, ErrnoText(errno)));
  if (::close(fd) != 0 && s.ok()) s = Status::Internal(fmt::format("{}: close: {}", path, ErrnoText(errno)));
  if (!s.ok()) ::unlink(path.c_str());
  return s;
}

Status SyncFolder(const std::string& dir) { return FsyncPath(dir, O_RDONLY | O_DIRECTORY); }

namespace {

Status WriteFileDurably(const std::string& dir, const std::string& final_path, const std::string& tmp_path,
                        std::span<const std::byte> bytes) {
  TFD_RETURN_IF_ERROR(WriteSynced(tmp_path, bytes));
  if (::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    Status s = Status::Internal(fmt::format("{}: rename to {}: {}", tmp_path, final_path, ErrnoText(errno)));
    ::unlink(tmp_path.c_str());
    return s;
  }
  return SyncFolder(dir);
}

}  // namespace

std::string FileName(std::uint64_t global_step) { return fmt::format("{}{:012}{}", kPrefix, global_step, kSuffix); }

Result<std::vector<std::string>> List(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return Status::NotFound(fmt::format("{}: cannot list the checkpoint folder: {}", dir, ec.message()));
  std::vector<std::pair<std::uint64_t, std::string>> found;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return Status::Internal(fmt::format("{}: listing: {}", dir, ec.message()));
    std::uint64_t step = 0;
    if (StepOfFileName(it->path().filename().string(), &step)) found.emplace_back(step, it->path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> paths;
  for (auto& f : found) paths.push_back(std::move(f.second));
  return paths;
}

Result<std::string> Write(const std::string& dir, const Checkpoint& ckpt, int keep_last) {
  if (keep_last < 1) return Status::InvalidArgument(fmt::format("{}: keep_last must be at least 1, got {}", dir, keep_last));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    return Status::NotFound(fmt::format("{}: checkpoint folder: {}", dir, ErrnoText(errno)));
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(fmt::format("{}: checkpoint folder is not a folder", dir));
  auto bytes = Serialize(ckpt);
  if (!bytes.ok()) return bytes.status().WithContext(fmt::format("{}: checkpoint at step {}", dir, ckpt.global_step));
  const std::string name = FileName(ckpt.global_step);
  const std::string path = (fs::path(dir) / name).string();
  const std::string tmp = (fs::path(dir) / fmt::format("{}{:012}{}", kPrefix, ckpt.global_step, kTempSuffix)).string();
  TFD_RETURN_IF_ERROR(WriteFileDurably(dir, path, tmp, *bytes));

  // Keep the newest `keep_last`; a failed delete costs disk space, not the checkpoint just written.
  auto all = List(dir);
  if (all.ok()) {
    for (std::size_t i = static_cast<std::size_t>(keep_last); i < all->size(); ++i) {
      if (::unlink((*all)[i].c_str()) != 0) spdlog::warn("{}: cannot delete an old checkpoint: {}", (*all)[i], ErrnoText(errno));
    }
  } else {
    spdlog::warn("{}", all.status().message());
  }
  // Temporary files left by a writer that died mid-save are never read; remove them.
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.starts_with(kPrefix) && n.ends_with(kTempSuffix) && ::unlink(it->path().c_str()) != 0)
      spdlog::warn("{}: cannot delete a stale temporary checkpoint: {}", it->path().string(), ErrnoText(errno));
  }
  return path;
}

Result<Checkpoint> Load(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::NotFound(fmt::format("{}: cannot open the checkpoint: {}", path, ErrnoText(errno)));
  std::vector<std::byte> bytes;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) bytes.reserve(static_cast<std::size_t>(st.st_size));
  std::byte buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return Status::Internal(fmt::format("{}: read: {}", path, ErrnoText(err)));
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), buf, buf + n);
  }
  ::close(fd);
  return Parse(bytes, path);
}

Result<Loaded> LoadNewestValid(const std::string& dir) {
  TFD_ASSIGN_OR_RETURN(std::vector<std::string> paths, List(dir));
  Loaded out;
  for (const std::string& p : paths) {
    auto c = Load(p);
    if (c.ok()) {
      out.path = p;
      out.checkpoint = std::move(c).value();
      if (!out.skipped.empty()) spdlog::info("{}: restoring the newest valid checkpoint", p);
      return out;
    }
    spdlog::warn("skipping checkpoint {}", c.status().message());
    out.skipped.push_back(c.status().message());
  }
  if (paths.empty()) return Status::NotFound(fmt::format("{}: no checkpoint files (ckpt-<step>.tfdckpt)", dir));
  return Status::NotFound(fmt::format("{}: none of the {} checkpoint files is valid (newest: {})", dir, paths.size(), out.skipped.front()));
}

Schedule::Schedule(const config::CheckpointSpec& spec, std::uint64_t start_step, Clock::time_point start)
    : every_steps_(spec.every_steps), every_secs_(spec.every_secs), last_step_(start_step), last_time_(start) {}

bool Schedule::Due(std::uint64_t global_step, Clock::time_point now) const {
  if (every_steps_ > 0 && global_step >= last_step_ + static_cast<std::uint64_t>(every_steps_)) return true;
  return every_secs_ > 0 && std::chrono::duration<double>(now - last_time_).count() >= every_secs_;
}

void Schedule::Saved(std::uint64_t global_step, Clock::time_point now) {
  last_step_ = global_step;
  last_time_ = now;
}

Status WriteEarlyStopping(const std::string& dir, std::uint64_t model, const EarlyStopping& state) {
  const nlohmann::json record = {{"model", fmt::format("{:016x}", model)}, {"epoch", state.epoch},
                                 {"have_best", state.have_best},         {"best", state.best},
                                 {"best_epoch", state.best_epoch},       {"wait", state.wait}};
  const std::string text = record.dump() + "\n";
  const std::string path = (fs::path(dir) / kEarlyStoppingFile).string();
  return WriteFileDurably(dir, path, path + ".tmp", std::as_bytes(std::span(text.data(), text.size())));
}

Result<EarlyStopping> ReadEarlyStopping(const std::string& dir, std::uint64_t model) {
  const std::string path = (fs::path(dir) / kEarlyStoppingFile).string();
  std::ifstream in(path);
  if (!in) return Status::NotFound(fmt::format("{}: no early-stopping record", path));
  const nlohmann::json record = nlohmann::json::parse(in, nullptr, false);
  if (!record.is_object()) return Status::Corruption(fmt::format("{}: not a JSON object", path));
  // Each field: present, of its type, in range; the first that is not is named.
  auto number = [&](const char* field, double min, double max) -> Result<double> {
    const auto it = record.find(field);
    if (it == record.end() || !it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < min || it->get<double>() > max)
      return Status::Corruption(fmt::format("{}: field \"{}\": expected a number from {:g} to {:g}", path, field, min, max));
    return it->get<double>();
  };
  const auto tag = record.find("model");
  if (tag == record.end() || !tag->is_string()) return Status::Corruption(fmt::format("{}: field \"model\": expected a string", path));
  if (tag->get<std::string>() != fmt::format("{:016x}", model))
    return Status::NotFound(fmt::format("{}: the record is another model's ({})", path, tag->get<std::string>()));
  const auto have_best = record.find("have_best");
  if (have_best == record.end() || !have_best->is_boolean())
    return Status::Corruption(fmt::format("{}: field \"have_best\": expected true or false", path));
  constexpr double kMaxEpoch = 1e9;
  Result<double> epoch = number("epoch", 0, kMaxEpoch), best = number("best", -1e300, 1e300),
                 best_epoch = number("best_epoch", 0, kMaxEpoch), wait = number("wait", 0, kMaxEpoch);
  for (const Result<double>* r : {&epoch, &best, &best_epoch, &wait})
    if (!r->ok()) return r->status();
  EarlyStopping state;
  state.epoch = static_cast<std::uint32_t>(*epoch);
  state.have_best = have_best->get<bool>();
  state.best = *best;
  state.best_epoch = static_cast<std::uint32_t>(*best_epoch);
  state.wait = static_cast<std::uint32_t>(*wait);
  return state;
}

}  // namespace tfd::ckpt
