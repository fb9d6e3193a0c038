#include "daemon/task/lifecycle.h"

#include <unistd.h>

#include <random>

#include "common/base/service.h"

namespace tfd::task {

void EmitStart(EventWriter& events, const StartEvent& start) {
  std::vector<EventField> fields = {{"role", start.role},
                                    {"mode", start.mode},
                                    {"rank", start.rank},
                                    {"chief", start.chief},
                                    {"pid", std::int64_t{getpid()}}};
  fields.insert(fields.end(), start.extra.begin(), start.extra.end());
  events.Emit("start", fields);
}

void EmitReady(EventWriter& events, std::int64_t global_step, std::string_view status) {
  events.Emit("ready", {{"global_step", global_step}});
  NotifyReady(status);
}

std::uint64_t NewIncarnation() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) | rd();
}

}  // namespace tfd::task
