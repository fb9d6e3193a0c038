#include "launcher/scale.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace tfd::launcher {
namespace {

namespace fs = std::filesystem;

Status WriteLine(const fs::path& path, const std::string& line) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << line << '\n';
    if (!out.flush()) return Status::Internal(fmt::format("{}: cannot write", tmp.string()));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::Internal(fmt::format("{}: cannot rename to {}: {}", tmp.string(), path.string(), ec.message()));
  return Status::Ok();
}

std::optional<std::string> ReadLine(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

}  // namespace

Status CheckScale(const config::JobSpec& job, int workers, std::string_view where) {
  if (!job.elastic.enabled())
    return Status::InvalidArgument(fmt::format("{}: train.elastic: the job is not elastic; tfctl scale needs \"elastic\": "
                                               "{{\"min_workers\", \"max_workers\"}} in the job it started with",
                                               where));
  if (job.update.mode == config::UpdateSpec::Mode::kAllreduce || job.model_parallel.split != config::ModelParallelSpec::Split::kNone)
    return Status::InvalidArgument(fmt::format("{}: train.update.mode: an allreduce or model-parallel ring keeps its workers; "
                                               "tfctl scale serves the ps modes (async, sync)",
                                               where));
  if (workers < job.elastic.min_workers || workers > job.elastic.max_workers)
    return Status::InvalidArgument(fmt::format("--workers {}: outside the job's elastic min_workers {} .. max_workers {} ({})", workers,
                                               job.elastic.min_workers, job.elastic.max_workers, where));
  return Status::Ok();
}

Status WriteScaleRequest(const fs::path& run_dir, const ScaleRequest& request) {
  return WriteLine(run_dir / "scale.request", fmt::format("{} {}", request.id, request.workers));
}

std::optional<ScaleRequest> TakeScaleRequest(const fs::path& run_dir) {
  const fs::path path = run_dir / "scale.request";
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  const std::optional<std::string> line = ReadLine(path);
  fs::remove(path, ec);
  ScaleRequest r;
  std::istringstream in(line.value_or(""));
  if (!(in >> r.id >> r.workers) || r.workers < 1) {
    (void)WriteScaleReply(run_dir, {.id = r.id.empty() ? "?" : r.id, .ok = false, .message = "the request was not readable"});
    return std::nullopt;
  }
  return r;
}

Status WriteScaleReply(const fs::path& run_dir, const ScaleReply& reply) {
  std::string started;
  for (const std::string& t : reply.started) started += (started.empty() ? "" : ",") + t;
  return WriteLine(run_dir / "scale.reply",
                   fmt::format("{} {} {} {}", reply.id, reply.ok ? "ok" : "error", started.empty() ? "-" : started, reply.message));
}

std::optional<ScaleReply> ReadScaleReply(const fs::path& run_dir, const std::string& id) {
  const std::optional<std::string> line = ReadLine(run_dir / "scale.reply");
  if (!line) return std::nullopt;
  std::istringstream in(*line);
  ScaleReply r;
  std::string status, started;
  if (!(in >> r.id >> status >> started) || r.id != id) return std::nullopt;
  r.ok = status == "ok";
  std::getline(in >> std::ws, r.message);
  if (started != "-") {
    std::istringstream names(started);
    for (std::string t; std::getline(names, t, ',');) r.started.push_back(t);
  }
  return r;
}

}  // namespace tfd::launcher
