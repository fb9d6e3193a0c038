#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/config/data_spec.h"
#include "common/data/examples.h"

// The format readers: each reads one split's files into Examples (common/data/examples.h), with
// every error InvalidArgument naming the file and where in it (row and column, array, image,
// record offset). common/data/source.h numbers the classes and normalises, the same for all.
namespace tfd::data {

// InvalidArgument "SOURCE: WHAT": the readers' errors name the file (and array) first.
inline Status SourceError(std::string_view source, const std::string& what) {
  return Status::InvalidArgument(std::string(source) + ": " + what);
}

// CSV (RFC 4180 via libcsv; .gz read through zlib): the spec's header, skip_rows, delimiter,
// columns, label and features. Every feature cell must be a finite number, but in the spec's
// categorical columns, whose strings Examples::categorical indexes (source.h numbers them).
Result<Examples> ReadCsv(const config::DataSpec& spec, const std::vector<std::string>& paths);

// NumPy: features in `x_path` (.npy, shape (N, ...)), labels or targets in `y_path` (shape (N,) or (N, 1)).
Result<Examples> ReadNpyPair(const config::DataSpec& spec, const std::string& x_path, const std::string& y_path);
// NumPy .npz archives, each holding the spec's arrays (npz_x, npz_y); several archives are concatenated.
Result<Examples> ReadNpz(const config::DataSpec& spec, const std::vector<std::string>& paths);

// Image folders (Keras' and PyTorch's layout): each path a folder with one subfolder per class of
// PNG and JPEG files.
Result<Examples> ReadImageFolders(const config::DataSpec& spec, const std::vector<std::string>& paths);

// TFRecord files of tf.train.Example records.
Result<Examples> ReadTfrecords(const config::DataSpec& spec, const std::vector<std::string>& paths);

// An IDX pair of any shape: features (N x ...) of unsigned bytes, labels (N) of unsigned bytes.
Result<Examples> ReadIdxExamples(const std::string& x_path, const std::string& y_path);

}  // namespace tfd::data
