#pragma once

#include <atomic>
#include <string>

#include "common/base/logging.h"
#include "common/base/signals.h"
#include "common/base/status.h"
#include "daemon/task/flags.h"

namespace tfd::task {

// What every role of tfd starts and ends with (docs/architecture.md, "Where a new role goes"): the
// log lines tagged with the task's name, the event writer (JSON lines on stdout with --log-format
// json), SIGINT and SIGTERM turned into the stop flag (taken by a thread of their own, see
// common/base/signals.h; SIGPIPE ignored), and the exit code. The
// role itself writes its `start` and `ready` events (lifecycle.h) once it knows their fields.
//
// One per process, made in the main thread before it starts another: it blocks the process's stop
// signals, whose flags are the only state tfd keeps outside its objects. Its methods are called from
// the main thread; stop() may be read from any thread.
class Task {
 public:
  Task(std::string name, const TaskFlags& flags);
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;

  const std::string& name() const { return name_; }
  EventWriter& events() { return events_; }
  // Set once SIGINT or SIGTERM arrived: the role finishes its step and returns.
  const std::atomic<bool>* stop() const;

  // The exit code for the role's result: 0 when ok; otherwise the reason is logged and written as
  // an `error` event ({"message": ...}), and the code is 128+N after signal N, else ExitCodeFor(s)
  // (2 bad usage or configuration, 1 a runtime failure).
  int Finish(const Status& result);

 private:
  std::string name_;
  EventWriter events_;
  const StopSignal& signal_;
};

}  // namespace tfd::task
