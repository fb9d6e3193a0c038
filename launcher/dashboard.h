#pragma once

// tfctl's live dashboard: one page (launcher/assets/dashboard.html, embedded at build time) and the
// JSON endpoints its script polls, served from a run folder with http::Server on its own thread.
//
//   GET /                        the page
//   GET /api/events?since=N      the complete lines of metrics.jsonl from byte N, at most
//                                kMaxEventLines lines and kMaxEventBytes bytes:
//                                {"since": N, "next": M, "more": bool, "skipped": K, "events": [...]}
//   GET /api/tasks               {"run": name, "live": bool, "ended": bool, "tasks": [{task, state, restarts, exit_code, test_accuracy}]}
//   GET /api/job                 job.json

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/mutex.h"
#include "common/base/status.h"
#include "common/http/server.h"
#include "launcher/runner.h"

namespace tfd::launcher {

inline constexpr std::size_t kMaxEventLines = 2000;
inline constexpr std::size_t kMaxEventBytes = 1 << 20;

// The page's bytes (generated from launcher/assets/dashboard.html by launcher/embed_asset.cmake).
std::string_view DashboardPage();

// A slice of metrics.jsonl: complete lines only (a line still being written waits for the next
// call). `next` is where the following slice starts; `more` says lines were left for it. A line
// longer than max_bytes is passed over (counted in `skipped`, as are lines that are not JSON
// objects), so a reader never stalls on it.
struct EventsPage {
  std::uint64_t since = 0, next = 0;
  std::vector<std::string> lines;  // each a JSON object
  bool more = false;
  int skipped = 0;
};
// NotFound when the file does not exist (yet); InvalidArgument when `since` is past its end.
Result<EventsPage> ReadEventsPage(const std::filesystem::path& file, std::uint64_t since, std::size_t max_lines = kMaxEventLines,
                                  std::size_t max_bytes = kMaxEventBytes);

// The dashboard's requests over one run folder. Handle and SetTasks may be called from any thread.
// Tasks come from SetTasks while a run's tfctl feeds it (live), else from the folder's
// metrics.jsonl and summary.json.
class DashboardSite {
 public:
  explicit DashboardSite(std::filesystem::path run_dir);
  http::Response Handle(const http::Request& request) const;
  void SetTasks(std::vector<TaskState> tasks);
  void SetEnded();  // the run is over: the page stops saying live

 private:
  http::Response Tasks() const;
  const std::filesystem::path run_dir_;
  mutable Mutex mu_;
  bool live_ TFD_GUARDED_BY(mu_) = false;
  bool ended_ TFD_GUARDED_BY(mu_) = false;
  std::vector<TaskState> tasks_ TFD_GUARDED_BY(mu_);
};

// A DashboardSite served on host:port (0: a free port) until destroyed. InvalidArgument or
// Unavailable from http::Server::Start when the address cannot be used.
class Dashboard {
 public:
  static Result<std::unique_ptr<Dashboard>> Start(const std::string& host, std::uint16_t port, const std::filesystem::path& run_dir);
  std::string url() const;  // "http://127.0.0.1:43121/"
  DashboardSite& site() { return *site_; }

 private:
  Dashboard() = default;
  std::unique_ptr<DashboardSite> site_;
  std::unique_ptr<http::Server> server_;  // after site_: stopped before the site goes
};

}  // namespace tfd::launcher
