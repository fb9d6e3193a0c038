#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "common/base/status.h"
#include "common/http/server.h"
#include "common/metrics/registry.h"
#include "common/metrics/task_metrics.h"
#include "common/transport/peer_guard.h"

namespace tfd::task {

// A task's Prometheus endpoint (tfd --metrics ADDR:PORT): /metrics renders the task's registry,
// /healthz says the task, its phase and global step, anything else is a 404.
//
// Threads: the http server's thread reads the registry and the phase; the task's threads update the
// metrics (thread-safe by the registry) and SetPhase. Destroying it stops the server first.
class MetricsEndpoint {
 public:
  struct Options {
    std::string host;                  // as --metrics gave it ("127.0.0.1", "" for every interface)
    std::uint16_t port = 0;            // 0: a free one (logged)
    metrics::Labels labels;            // on every sample: job, task and run
    std::string task;                  // the task's name, for /healthz
    bool training = false;             // the role trains: the training metrics are added
    bool serves_peers = false;         // a ps or ring member: its refusals are counted (guard())
  };
  // Starts serving. InvalidArgument "--metrics: ..." when the address cannot be bound.
  static Result<std::unique_ptr<MetricsEndpoint>> Start(const Options& options);
  ~MetricsEndpoint();

  metrics::TaskMetrics& metrics() { return *metrics_; }
  // The admission control whose refusals are counted here; null unless serves_peers. The role's
  // server shares it (transport::ConnectionOptions::guard).
  const std::shared_ptr<transport::PeerGuard>& guard() const { return guard_; }
  // What the task is doing, for /healthz: "starting", "running", "finished" or "failed". Static strings only.
  void SetPhase(const char* phase) { phase_.store(phase); }
  std::string address() const { return server_->address(); }

 private:
  MetricsEndpoint() = default;

  std::unique_ptr<metrics::Registry> registry_;
  std::unique_ptr<metrics::TaskMetrics> metrics_;
  std::shared_ptr<transport::PeerGuard> guard_;
  std::atomic<const char*> phase_{"starting"};
  std::unique_ptr<http::Server> server_;  // last: stopped first, as its handler reads the above
};

}  // namespace tfd::task
