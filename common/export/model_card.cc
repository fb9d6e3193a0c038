#include "common/export/model_card.h"

#include <cmath>

#include <fmt/format.h>

#include "common/config/json_writer.h"
#include "common/config/spec_json.h"

namespace tfd::exporting {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// Reads the member `key` of `j` as a T, or fails naming it.
template <typename T>
Status Member(const json& j, const char* key, std::string_view source, T* out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::InvalidArgument(fmt::format("{}: {}: missing", source, key));
  try {
    *out = it->get<T>();
  } catch (const json::exception&) {
    return Status::InvalidArgument(fmt::format("{}: {}: not the expected type, got {}", source, key, it->dump()));
  }
  return Status::Ok();
}

// "categorical": [{"column": NAME, "feature": K, "vocabulary": [...]}, ...], features in
// increasing order inside [0, features), each vocabulary at most kMaxCategories values.
Result<std::vector<data::CategoricalColumn>> ParseCategorical(const json& j, std::int64_t features, std::string_view source) {
  if (!j.is_array()) return Status::InvalidArgument(fmt::format("{}: categorical: expected a list of columns, got {}", source, j.dump()));
  std::vector<data::CategoricalColumn> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string where = fmt::format("{}: categorical[{}]", source, i);
    if (!j[i].is_object()) return Status::InvalidArgument(fmt::format("{}: expected an object", where));
    data::CategoricalColumn c;
    TFD_RETURN_IF_ERROR(Member(j[i], "column", where, &c.name));
    TFD_RETURN_IF_ERROR(Member(j[i], "feature", where, &c.feature));
    TFD_RETURN_IF_ERROR(Member(j[i], "vocabulary", where, &c.vocabulary));
    if (c.feature < 0 || c.feature >= features || (!out.empty() && c.feature <= out.back().feature))
      return Status::InvalidArgument(fmt::format("{}: feature: expected a place in [0, {}) after the last column's, got {}", where, features, c.feature));
    if (std::ssize(c.vocabulary) > data::kMaxCategories)
      return Status::InvalidArgument(fmt::format("{}: vocabulary: {} values, at most {}", where, c.vocabulary.size(), data::kMaxCategories));
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

data::Dataset ModelCard::Shell() const {
  data::Dataset d;
  d.height = height, d.width = width, d.channels = channels, d.dtype = dtype;
  d.num_classes = regression() ? 0 : static_cast<int>(class_names.size());
  d.class_names = class_names;
  d.feature_names = feature_names;
  d.num_targets = num_targets;
  d.normalizer = normalizer;
  d.categorical = categorical;
  return d;
}

ModelCard CardFor(const config::JobSpec& job, const data::Dataset& train) {
  ModelCard c;
  c.model = job.model;
  c.data = job.data;
  c.height = train.height, c.width = train.width, c.channels = train.channels, c.dtype = train.dtype;
  c.normalizer = train.normalizer;
  c.normalizer.scale = train.normalizer.scale.value_or(train.dtype == data::DType::kU8 ? 1.0f / 255.0f : 1.0f);
  c.num_targets = train.num_targets;
  if (!train.regression()) {
    c.class_names = train.class_names;
    for (int i = static_cast<int>(c.class_names.size()); i < train.num_classes; ++i) c.class_names.push_back(std::to_string(i));
  }
  c.feature_names = train.feature_names;
  c.categorical = train.categorical;
  c.data_fingerprint = data::Fingerprint(train);
  return c;
}

nlohmann::ordered_json CardJson(const ModelCard& c) {
  ojson j;
  j["model"] = config::ModelSpecJson(c.model);
  j["data"] = config::DataSpecJson(c.data);
  j["input"] = {{"shape", {c.height, c.width, c.channels}}, {"dtype", c.dtype == data::DType::kU8 ? "uint8" : "float32"}};
  ojson pre = {{"scale", *c.normalizer.scale}};
  if (!c.normalizer.mean.empty()) pre["mean"] = c.normalizer.mean, pre["inv_std"] = c.normalizer.inv_std;
  j["preprocessing"] = pre;
  if (c.regression()) j["targets"] = c.num_targets;
  else j["classes"] = c.class_names;
  if (!c.feature_names.empty()) j["feature_names"] = c.feature_names;
  if (!c.categorical.empty()) {
    j["categorical"] = ojson::array();
    for (const data::CategoricalColumn& col : c.categorical)
      j["categorical"].push_back({{"column", col.name}, {"feature", col.feature}, {"vocabulary", col.vocabulary}});
  }
  j["data_fingerprint"] = c.data_fingerprint;
  return j;
}

std::string CardText(const ModelCard& card) { return config::CompactJson(CardJson(card)); }

Status CheckSameData(std::string_view saved, const ModelCard& now, std::string_view source) {
  if (saved.empty()) return Status::Ok();
  const json j = json::parse(saved, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("data_fingerprint") || !j["data_fingerprint"].is_string())
    return Status::InvalidArgument(fmt::format("{}: its model card is not valid JSON with a data_fingerprint", source));
  const std::string was = j["data_fingerprint"].get<std::string>();
  if (was == now.data_fingerprint) return Status::Ok();
  std::string then = "?";
  if (Result<config::DataSpec> d = config::ParseDataSpec(j.value("data", json()), source); d.ok()) then = d->Describe();
  return Status::InvalidArgument(fmt::format("{}: was trained on other data ({}, fingerprint {}) than this job's ({}, fingerprint {}): "
                                             "resume on the data it was trained on, or point checkpoint.dir at a new folder",
                                             source, then, was.substr(0, 12),
                                             now.data.Describe(), now.data_fingerprint.substr(0, 12)));
}

Result<ModelCard> ParseCard(const nlohmann::json& j, std::string_view source) {
  if (!j.is_object()) return Status::InvalidArgument(fmt::format("{}: expected a JSON object", source));
  ModelCard c;
  json model, data, input, pre;
  TFD_RETURN_IF_ERROR(Member(j, "model", source, &model));
  TFD_RETURN_IF_ERROR(Member(j, "data", source, &data));
  TFD_ASSIGN_OR_RETURN(c.model, config::ParseModelSpec(model, source));
  TFD_ASSIGN_OR_RETURN(c.data, config::ParseDataSpec(data, source));
  TFD_RETURN_IF_ERROR(Member(j, "input", source, &input));
  std::vector<int> shape;
  std::string dtype;
  TFD_RETURN_IF_ERROR(Member(input, "shape", fmt::format("{}: input", source), &shape));
  TFD_RETURN_IF_ERROR(Member(input, "dtype", fmt::format("{}: input", source), &dtype));
  if (shape.size() != 3 || shape[0] < 1 || shape[1] < 1 || shape[2] < 1 || std::int64_t{shape[0]} * shape[1] * shape[2] > (1 << 26))
    return Status::InvalidArgument(fmt::format("{}: input.shape: expected [height, width, channels] of positive sizes", source));
  c.height = shape[0], c.width = shape[1], c.channels = shape[2];
  if (dtype == "uint8") c.dtype = data::DType::kU8;
  else if (dtype == "float32") c.dtype = data::DType::kF32;
  else return Status::InvalidArgument(fmt::format("{}: input.dtype: expected uint8 or float32, got \"{}\"", source, dtype));
  TFD_RETURN_IF_ERROR(Member(j, "preprocessing", source, &pre));
  float scale = 0;
  TFD_RETURN_IF_ERROR(Member(pre, "scale", fmt::format("{}: preprocessing", source), &scale));
  if (!std::isfinite(scale) || scale == 0) return Status::InvalidArgument(fmt::format("{}: preprocessing.scale: expected a finite number other than 0", source));
  c.normalizer.scale = scale;
  if (pre.contains("mean")) {
    TFD_RETURN_IF_ERROR(Member(pre, "mean", fmt::format("{}: preprocessing", source), &c.normalizer.mean));
    TFD_RETURN_IF_ERROR(Member(pre, "inv_std", fmt::format("{}: preprocessing", source), &c.normalizer.inv_std));
    if (std::ssize(c.normalizer.mean) != c.features() || std::ssize(c.normalizer.inv_std) != c.features())
      return Status::InvalidArgument(fmt::format("{}: preprocessing: expected {} means and inverse deviations (one per feature), got {} and {}",
                                                 source, c.features(), c.normalizer.mean.size(), c.normalizer.inv_std.size()));
  }
  if (j.contains("targets")) {
    TFD_RETURN_IF_ERROR(Member(j, "targets", source, &c.num_targets));
    if (c.num_targets < 1 || c.num_targets > (1 << 16)) return Status::InvalidArgument(fmt::format("{}: targets: expected a count >= 1", source));
  } else {
    TFD_RETURN_IF_ERROR(Member(j, "classes", source, &c.class_names));
    if (c.class_names.size() < 2) return Status::InvalidArgument(fmt::format("{}: classes: expected at least 2 class names", source));
  }
  if (j.contains("feature_names")) TFD_RETURN_IF_ERROR(Member(j, "feature_names", source, &c.feature_names));
  if (j.contains("categorical")) {
    TFD_ASSIGN_OR_RETURN(c.categorical, ParseCategorical(j["categorical"], c.features(), source));
  }
  TFD_RETURN_IF_ERROR(Member(j, "data_fingerprint", source, &c.data_fingerprint));
  return c;
}

}  // namespace tfd::exporting
