#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/base/mutex.h"

namespace tfd {

// Sets up the process's one spdlog logger: human lines on stderr tagged with `task` ("worker:1",
// "ps:0", "standalone"). `level` is trace|debug|info|warn|error. Call once from main().
void SetupLogging(std::string_view task, std::string_view level = "info");

// One field of a JSON event line.
struct EventField {
  std::string key;
  std::variant<std::int64_t, double, std::string, bool> value;
};

// Writes one JSON object per line ({"ts":..., "task":..., "event":..., fields...}) to a FILE
// (stdout in tfd). Disabled writers drop events. Does not own the FILE.
//
// Threads: any thread may Emit (a ps emits from its io thread and its main thread); each line is
// formatted outside the lock and written and flushed whole under mu_, so lines never interleave.
class EventWriter {
 public:
  EventWriter(std::FILE* out, std::string task, bool enabled)
      : out_(out), task_(std::move(task)), enabled_(enabled) {}

  bool enabled() const { return enabled_; }
  void Emit(std::string_view event, const std::vector<EventField>& fields) TFD_EXCLUDES(mu_);

  // The JSON line Emit would write, without the trailing newline; `ts` is seconds since the epoch.
  static std::string Format(double ts, std::string_view task, std::string_view event,
                            const std::vector<EventField>& fields);

 private:
  std::FILE* const out_ TFD_PT_GUARDED_BY(mu_);
  const std::string task_;
  const bool enabled_;
  Mutex mu_;
};

// Appends `s` to `out` as a quoted JSON string.
void AppendJsonString(std::string_view s, std::string* out);

}  // namespace tfd
