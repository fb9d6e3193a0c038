#pragma once

// The served versions of one model: the newest version folder of a base, loaded, and swapped for a
// newer one when it appears (TensorFlow Serving's version policy "latest").
//
// Threads: the poller thread calls Poll(); any thread calls Current() and Find(). A Servable is
// shared: a request holds the version it resolved until it is answered, so a swap never touches a
// version in flight; its Predict is called by the batcher thread only (model::Model is not thread-safe).

#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/base/mutex.h"
#include "common/base/status.h"
#include "common/export/model_dir.h"
#include "daemon/serve/request.h"

namespace tfd::serve {

class Servable {
 public:
  Servable(std::uint64_t version, exporting::LoadedModel loaded, int max_batch);

  std::uint64_t version() const { return version_; }
  const exporting::LoadedModel& loaded() const { return loaded_; }
  const Signature& signature() const { return signature_; }

  // The outputs (rows x signature().outputs) of `rows` raw examples (at most max_batch), and for a
  // classifier their softmax into `probabilities`. The batcher thread only.
  void Predict(std::span<const float> raw, int rows, std::vector<float>* outputs, std::vector<float>* probabilities) const;

 private:
  std::uint64_t version_;
  exporting::LoadedModel loaded_;
  Signature signature_;
  mutable std::vector<float> x_;  // the normalised batch
};

class ModelManager {
 public:
  // Loads the newest version in `base`; its error names the folder and the file.
  static Result<std::unique_ptr<ModelManager>> Open(const std::string& base, int max_batch, tensor::GemmConfig gemm);

  std::shared_ptr<const Servable> Current() const TFD_EXCLUDES(mu_);
  // The version `version` while it is the one served, else null (an unloaded version is gone).
  std::shared_ptr<const Servable> Find(std::uint64_t version) const TFD_EXCLUDES(mu_);

  // Loads a version newer than the one served (the newest; one that failed to load before is not
  // tried again) off the serving path and swaps it in. The swapped version when it did, 0 when
  // there was none; an error (logged by the caller) naming the folder when the newest failed.
  Result<std::uint64_t> Poll() TFD_EXCLUDES(mu_);

  const std::string& base() const { return base_; }

 private:
  ModelManager(std::string base, int max_batch, tensor::GemmConfig gemm) : base_(std::move(base)), max_batch_(max_batch), gemm_(gemm) {}
  Result<std::shared_ptr<const Servable>> LoadNumber(std::uint64_t version) const;

  const std::string base_;
  const int max_batch_;
  const tensor::GemmConfig gemm_;
  std::set<std::uint64_t> failed_;  // the poller thread's own
  mutable Mutex mu_;
  std::shared_ptr<const Servable> current_ TFD_GUARDED_BY(mu_);
};

}  // namespace tfd::serve
