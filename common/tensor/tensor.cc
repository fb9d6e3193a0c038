#include "common/tensor/tensor.h"

#include <fmt/format.h>

#include "common/base/check.h"

namespace tfd::tensor {

std::int64_t NumElements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    TFD_CHECK(d >= 0);
    n *= d;
  }
  return n;
}

std::string ShapeString(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

void Tensor::Reshape(std::vector<std::int64_t> shape) {
  size_ = NumElements(shape);
  shape_ = std::move(shape);
  if (static_cast<std::size_t>(size_) > data_.size()) data_.resize(static_cast<std::size_t>(size_));
}

}  // namespace tfd::tensor
