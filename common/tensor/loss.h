#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/base/class_id.h"

namespace tfd::tensor {

// What the model's last layer is trained to: class logits under softmax cross-entropy, or
// regression outputs under the mean squared or the mean absolute error.
enum class LossKind { kSoftmaxCrossEntropy, kMse, kMae };

// One batch's labels, as the loss reads them: a class id per row (classification), or `width`
// float targets per row (regression: rows x width, row-major). A view; the caller owns the data.
struct Labels {
  std::span<const ClassId> ids;
  std::span<const float> targets;
  int width = 0;  // targets per row; 0: class ids

  Labels() = default;
  // Implicit, so that classification code passes its class ids as they are.
  Labels(std::span<const ClassId> class_ids) : ids(class_ids) {}
  Labels(const std::vector<ClassId>& class_ids) : ids(class_ids) {}
  Labels(std::span<const float> values, int targets_per_row) : targets(values), width(targets_per_row) {}

  bool regression() const { return width > 0; }
  std::size_t rows() const { return regression() ? targets.size() / static_cast<std::size_t>(width) : ids.size(); }
  // Rows [first, first + n).
  Labels Rows(std::size_t first, std::size_t n) const {
    if (!regression()) return Labels(ids.subspan(first, n));
    return Labels(targets.subspan(first * static_cast<std::size_t>(width), n * static_cast<std::size_t>(width)), width);
  }
};

struct LossResult {
  double loss = 0;      // the batch's mean loss (cross-entropy, squared or absolute error)
  int correct = 0;      // classification: rows whose arg-max logit is the label
  // Regression: the sums over the batch's rows and targets of |output - target| and of its square
  // (MAE and RMSE are these over rows x targets), whichever loss trains.
  double abs_error = 0, squared_error = 0;
};

// Softmax cross-entropy on logits [batch, classes] (rows). When `dlogits` is not null it receives
// dL/dlogits of the mean loss: (softmax - onehot) / batch. Labels must be < classes.
LossResult SoftmaxCrossEntropy(const float* logits, std::span<const ClassId> labels, int classes,
                               float* dlogits);

// The mean squared (kMse) or absolute (kMae) error of outputs against `targets` (rows x width
// floats, laid out alike), averaged over rows and targets, as Keras' and PyTorch's "mean" reductions. When
// `doutputs` is not null it receives dL/doutputs: 2 (o - t) / (rows width) for kMse,
// sign(o - t) / (rows width) for kMae (0 where o == t).
LossResult RegressionLoss(const float* outputs, std::span<const float> targets, LossKind kind, float* doutputs);

// The loss `kind` of outputs [y.rows(), units] against `y` (class ids for kSoftmaxCrossEntropy,
// else targets with width == units), with its gradient into `doutputs` when not null.
LossResult ComputeLoss(LossKind kind, const float* outputs, const Labels& y, int units, float* doutputs);

// Number of rows whose arg-max (first on ties) equals the label.
int CountCorrect(const float* logits, std::span<const ClassId> labels, int classes);

}  // namespace tfd::tensor
