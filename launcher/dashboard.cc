#include "launcher/dashboard.h"

#include <charconv>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/config/json_writer.h"
#include "launcher/report.h"

namespace tfd::launcher {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

http::Response Json(int status, const json& body) {
  return {.status = status, .content_type = "application/json", .body = config::CompactJson(body) + "\n", .headers = {{"Cache-Control", "no-store"}}};
}

http::Response Error(int status, const std::string& message) { return Json(status, json{{"error", message}}); }

// The value of `key` in the query of `target` ("/api/events?since=10&x=y"); empty when absent.
std::string QueryValue(std::string_view target, std::string_view key) {
  const std::size_t q = target.find('?');
  if (q == std::string_view::npos) return "";
  std::string_view query = target.substr(q + 1);
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    if (pair.substr(0, pair.find('=')) == key && pair.find('=') != std::string_view::npos) return std::string(pair.substr(pair.find('=') + 1));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return "";
}

std::string ReadWhole(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

Result<EventsPage> ReadEventsPage(const fs::path& file, std::uint64_t since, std::size_t max_lines, std::size_t max_bytes) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("{}: no such file yet", file.filename().string()));
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::uint64_t>(in.tellg());
  if (since > size) return Status::InvalidArgument(fmt::format("since={} is past the end of {} ({} bytes)", since, file.filename().string(), size));
  EventsPage page{.since = since, .next = since};
  in.seekg(static_cast<std::streamoff>(since));
  std::string chunk(static_cast<std::size_t>(std::min<std::uint64_t>(size - since, max_bytes)), '\0');
  in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  chunk.resize(static_cast<std::size_t>(in.gcount()));
  std::size_t start = 0;
  for (std::size_t nl; page.lines.size() < max_lines && (nl = chunk.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string_view line(chunk.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) page.lines.emplace_back(line);
    else if (!line.empty()) ++page.skipped;
    page.next = since + nl + 1;
  }
  if (start == 0 && chunk.size() == max_bytes && chunk.find('\n') == std::string::npos) {
    // One line longer than a whole answer: pass over it to its end.
    std::uint64_t pos = since + chunk.size();
    in.clear();
    in.seekg(static_cast<std::streamoff>(pos));
    char c = 0;
    while (in.get(c) && c != '\n') ++pos;
    if (in) {  // its newline was found: past it
      page.next = pos + 1;
      ++page.skipped;
    }
  }
  // Cut short by a cap with bytes left behind (maybe only a line being written: the next call says).
  page.more = page.next < size && (page.lines.size() >= max_lines || chunk.size() == max_bytes);
  return page;
}

DashboardSite::DashboardSite(fs::path run_dir) : run_dir_(std::move(run_dir)) {}

void DashboardSite::SetTasks(std::vector<TaskState> tasks) {
  MutexLock lock(&mu_);
  tasks_ = std::move(tasks);
  live_ = true;
}

void DashboardSite::SetEnded() {
  MutexLock lock(&mu_);
  ended_ = true;
}

http::Response DashboardSite::Tasks() const {
  std::vector<TaskState> tasks;
  bool live = false, ended = false;
  {
    MutexLock lock(&mu_);
    live = live_ && !ended_;
    ended = ended_;
    tasks = tasks_;
  }
  std::error_code ec;
  if (!live) {  // a folder tfctl no longer feeds: what its files say
    tasks = TaskStatesFromEvents(ReadWhole(run_dir_ / "metrics.jsonl"));
    if (fs::exists(run_dir_ / "summary.json", ec)) {
      ended = true;
      if (Status s = ApplySummary(ReadWhole(run_dir_ / "summary.json"), "summary.json", &tasks); !s.ok()) return Error(500, s.message());
    }
  }
  json out = {{"run", run_dir_.filename().string()}, {"live", live}, {"ended", ended}, {"tasks", json::array()}};
  for (const TaskState& t : tasks)
    out["tasks"].push_back({{"task", t.task}, {"state", t.state}, {"restarts", t.restarts}, {"exit_code", t.exit_code},
                            {"test_accuracy", t.test_accuracy}});
  return Json(200, out);
}

http::Response DashboardSite::Handle(const http::Request& request) const {
  if (request.method != "GET" && request.method != "HEAD") return Error(405, "only GET");
  const std::string_view target = request.target;
  const std::string_view path = target.substr(0, target.find('?'));
  if (path == "/" || path == "/index.html")
    return {.status = 200, .content_type = "text/html; charset=utf-8", .body = std::string(DashboardPage()), .headers = {{"Cache-Control", "no-store"}}};
  if (path == "/api/tasks") return Tasks();
  if (path == "/api/job") {
    const json job = json::parse(ReadWhole(run_dir_ / "job.json"), nullptr, /*allow_exceptions=*/false);
    return job.is_discarded() ? Error(500, "job.json: not valid JSON") : Json(200, job);
  }
  if (path == "/api/events") {
    const std::string text = QueryValue(target, "since");
    std::uint64_t since = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), since);
    if (!text.empty() && (ec != std::errc() || end != text.data() + text.size()))
      return Error(400, fmt::format("since: expected a byte offset, got \"{}\"", text));
    Result<EventsPage> page = ReadEventsPage(run_dir_ / "metrics.jsonl", since);
    if (page.status().code() == Code::kNotFound) return Json(200, json{{"since", since}, {"next", since}, {"more", false}, {"skipped", 0}, {"events", json::array()}});
    if (!page.ok()) return Error(400, page.status().message());
    // Each line is a JSON object (ReadEventsPage parsed it): parsed again into the answer.
    nlohmann::ordered_json body = {{"since", page->since}, {"next", page->next}, {"more", page->more}, {"skipped", page->skipped},
                                   {"events", nlohmann::ordered_json::array()}};
    for (const std::string& line : page->lines)
      body["events"].push_back(nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false));
    return {.status = 200, .content_type = "application/json", .body = config::JsonText(body, /*open_levels=*/2) + "\n",
            .headers = {{"Cache-Control", "no-store"}}};
  }
  return Error(404, fmt::format("no such page: {}", path));
}

Result<std::unique_ptr<Dashboard>> Dashboard::Start(const std::string& host, std::uint16_t port, const fs::path& run_dir) {
  std::unique_ptr<Dashboard> d(new Dashboard());
  d->site_ = std::make_unique<DashboardSite>(run_dir);
  DashboardSite* site = d->site_.get();
  Result<std::unique_ptr<http::Server>> server = http::Server::Start(host, port, [site](const http::Request& r) { return site->Handle(r); });
  if (!server.ok()) return server.status();
  d->server_ = std::move(*server);
  return d;
}

std::string Dashboard::url() const {
  const std::string address = server_->address();
  const std::size_t colon = address.rfind(':');
  const std::string host = address.substr(0, colon);
  return fmt::format("http://{}:{}/", host.find(':') != std::string::npos ? "[" + host + "]" : host, server_->port());
}

}  // namespace tfd::launcher
