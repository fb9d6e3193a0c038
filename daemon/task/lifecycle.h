#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/logging.h"

namespace tfd::task {

// The `start` event every role writes once, when it has read its configuration and is about to
// reach its peers. Every role writes the same fields (docs/config.md, "Events"):
//   role   "ps", "worker", "evaluator", "coordinator", "generic_worker" or "standalone"
//   mode   how the task trains: "async", "sync", "allreduce", "model_parallel layers|units",
//          "standalone", or "" for a role that does not train (ps, evaluator, coordinator) or does
//          not know yet (a generic worker, whose trials bring their own jobs)
//   rank   the worker's rank (chief 0), or the task's index for other roles; 0 standalone
//   chief  whether this task is the chief
//   pid    the process id (tfctl chaos signals a task by it)
// and then the role's own fields in `extra` (a ps's port, a stage's stage/stages/replica/replicas,
// a coordinator's trials, a standalone run's parameters and train_examples).
struct StartEvent {
  std::string role;
  std::string mode;
  std::int64_t rank = 0;
  bool chief = false;
  std::vector<EventField> extra;
};

// Writes `start`. Any thread (EventWriter is thread-safe).
void EmitStart(EventWriter& events, const StartEvent& start);

// Writes the `ready` event ({"global_step": step}) and tells systemd READY=1 with `status` (shown
// by systemctl status): the task has reached its peers and is about to do its work.
void EmitReady(EventWriter& events, std::int64_t global_step, std::string_view status);

// A fresh 64-bit incarnation id: told to peers in HELLO so that they can tell a restarted task from
// the one they knew. Drawn from std::random_device.
std::uint64_t NewIncarnation();

}  // namespace tfd::task
