#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/base/status.h"
#include "common/summary/event.h"

namespace tfd::summary {

struct WriterOptions {
  std::string hostname;    // the file name's last part; empty: this machine's name
  double wall_time = 0;    // when the file is opened (its name, its first event); 0: now
  // Buffered events are written out once they reach this many bytes, even before Flush.
  std::size_t flush_bytes = std::size_t{1} << 20;
};

// One TensorBoard event file, LOGDIR/SUBDIR/events.out.tfevents.<10-digit seconds>.<hostname>,
// created (with its folders) by Open, never appended to: every process start gets a file of its
// own (".2", ".3" ... when a name is taken), so a killed task's cut-off last record stays in its
// own file. Events are buffered and written by Flush (or past flush_bytes); the destructor
// flushes. One thread at a time. After a failed write every call returns that failure.
class Writer {
 public:
  // InvalidArgument naming the path and the system's reason when the folder or file cannot be
  // made; the file then holds its first event (file_version), already written out.
  static Result<std::unique_ptr<Writer>> Open(const std::string& logdir, const std::string& subdir, const WriterOptions& options = {});
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Tags are cut to kMaxTagBytes.
  Status Scalar(std::string_view tag, std::int64_t step, double value, double wall_time);
  // Several scalars in one event.
  Status Scalars(std::int64_t step, std::span<const std::pair<std::string, double>> values, double wall_time);
  Status Histogram(std::string_view tag, std::int64_t step, std::span<const float> values, double wall_time);
  Status Flush();

  const std::string& path() const { return path_; }

  static constexpr std::size_t kMaxTagBytes = 256;

 private:
  Writer(int fd, std::string path, std::size_t flush_bytes) : fd_(fd), path_(std::move(path)), flush_bytes_(flush_bytes) {}
  Status Add(double wall_time, std::int64_t step, std::span<const Value> values);

  int fd_;
  std::string path_;
  std::size_t flush_bytes_;
  std::string buffer_;  // framed records not yet written
  Status failed_;
};

}  // namespace tfd::summary
