#include "daemon/ps/run_ps.h"

#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/base/service.h"
#include "common/summary/writer.h"
#include "common/transport/listener.h"
#include "common/transport/local_link.h"
#include "daemon/ps/parameter_store.h"
#include "daemon/ps/ps_service.h"
#include "daemon/task/lifecycle.h"

namespace tfd::ps {
namespace {

// The ps's TensorBoard summaries: a point every kEvery while updates come, on the global step
// (docs/observability.md lists the tags). Written and flushed on the io thread: a few dozen bytes.
class PsSummaries {
 public:
  static constexpr std::chrono::seconds kEvery{5};
  explicit PsSummaries(std::unique_ptr<summary::Writer> writer) : writer_(std::move(writer)) {}

  void MaybePoint(ParameterStore& store, std::chrono::steady_clock::time_point now) {
    if (writer_ == nullptr || now < next_) return;
    next_ = now + kEvery;
    const std::uint64_t step = store.global_step();
    const double secs = std::chrono::duration<double>(now - last_).count();
    const ParameterStore::StalenessWindow w = store.TakeStalenessWindow();
    if (step == last_step_) return;
    std::vector<std::pair<std::string, double>> values;
    if (last_step_ > 0 && secs > 0) values.emplace_back("updates_per_sec", static_cast<double>(step - last_step_) / secs);
    if (w.applied > 0) {
      values.emplace_back("staleness/mean", static_cast<double>(w.staleness_sum) / static_cast<double>(w.applied));
      values.emplace_back("staleness/max", static_cast<double>(w.staleness_max));
    }
    std::uint64_t dropped = 0;
    for (std::uint64_t n : store.stale_counts()) dropped += n;
    values.emplace_back("stale_gradients_dropped", static_cast<double>(dropped));
    last_step_ = step;
    last_ = now;
    const double wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    Status s = writer_->Scalars(static_cast<std::int64_t>(step), values, wall);
    if (s.ok()) s = writer_->Flush();
    if (!s.ok()) {
      spdlog::warn("summaries: {}; no more summaries from this task", s.message());
      writer_.reset();
    }
  }
  // The last point, whatever the time.
  void Finish(ParameterStore& store) {
    next_ = {};
    MaybePoint(store, std::chrono::steady_clock::now());
  }

 private:
  std::unique_ptr<summary::Writer> writer_;  // null once a write failed
  std::chrono::steady_clock::time_point next_{}, last_ = std::chrono::steady_clock::now();
  std::uint64_t last_step_ = 0;
};

}  // namespace

Status RunPs(const config::TfConfig& config, EventWriter& events, const PsOptions& options) {
  namespace asio = transport::asio;
  asio::io_context ioc(1);
  const std::uint64_t incarnation = task::NewIncarnation();
  ParameterStore store;
  std::optional<PsService::Ending> ending;  // set on the io thread
  asio::steady_timer stopper(ioc);
  std::set<std::shared_ptr<transport::Connection>> connections;
  std::mutex connections_mu;
  PsService::Limits limits;
  limits.worker_return_timeout = options.worker_return_timeout;
  limits.startup_timeout = options.startup_timeout;
  limits.end_grace = options.connection.peer_timeout;
  if (options.metrics != nullptr) options.metrics->AddPsMetrics();
  PsService service(config, incarnation, store, events, limits, [&](const PsService::Ending& end) {
    // Let the last answers reach their workers, then stop.
    asio::post(ioc, [&, end] {
      ending = end;
      stopper.expires_after(std::chrono::milliseconds(200));
      stopper.async_wait([&](const boost::system::error_code&) { ioc.stop(); });
    });
  }, options.metrics);
  // This ps's admission control: every connection it accepts shares the per-address cap on
  // handshakes in progress, and counts its refusals there.
  transport::ConnectionOptions connection = options.connection;
  if (connection.guard == nullptr) connection.guard = std::make_shared<transport::PeerGuard>();
  const config::Endpoint& self = config.self();
  TFD_ASSIGN_OR_RETURN(std::unique_ptr<transport::Listener> listener,
                       transport::Listener::Bind(ioc, options.bind_address, self.port, [&](transport::tcp::socket socket) {
                         const std::string remote = transport::PeerAddress(socket, /*with_port=*/true);
                         auto conn = std::make_shared<transport::Connection>(
                             std::move(socket), service, remote.empty() ? std::string("a peer") : remote,
                             connection);
                         {
                           std::lock_guard<std::mutex> lock(connections_mu);
                           std::erase_if(connections, [](const auto& c) { return c->closed(); });  // forget closed ones
                           connections.insert(conn);
                         }
                         conn->Start();
                       }));
  std::optional<PsSummaries> summaries;
  if (!options.summaries_dir.empty()) {
    TFD_ASSIGN_OR_RETURN(std::unique_ptr<summary::Writer> writer, summary::Writer::Open(options.summaries_dir, config.task.ToString()));
    spdlog::info("summaries: {}", writer->path());
    summaries.emplace(std::move(writer));
  }
  listener->Start();
  spdlog::info("{} listening on {}:{} (incarnation {:016x}); {} workers, cluster id {:016x}", config.task.ToString(),
               options.bind_address.empty() ? "*" : options.bind_address, self.port, incarnation, config.cluster.num_workers(),
               config.cluster.Id());
  task::EmitStart(events, {.role = "ps", .rank = config.task.index, .extra = {{"port", std::int64_t{self.port}}}});
  NotifyReady(fmt::format("{} listening on port {}", config.task.ToString(), self.port));

  // Poll the signal flag; log while nobody has initialised the variables.
  asio::steady_timer poll(ioc);
  auto started = std::chrono::steady_clock::now();
  auto next_wait_log = started + std::chrono::seconds(10);
  bool stopped = false;
  std::function<void()> arm = [&] {
    poll.expires_after(std::chrono::milliseconds(50));
    poll.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      if (options.stop != nullptr && options.stop->load()) {
        NotifyStopping();
        stopped = true;
        ioc.stop();
        return;
      }
      const auto now = std::chrono::steady_clock::now();
      service.Tick(now);
      if (summaries) summaries->MaybePoint(store, now);
      if (!store.initialized() && now >= next_wait_log) {
        spdlog::info("waiting for the chief ({} at {}) to initialise the variables",
                     config.cluster.WorkerTask(0).ToString(), config.cluster.EndpointOf(config.cluster.WorkerTask(0)).ToString());
        next_wait_log = now + std::chrono::seconds(30);
      }
      arm();
    });
  };
  arm();
  ioc.run();
  // Close every socket before returning, and let the closes run.
  listener->Stop();
  {
    std::lock_guard<std::mutex> lock(connections_mu);
    for (const auto& c : connections) c->Close(Status::Unavailable("ps shutting down"));
  }
  poll.cancel();
  ioc.restart();
  ioc.run_for(std::chrono::milliseconds(100));
  if (summaries) summaries->Finish(store);
  const transport::RefusalCounts refused = connection.guard->counts();
  if (refused.total() > 0) spdlog::info("refused connections: {}", refused.ToString());
  const auto stale = store.stale_counts();
  for (std::size_t w = 0; w < stale.size(); ++w)
    if (stale[w] > 0) spdlog::info("dropped {} stale gradients from {}", stale[w], config.cluster.WorkerTask(static_cast<int>(w)).ToString());
  if (!ending) return Status::FailedPrecondition(fmt::format("stopped by a signal at global_step {}", store.global_step()));
  if (!ending->ok) return Status::FailedPrecondition(ending->message);
  spdlog::info("{}", ending->message);
  const PsService::TimeSpent work = service.time_spent();
  spdlog::info("its own time: {} pushes applied in {:.2f} s ({:.0f} us each), {} parameter replies built in {:.2f} s ({:.0f} us each)",
               work.pushes, work.apply_s, work.pushes > 0 ? 1e6 * work.apply_s / static_cast<double>(work.pushes) : 0.0, work.replies,
               work.reply_s, work.replies > 0 ? 1e6 * work.reply_s / static_cast<double>(work.replies) : 0.0);
  events.Emit("done", {{"global_step", static_cast<std::int64_t>(store.global_step())},
                       {"workers_done", std::int64_t{ending->workers_done}},
                       {"refused_connections", static_cast<std::int64_t>(refused.total())},
                       {"pushes", static_cast<std::int64_t>(work.pushes)},
                       {"apply_s", work.apply_s},
                       {"replies", static_cast<std::int64_t>(work.replies)},
                       {"reply_s", work.reply_s}});
  return Status::Ok();
}

}  // namespace tfd::ps
