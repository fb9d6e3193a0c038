#include "common/data/dataset.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/base/check.h"
#include "common/base/random.h"
#include "common/base/sha256.h"
#include "common/data/idx.h"

namespace tfd::data {

Result<Dataset> LoadIdxPair(const std::string& images_path, const std::string& labels_path, int num_classes) {
  // Mapped where possible: the image bytes are most of a task's memory, and the same on every task.
  Result<MappedIdxArray> mapped = MapIdxFile(images_path, 3);
  IdxArray images;
  if (mapped.ok()) {
    images.dims = mapped->dims;
  } else if (mapped.status().code() == Code::kUnavailable) {
    TFD_ASSIGN_OR_RETURN(images, ReadIdxFile(images_path, 3));
  } else {
    return mapped.status();
  }
  TFD_ASSIGN_OR_RETURN(std::vector<ClassId> labels, ReadIdxLabels(labels_path));
  if (images.dims[0] != labels.size()) {
    return Status::Corruption(fmt::format("{}: {} labels, but {} has {} images", labels_path, labels.size(),
                                          images_path, images.dims[0]));
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= num_classes) {
      return Status::Corruption(fmt::format("{}: label {} at index {} is outside [0, {})", labels_path,
                                            labels[i], i, num_classes));
    }
  }
  Dataset d;
  d.size = images.dims[0];
  d.height = static_cast<int>(images.dims[1]);
  d.width = static_cast<int>(images.dims[2]);
  d.num_classes = num_classes;
  d.features = mapped.ok() ? ByteArray(std::move(mapped->data), mapped->size) : ByteArray(std::move(images.data));
  d.labels = std::move(labels);
  return d;
}

Result<DataSplits> LoadMnist(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::NotFound(fmt::format("{}: no such data folder (fetch MNIST with: scripts/fetch_mnist.sh {})", dir, dir));
  }
  auto path = [&dir](const char* name) { return (std::filesystem::path(dir) / name).string(); };
  DataSplits m;
  TFD_ASSIGN_OR_RETURN(m.train, LoadIdxPair(path(kTrainImages), path(kTrainLabels)));
  TFD_ASSIGN_OR_RETURN(m.test, LoadIdxPair(path(kTestImages), path(kTestLabels)));
  if (m.train.height != m.test.height || m.train.width != m.test.width) {
    return Status::Corruption(fmt::format("{}: test images are {}x{}, training images {}x{}", path(kTestImages),
                                          m.test.height, m.test.width, m.train.height, m.train.width));
  }
  return m;
}

std::vector<std::uint32_t> EpochShard(std::int64_t n, std::uint64_t seed, int epoch, int index, int count, bool shuffle) {
  std::vector<std::uint32_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), 0u);
  if (shuffle) {
    Rng rng(seed, 0x5348554646ULL + static_cast<std::uint64_t>(epoch));  // Fisher-Yates
    for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.Below(i)]);
  }
  std::vector<std::uint32_t> shard;
  shard.reserve(static_cast<std::size_t>(n / count + 1));
  for (std::int64_t i = index; i < n; i += count) shard.push_back(perm[static_cast<std::size_t>(i)]);
  return shard;
}

namespace {
// Converts one example; restrict tells the compiler the bytes and floats do not overlap (a uint8_t
// pointer may alias anything), so the loops vectorise.
void ConvertBytes(const std::uint8_t* __restrict src, float* __restrict dst, std::int64_t n, float scale) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]) * scale;
}
void ConvertFloats(const float* __restrict src, float* __restrict dst, std::int64_t n, float scale) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i] * scale;
}
void Standardize(const Normalizer& norm, float* __restrict x, std::int64_t n) {
  const float* __restrict mean = norm.mean.data();
  const float* __restrict inv_std = norm.inv_std.data();
  for (std::int64_t i = 0; i < n; ++i) x[i] = (x[i] - mean[i]) * inv_std[i];
}

// The labels as the fingerprint has always hashed them: a byte each while every class id fits one
// (so that checkpoints and model cards made when labels were bytes still match their data), else
// 4 bytes little-endian each.
void HashLabels(const Dataset& data, Sha256* h) {
  constexpr std::size_t kChunk = 4096;
  std::uint8_t buf[kChunk * 4];
  const bool bytes = data.num_classes <= 256;
  for (std::size_t at = 0; at < data.labels.size(); at += kChunk) {
    const std::size_t n = std::min(kChunk, data.labels.size() - at);
    std::size_t used = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto v = static_cast<std::uint32_t>(data.labels[at + i]);
      for (std::size_t b = 0; b < (bytes ? 1u : 4u); ++b) buf[used++] = static_cast<std::uint8_t>(v >> (8 * b));
    }
    h->Update(std::as_bytes(std::span(buf, used)));
  }
}

}  // namespace

std::string Fingerprint(const Dataset& data) {
  Sha256 h;
  const std::string head = fmt::format("tfd-data-1 {} {} {} {} {} {} {} {}", data.size, data.height, data.width, data.channels,
                                       data.dtype == DType::kU8 ? "u8" : "f32", data.num_classes, data.num_targets,
                                       fmt::join(data.class_names, "\x1f"));
  h.Update(std::as_bytes(std::span(head)));
  h.Update(std::as_bytes(std::span(data.features.data(), data.features.size())));
  HashLabels(data, &h);
  h.Update(std::as_bytes(std::span(data.targets)));
  for (const CategoricalColumn& c : data.categorical) {  // ids mean nothing without their vocabulary
    const std::string vocabulary = fmt::format("categorical {} {} {}\x1e", c.feature, c.name, fmt::join(c.vocabulary, "\x1f"));
    h.Update(std::as_bytes(std::span(vocabulary)));
  }
  return h.HexDigest();
}

ByteArray RenumberCategories(const ByteArray& features, std::int64_t rows, std::int64_t width,
                             const std::vector<CategoricalColumn>& columns, const std::vector<std::vector<float>>& remap) {
  std::vector<std::uint8_t> bytes(features.begin(), features.end());
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::size_t c = 0; c < remap.size(); ++c) {
      const auto at = static_cast<std::size_t>(i * width + columns[c].feature) * sizeof(float);
      float v = 0;
      std::memcpy(&v, bytes.data() + at, sizeof v);
      const auto id = static_cast<std::size_t>(v);
      v = id < remap[c].size() ? remap[c][id] : 0.0f;
      std::memcpy(bytes.data() + at, &v, sizeof v);
    }
  return bytes;
}

namespace {

float FeatureAt(const Dataset& d, std::int64_t row, int feature) {
  float v = 0;
  std::memcpy(&v, d.features.data() + (row * d.pixels() + feature) * sizeof(float), sizeof(float));
  return v;
}

// Rewrites each categorical feature of `d` through `remap` (old id -> new id, per column).
void Renumber(const std::vector<std::vector<float>>& remap, Dataset* d) {
  d->features = RenumberCategories(d->features, d->size, d->pixels(), d->categorical, remap);
}

}  // namespace

void FitVocabulary(DataSplits* data) {
  Dataset& train = data->train;
  std::vector<CategoricalColumn> fitted = train.categorical;
  std::vector<std::vector<float>> remap(fitted.size());
  bool changed = false;
  for (std::size_t c = 0; c < fitted.size(); ++c) {
    std::vector<bool> used(static_cast<std::size_t>(fitted[c].ids()), false);
    for (std::int64_t i = 0; i < train.size; ++i) {
      const auto id = static_cast<std::size_t>(FeatureAt(train, i, fitted[c].feature));
      if (id < used.size()) used[id] = true;
    }
    remap[c].assign(used.size(), 0.0f);
    std::vector<std::string> kept;
    for (std::size_t id = 1; id < used.size(); ++id)
      if (used[id]) {
        kept.push_back(std::move(fitted[c].vocabulary[id - 1]));
        remap[c][id] = static_cast<float>(kept.size());
      }
    changed = changed || kept.size() + 1 != used.size();
    fitted[c].vocabulary = std::move(kept);
  }
  if (!changed) return;
  for (Dataset* d : {&data->train, &data->test, &data->validation}) {
    if (d->categorical.size() != fitted.size()) continue;  // an empty split of no columns
    if (d->size > 0) Renumber(remap, d);
    d->categorical = fitted;
  }
}

void HoldOut(DataSplits* data, std::int64_t count) {
  Dataset& train = data->train;
  TFD_CHECK(count > 0 && count < train.size);
  Dataset& val = data->validation;
  val = train.Shell();
  const std::int64_t keep = train.size - count;
  const auto bytes = static_cast<std::ptrdiff_t>(train.example_bytes());
  val.features = std::vector<std::uint8_t>(train.features.begin() + keep * bytes, train.features.end());
  val.labels.assign(train.labels.begin() + std::min<std::ptrdiff_t>(keep, std::ssize(train.labels)), train.labels.end());
  const std::ptrdiff_t kept_targets = keep * train.num_targets;
  val.targets.assign(train.targets.begin() + std::min<std::ptrdiff_t>(kept_targets, std::ssize(train.targets)), train.targets.end());
  val.size = count;
  train.features.Truncate(static_cast<std::size_t>(keep * bytes));
  if (!train.labels.empty()) train.labels.resize(static_cast<std::size_t>(keep));
  if (!train.targets.empty()) train.targets.resize(static_cast<std::size_t>(kept_targets));
  train.size = keep;
  FitVocabulary(data);
}

void FillBatch(const Dataset& data, std::span<const std::uint32_t> indices, float* x, ClassId* y, float* targets) {
  const std::int64_t values = data.pixels();
  const auto bytes = static_cast<std::int64_t>(data.example_bytes());
  const std::uint8_t* features = data.features.data();
  const Normalizer& norm = data.normalizer;
  const bool standardize = !norm.mean.empty();
  const float scale = norm.scale.value_or(data.dtype == DType::kU8 ? 1.0f / 255.0f : 1.0f);
  constexpr std::size_t kAhead = 4;  // shuffled examples are scattered: fetch a few examples early
  for (std::size_t r = 0; r < std::min(kAhead, indices.size()); ++r)
    for (std::int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(features + indices[r] * bytes + off);
  for (std::size_t r = 0; r < indices.size(); ++r) {
    if (r + kAhead < indices.size()) {
      const std::uint8_t* next = features + static_cast<std::int64_t>(indices[r + kAhead]) * bytes;
      for (std::int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(next + off);
    }
    const std::uint8_t* src = features + static_cast<std::int64_t>(indices[r]) * bytes;
    float* row = x + static_cast<std::int64_t>(r) * values;
    if (data.dtype == DType::kU8) ConvertBytes(src, row, values, scale);
    else ConvertFloats(reinterpret_cast<const float*>(src), row, values, scale);
    if (standardize) Standardize(norm, row, values);
    if (data.regression()) {
      if (targets == nullptr || data.targets.empty()) continue;  // the statistics pass; examples to predict on
      const float* t = data.targets.data() + static_cast<std::int64_t>(indices[r]) * data.num_targets;
      std::copy(t, t + data.num_targets, targets + static_cast<std::int64_t>(r) * data.num_targets);
    } else if (!data.labels.empty()) {  // (examples to predict on may have none)
      y[r] = data.labels[indices[r]];
    }
  }
}

}  // namespace tfd::data
