#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/base/status.h"

namespace tfd::config {

// Reads typed fields of one JSON object, recording the first error into a Status shared by every
// reader of one document, as "SOURCE: PATH.KEY: what was expected, got WHAT". Keys never read count
// as unknown in Finish(). Internal to common/config.
class ObjectReader {
 public:
  // `j` and `*status` must outlive the reader. `path` is the object's JSON path ("" for the root).
  ObjectReader(const nlohmann::json& j, std::string source, std::string path, Status* status);
  // A reader for the object at `key` of this one (marking `key` known), sharing the status.
  ObjectReader Child(const nlohmann::json& j, std::string path) const { return ObjectReader(j, source_, std::move(path), status_); }

  bool Has(std::string_view key) const;
  const nlohmann::json* Get(std::string_view key);  // marks the key as known; null if absent

  // Each reads `key` if present (else leaves *out unchanged, or fails when `required`).
  void Int(std::string_view key, std::int64_t min, std::int64_t max, std::int64_t* out, bool required = false);
  void Int(std::string_view key, int min, int max, int* out, bool required = false);
  void Double(std::string_view key, double min, double max, bool min_exclusive, double* out, bool required = false);
  void String(std::string_view key, std::string* out, bool required = false);
  void Bool(std::string_view key, bool* out);

  std::string PathOf(std::string_view key) const;
  std::string PathOf(std::string_view key, std::size_t index) const;
  void Fail(const std::string& path, const std::string& what);
  // Ok, or the first error; also an error for any key nobody asked for.
  Status Finish();
  const Status& status() const { return *status_; }
  const std::string& source() const { return source_; }

 private:
  const nlohmann::json& j_;
  std::string source_, path_;
  std::set<std::string, std::less<>> known_;
  Status* status_;
};

// The whole file at `path`; NotFound naming it and `what` ("the job file") when it cannot be read.
Result<std::string> ReadTextFile(const std::string& path, std::string_view what);

struct JobSpec;
struct CompressionSpec;
// Reads update.compression from `update` (the "update" object's reader) for `allreduce` or a ps
// mode (common/config/compression.cc); errors go to its status.
void ReadCompression(ObjectReader& update, bool allreduce, CompressionSpec* out);
struct DataSpec;
// Reads the job's "data" (common/config/data_spec.h) from `root`; errors go to its status.
void ReadDataSpec(ObjectReader& root, DataSpec* d);
struct ModelSpec;
// Reads the job's "model" from `root`; errors go to its status.
void ReadModel(ObjectReader& root, ModelSpec* model);
// Reads a job spec from the object `r` reads (for a job file, or the "train" object of a cluster
// file); errors go to r's status.
JobSpec ReadJobSpec(ObjectReader& r);

// A short description of a JSON value for error messages: `"abc"`, `-5`, `an object`.
std::string Describe(const nlohmann::json& v);

}  // namespace tfd::config
