#pragma once

// tfctl scale: how the command and the run's tfctl (the one that runs Run, in the foreground or
// detached) talk through the run folder. The command writes RUN/scale.request; Run takes it within
// a quarter of a second, starts or stops workers, and answers in RUN/scale.reply. Each file is one
// line of text, written to a temporary name and renamed, so the reader never sees half of it.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/config/job.h"

namespace tfd::launcher {

struct ScaleRequest {
  int workers = 0;   // the number of training workers wanted
  std::string id;    // the requester's, echoed in the reply ("<pid>-<time>")
};

struct ScaleReply {
  std::string id;
  bool ok = false;
  std::string message;  // what was done ("started worker:2; 3 workers run") or why nothing was
  std::vector<std::string> started;  // the tasks started, whose ready events the command waits for
};

// InvalidArgument naming `where` (the run's cluster.json) when `job` cannot be scaled to `workers`:
// not elastic, an allreduce or pipeline job (a fixed ring), or outside min_workers..max_workers.
Status CheckScale(const config::JobSpec& job, int workers, std::string_view where);

Status WriteScaleRequest(const std::filesystem::path& run_dir, const ScaleRequest& request);
// The pending request, removed from the folder; nullopt when there is none or it is unreadable
// (then removed too, and the reply says so under id "?").
std::optional<ScaleRequest> TakeScaleRequest(const std::filesystem::path& run_dir);

Status WriteScaleReply(const std::filesystem::path& run_dir, const ScaleReply& reply);
// The reply to request `id`, nullopt while there is none (or one to another request).
std::optional<ScaleReply> ReadScaleReply(const std::filesystem::path& run_dir, const std::string& id);

}  // namespace tfd::launcher
