#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tfd::config {

// Where one split's examples are read from: files (each a path or a glob; together one source, in
// the order given, a glob's matches sorted), or, for formats that keep features and labels apart
// (.npy, an IDX pair), an `x` and a `y` file.
struct DataFiles {
  std::vector<std::string> paths;
  std::string x, y;
  bool empty() const { return paths.empty() && x.empty(); }
};

// The job's "data" (docs/data.md). A string is the MNIST IDX folder (`folder`); an object names
// the files and how to read them.
struct DataSpec {
  enum class Format { kMnistFolder, kCsv, kNpy, kNpz, kImages, kTfrecord, kIdx };
  enum class Task { kClassification, kRegression };
  enum class Normalize { kDefault, kScale, kStandardize, kNone };

  Format format = Format::kMnistFolder;
  std::string folder;      // kMnistFolder: the four MNIST IDX files
  DataFiles train, test;   // test empty: held out from train by test_split
  double test_fraction = 0;      // of the training files' examples, held out by a seeded shuffle
  std::int64_t test_count = 0;   // ... or a count of them
  // Seeds that shuffle ("split_seed"); unset: the job's seed. An ensemble's members (seed + k) share
  // the ensemble's, so they hold out the same test set.
  std::optional<std::uint64_t> split_seed;
  Task task = Task::kClassification;
  // Regression: the loss minimised ("loss": mse, the default, or mae); classification always
  // trains on softmax cross-entropy.
  enum class Loss { kMse, kMae };
  Loss loss = Loss::kMse;
  // The label (or regression target) column: by name, or by index (-1: the last column).
  std::string label;
  int label_index = -1;
  // The feature columns by name or index; both empty: every column but the label.
  std::vector<std::string> feature_names;
  std::vector<int> feature_indices;
  // CSV: the feature columns whose cells are category strings (by name or index, as features):
  // each becomes a category id through a vocabulary built from the training split (docs/data.md).
  std::vector<std::string> categorical_names;
  std::vector<int> categorical_indices;
  bool has_categorical() const { return !categorical_names.empty() || !categorical_indices.empty(); }
  // CSV: whether the first row names the columns (else `columns` may); unset: it does unless every
  // one of its cells is a number. Rows skipped before it; the delimiter.
  std::optional<bool> header;
  int skip_rows = 0;
  char delimiter = ',';
  std::vector<std::string> columns;
  // Class names in id order; empty: the data's labels, sorted (numbers numerically).
  std::vector<std::string> classes;
  // Images (folders, TFRecord bytes): resized to height x width when set; channels 1 (grayscale) or
  // 3 (RGB), 0: the first image's.
  int image_height = 0, image_width = 0, channels = 0;
  // .npz: the arrays holding features and labels.
  std::string npz_x = "x", npz_y = "y";
  Normalize normalize = Normalize::kDefault;
  // Predicting (tfd predict), not a job field: when > 0, a file may lack the label. A CSV does when
  // the label named is not among its columns, or (a label by position, no features named) when it
  // has exactly this many columns; an .npy pair when no labels file is named; an .npz without its
  // "y" array. The reader then fills no labels or targets.
  int unlabeled_width = 0;

  bool regression() const { return task == Task::kRegression; }
  bool is_mnist_folder() const { return format == Format::kMnistFolder; }
  // Whether a test set is held out of the training files (no `test`, a test_split given; `tfd data
  // inspect` of a bare file has neither).
  bool held_out_test() const { return test.empty() && format != Format::kMnistFolder && (test_count > 0 || test_fraction > 0); }
  // For logs and errors: the folder, or the first training file.
  std::string Describe() const;
  // Every path the spec names that is not a glob, with its field ("data", "data.train[0]",
  // "data.test.x"): what a launcher can check on each host before a run.
  std::vector<std::pair<std::string, std::string>> NamedPaths() const;
};

std::string_view FormatName(DataSpec::Format f);
std::string_view NormalizeName(DataSpec::Normalize n);
std::string_view LossName(DataSpec::Loss l);
// The format a file's name implies (.csv, .csv.gz, .tsv, .npy, .npz, .tfrecord/.tfrecords, .idx/-ubyte);
// false when it implies none (a folder of images is named by "format": "images").
bool FormatFromName(std::string_view path, DataSpec::Format* out);

}  // namespace tfd::config
