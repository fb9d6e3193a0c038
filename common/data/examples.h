#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/data/dataset.h"

namespace tfd::data {

// What a format's reader returns for one split, before classes are numbered and the data is
// normalised (common/data/source.h does both, the same way for every format): the examples'
// features in the file's element type, and their labels as the file has them.
struct Examples {
  std::int64_t size = 0;
  int height = 1, width = 0, channels = 1;  // one example's shape: H x W x C; a table row is 1 x D x 1
  DType dtype = DType::kF32;
  ByteArray features;  // size x (height * width * channels) elements of dtype, row-major
  // Exactly one of these is filled (size entries): labels as text (a CSV cell, a class folder's
  // name, a TFRecord bytes feature) or as integers (an .npy or IDX array, a TFRecord int64 feature).
  std::vector<std::string> label_text;
  std::vector<std::int64_t> label_ids;
  // A regression target per example and target column (size x targets), when the task is regression.
  std::vector<float> targets;
  int num_targets = 0;
  // Feature names where the format has them (a CSV header), for `tfd data inspect`.
  std::vector<std::string> feature_names;
  // The spec's categorical columns (CSV), in row order: each one's `vocabulary` holds the values
  // read, in the order first met, and a row's feature holds its value's index there (not yet an
  // id: source.h's EncodeCategories numbers them by a training vocabulary).
  std::vector<CategoricalColumn> categorical;

  std::int64_t values() const { return std::int64_t{height} * width * channels; }
};

}  // namespace tfd::data
