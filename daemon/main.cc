// tfd: the training daemon. main() parses the flags, chooses the task, and dispatches on its role;
// each role's entry (daemon/task/roles.h) wires what differs for it, and the task skeleton
// (daemon/task/task.h) gives every role the same logs, events, signals and exit codes: 0 done,
// 1 runtime failure, 2 bad usage or configuration, 128+N after signal N.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string_view>

#include "daemon/data/data_command.h"
#include "daemon/export/export_command.h"
#include "daemon/predict/predict_command.h"
#include "daemon/serve/serve_command.h"
#include "daemon/task/flags.h"
#include "daemon/task/roles.h"
#include "daemon/task/select.h"
#include "daemon/task/task.h"

namespace {

int UsageError(const tfd::Status& s) {
  std::fprintf(stderr, "tfd: %s\n", s.message().c_str());
  return 2;
}

tfd::Status Dispatch(const tfd::task::RoleContext& c) {
  using tfd::task::Role;
  switch (c.place.role) {
    case Role::kStandalone: return tfd::task::RunStandaloneTask(c);
    case Role::kPs: return tfd::task::RunPsTask(c);
    case Role::kWorker: return tfd::task::RunWorkerTask(c);
    case Role::kEvaluator: return tfd::task::RunEvaluatorTask(c);
    case Role::kCoordinator: return tfd::task::RunCoordinatorTask(c);
    case Role::kGenericWorker: return tfd::task::RunGenericWorkerTask(c);
  }
  return tfd::Status::Internal("unknown role");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "data") return tfd::data_command::Run(argc - 1, argv + 1, std::cout);
  if (argc > 1 && std::string_view(argv[1]) == "export") return tfd::export_command::Run(argc - 1, argv + 1, std::cout);
  if (argc > 1 && std::string_view(argv[1]) == "predict") return tfd::predict_command::Run(argc - 1, argv + 1, std::cout);
  if (argc > 1 && std::string_view(argv[1]) == "serve") return tfd::serve_command::Run(argc - 1, argv + 1, std::cout);
  tfd::Result<tfd::task::ParsedFlags> parsed = tfd::task::ParseTaskFlags(argc, argv, std::cout);
  if (!parsed.ok()) return UsageError(parsed.status());
  if (parsed->exit_now) return 0;
  const tfd::task::TaskFlags& flags = parsed->flags;
  tfd::Result<tfd::task::TaskPlace> place = tfd::task::SelectTask(flags, std::getenv("TF_CONFIG"));
  if (!place.ok()) return UsageError(place.status());
  tfd::Result<std::shared_ptr<const tfd::transport::ClusterToken>> token = tfd::task::LoadToken(flags, *place);
  if (!token.ok()) return UsageError(token.status());
  tfd::task::Task task(place->name, flags);
  return task.Finish(Dispatch({.flags = flags, .place = *place, .token = *token, .task = task}));
}
