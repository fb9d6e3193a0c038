#include "launcher/scale.h"

#include <climits>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/config/json_reader.h"
#include "common/config/json_writer.h"

namespace tfd::launcher {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

Status WriteRenamed(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) return Status::Internal(fmt::format("{}: cannot write", tmp.string()));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::Internal(fmt::format("{}: cannot rename to {}: {}", tmp.string(), path.string(), ec.message()));
  return Status::Ok();
}

// The file's text; nullopt when there is none (or it went away meanwhile).
std::optional<std::string> ReadIfThere(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  Result<std::string> text = config::ReadTextFile(path.string(), "the scale file");
  if (!text.ok()) return std::nullopt;
  return std::move(*text);
}

// The object of `text`, or Corruption naming `path`.
Result<json> ParseObject(std::string_view text, std::string_view path) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Corruption(fmt::format("{}: not valid JSON", path));
  if (!j.is_object()) return Status::Corruption(fmt::format("{}: expected a JSON object", path));
  return j;
}

Status FieldError(std::string_view path, std::string_view key, std::string_view expected) {
  return Status::Corruption(fmt::format("{}: \"{}\": expected {}", path, key, expected));
}

}  // namespace

Status CheckScale(const config::JobSpec& job, int workers, std::string_view where) {
  if (!job.elastic.enabled())
    return Status::InvalidArgument(fmt::format("{}: train.elastic: the job is not elastic; tfctl scale needs \"elastic\": "
                                               "{{\"min_workers\", \"max_workers\"}} in the job it started with",
                                               where));
  if (job.model_parallel.split != config::ModelParallelSpec::Split::kNone)
    return Status::InvalidArgument(fmt::format("{}: train.model_parallel: a model-parallel ring keeps its workers; tfctl scale serves "
                                               "the ps modes (async, sync) and elastic allreduce",
                                               where));
  if (workers < job.elastic.min_workers || workers > job.elastic.max_workers)
    return Status::InvalidArgument(fmt::format("--workers {}: outside the job's elastic min_workers {} .. max_workers {} ({})", workers,
                                               job.elastic.min_workers, job.elastic.max_workers, where));
  return Status::Ok();
}

std::string ScaleRequestJson(const ScaleRequest& request) {
  return config::JsonText(nlohmann::ordered_json{{"id", request.id}, {"workers", request.workers}}) + "\n";
}

Result<ScaleRequest> ParseScaleRequest(std::string_view text, std::string_view path) {
  TFD_ASSIGN_OR_RETURN(json j, ParseObject(text, path));
  ScaleRequest r;
  if (!j.contains("id") || !j["id"].is_string()) return FieldError(path, "id", "a string");
  r.id = j["id"].get<std::string>();
  if (!j.contains("workers") || !j["workers"].is_number_integer() || j["workers"].get<std::int64_t>() < 1 ||
      j["workers"].get<std::int64_t>() > INT_MAX)
    return FieldError(path, "workers", "an integer of at least 1");
  r.workers = j["workers"].get<int>();
  return r;
}

std::string ScaleReplyJson(const ScaleReply& reply) {
  return config::JsonText(nlohmann::ordered_json{{"id", reply.id}, {"ok", reply.ok}, {"message", reply.message}, {"started", reply.started}}) +
         "\n";
}

Result<ScaleReply> ParseScaleReply(std::string_view text, std::string_view path) {
  TFD_ASSIGN_OR_RETURN(json j, ParseObject(text, path));
  ScaleReply r;
  if (!j.contains("id") || !j["id"].is_string()) return FieldError(path, "id", "a string");
  r.id = j["id"].get<std::string>();
  if (!j.contains("ok") || !j["ok"].is_boolean()) return FieldError(path, "ok", "true or false");
  r.ok = j["ok"].get<bool>();
  if (!j.contains("message") || !j["message"].is_string()) return FieldError(path, "message", "a string");
  r.message = j["message"].get<std::string>();
  if (!j.contains("started") || !j["started"].is_array()) return FieldError(path, "started", "an array of task names");
  for (const json& t : j["started"]) {
    if (!t.is_string()) return FieldError(path, "started", "an array of task names");
    r.started.push_back(t.get<std::string>());
  }
  return r;
}

Status WriteScaleRequest(const fs::path& run_dir, const ScaleRequest& request) {
  return WriteRenamed(run_dir / "scale.request", ScaleRequestJson(request));
}

Result<std::optional<ScaleRequest>> TakeScaleRequest(const fs::path& run_dir) {
  const fs::path path = run_dir / "scale.request";
  const std::optional<std::string> text = ReadIfThere(path);
  if (!text) return std::optional<ScaleRequest>();
  std::error_code ec;
  fs::remove(path, ec);
  Result<ScaleRequest> r = ParseScaleRequest(*text, path.string());
  if (!r.ok()) {
    // The requester waits for a reply to its id: give it one when the id can be read.
    const json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
    const std::string id = j.is_object() && j.contains("id") && j["id"].is_string() ? j["id"].get<std::string>() : "?";
    (void)WriteScaleReply(run_dir, {.id = id, .ok = false, .message = r.status().message()});
    return r.status();
  }
  return std::optional<ScaleRequest>(std::move(*r));
}

Status WriteScaleReply(const fs::path& run_dir, const ScaleReply& reply) {
  return WriteRenamed(run_dir / "scale.reply", ScaleReplyJson(reply));
}

Result<std::optional<ScaleReply>> ReadScaleReply(const fs::path& run_dir, const std::string& id) {
  const fs::path path = run_dir / "scale.reply";
  const std::optional<std::string> text = ReadIfThere(path);
  if (!text) return std::optional<ScaleReply>();
  TFD_ASSIGN_OR_RETURN(ScaleReply r, ParseScaleReply(*text, path.string()));
  if (r.id != id) return std::optional<ScaleReply>();
  return std::optional<ScaleReply>(std::move(r));
}

}  // namespace tfd::launcher
