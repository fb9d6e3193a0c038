#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Core>

namespace tfd::tensor {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using VectorMap = Eigen::Map<Eigen::VectorXf>;
using ConstVectorMap = Eigen::Map<const Eigen::VectorXf>;

// A dense row-major float tensor that owns its storage. Moves are cheap; shape changes never
// shrink the allocation, so a tensor reused across steps allocates once.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::vector<std::int64_t> shape) { Reshape(std::move(shape)); }

  void Reshape(std::vector<std::int64_t> shape);
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t size() const { return size_; }
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  std::span<float> span() { return {data_.data(), static_cast<std::size_t>(size_)}; }
  std::span<const float> span() const { return {data_.data(), static_cast<std::size_t>(size_)}; }
  // Views the tensor as rows x (size / rows).
  MatrixMap AsMatrix(std::int64_t rows) { return MatrixMap(data(), rows, size_ / rows); }

 private:
  std::vector<std::int64_t> shape_;
  std::int64_t size_ = 0;
  std::vector<float> data_;
};

std::int64_t NumElements(const std::vector<std::int64_t>& shape);
std::string ShapeString(const std::vector<std::int64_t>& shape);  // "[784, 100]"

}  // namespace tfd::tensor
