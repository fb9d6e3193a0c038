#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

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
// (stdout in tfd). Disabled writers drop events. Thread-safe; each line is flushed whole.
class EventWriter {
 public:
  EventWriter(std::FILE* out, std::string task, bool enabled)
      : out_(out), task_(std::move(task)), enabled_(enabled) {}

  bool enabled() const { return enabled_; }
  void Emit(std::string_view event, const std::vector<EventField>& fields);

  // The JSON line Emit would write, without the trailing newline; `ts` is seconds since the epoch.
  static std::string Format(double ts, std::string_view task, std::string_view event,
                            const std::vector<EventField>& fields);

 private:
  std::FILE* out_;
  std::string task_;
  bool enabled_;
  std::mutex mu_;
};

// Appends `s` to `out` as a quoted JSON string.
void AppendJsonString(std::string_view s, std::string* out);

}  // namespace tfd
