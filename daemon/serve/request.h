#pragma once

// TensorFlow Serving's REST predict request and answer (docs/serving.md), as pure functions over
// JSON text, so every bad request is tested without a socket or a model.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/base/status.h"

namespace tfd::serve {

// What a served model takes and gives: one example of height x width x channels raw values, and
// its outputs (classification: logits and probabilities per class; regression: the targets).
struct Signature {
  int height = 1, width = 1, channels = 1;
  int outputs = 0;
  bool regression = false;
  int max_instances = 64;  // rows one request may carry (--batch-max)
  // The model's categorical features (its card's): a string there becomes its vocabulary id (0,
  // out of vocabulary, when the training data never had it); a number there is taken as an id.
  struct CategoricalInput {
    std::int64_t feature = 0;
    std::unordered_map<std::string, float> ids;
  };
  std::vector<CategoricalInput> categorical;
  std::int64_t features() const { return std::int64_t{height} * width * channels; }
};

// The input's name in the signature (and in model.onnx).
inline constexpr std::string_view kInputName = "input";

struct PredictRequest {
  bool columnar = false;    // {"inputs": ...} (answered {"outputs": ...}) rather than {"instances": ...}
  int rows = 0;
  std::vector<float> values;  // rows x features raw values, row-major, all finite
};

// Parses a :predict body. InvalidArgument with the message a 400 carries: what is wrong and where
// ("instance 2: expected 784 numbers (or nested [28, 28, 1]), got 783"), for a body that is not
// JSON, has neither or both of "instances" and "inputs", an empty list, more than max_instances
// rows, a row of another shape, a value that is not a number or not finite as a float32.
Result<PredictRequest> ParsePredict(std::string_view body, const Signature& sig);

// The answer to `request` given the model's outputs for its rows: rows x sig.outputs logits (or
// regression outputs) and, for a classifier, as many probabilities. Row format: {"predictions":
// [{"logits": [...], "probabilities": [...]}, ...]} (a regressor: [[...], ...]); columnar:
// {"outputs": {"logits": [[...]], "probabilities": [[...]]}} (a regressor: [[...], ...]).
std::string FormatPredict(const PredictRequest& request, const Signature& sig, std::span<const float> outputs,
                          std::span<const float> probabilities);

// {"error": message} with the message escaped.
std::string ErrorJson(std::string_view message);

}  // namespace tfd::serve
