#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/config/job.h"
#include "common/export/model_card.h"
#include "common/model/model.h"

namespace tfd::train {

// Writes `model` (trained by `job`, described by `card`: exporting::CardFor) as the next version folder of job.export_model.dir
// (common/export/model_dir.h), with `metrics` (the run's final metrics, as its `done` event says
// them) and `trained_by` (TrainedBy) in its model.json, and emits `exported` {path, version, global_step}. Returns the folder.
Result<std::string> ExportTrainedModel(const config::JobSpec& job, const exporting::ModelCard& card, const model::Model& model,
                                       std::int64_t global_step, std::span<const EventField> metrics, const std::string& trained_by,
                                       EventWriter& events);

// How a job trains, for model.json's trained_by: "standalone" is the caller's; else async, sync,
// allreduce or model_parallel.
std::string TrainedBy(const config::JobSpec& job, bool standalone);

}  // namespace tfd::train
