#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/base/class_id.h"
#include "common/base/status.h"

namespace tfd::data {

// Read-only bytes that are either owned (a vector) or a view of a shared mapping (an IDX file's
// payload, MapIdxFile), which the last copy keeps alive. Copies share a mapping and copy owned bytes.
class ByteArray {
 public:
  ByteArray() = default;
  ByteArray(std::vector<std::uint8_t> owned) : owned_(std::move(owned)), size_(owned_.size()) {}  // implicit, as from a vector
  ByteArray(std::initializer_list<std::uint8_t> owned) : ByteArray(std::vector<std::uint8_t>(owned)) {}
  ByteArray(std::shared_ptr<const std::uint8_t> mapped, std::size_t size) : mapped_(std::move(mapped)), size_(size) {}

  const std::uint8_t* data() const { return mapped_ != nullptr ? mapped_.get() : owned_.data(); }
  std::size_t size() const { return size_; }
  const std::uint8_t* begin() const { return data(); }
  const std::uint8_t* end() const { return data() + size_; }
  std::uint8_t operator[](std::size_t i) const { return data()[i]; }
  bool mapped() const { return mapped_ != nullptr; }
  // Keeps the first `n` bytes (n <= size()); a mapping stays mapped whole.
  void Truncate(std::size_t n) {
    size_ = std::min(n, size_);
    if (mapped_ == nullptr) owned_.resize(size_);
  }
  friend bool operator==(const ByteArray& a, const std::vector<std::uint8_t>& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

 private:
  std::vector<std::uint8_t> owned_;
  std::shared_ptr<const std::uint8_t> mapped_;
  std::size_t size_ = 0;
};

// The element type of a dataset's features: bytes (images, as files store them) or floats.
enum class DType : std::uint8_t { kU8, kF32 };
inline constexpr std::size_t DTypeBytes(DType t) { return t == DType::kU8 ? 1 : 4; }

// How a feature value becomes the model's input: x * scale, then (x - mean[j]) * inv_std[j] per
// feature j where `mean` is set (standardize). The same on every split; computed from the training split.
struct Normalizer {
  std::optional<float> scale;  // unset: 1/255 for bytes (pixels in [0, 1]), 1 for floats
  std::vector<float> mean, inv_std;  // empty, or one per feature
};

// Most distinct values one categorical column's vocabulary may hold (docs/data.md): an embedding
// table of a million rows of 8 floats is 32 MiB, and as much again per optimizer slot; a column
// with more (a row id, a free-text field) is not a category.
inline constexpr int kMaxCategories = 1000000;

// A feature column whose cells are category strings (a CSV's data.categorical), kept in an
// example's row of floats as a category id: id k + 1 is vocabulary[k]; id 0 is every value the
// training split never had (out of vocabulary). The vocabulary is the training split's values,
// sorted, so every task and run numbers them alike.
struct CategoricalColumn {
  int feature = 0;   // its place in an example's row of features
  std::string name;  // the column's name (a CSV header's, or "column k")
  std::vector<std::string> vocabulary;
  int ids() const { return static_cast<int>(vocabulary.size()) + 1; }
  friend bool operator==(const CategoricalColumn&, const CategoricalColumn&) = default;
};

// Labelled examples in the file's element type (one byte per pixel for images, else floats),
// converted to floats one batch at a time. LoadIdxPair maps an image file that can be mapped, so
// the tasks of one host share its pages.
struct Dataset {
  std::int64_t size = 0;
  int height = 0, width = 0, channels = 1;  // one example's shape; a table row is 1 x features x 1
  DType dtype = DType::kU8;
  int num_classes = 10;               // 0 for a regression dataset
  ByteArray features;                 // size x height x width x channels elements of dtype
  std::vector<ClassId> labels;        // size, each in [0, num_classes) (classification)
  std::vector<std::string> class_names;  // num_classes names, in id order (empty: the ids themselves)
  std::vector<std::string> feature_names;  // where the source names them (a CSV header), else empty
  std::vector<CategoricalColumn> categorical;  // in row order; their features hold category ids
  // Regression ("task": "regression"): num_targets float targets per example (size x num_targets,
  // row-major) in place of labels.
  std::vector<float> targets;
  int num_targets = 0;
  Normalizer normalizer;

  bool regression() const { return num_targets > 0; }
  // The model's outputs: one per class, or one per target.
  int outputs() const { return regression() ? num_targets : num_classes; }
  std::int64_t pixels() const { return std::int64_t{height} * width * channels; }
  // A dataset of no examples with this one's shape, type, classes and normalizer.
  Dataset Shell() const {
    Dataset d;
    d.height = height, d.width = width, d.channels = channels, d.dtype = dtype, d.num_classes = num_classes;
    d.class_names = class_names, d.feature_names = feature_names, d.normalizer = normalizer, d.num_targets = num_targets;
    d.categorical = categorical;
    return d;
  }
  std::size_t example_bytes() const { return static_cast<std::size_t>(pixels()) * DTypeBytes(dtype); }
};

struct DataSplits {
  Dataset train, test;
  Dataset validation;  // the last examples of the training file, held out (validation_split); may be empty
};

// How many of `n` examples a split holds out: `count` when set, else Keras' rule for a `fraction`
// (the first floor(n * (1 - fraction)) stay). Used for validation_split and data.test_split alike.
inline std::int64_t HeldOutCount(std::int64_t n, std::int64_t count, double fraction) {
  return count > 0 ? count : n - static_cast<std::int64_t>(std::floor(static_cast<double>(n) * (1 - fraction)));
}

// Moves the last `count` examples of `data->train` into `data->validation` (0 < count < train.size):
// the validation images are copied out, and a mapped training file stays mapped. Categorical
// columns then keep the values the training examples left have (FitVocabulary).
void HoldOut(DataSplits* data, std::int64_t count);

// Shrinks each categorical column's vocabulary to the values data->train's examples hold and
// renumbers every split's ids to it (a value only the test or validation examples hold becomes
// out of vocabulary, 0), so that the vocabulary is the training split's after a hold-out.
void FitVocabulary(DataSplits* data);

// `features` (rows x width float32 values) with each categorical column's id rewritten through
// `remap[c]` (old id -> new id; an id past its table becomes 0, out of vocabulary).
ByteArray RenumberCategories(const ByteArray& features, std::int64_t rows, std::int64_t width,
                             const std::vector<CategoricalColumn>& columns, const std::vector<std::vector<float>>& remap);

// SHA-256 (hex) of what a model learns from: the shape, element type, classes (names) or target
// count, and every example's features and labels or targets in order. Two datasets with equal
// fingerprints hold the same examples; a checkpoint and an exported model record their training
// split's, so that resuming on other data is caught.
std::string Fingerprint(const Dataset& data);

// File names of the four MNIST IDX files inside the data folder.
inline constexpr const char* kTrainImages = "train-images-idx3-ubyte";
inline constexpr const char* kTrainLabels = "train-labels-idx1-ubyte";
inline constexpr const char* kTestImages = "t10k-images-idx3-ubyte";
inline constexpr const char* kTestLabels = "t10k-labels-idx1-ubyte";

// Loads an image file and its label file; Corruption when the counts differ or a label is not in
// [0, num_classes), naming the file. The images are a shared read-only mapping of the file
// (MapIdxFile) where it can be mapped, else read into memory; the labels are read.
Result<Dataset> LoadIdxPair(const std::string& images_path, const std::string& labels_path, int num_classes = 10);
// Loads the four files from `dir`; NotFound naming the folder when it does not exist.
Result<DataSplits> LoadMnist(const std::string& dir);

// The training examples worker `index` of `count` uses in `epoch`: a permutation of [0, n)
// seeded by (seed, epoch) (the identity when !shuffle), then every count-th entry from `index`
// (as PyTorch's DistributedSampler). For equal batches, the union of the workers' k-th batches is
// the k-th batch of count * batch examples a single worker would take, which makes sync training
// comparable with one process.
std::vector<std::uint32_t> EpochShard(std::int64_t n, std::uint64_t seed, int epoch, int index, int count, bool shuffle);

// Writes the examples `indices` as the model's floats to `x` (rows of pixels(), normalised by
// data.normalizer) and their labels to `y`; for a regression dataset, their targets to `targets`
// (rows of num_targets) instead, and `y` is not written (it may be null). A dataset without labels
// or targets (examples to predict on), or a null `targets`, writes only `x`.
void FillBatch(const Dataset& data, std::span<const std::uint32_t> indices, float* x, ClassId* y, float* targets = nullptr);

}  // namespace tfd::data
