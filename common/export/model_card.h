#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/base/status.h"
#include "common/config/job.h"
#include "common/data/dataset.h"

namespace tfd::exporting {

// What a trained network needs besides its weights for a new example to go in raw and its outputs
// to mean something: the layers, how the training files were read, one example's shape and element
// type, the preprocessing training applied (with the training split's statistics), and the classes
// or regression targets. An exported model's model.json holds it; so does every checkpoint (a
// resumed run compares the data fingerprint, `tfd export` builds a model folder from it).
struct ModelCard {
  config::ModelSpec model;
  // How training read its files: format, label and feature columns, CSV and image options, task.
  // Its file lists are the training job's (for the record); a new file is read with the rest.
  config::DataSpec data;
  int height = 1, width = 1, channels = 1;  // one example, NHWC (a table row: 1 x features x 1)
  data::DType dtype = data::DType::kF32;    // what the files hold: bytes (pixels) or numbers
  data::Normalizer normalizer;              // resolved: scale always set
  std::vector<std::string> class_names;     // classification: one per output, in id order
  int num_targets = 0;                      // regression: the outputs
  std::vector<std::string> feature_names;   // where the source named them (a CSV header)
  // The training split's categorical columns with their vocabularies: a new file's or request's
  // strings in those columns become the ids the model was trained on (unseen ones 0).
  std::vector<data::CategoricalColumn> categorical;
  std::string data_fingerprint;             // data::Fingerprint of the training split

  bool regression() const { return num_targets > 0; }
  int outputs() const { return regression() ? num_targets : static_cast<int>(class_names.size()); }
  std::int64_t features() const { return std::int64_t{height} * width * channels; }
  // A dataset of no examples with this shape, type, classes and preprocessing: what a reader of a
  // new file and data::FillBatch take.
  data::Dataset Shell() const;
};

// The card of a model trained by `job` on `train` (after its normalizer was set).
ModelCard CardFor(const config::JobSpec& job, const data::Dataset& train);

nlohmann::ordered_json CardJson(const ModelCard& card);
// CardJson on one line: what a checkpoint's CARD record holds.
std::string CardText(const ModelCard& card);
// InvalidArgument "SOURCE: FIELD: what was expected" for a card that is not one CardJson writes.
Result<ModelCard> ParseCard(const nlohmann::json& j, std::string_view source);

// Whether a checkpoint whose card is `saved` (CardText; empty for a file from before cards, which
// passes) was trained on the data `now` describes. InvalidArgument naming `source`, both data sources
// and their fingerprints when it was not (a run resumed on other data would silently mix two).
Status CheckSameData(std::string_view saved, const ModelCard& now, std::string_view source);

}  // namespace tfd::exporting
