#include "common/config/spec_json.h"

#include <fmt/format.h>

#include "common/config/json_reader.h"

namespace tfd::config {
namespace {

using ojson = nlohmann::ordered_json;

const char* InitName(InitKind k) {
  switch (k) {
    case InitKind::kDefault: return "default";
    case InitKind::kZeros: return "zeros";
    case InitKind::kNormal: return "normal";
    case InitKind::kTruncatedNormal: return "truncated_normal";
    case InitKind::kGlorotUniform: return "glorot_uniform";
    case InitKind::kHeNormal: return "he_normal";
    case InitKind::kOnes: return "ones";
  }
  return "?";
}

// Sets "init" on `out` unless it is the default.
void PutInit(const InitSpec& init, ojson* out) {
  if (init.kind == InitKind::kDefault) return;
  if (init.kind == InitKind::kNormal || init.kind == InitKind::kTruncatedNormal)
    (*out)["init"] = ojson{{"type", InitName(init.kind)}, {"stddev", init.stddev}};
  else
    (*out)["init"] = InitName(init.kind);
}

// strides and padding where they differ from Keras' defaults, so a job without them writes what it read.
void PutWindow(const LayerSpec& l, ojson* out) {
  if (l.strides > 0) (*out)["strides"] = l.strides;
  if (l.padding != Padding::kValid) (*out)["padding"] = std::string(PaddingName(l.padding));
}

ojson NormJson(const LayerSpec& l) {
  ojson j = {{"type", std::string(LayerKindName(l.kind))}};
  if (l.kind == LayerSpec::Kind::kBatchNorm) j["momentum"] = l.momentum;
  j["epsilon"] = l.epsilon;
  j["center"] = l.center;
  j["scale"] = l.scale;
  if (l.kind == LayerSpec::Kind::kBatchNorm) j["sync"] = l.sync;
  return j;
}

ojson LayerJson(const LayerSpec& l) {
  ojson j;
  switch (l.kind) {
    case LayerSpec::Kind::kDense: j = {{"type", "dense"}, {"units", l.units}}; break;
    case LayerSpec::Kind::kConv2D:
      j = {{"type", "conv2d"}, {"filters", l.filters}, {"kernel_size", l.kernel_size}};
      PutWindow(l, &j);
      break;
    case LayerSpec::Kind::kMaxPool2D:
    case LayerSpec::Kind::kAvgPool2D:
      j = {{"type", std::string(LayerKindName(l.kind))}, {"pool_size", l.pool_size}};
      PutWindow(l, &j);
      return j;
    case LayerSpec::Kind::kGlobalAvgPool2D: return {{"type", "global_avg_pool2d"}};
    case LayerSpec::Kind::kBatchNorm:
    case LayerSpec::Kind::kLayerNorm: return NormJson(l);
    case LayerSpec::Kind::kFlatten: return {{"type", "flatten"}};
    case LayerSpec::Kind::kDropout: return {{"type", "dropout"}, {"rate", l.rate}};
    case LayerSpec::Kind::kDepthwiseConv2D:
      j = {{"type", "depthwise_conv2d"}, {"kernel_size", l.kernel_size}, {"depth_multiplier", l.depth_multiplier}, {"use_bias", l.use_bias}};
      PutWindow(l, &j);
      break;
    case LayerSpec::Kind::kEmbedding:
    case LayerSpec::Kind::kOneHot:
      j = {{"type", std::string(LayerKindName(l.kind))}};
      if (l.kind == LayerSpec::Kind::kEmbedding) j["output_dim"] = l.output_dim;
      if (!l.columns.empty()) j["columns"] = l.columns;
      if (l.kind == LayerSpec::Kind::kOneHot) return j;
      PutInit(l.init, &j);
      return j;
    case LayerSpec::Kind::kResidual:
      j = {{"type", "residual"}, {"layers", ojson::array()}};
      for (const LayerSpec& inner : l.layers) j["layers"].push_back(LayerJson(inner));
      break;
  }
  j["activation"] = std::string(ActivationName(l.activation));
  PutInit(l.init, &j);
  return j;
}

ojson FilesJson(const DataFiles& files) {
  if (!files.x.empty()) return {{"x", files.x}, {"y", files.y}};
  if (files.paths.size() == 1) return files.paths.front();
  return files.paths;
}

// Reads `value` as the member `key` of a root object, with the job parser's reader `read`.
template <typename Spec, typename Read>
Result<Spec> ReadAlone(const nlohmann::json& value, const char* key, std::string_view source, Read read) {
  const nlohmann::json root = {{key, value}};
  Status status;
  ObjectReader r(root, std::string(source), "", &status);
  Spec spec;
  read(r, &spec);
  TFD_RETURN_IF_ERROR(r.Finish());
  return spec;
}

}  // namespace

nlohmann::ordered_json ModelSpecJson(const ModelSpec& model) {
  ojson j;
  if (model.name == "layers") {
    j["layers"] = ojson::array();
    for (const LayerSpec& l : model.layers) j["layers"].push_back(LayerJson(l));
  } else {
    if (model.init.kind == InitKind::kDefault) return model.name;
    j["name"] = model.name;
  }
  PutInit(model.init, &j);
  return j;
}

nlohmann::ordered_json DataSpecJson(const DataSpec& d) {
  if (d.is_mnist_folder()) return d.folder;
  ojson j;
  if (!d.train.empty()) j["train"] = FilesJson(d.train);
  if (!d.test.empty()) j["test"] = FilesJson(d.test);
  if (d.test_count > 0) j["test_split"] = d.test_count;
  else if (d.test_fraction > 0) j["test_split"] = d.test_fraction;
  j["format"] = std::string(FormatName(d.format));
  j["task"] = d.regression() ? "regression" : "classification";
  if (d.regression()) j["loss"] = std::string(LossName(d.loss));
  if (!d.classes.empty()) j["classes"] = d.classes;
  if (!d.label.empty()) j["label"] = d.label;
  else if (d.label_index >= 0) j["label"] = d.label_index;
  if (!d.feature_names.empty()) j["features"] = d.feature_names;
  else if (!d.feature_indices.empty()) j["features"] = d.feature_indices;
  if (!d.categorical_names.empty()) j["categorical"] = d.categorical_names;
  else if (!d.categorical_indices.empty()) j["categorical"] = d.categorical_indices;
  if (d.format == DataSpec::Format::kCsv) {
    if (!d.columns.empty()) j["columns"] = d.columns;
    else if (d.header.has_value()) j["header"] = *d.header;
    if (d.skip_rows > 0) j["skip_rows"] = d.skip_rows;
    j["delimiter"] = d.delimiter == '\t' ? std::string("tab") : std::string(1, d.delimiter);
  }
  if (d.format == DataSpec::Format::kImages || d.format == DataSpec::Format::kTfrecord) {
    if (d.image_height > 0) j["image_size"] = {d.image_height, d.image_width};
    if (d.channels > 0) j["color"] = d.channels == 1 ? "grayscale" : "rgb";
  }
  if (d.format == DataSpec::Format::kNpz) j["arrays"] = {{"x", d.npz_x}, {"y", d.npz_y}};
  if (d.normalize != DataSpec::Normalize::kDefault) j["normalize"] = std::string(NormalizeName(d.normalize));
  return j;
}

Result<ModelSpec> ParseModelSpec(const nlohmann::json& model, std::string_view source) {
  return ReadAlone<ModelSpec>(model, "model", source, [](ObjectReader& r, ModelSpec* m) { ReadModel(r, m); });
}

Result<DataSpec> ParseDataSpec(const nlohmann::json& data, std::string_view source) {
  return ReadAlone<DataSpec>(data, "data", source, [](ObjectReader& r, DataSpec* d) { ReadDataSpec(r, d); });
}

}  // namespace tfd::config
