#pragma once

// tfctl scale: how the command and the run's tfctl (the one that runs Run, in the foreground or
// detached) talk through the run folder. The command writes RUN/scale.request; Run takes it within
// a quarter of a second, starts or stops workers, and answers in RUN/scale.reply. Each file is one
// JSON object on one line, written to a temporary name and renamed, so the reader never sees half
// of it:
//   scale.request  {"id": "4711-123456789", "workers": 3}
//   scale.reply    {"id": "4711-123456789", "ok": true, "message": "started worker:2; 3 workers run", "started": ["worker:2"]}
// Both are written with config::JsonText and read with nlohmann by the functions below, and
// nothing else.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
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
// not elastic, a model-parallel job (a fixed ring), or outside min_workers..max_workers.
Status CheckScale(const config::JobSpec& job, int workers, std::string_view where);

// The files' text (one line, with its newline), and the text read back: Corruption naming `path`
// when it is not JSON, not an object, or a field is missing or of another type (a request's
// "workers" must be an integer of at least 1; a reply's "started" an array of strings).
std::string ScaleRequestJson(const ScaleRequest& request);
Result<ScaleRequest> ParseScaleRequest(std::string_view text, std::string_view path);
std::string ScaleReplyJson(const ScaleReply& reply);
Result<ScaleReply> ParseScaleReply(std::string_view text, std::string_view path);

Status WriteScaleRequest(const std::filesystem::path& run_dir, const ScaleRequest& request);
// The pending request, removed from the folder; nullopt when there is none. A malformed one is
// removed too and returned as ParseScaleRequest's error, and the reply says so (under the
// request's id when it has one, else "?").
Result<std::optional<ScaleRequest>> TakeScaleRequest(const std::filesystem::path& run_dir);

Status WriteScaleReply(const std::filesystem::path& run_dir, const ScaleReply& reply);
// The reply to request `id`; nullopt while there is none (or one to another request).
// ParseScaleReply's error, naming the file, when the reply is malformed.
Result<std::optional<ScaleReply>> ReadScaleReply(const std::filesystem::path& run_dir, const std::string& id);

}  // namespace tfd::launcher
