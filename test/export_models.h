#pragma once
// One model of each kind tfd exports, with raw data shaped as its users' files are, for the tests
// and the benchmark of the exported model (export_onnx_test, onnx_checker_test, bench_predict).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/config/job.h"
#include "common/data/dataset.h"
#include "common/model/model.h"

namespace tfd::testing {

struct ExportCase {
  std::string name;    // "mlp", "layers", "standardized", "regression3", ...
  config::JobSpec job;  // its model and data spec
  data::Dataset data;   // raw rows as a file holds them, the normalizer as training resolved it
};

// softmax, mlp, dnn and cnn on MNIST-shaped bytes (scale 1/255); a conv2d / max_pool2d / flatten /
// dense / dropout stack on 3-channel images; strided, same-padded convolutions with max, average
// and global average pooling, relu6 and gelu ("windows"); batch_norm and layer_norm ("norms");
// residual blocks, identity and projected, on images and on flat features, and depthwise_conv2d
// ("residual"); a
// standardized float table classifier; regression
// models of 1 and 3 targets (mse) on a standardized table; an embedding and a one_hot first layer
// on a table with two categorical columns ("embedding", "one_hot"). `rows` examples each, from `seed`.
std::vector<ExportCase> ExportCases(int rows, std::uint32_t seed);

// The case's model for batches of up to `max_batch`, initialised from `seed` and then trained
// `steps` plain SGD steps on its data, so that its weights are not an initializer's alone.
std::unique_ptr<model::Model> TrainedModel(const ExportCase& c, int max_batch, int steps, std::uint64_t seed);

// The case's examples as raw float32 rows (pixels 0..255 as floats): what ONNX Runtime is fed.
std::vector<float> RawRows(const data::Dataset& data);

}  // namespace tfd::testing
