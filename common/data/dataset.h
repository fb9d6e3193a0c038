#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

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

// Labelled images kept as bytes (one uint8 per pixel); converted to floats one batch at a time.
// LoadIdxPair maps an image file that can be mapped, so the tasks of one host share its pages.
struct Dataset {
  std::int64_t size = 0;
  int height = 0, width = 0, channels = 1;
  int num_classes = 10;
  ByteArray images;                  // size x height x width x channels
  std::vector<std::uint8_t> labels;  // size, each < num_classes

  std::int64_t pixels() const { return std::int64_t{height} * width * channels; }
};

struct MnistData {
  Dataset train, test;
  Dataset validation;  // the last examples of the training file, held out (validation_split); may be empty
};

// Moves the last `count` examples of `data->train` into `data->validation` (0 < count < train.size):
// the validation images are copied out, and a mapped training file stays mapped.
void HoldOut(MnistData* data, std::int64_t count);

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
Result<MnistData> LoadMnist(const std::string& dir);

// The training examples worker `index` of `count` uses in `epoch`: a permutation of [0, n)
// seeded by (seed, epoch) (the identity when !shuffle), then every count-th entry from `index`
// (as PyTorch's DistributedSampler). For equal batches, the union of the workers' k-th batches is
// the k-th batch of count * batch examples a single worker would take, which makes sync training
// comparable with one process.
std::vector<std::uint32_t> EpochShard(std::int64_t n, std::uint64_t seed, int epoch, int index, int count, bool shuffle);

// Writes the examples `indices` as floats in [0, 1] to `x` (rows of pixels()) and their labels to `y`.
void FillBatch(const Dataset& data, std::span<const std::uint32_t> indices, float* x, std::uint8_t* y);

}  // namespace tfd::data
