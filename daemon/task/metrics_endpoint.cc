#include "daemon/task/metrics_endpoint.h"

#include <fmt/format.h>

namespace tfd::task {

MetricsEndpoint::~MetricsEndpoint() { server_.reset(); }

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const Options& options) {
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  e->registry_ = std::make_unique<metrics::Registry>(options.labels);
  e->metrics_ = std::make_unique<metrics::TaskMetrics>(*e->registry_);
  if (options.training) e->metrics_->AddTrainingMetrics();
  if (options.serves_peers) {
    e->guard_ = std::make_shared<transport::PeerGuard>();
    e->metrics_->AddRefusals([g = e->guard_](std::size_t reason) {
      const transport::RefusalCounts c = g->counts();
      const std::uint64_t by_reason[] = {c.malformed, c.authentication, c.handshake_timeout, c.busy, c.mismatch};
      return by_reason[reason];
    });
  }
  MetricsEndpoint* self = e.get();
  Result<std::unique_ptr<http::Server>> server =
      http::Server::Start(options.host, options.port, [self, task = options.task](const http::Request& req) {
        http::Response r;
        const std::string path = req.target.substr(0, req.target.find('?'));
        if (path == "/metrics") {
          r.content_type = std::string(metrics::kContentType);
          r.body = self->metrics_->registry().Render();
        } else if (path == "/healthz") {
          r.body = fmt::format("ok {} {} global_step={:.0f}\n", task, self->phase_.load(), self->metrics_->global_step->value());
        } else {
          r.status = 404;
          r.body = "not found: this task serves /metrics and /healthz\n";
        }
        return r;
      });
  if (!server.ok()) return Status::InvalidArgument("--metrics: " + server.status().message());
  e->server_ = std::move(server).value();
  return e;
}

}  // namespace tfd::task
