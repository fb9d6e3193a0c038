#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/base/status.h"
#include "common/ckpt/checkpoint.h"
#include "common/export/model_card.h"
#include "common/model/model.h"

namespace tfd::exporting {

// An exported model: TensorFlow Serving's layout, a base folder of numbered version folders
// (docs/serving.md), each holding
//   model.json        the card (model_card.h), the outputs' meaning, the final metrics, the files'
//                     SHA-256s, the tfd version
//   weights.tfdckpt   the weights in tfd's checkpoint format (no optimizer slots)
//   model.onnx        the network as an ONNX graph, preprocessing inside (onnx.h)
// A version folder is written under a temporary name and renamed whole, so a reader (`tfd serve`
// watching the base) never sees half of one.

inline constexpr const char* kModelJson = "model.json";
inline constexpr const char* kWeightsFile = "weights.tfdckpt";
inline constexpr const char* kOnnxFile = "model.onnx";

// What a run knows at export besides the card and the weights.
struct ExportInfo {
  std::uint64_t global_step = 0;
  std::string trained_by;         // "standalone", "ps", "allreduce", "model_parallel", "ensemble", ...
  nlohmann::ordered_json metrics = nlohmann::ordered_json::object();  // the final metrics, as the run reported them
};

// The version numbers of the folders in `base`, ascending (names that are not numbers are
// ignored); empty when `base` does not exist.
std::vector<std::uint64_t> Versions(const std::string& base);

// Writes `model` (its parameters) as version max(Versions(base)) + 1 (1 for a new base) into
// `base`, creating it; returns the version folder's path. Errors name the path and the reason.
Result<std::string> WriteVersion(const std::string& base, const ModelCard& card, const model::Model& model, const ExportInfo& info);

// The model of a checkpoint's whole tensors under `card`: built (for batches of up to
// `max_batch`), its parameters filled from `tensors` by name. InvalidArgument naming `source` and
// the variable when a tensor is missing or has another shape.
Result<std::unique_ptr<model::Model>> BuildFromTensors(const ModelCard& card, std::span<const ckpt::NamedTensor> tensors, int max_batch,
                                                       std::string_view source, tensor::GemmConfig gemm = {});

// One version folder, read and checked: every file present, their SHA-256s as model.json says,
// the card valid, the weights the card's model's. InvalidArgument/NotFound/Corruption naming the
// folder and file.
struct LoadedModel {
  std::string dir;
  ModelCard card;
  nlohmann::json info;  // model.json as written
  std::unique_ptr<model::Model> model;
};
Result<LoadedModel> LoadVersion(const std::string& dir, int max_batch, tensor::GemmConfig gemm = {});

// `dir` when it is a version folder (holds model.json), else its newest version; NotFound naming
// `dir` when it holds none.
Result<std::string> ResolveVersionDir(const std::string& dir);

}  // namespace tfd::exporting
