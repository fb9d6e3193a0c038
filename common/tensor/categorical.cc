// embedding and one_hot (layers.h): a table row per category id, or a one-hot vector, in place
// of each categorical feature, after the numeric features.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/base/check.h"
#include "common/tensor/layers.h"

namespace tfd::tensor {
namespace {

class Categorical final : public Layer {
 public:
  // output_dim 0: one_hot (each column's width its id count); else embedding.
  Categorical(ActShape in, std::vector<CategoricalInput> columns, int output_dim, InitSpec init)
      : in_(in), columns_(std::move(columns)), dim_(output_dim), init_(init) {
    std::vector<bool> categorical(static_cast<std::size_t>(in.size()), false);
    for (const CategoricalInput& c : columns_) {
      TFD_CHECK(c.feature >= 0 && c.feature < in.size() && c.ids >= 1);
      categorical[static_cast<std::size_t>(c.feature)] = true;
    }
    for (int f = 0; f < in.size(); ++f)
      if (!categorical[static_cast<std::size_t>(f)]) numeric_.push_back(f);
    width_ = static_cast<std::int64_t>(numeric_.size());
    for (const CategoricalInput& c : columns_) width_ += embedding() ? dim_ : c.ids;
    tables_.resize(columns_.size()), dtables_.resize(columns_.size());
  }

  std::string Describe() const override {
    return embedding() ? fmt::format("embedding {} columns x {}", columns_.size(), dim_) : fmt::format("one_hot {} columns", columns_.size());
  }
  ActShape output_shape() const override { return {1, 1, static_cast<int>(width_)}; }
  bool PerImage() const override { return true; }
  // Keras' Embedding keeps "embeddings" [ids, output_dim]; a table per column: embeddings,
  // embeddings_1, ... as columns_ orders them. Keras' default initializer is U(-0.05, 0.05); ours
  // is N(0, 0.05²) unless the layer's init says otherwise.
  std::vector<ParamSpec> Params() const override {
    std::vector<ParamSpec> p;
    if (!embedding()) return p;
    InitSpec init = init_;
    if (init.kind == config::InitKind::kDefault) init = {config::InitKind::kNormal, 0.05};
    for (std::size_t c = 0; c < columns_.size(); ++c)
      p.push_back({c == 0 ? "embeddings" : fmt::format("embeddings_{}", c), {columns_[c].ids, dim_}, init, columns_[c].ids, dim_});
    return p;
  }
  void Bind(std::span<const std::span<float>> params, std::span<const std::span<float>> grads) override {
    TFD_CHECK(params.size() == (embedding() ? columns_.size() : 0u) && grads.size() == params.size());
    for (std::size_t c = 0; c < params.size(); ++c) tables_[c] = params[c].data(), dtables_[c] = grads[c].data();
  }

  void Forward(const float* in, float* out, int batch) override {
    for (int n = 0; n < batch; ++n) {
      const float* x = in + static_cast<std::int64_t>(n) * in_.size();
      float* y = out + static_cast<std::int64_t>(n) * width_;
      for (int f : numeric_) *y++ = x[f];
      for (std::size_t c = 0; c < columns_.size(); ++c) {
        const std::int64_t id = Id(x, columns_[c]);
        if (embedding()) {
          const float* row = tables_[c] + id * dim_;
          y = std::copy(row, row + dim_, y);
        } else {
          std::fill(y, y + columns_[c].ids, 0.0f);
          y[id] = 1.0f;
          y += columns_[c].ids;
        }
      }
    }
  }

  // The ids are names, not quantities: their gradient is zero; a table's rows get the sum of
  // their examples' output gradients (sparse in effect, dense in storage).
  void Backward(const float* in, const float*, float* dout, float* din, int batch) override {
    for (std::size_t c = 0; c < dtables_.size(); ++c) std::fill(dtables_[c], dtables_[c] + std::int64_t{columns_[c].ids} * dim_, 0.0f);
    for (int n = 0; n < batch; ++n) {
      const float* x = in + static_cast<std::int64_t>(n) * in_.size();
      const float* dy = dout + static_cast<std::int64_t>(n) * width_;
      if (din != nullptr) {
        float* dx = din + static_cast<std::int64_t>(n) * in_.size();
        std::fill(dx, dx + in_.size(), 0.0f);
        for (std::size_t j = 0; j < numeric_.size(); ++j) dx[numeric_[j]] = dy[j];
      }
      dy += numeric_.size();
      for (std::size_t c = 0; c < columns_.size(); ++c) {
        if (!embedding()) {
          dy += columns_[c].ids;
          continue;
        }
        float* drow = dtables_[c] + Id(x, columns_[c]) * dim_;
        for (int k = 0; k < dim_; ++k) drow[k] += dy[k];
        dy += dim_;
      }
    }
  }

 private:
  bool embedding() const { return dim_ > 0; }
  // A feature's id; anything but an id in [0, ids) (a raw number sent to a server) is out of vocabulary.
  static std::int64_t Id(const float* x, const CategoricalInput& c) {
    const float v = x[c.feature];
    return v >= 0 && v < static_cast<float>(c.ids) && v == std::floor(v) ? static_cast<std::int64_t>(v) : 0;
  }

  ActShape in_;
  std::vector<CategoricalInput> columns_;
  int dim_;
  InitSpec init_;
  std::vector<int> numeric_;  // the features that pass through, in row order
  std::int64_t width_ = 0;
  std::vector<float*> tables_, dtables_;
};

}  // namespace

std::unique_ptr<Layer> MakeEmbedding(ActShape in, std::vector<CategoricalInput> columns, int output_dim, InitSpec init) {
  TFD_CHECK(output_dim >= 1);
  return std::make_unique<Categorical>(in, std::move(columns), output_dim, init);
}
std::unique_ptr<Layer> MakeOneHot(ActShape in, std::vector<CategoricalInput> columns) {
  return std::make_unique<Categorical>(in, std::move(columns), 0, InitSpec{});
}

}  // namespace tfd::tensor
