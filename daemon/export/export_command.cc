#include "daemon/export/export_command.h"

#include <cstdio>
#include <filesystem>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/ckpt/file.h"
#include "common/config/job.h"
#include "common/export/model_dir.h"
#include "daemon/train/job_data.h"

namespace tfd::export_command {
namespace {

constexpr const char* kUsage =
    "usage: tfd export --checkpoint DIR|FILE --out BASE [--job JOB.json]\n"
    "  Writes the newest valid checkpoint in DIR (or FILE) as the next version folder of BASE\n"
    "  (model.json, weights.tfdckpt, model.onnx), as a run's chief exports at its end. --job: for a\n"
    "  checkpoint written before checkpoints carried the model's card; its data is loaded to make one.\n";

int Fail(const std::string& message) {
  std::fprintf(stderr, "tfd: export: %s\n", message.c_str());
  return 2;
}

Result<ckpt::Loaded> LoadCheckpoint(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return ckpt::LoadNewestValid(path);
  TFD_ASSIGN_OR_RETURN(ckpt::Checkpoint c, ckpt::Load(path));
  return ckpt::Loaded{.path = path, .checkpoint = std::move(c), .skipped = {}};
}

// The card the checkpoint carries, or one made from --job's data.
Result<exporting::ModelCard> CardOf(const ckpt::Loaded& loaded, const std::string& job_path) {
  if (!loaded.checkpoint.model_card.empty()) {
    const nlohmann::json j = nlohmann::json::parse(loaded.checkpoint.model_card, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return Status::Corruption(fmt::format("{}: its model card is not valid JSON", loaded.path));
    return exporting::ParseCard(j, loaded.path + ": model card");
  }
  if (job_path.empty())
    return Status::InvalidArgument(fmt::format("{}: carries no model card (written before checkpoints had one): give the job that "
                                               "trained it with --job JOB.json",
                                               loaded.path));
  TFD_ASSIGN_OR_RETURN(config::JobSpec job, config::LoadJobSpec(job_path));
  TFD_ASSIGN_OR_RETURN(train::LoadedJob data, train::LoadJobData(job, 1, /*trains=*/false));
  return exporting::CardFor(job, data.data.train);
}

}  // namespace

int Run(int argc, char** argv, std::ostream& out) {
  namespace po = boost::program_options;
  std::string checkpoint, base, job;
  bool help = false;
  po::options_description opts;
  opts.add_options()("checkpoint", po::value(&checkpoint))("out", po::value(&base))("job", po::value(&job))("help,h", po::bool_switch(&help));
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(opts).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return Fail(fmt::format("{}\n{}", e.what(), kUsage));
  }
  if (help) return out << kUsage, 0;
  if (checkpoint.empty() || base.empty()) return Fail(fmt::format("--checkpoint and --out are required\n{}", kUsage));
  Result<ckpt::Loaded> loaded = LoadCheckpoint(checkpoint);
  if (!loaded.ok()) return Fail(fmt::format("--checkpoint {}: {}", checkpoint, loaded.status().message()));
  Result<exporting::ModelCard> card = CardOf(*loaded, job);
  if (!card.ok()) return Fail(card.status().message());
  Result<std::unique_ptr<model::Model>> model = exporting::BuildFromTensors(*card, loaded->checkpoint.tensors, 1, loaded->path);
  if (!model.ok()) return Fail(model.status().message());
  exporting::ExportInfo info;
  info.global_step = loaded->checkpoint.global_step;
  info.trained_by = "checkpoint";
  info.metrics["checkpoint"] = loaded->path;
  Result<std::string> dir = exporting::WriteVersion(base, *card, **model, info);
  if (!dir.ok()) return Fail(dir.status().message());
  out << fmt::format("exported {} (global_step {}) to {}\n", loaded->path, loaded->checkpoint.global_step, *dir);
  return 0;
}

}  // namespace tfd::export_command
