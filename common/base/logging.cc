#include "common/base/logging.h"
#include "common/base/service.h"

#include <cmath>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>
#if TFD_HAVE_SYSTEMD
#include <spdlog/sinks/systemd_sink.h>
#endif
#include <spdlog/spdlog.h>

namespace tfd {

void SetupLogging(std::string_view task, std::string_view level) {
  std::shared_ptr<spdlog::logger> logger;
#if TFD_HAVE_SYSTEMD
  if (StderrIsJournal()) {
    // Under systemd: structured journal entries with their priority; the journal keeps the time.
    logger = std::make_shared<spdlog::logger>(fmt::format("tfd-{}", task),
                                              std::make_shared<spdlog::sinks::systemd_sink_mt>("tfd"));
    logger->set_pattern(fmt::format("[{}] %v", task));
  }
#endif
  if (!logger) {
    logger = spdlog::stderr_logger_mt(fmt::format("tfd-{}", task));
    logger->set_pattern(fmt::format("%Y-%m-%d %H:%M:%S.%e [{}] %^%l%$ %v", task));
  }
  logger->set_level(spdlog::level::from_str(std::string(level)));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(std::move(logger));
}

void AppendJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          *out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

std::string EventWriter::Format(double ts, std::string_view task, std::string_view event,
                                const std::vector<EventField>& fields) {
  std::string line = fmt::format("{{\"ts\":{:.3f},\"task\":", ts);
  AppendJsonString(task, &line);
  line += ",\"event\":";
  AppendJsonString(event, &line);
  for (const EventField& f : fields) {
    line.push_back(',');
    AppendJsonString(f.key, &line);
    line.push_back(':');
    std::visit(
        [&line](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::string>) {
            AppendJsonString(v, &line);
          } else if constexpr (std::is_same_v<V, bool>) {
            line += v ? "true" : "false";
          } else if constexpr (std::is_same_v<V, double>) {
            line += std::isfinite(v) ? fmt::format("{:.6g}", v) : "null";  // JSON has no NaN
          } else {
            line += fmt::format("{}", v);
          }
        },
        f.value);
  }
  line.push_back('}');
  return line;
}

void EventWriter::Emit(std::string_view event, const std::vector<EventField>& fields) {
  if (!enabled_) return;
  double ts = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string line = Format(ts, task_, event, fields);
  line.push_back('\n');
  MutexLock lock(&mu_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

}  // namespace tfd
