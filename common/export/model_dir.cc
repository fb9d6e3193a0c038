#include "common/export/model_dir.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/base/sha256.h"
#include "common/ckpt/file.h"
#include "common/ckpt/format.h"
#include "common/config/json_writer.h"
#include "common/export/onnx.h"

#ifndef TFD_VERSION
#define TFD_VERSION "unknown"
#endif

namespace tfd::exporting {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::string HexSha256(std::span<const std::byte> bytes) {
  Sha256 h;
  h.Update(bytes);
  return h.HexDigest();
}

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s)); }

Result<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::Internal(fmt::format("{}: read failed", path));
  return std::move(ss).str();
}

bool ParseVersion(const std::string& name, std::uint64_t* v) {
  if (name.empty() || name.size() > 18 || (name[0] == '0' && name.size() > 1)) return false;
  auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), *v);
  return ec == std::errc() && p == name.data() + name.size();
}

ojson OutputsJson(const ModelCard& card) {
  if (card.regression())
    return ojson::array({{{"name", kOnnxOutputs}, {"shape", {-1, card.num_targets}}, {"meaning", "regression targets"}}});
  return ojson::array({{{"name", kOnnxLogits}, {"shape", {-1, card.outputs()}}, {"meaning", "logits, one per class"}},
                       {{"name", kOnnxProbabilities}, {"shape", {-1, card.outputs()}}, {"meaning", "softmax of the logits"}}});
}

}  // namespace

std::vector<std::uint64_t> Versions(const std::string& base) {
  std::vector<std::uint64_t> out;
  std::error_code ec;
  for (fs::directory_iterator it(base, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::uint64_t v = 0;
    if (it->is_directory(ec) && ParseVersion(it->path().filename().string(), &v)) out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::string> WriteVersion(const std::string& base, const ModelCard& card, const model::Model& model, const ExportInfo& info) {
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) return Status::Internal(fmt::format("{}: cannot create the model folder: {}", base, ec.message()));
  const std::vector<std::uint64_t> have = Versions(base);
  const std::uint64_t version = have.empty() ? 1 : have.back() + 1;
  const std::string final_dir = (fs::path(base) / std::to_string(version)).string();
  const std::string tmp_dir = (fs::path(base) / fmt::format(".tmp-{}-{}", version, ::getpid())).string();
  fs::remove_all(tmp_dir, ec);
  if (!fs::create_directory(tmp_dir, ec) || ec) return Status::Internal(fmt::format("{}: cannot create: {}", tmp_dir, ec.message()));

  ckpt::Checkpoint weights;
  weights.global_step = info.global_step;
  weights.final = true;
  for (const model::Variable& v : model.variables()) {
    const auto values = model.params().subspan(static_cast<std::size_t>(v.offset), static_cast<std::size_t>(v.size));
    weights.tensors.push_back({.name = v.name, .shape = v.shape, .values = {values.begin(), values.end()}, .slots = {}});
  }
  Result<std::vector<std::byte>> weight_bytes = ckpt::Serialize(weights);
  Result<std::string> onnx = weight_bytes.ok() ? OnnxModelBytes(card, model) : Result<std::string>(weight_bytes.status());
  Status s = onnx.status();
  if (s.ok()) s = ckpt::WriteSynced((fs::path(tmp_dir) / kWeightsFile).string(), *weight_bytes);
  if (s.ok()) s = ckpt::WriteSynced((fs::path(tmp_dir) / kOnnxFile).string(), Bytes(*onnx));
  if (s.ok()) {
    ojson j = {{"format", "tfd-model"}, {"format_version", 1}, {"version", version}, {"tfd_version", TFD_VERSION}};
    j["input"] = {{"name", kOnnxInput}, {"shape", {-1, card.features()}}, {"dtype", "float32"},
                  {"example_shape", {card.height, card.width, card.channels}}};
    j["outputs"] = OutputsJson(card);
    j["task"] = card.regression() ? "regression" : "classification";
    j["card"] = CardJson(card);
    j["global_step"] = info.global_step;
    j["trained_by"] = info.trained_by;
    j["metrics"] = info.metrics;
    j["files"] = {{kWeightsFile, HexSha256(*weight_bytes)}, {kOnnxFile, HexSha256(Bytes(*onnx))}};
    s = ckpt::WriteSynced((fs::path(tmp_dir) / kModelJson).string(), Bytes(config::JsonText(j, 2) + "\n"));
  }
  if (s.ok()) s = ckpt::SyncFolder(tmp_dir);
  if (s.ok()) {
    fs::rename(tmp_dir, final_dir, ec);
    if (ec) s = Status::Internal(fmt::format("{}: rename to {}: {}", tmp_dir, final_dir, ec.message()));
  }
  if (s.ok()) s = ckpt::SyncFolder(base);
  if (!s.ok()) {
    fs::remove_all(tmp_dir, ec);
    return s;
  }
  return final_dir;
}

Result<std::unique_ptr<model::Model>> BuildFromTensors(const ModelCard& card, std::span<const ckpt::NamedTensor> tensors, int max_batch,
                                                       std::string_view source, tensor::GemmConfig gemm) {
  const model::Outputs outputs = card.regression()
                                     ? model::Outputs(card.num_targets, card.data.loss == config::DataSpec::Loss::kMae ? tensor::LossKind::kMae
                                                                                                                         : tensor::LossKind::kMse)
                                     : model::Outputs(card.outputs());
  Result<std::unique_ptr<model::Model>> built =
      model::Model::Build(card.model, {card.height, card.width, card.channels}, outputs, max_batch, gemm, card.categorical);
  if (!built.ok()) return Status::InvalidArgument(fmt::format("{}: {}", source, built.status().message()));
  model::Model& m = **built;
  if (tensors.size() != m.variables().size())
    return Status::InvalidArgument(fmt::format("{}: holds {} tensors, the model has {} variables", source, tensors.size(), m.variables().size()));
  for (const model::Variable& v : m.variables()) {
    auto it = std::find_if(tensors.begin(), tensors.end(), [&](const ckpt::NamedTensor& t) { return t.name == v.name; });
    if (it == tensors.end()) return Status::InvalidArgument(fmt::format("{}: no tensor {} (the model's variable)", source, v.name));
    if (it->shape != v.shape || std::ssize(it->values) != v.size)
      return Status::InvalidArgument(fmt::format("{}: {} has shape [{}], the model's is [{}]", source, v.name, fmt::join(it->shape, ", "),
                                                 fmt::join(v.shape, ", ")));
    std::copy(it->values.begin(), it->values.end(), m.params().begin() + v.offset);
  }
  return built;
}

Result<std::string> ResolveVersionDir(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(fs::path(dir) / kModelJson, ec)) return dir;
  if (!fs::is_directory(dir, ec)) return Status::NotFound(fmt::format("{}: no such model folder", dir));
  const std::vector<std::uint64_t> versions = Versions(dir);
  if (versions.empty())
    return Status::NotFound(fmt::format("{}: holds neither {} nor a numbered version folder (an exported model's)", dir, kModelJson));
  return (fs::path(dir) / std::to_string(versions.back())).string();
}

Result<LoadedModel> LoadVersion(const std::string& dir, int max_batch, tensor::GemmConfig gemm) {
  LoadedModel out;
  out.dir = dir;
  const std::string json_path = (fs::path(dir) / kModelJson).string();
  TFD_ASSIGN_OR_RETURN(std::string text, ReadAll(json_path));
  out.info = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out.info.is_discarded() || !out.info.is_object()) return Status::InvalidArgument(fmt::format("{}: not valid JSON", json_path));
  if (out.info.value("format", "") != "tfd-model")
    return Status::InvalidArgument(fmt::format("{}: format: expected \"tfd-model\" (a model tfd exported)", json_path));
  if (!out.info.contains("card")) return Status::InvalidArgument(fmt::format("{}: card: missing", json_path));
  TFD_ASSIGN_OR_RETURN(out.card, ParseCard(out.info["card"], json_path + ": card"));
  const nlohmann::json files = out.info.value("files", nlohmann::json::object());
  std::string weights_bytes;
  for (const char* name : {kWeightsFile, kOnnxFile}) {
    const std::string path = (fs::path(dir) / name).string();
    TFD_ASSIGN_OR_RETURN(std::string bytes, ReadAll(path));
    if (!files.contains(name) || !files[name].is_string())
      return Status::InvalidArgument(fmt::format("{}: files.{}: missing (the file's SHA-256)", json_path, name));
    const std::string want = files[name].get<std::string>(), got = HexSha256(Bytes(bytes));
    if (want != got)
      return Status::Corruption(fmt::format("{}: SHA-256 {} does not match model.json's {} (the file was changed or is not this model's)", path,
                                            got.substr(0, 16), want.substr(0, 16)));
    if (std::string_view(name) == kWeightsFile) weights_bytes = std::move(bytes);
  }
  const std::string weights_path = (fs::path(dir) / kWeightsFile).string();
  TFD_ASSIGN_OR_RETURN(ckpt::Checkpoint weights, ckpt::Parse(Bytes(weights_bytes), weights_path));
  TFD_ASSIGN_OR_RETURN(out.model, BuildFromTensors(out.card, weights.tensors, max_batch, weights_path, gemm));
  return out;
}

}  // namespace tfd::exporting
