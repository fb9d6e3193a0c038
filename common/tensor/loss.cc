#include "common/tensor/loss.h"

#include <algorithm>
#include <cmath>

namespace tfd::tensor {

LossResult SoftmaxCrossEntropy(const float* logits, std::span<const ClassId> labels, int classes,
                               float* dlogits) {
  LossResult r;
  const int batch = static_cast<int>(labels.size());
  const float inv_batch = 1.0f / static_cast<float>(batch);
  double total = 0;
  for (int i = 0; i < batch; ++i) {
    const float* z = logits + static_cast<std::int64_t>(i) * classes;
    int best = 0;
    for (int c = 1; c < classes; ++c)
      if (z[c] > z[best]) best = c;
    const float max = z[best];
    // e^(z - max) goes into the gradient row, then is normalised there: one exp per logit.
    float* e = dlogits != nullptr ? dlogits + static_cast<std::int64_t>(i) * classes : nullptr;
    float sum = 0;
    for (int c = 0; c < classes; ++c) {
      const float v = std::exp(z[c] - max);
      if (e != nullptr) e[c] = v;
      sum += v;
    }
    total += static_cast<double>(std::log(sum) - (z[labels[i]] - max));
    r.correct += best == labels[i];
    if (dlogits != nullptr) {
      const float scale = inv_batch / sum;
      for (int c = 0; c < classes; ++c) e[c] *= scale;
      e[labels[i]] -= inv_batch;
    }
  }
  r.loss = total / batch;
  return r;
}

LossResult RegressionLoss(const float* outputs, std::span<const float> targets, LossKind kind, float* doutputs) {
  LossResult r;
  const std::size_t n = targets.size();
  if (n == 0) return r;
  const float inv_n = 1.0f / static_cast<float>(n);
  double loss = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float diff = outputs[i] - targets[i];
    const double sq = static_cast<double>(diff) * diff, abs = std::abs(static_cast<double>(diff));
    r.abs_error += abs;
    r.squared_error += sq;
    loss += kind == LossKind::kMae ? abs : sq;
    if (doutputs != nullptr)
      doutputs[i] = kind == LossKind::kMae ? static_cast<float>((diff > 0) - (diff < 0)) * inv_n : 2.0f * diff * inv_n;
  }
  r.loss = loss / static_cast<double>(n);
  return r;
}

LossResult ComputeLoss(LossKind kind, const float* outputs, const Labels& y, int units, float* doutputs) {
  if (kind == LossKind::kSoftmaxCrossEntropy) return SoftmaxCrossEntropy(outputs, y.ids, units, doutputs);
  return RegressionLoss(outputs, y.targets, kind, doutputs);
}

int CountCorrect(const float* logits, std::span<const ClassId> labels, int classes) {
  int correct = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const float* z = logits + i * classes;
    correct += static_cast<int>(std::max_element(z, z + classes) - z) == labels[i];
  }
  return correct;
}

}  // namespace tfd::tensor
