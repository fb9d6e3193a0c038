#include "daemon/train/export.h"

#include <filesystem>
#include <variant>

#include <spdlog/spdlog.h>

#include "common/export/model_dir.h"

namespace tfd::train {

std::string TrainedBy(const config::JobSpec& job, bool standalone) {
  if (standalone) return "standalone";
  if (job.model_parallel.enabled()) return "model_parallel";
  switch (job.update.mode) {
    case config::UpdateSpec::Mode::kAsync: return "async";
    case config::UpdateSpec::Mode::kSync: return "sync";
    case config::UpdateSpec::Mode::kAllreduce: return "allreduce";
  }
  return "?";
}

Result<std::string> ExportTrainedModel(const config::JobSpec& job, const exporting::ModelCard& card, const model::Model& model,
                                       std::int64_t global_step, std::span<const EventField> metrics, const std::string& trained_by,
                                       EventWriter& events) {
  exporting::ExportInfo info;
  info.global_step = static_cast<std::uint64_t>(global_step);
  info.trained_by = trained_by;
  for (const EventField& f : metrics) std::visit([&](const auto& v) { info.metrics[f.key] = v; }, f.value);
  TFD_ASSIGN_OR_RETURN(std::string dir, exporting::WriteVersion(job.export_model.dir, card, model, info));
  const std::string version = std::filesystem::path(dir).filename().string();
  spdlog::info("exported the model at global_step {} to {}", global_step, dir);
  events.Emit("exported", {{"path", dir}, {"version", version}, {"global_step", global_step}});
  return dir;
}

}  // namespace tfd::train
