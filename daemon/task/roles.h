#pragma once

#include <memory>

#include "common/base/status.h"
#include "common/transport/auth.h"
#include "daemon/task/flags.h"
#include "daemon/task/select.h"
#include "daemon/task/task.h"

namespace tfd::task {

// What each role's entry is given: the flags, its place, the cluster token (null without one; see
// LoadToken) and the task skeleton (events, stop flag). A role's entry wires what differs for it
// (its job, observers, metrics, options) and runs the role to its end; main() dispatches on
// place.role and turns the Status into the exit code with Task::Finish.
struct RoleContext {
  const TaskFlags& flags;
  const TaskPlace& place;
  std::shared_ptr<const transport::ClusterToken> token;
  Task& task;
};

Status RunStandaloneTask(const RoleContext& c);     // tfd --standalone
Status RunPsTask(const RoleContext& c);             // a ps task
Status RunWorkerTask(const RoleContext& c);         // a training worker: ps modes, allreduce or a pipeline stage, per the job
Status RunEvaluatorTask(const RoleContext& c);      // the evaluator task
Status RunCoordinatorTask(const RoleContext& c);    // the coordinator task of a sweep or ensemble
Status RunGenericWorkerTask(const RoleContext& c);  // a sweep's worker (--coordinator, or a worker of a cluster with a coordinator)

}  // namespace tfd::task
