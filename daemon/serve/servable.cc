#include "daemon/serve/servable.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

namespace tfd::serve {

Servable::Servable(std::uint64_t version, exporting::LoadedModel loaded, int max_batch)
    : version_(version), loaded_(std::move(loaded)) {
  const exporting::ModelCard& card = loaded_.card;
  signature_ = {.height = card.height, .width = card.width, .channels = card.channels, .outputs = card.outputs(),
                .regression = card.regression(), .max_instances = max_batch};
  for (const data::CategoricalColumn& c : card.categorical) {
    Signature::CategoricalInput in{.feature = c.feature, .ids = {}};
    in.ids.reserve(c.vocabulary.size());
    for (std::size_t k = 0; k < c.vocabulary.size(); ++k) in.ids.emplace(c.vocabulary[k], static_cast<float>(k + 1));
    signature_.categorical.push_back(std::move(in));
  }
}

void Servable::Predict(std::span<const float> raw, int rows, std::vector<float>* outputs, std::vector<float>* probabilities) const {
  const data::Normalizer& norm = loaded_.card.normalizer;
  const float scale = norm.scale.value_or(1.0f);
  const auto features = static_cast<std::size_t>(signature_.features());
  x_.resize(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) x_[i] = raw[i] * scale;
  if (!norm.mean.empty())
    for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r)
      for (std::size_t j = 0; j < features; ++j) x_[r * features + j] = (x_[r * features + j] - norm.mean[j]) * norm.inv_std[j];
  const int k = signature_.outputs;
  const float* out = loaded_.model->Forward(x_.data(), rows);
  outputs->assign(out, out + static_cast<std::size_t>(rows) * k);
  if (signature_.regression) return;
  probabilities->resize(outputs->size());
  for (int r = 0; r < rows; ++r) {  // softmax, as the exported graph's "probabilities"
    const float* z = outputs->data() + static_cast<std::size_t>(r) * k;
    float* p = probabilities->data() + static_cast<std::size_t>(r) * k;
    const float top = *std::max_element(z, z + k);
    float sum = 0;
    for (int c = 0; c < k; ++c) sum += (p[c] = std::exp(z[c] - top));
    for (int c = 0; c < k; ++c) p[c] /= sum;
  }
}

Result<std::unique_ptr<ModelManager>> ModelManager::Open(const std::string& base, int max_batch, tensor::GemmConfig gemm) {
  std::unique_ptr<ModelManager> m(new ModelManager(base, max_batch, gemm));
  const std::vector<std::uint64_t> versions = exporting::Versions(base);
  if (versions.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(base, ec)) return Status::NotFound(fmt::format("{}: no such model folder", base));
    return Status::NotFound(fmt::format("{}: holds no numbered version folder (an exported model's: {}/1/model.json)", base, base));
  }
  TFD_ASSIGN_OR_RETURN(std::shared_ptr<const Servable> first, m->LoadNumber(versions.back()));
  MutexLock lock(&m->mu_);
  m->current_ = std::move(first);
  return m;
}

Result<std::shared_ptr<const Servable>> ModelManager::LoadNumber(std::uint64_t version) const {
  const std::string dir = (std::filesystem::path(base_) / std::to_string(version)).string();
  TFD_ASSIGN_OR_RETURN(exporting::LoadedModel loaded, exporting::LoadVersion(dir, max_batch_, gemm_));
  return std::make_shared<const Servable>(version, std::move(loaded), max_batch_);
}

std::shared_ptr<const Servable> ModelManager::Current() const {
  MutexLock lock(&mu_);
  return current_;
}

std::shared_ptr<const Servable> ModelManager::Find(std::uint64_t version) const {
  MutexLock lock(&mu_);
  return current_ && current_->version() == version ? current_ : nullptr;
}

Result<std::uint64_t> ModelManager::Poll() {
  const std::vector<std::uint64_t> versions = exporting::Versions(base_);
  if (versions.empty() || versions.back() <= Current()->version() || failed_.contains(versions.back())) return std::uint64_t{0};
  Result<std::shared_ptr<const Servable>> next = LoadNumber(versions.back());
  if (!next.ok()) {
    failed_.insert(versions.back());
    return next.status();
  }
  MutexLock lock(&mu_);
  current_ = std::move(*next);  // the old version lives on in the requests that hold it
  return current_->version();
}

}  // namespace tfd::serve
