#pragma once

// TensorFlow Serving's REST API over one model (docs/serving.md): routes a request, answers the
// status and metadata itself, queues :predict for the batcher, and counts everything in the
// registry it serves on /metrics.
//
// Threads: Handle runs on the HTTP server's thread; a predict's answer is sent from the batcher
// thread. ServeApi must outlive the Batcher and the Server (they call back into it).

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/http/server.h"
#include "common/metrics/registry.h"
#include "common/transport/auth.h"
#include "daemon/serve/batcher.h"
#include "daemon/serve/servable.h"

namespace tfd::serve {

struct ApiOptions {
  std::string name;                             // the model's name in the URLs
  std::chrono::milliseconds deadline{10000};    // per predict request, from its arrival
  std::optional<transport::ClusterToken> token;  // set: every path but /healthz wants "Authorization: Bearer HEX"
  int batch_max = 64;                           // the batch-size histogram's top bucket
};

class ServeApi {
 public:
  ServeApi(ApiOptions options, ModelManager& models, metrics::Registry& registry);

  // Call once the batcher exists, before the server starts.
  void SetBatcher(Batcher* batcher) { batcher_ = batcher; }

  void Handle(http::Request request, http::Respond respond);
  // The answer the server gives itself (413, 408) as JSON, counted.
  http::Response Refusal(int status, std::string_view message);
  void ObserveBatch(int rows) { batch_rows_->Observe(rows); }
  void CountLoadFailure() { load_failures_->Increment(); }

 private:
  http::Response Answer(int status, std::string body, std::string content_type = "application/json");
  http::Response Error(int status, std::string_view message) { return Answer(status, ErrorJson(message)); }
  http::Response Route(const http::Request& request, const http::Respond& respond, bool* queued);
  http::Response Predict(const http::Request& request, std::shared_ptr<const Servable> servable, const http::Respond& respond, bool* queued);
  std::string StatusJson(const Servable& s) const;
  std::string MetadataJson(const Servable& s) const;
  bool Authorized(const http::Request& request) const;
  void Count(int status);

  const ApiOptions options_;
  ModelManager& models_;
  metrics::Registry& registry_;
  Batcher* batcher_ = nullptr;
  metrics::Histogram* latency_;
  metrics::Histogram* batch_rows_;
  metrics::Counter* load_failures_;
};

}  // namespace tfd::serve
