#pragma once

// The job's "model" and "data" written back as the JSON the job parser reads, and read from such
// JSON alone: what an exported model (common/export) keeps of the job that trained it, so that
// `tfd predict` and `tfd serve` build the same network and read a new file as training read its own.

#include <string_view>

#include <nlohmann/json.hpp>

#include "common/base/status.h"
#include "common/config/job.h"

namespace tfd::config {

// "dnn", {"name": "dnn", "init": ...} or {"layers": [...]}: what ParseModelSpec reads back equal.
nlohmann::ordered_json ModelSpecJson(const ModelSpec& model);
// The "data" object (or the MNIST folder's string) with every field the reader takes: files,
// format, task, columns, CSV and image options, normalize.
nlohmann::ordered_json DataSpecJson(const DataSpec& data);

// The job parser's reading of a "model" or "data" value alone; errors read "SOURCE: model...: what".
Result<ModelSpec> ParseModelSpec(const nlohmann::json& model, std::string_view source);
Result<DataSpec> ParseDataSpec(const nlohmann::json& data, std::string_view source);

}  // namespace tfd::config
