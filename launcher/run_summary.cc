#include "launcher/run_summary.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/config/json_writer.h"

namespace tfd::launcher {

std::string ModelSummary::base() const { return std::filesystem::path(path).parent_path().string(); }

std::string ModelSummary::where() const { return host.empty() ? path : host + ":" + path; }

namespace {

nlohmann::ordered_json ModelJson(const ModelSummary& m) {
  nlohmann::ordered_json j = {{"task", m.task}};
  if (!m.host.empty()) j["host"] = m.host;
  j["path"] = m.path;
  j["version"] = m.version;
  if (m.global_step) j["global_step"] = *m.global_step;
  return j;
}

Result<ModelSummary> ParseModel(const nlohmann::json& j, std::string_view source) {
  auto text = [&](const char* key) { return j.contains(key) && j[key].is_string(); };
  if (!j.is_object() || !text("path") || !text("version"))
    return Status::InvalidArgument(fmt::format("{}: model: expected an object with string \"path\" and \"version\"", source));
  ModelSummary m{.task = text("task") ? j["task"].get<std::string>() : "", .host = text("host") ? j["host"].get<std::string>() : "",
                 .path = j["path"].get<std::string>(), .version = j["version"].get<std::string>()};
  if (j.contains("global_step") && !j["global_step"].is_null()) {
    if (!j["global_step"].is_number_integer()) return Status::InvalidArgument(fmt::format("{}: model.global_step: expected an integer", source));
    m.global_step = j["global_step"].get<std::int64_t>();
  }
  return m;
}

}  // namespace

std::string SummaryJson(const RunSummary& summary) {
  nlohmann::ordered_json tasks = nlohmann::ordered_json::array();
  for (const TaskSummary& t : summary.tasks) {
    nlohmann::ordered_json j = {{"task", t.task}, {"exit_code", t.exit_code}, {"restarts", t.restarts},
                                {"ended_at", std::round(t.ended_at * 1000) / 1000}};
    if (t.past_deadline) j["past_deadline"] = true;
    if (t.scaled_down) j["scaled_down"] = true;
    if (t.test_accuracy) j["test_accuracy"] = *t.test_accuracy;
    if (t.global_step) j["global_step"] = *t.global_step;
    if (!t.params_sha256.empty()) j["params_sha256"] = t.params_sha256;
    tasks.push_back(std::move(j));
  }
  nlohmann::ordered_json doc = {{"run_dir", summary.run_dir}, {"exit_code", summary.exit_code}};
  if (summary.model) doc["model"] = ModelJson(*summary.model);
  doc["tasks"] = std::move(tasks);
  return config::JsonText(doc, /*open_levels=*/2) + "\n";
}

Result<RunSummary> ParseSummary(std::string_view text, std::string_view source) {
  using nlohmann::json;
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::InvalidArgument(fmt::format("{}: not valid JSON", source));
  if (!doc.is_object() || !doc.contains("tasks") || !doc["tasks"].is_array())
    return Status::InvalidArgument(fmt::format("{}: expected an object with a \"tasks\" array", source));
  RunSummary s;
  if (doc.contains("run_dir")) {
    if (!doc["run_dir"].is_string()) return Status::InvalidArgument(fmt::format("{}: run_dir: expected a string", source));
    s.run_dir = doc["run_dir"].get<std::string>();
  }
  if (doc.contains("exit_code")) {
    if (!doc["exit_code"].is_number_integer()) return Status::InvalidArgument(fmt::format("{}: exit_code: expected an integer", source));
    s.exit_code = doc["exit_code"].get<int>();
  }
  if (doc.contains("model")) {
    TFD_ASSIGN_OR_RETURN(s.model, ParseModel(doc["model"], source));
  }
  for (std::size_t i = 0; i < doc["tasks"].size(); ++i) {
    const json& t = doc["tasks"][i];
    if (!t.is_object() || !t.contains("task") || !t["task"].is_string() || !t.contains("exit_code") || !t["exit_code"].is_number_integer())
      return Status::InvalidArgument(fmt::format("{}: tasks[{}]: expected \"task\" and an integer \"exit_code\"", source, i));
    TaskSummary task{.task = t["task"].get<std::string>(), .exit_code = t["exit_code"].get<int>()};
    // An optional field of the wrong type is an error; null stands for a number that was not finite.
    auto wrong = [&](const char* key, const char* expected) {
      return Status::InvalidArgument(fmt::format("{}: tasks[{}].{}: expected {}", source, i, key, expected));
    };
    auto has = [&](const char* key) { return t.contains(key) && !t[key].is_null(); };
    if (has("restarts")) {
      if (!t["restarts"].is_number_integer()) return wrong("restarts", "an integer");
      task.restarts = t["restarts"].get<int>();
    }
    if (has("ended_at")) {
      if (!t["ended_at"].is_number()) return wrong("ended_at", "a number");
      task.ended_at = t["ended_at"].get<double>();
    }
    for (auto [key, out] : {std::pair{"past_deadline", &task.past_deadline}, {"scaled_down", &task.scaled_down}}) {
      if (!has(key)) continue;
      if (!t[key].is_boolean()) return wrong(key, "true or false");
      *out = t[key].get<bool>();
    }
    if (has("test_accuracy")) {
      if (!t["test_accuracy"].is_number()) return wrong("test_accuracy", "a number or null");
      task.test_accuracy = t["test_accuracy"].get<double>();
    }
    if (has("global_step")) {
      if (!t["global_step"].is_number_integer()) return wrong("global_step", "an integer");
      task.global_step = t["global_step"].get<std::int64_t>();
    }
    if (has("params_sha256")) {
      if (!t["params_sha256"].is_string()) return wrong("params_sha256", "a string");
      task.params_sha256 = t["params_sha256"].get<std::string>();
    }
    s.tasks.push_back(std::move(task));
  }
  return s;
}

}  // namespace tfd::launcher
