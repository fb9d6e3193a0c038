#pragma once

#include <cstdint>
#include <span>

namespace tfd::tensor {

struct LossResult {
  double loss = 0;      // mean softmax cross-entropy over the batch
  int correct = 0;      // rows whose arg-max logit is the label
};

// Softmax cross-entropy on logits [batch, classes] (rows). When `dlogits` is not null it receives
// dL/dlogits of the mean loss: (softmax - onehot) / batch. Labels must be < classes.
LossResult SoftmaxCrossEntropy(const float* logits, std::span<const std::uint8_t> labels, int classes,
                               float* dlogits);

// Number of rows whose arg-max (first on ties) equals the label.
int CountCorrect(const float* logits, std::span<const std::uint8_t> labels, int classes);

}  // namespace tfd::tensor
