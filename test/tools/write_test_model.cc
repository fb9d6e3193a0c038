// Writes an exported model of fixed random weights for tests and benchmarks of `tfd serve`:
//   tfd_write_test_model BASE MODEL SHAPE SEED
// MODEL: softmax | mlp | dnn | cnn; SHAPE: mnist (28x28x1 bytes, classes "0".."9", scale 1/255),
// table (4 standardized float features, classes setosa/versicolor/virginica) or regression (4
// features, 2 targets). Prints the version folder written (BASE/N: one more than the newest).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/export/model_dir.h"

int main(int argc, char** argv) {
  using namespace tfd;
  if (argc != 5) {
    std::fprintf(stderr, "usage: tfd_write_test_model BASE softmax|mlp|dnn|cnn mnist|table|regression SEED\n");
    return 2;
  }
  const std::string shape = argv[3];
  exporting::ModelCard card;
  card.model.name = argv[2];
  card.data_fingerprint = "test";
  if (shape == "mnist") {
    card.height = 28, card.width = 28, card.channels = 1, card.dtype = data::DType::kU8;
    card.normalizer.scale = 1.0f / 255.0f;
    card.data.folder = "data/mnist";
    for (int c = 0; c < 10; ++c) card.class_names.push_back(std::to_string(c));
  } else if (shape == "table" || shape == "regression") {
    card.width = 4, card.dtype = data::DType::kF32;
    card.normalizer = {.scale = 1.0f, .mean = {5.8f, 3.0f, 3.7f, 1.2f}, .inv_std = {1.2f, 2.3f, 0.57f, 1.3f}};
    card.feature_names = {"sepal_length", "sepal_width", "petal_length", "petal_width"};
    card.data.format = config::DataSpec::Format::kCsv;
    card.data.train.paths = {"iris.csv"};
    card.data.test.paths = {"iris_test.csv"};
    card.data.label = "species";
    card.data.normalize = config::DataSpec::Normalize::kStandardize;
    if (shape == "table") card.class_names = {"setosa", "versicolor", "virginica"};
    else card.num_targets = 2, card.data.task = config::DataSpec::Task::kRegression;
  } else {
    std::fprintf(stderr, "tfd_write_test_model: unknown shape %s\n", shape.c_str());
    return 2;
  }
  const model::Outputs outputs = card.regression() ? model::Outputs(card.num_targets, tensor::LossKind::kMse) : model::Outputs(card.outputs());
  Result<std::unique_ptr<model::Model>> m = model::Model::Build(card.model, {card.height, card.width, card.channels}, outputs, 1);
  if (!m.ok()) {
    std::fprintf(stderr, "tfd_write_test_model: %s\n", m.status().message().c_str());
    return 2;
  }
  (*m)->Initialize(std::strtoull(argv[4], nullptr, 10));
  Result<std::string> dir = exporting::WriteVersion(argv[1], card, **m, {.global_step = 1, .trained_by = "test"});
  if (!dir.ok()) {
    std::fprintf(stderr, "tfd_write_test_model: %s\n", dir.status().message().c_str());
    return 1;
  }
  std::printf("%s\n", dir->c_str());
  return 0;
}
