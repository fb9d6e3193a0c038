#pragma once

#include <string>

#include "common/base/status.h"
#include "common/export/model_card.h"
#include "common/model/model.h"

namespace tfd::exporting {

// The ONNX names of the exported graph's input and outputs.
inline constexpr const char* kOnnxInput = "input";           // [N, features] raw values, float32
inline constexpr const char* kOnnxLogits = "logits";         // [N, classes]
inline constexpr const char* kOnnxProbabilities = "probabilities";  // [N, classes], softmax of logits
inline constexpr const char* kOnnxOutputs = "outputs";       // [N, targets] (regression)

// The serialized ONNX ModelProto (opset 13) of `model` (its current parameters) under `card`: the
// card's preprocessing (scale, standardize) inside the graph so it takes the raw values a file
// holds, the layers (dropout absent), and two outputs, logits and probabilities (a regression
// model: one, outputs); class names as metadata. InvalidArgument for a model it cannot express.
Result<std::string> OnnxModelBytes(const ModelCard& card, const model::Model& model);

}  // namespace tfd::exporting
