// A ps (ParameterStore + PsService behind a Listener on port 0) and one or two PsClients in this
// one process, over loopback TCP: the INIT, pull, push and DONE conversation end to end, with no
// tfd process and no model. The values are chosen so every expected parameter is exact in float.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/base/logging.h"
#include "common/transport/listener.h"
#include "daemon/ps/parameter_store.h"
#include "daemon/ps/ps_service.h"
#include "daemon/worker/placement.h"
#include "daemon/worker/ps_client.h"

namespace tfd::testing::ps_loopback_test {
namespace {

using namespace std::chrono_literals;
namespace asio = transport::asio;

const std::vector<float> kInitial = {1.0f, 2.0f, 3.0f, 4.0f};

// ps:0 of a cluster of `num_workers` workers, serving on an io_context thread of its own.
class LoopbackPs {
 public:
  explicit LoopbackPs(int num_workers, ps::PsService::Limits limits = {}) : events_(stdout, "ps:0", /*enabled=*/false) {
    for (int w = 0; w < num_workers; ++w) config_.cluster.worker.push_back({"127.0.0.1", static_cast<std::uint16_t>(1 + w)});
    config_.task = {config::TaskType::kPs, 0};
    auto listener = transport::Listener::Bind(ioc_, "127.0.0.1", 0, [this](transport::tcp::socket socket) {
      auto conn = std::make_shared<transport::Connection>(std::move(socket), *service_, "a worker", transport::ConnectionOptions{});
      {
        std::lock_guard<std::mutex> lock(conns_mu_);
        conns_.push_back(conn);
      }
      conn->Start();
    });
    REQUIRE(listener.ok());
    listener_ = std::move(*listener);
    config_.cluster.ps.push_back({"127.0.0.1", listener_->port()});
    // The service takes the cluster id from the finished config, so it comes after the bind.
    service_ = std::make_unique<ps::PsService>(config_, /*incarnation=*/0x5e, store_, events_, limits, [this](const ps::PsService::Ending& end) {
      std::lock_guard<std::mutex> lock(ending_mu_);
      ending_ = end;
      all_done_.store(end.ok);
    });
    listener_->Start();
    thread_ = std::thread([this] { ioc_.run(); });
  }

  ~LoopbackPs() {
    asio::post(ioc_, [this] {
      listener_->Stop();
      std::lock_guard<std::mutex> lock(conns_mu_);
      for (const auto& c : conns_) c->Close(Status::Unavailable("test over"));
    });
    // Let the closes run, then stop.
    asio::steady_timer stop(ioc_, 200ms);
    stop.async_wait([this](const boost::system::error_code&) { ioc_.stop(); });
    thread_.join();
  }

  // The TF_CONFIG of worker `rank` (worker 0 is the chief: the cluster has no chief task).
  config::TfConfig WorkerConfig(int rank) const {
    config::TfConfig c = config_;
    c.task = {config::TaskType::kWorker, rank};
    return c;
  }
  ps::ParameterStore& store() { return store_; }
  bool all_done() const { return all_done_.load(); }
  // What the service has recorded of worker `rank` (its connection, loss, give-up or DONE).
  ps::PsService::WorkerState worker(int rank) const { return service_->WorkerStateOf(rank); }
  // The service's clock check as if `later` had passed since now.
  void Tick(std::chrono::seconds later) { service_->Tick(std::chrono::steady_clock::now() + later); }
  std::optional<ps::PsService::Ending> ending() {
    std::lock_guard<std::mutex> lock(ending_mu_);
    return ending_;
  }

 private:
  config::TfConfig config_;
  ps::ParameterStore store_;
  EventWriter events_;
  std::atomic<bool> all_done_{false};
  std::mutex ending_mu_;
  std::optional<ps::PsService::Ending> ending_;  // guarded by ending_mu_
  std::unique_ptr<ps::PsService> service_;  // outlives the io_context, which may still hold connections
  asio::io_context ioc_{1};
  std::unique_ptr<transport::Listener> listener_;
  std::mutex conns_mu_;
  std::vector<std::shared_ptr<transport::Connection>> conns_;  // guarded by conns_mu_
  std::thread thread_;
};

// The workers' side: an io_context thread shared by their clients, and one placement (one variable
// of four floats on the one ps).
class Workers {
 public:
  Workers() : guard_(asio::make_work_guard(ioc_)), thread_([this] { ioc_.run(); }) {
    placement_ = worker::Place({{"w", 0, static_cast<std::int64_t>(kInitial.size())}}, 1, config::Placement::kBalanced);
  }
  ~Workers() {
    for (auto& c : clients_) c->Close();
    clients_.clear();
    guard_.reset();
    asio::steady_timer stop(ioc_, 200ms);
    stop.async_wait([this](const boost::system::error_code&) { ioc_.stop(); });
    thread_.join();
  }

  worker::PsClient& Connect(const config::TfConfig& config, std::uint64_t incarnation,
                            std::optional<wire::GradEncoding> encoding = std::nullopt) {
    worker::PsClientOptions options;
    options.encoding = encoding;
    options.startup_timeout = 10s;
    options.step_timeout = 10s;
    options.reconnect_timeout = 1s;
    auto client = worker::PsClient::Connect(ioc_, config, incarnation, placement_, options);
    INFO(client.status().ToString());
    REQUIRE(client.ok());
    clients_.push_back(std::move(*client));
    return *clients_.back();
  }
  // Connect's outcome, success not required (a ps that refuses this worker).
  Status TryConnect(const config::TfConfig& config, std::uint64_t incarnation) {
    worker::PsClientOptions options;
    options.startup_timeout = 2s;
    auto client = worker::PsClient::Connect(ioc_, config, incarnation, placement_, options);
    if (!client.ok()) return client.status();
    clients_.push_back(std::move(*client));
    return Status::Ok();
  }

 private:
  asio::io_context ioc_{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
  worker::Placement placement_;
  std::vector<std::unique_ptr<worker::PsClient>> clients_;
};

config::OptimizerSpec Sgd() {
  config::OptimizerSpec sgd;
  sgd.type = config::OptimizerSpec::Type::kSgd;
  sgd.learning_rate = 0.5;
  return sgd;
}

config::UpdateSpec Update(config::UpdateSpec::Mode mode) {
  config::UpdateSpec u;
  u.mode = mode;
  u.scale_stale = false;  // async: plain p - lr * g, whatever the staleness
  return u;
}

wire::Push Tag(std::uint32_t rank, std::uint64_t incarnation, std::uint64_t local_step) {
  wire::Push tag;
  tag.worker = rank;
  tag.incarnation = incarnation;
  tag.local_step = local_step;
  return tag;
}

void Ok(const Status& s) {
  INFO(s.ToString());
  REQUIRE(s.ok());
}

// Waits until `done()`, for up to 30 s: what it waits for comes within milliseconds, and the limit
// only ends a test that would otherwise hang (on a loaded machine, a thread may wait seconds for a core).
template <typename F>
bool Eventually(F done) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// ps:0 and both workers of its cluster, initialised with sgd (learning rate 0.5) in `mode`: the
// chief's INIT carries kInitial, the other worker's WAIT_READY is answered once the ps holds them.
struct TwoWorkers {
  explicit TwoWorkers(config::UpdateSpec::Mode mode, config::UpdateSpec::OnWorkerLoss on_loss = config::UpdateSpec::OnWorkerLoss::kFail,
                      ps::PsService::Limits limits = {}, bool scale_stale = false)
      : ps(2, limits), chief(workers.Connect(ps.WorkerConfig(0), 11)), other(workers.Connect(ps.WorkerConfig(1), 22)) {
    config::UpdateSpec update = Update(mode);
    update.on_worker_loss = on_loss;
    update.scale_stale = scale_stale;
    Ok(chief.Initialize(/*chief=*/true, Sgd(), update, kInitial));
    CHECK(ps.store().initialized());
    CHECK(ps.store().size() == 4);
    std::vector<float> scratch(4, 9.0f);
    Ok(other.Initialize(/*chief=*/false, Sgd(), update, scratch));
  }
  // DONE from one worker ends nothing (and its ack waits, the other worker being still connected
  // and unaware of it); from both, the service calls on_all_done and answers both.
  void DoneFromBoth() {
    std::future<Status> chief_done = std::async(std::launch::async, [&] { return chief.Done(0, kInitial); });
    CHECK(chief_done.wait_for(100ms) == std::future_status::timeout);
    CHECK_FALSE(ps.all_done());
    Ok(other.Done(1, kInitial));
    CHECK(Eventually([&] { return ps.all_done(); }));
    REQUIRE(chief_done.wait_for(30s) == std::future_status::ready);
    Ok(chief_done.get());
  }

  LoopbackPs ps;
  Workers workers;  // closed before the ps stops
  worker::PsClient& chief;
  worker::PsClient& other;
};

TEST_CASE("async over loopback: INIT, pull, pushes applied as sgd says, a duplicate once, DONE from all", "[integration][ps]") {
  TwoWorkers c(config::UpdateSpec::Mode::kAsync);
  CHECK_FALSE(c.ps.store().sync());
  std::vector<float> params(4, -1.0f);
  Result<std::uint64_t> step = c.other.Pull(params, /*sync=*/false);
  REQUIRE(step.ok());
  CHECK(*step == 0);
  CHECK(params == kInitial);

  // p - 0.5 g, applied at once and pulled back in the same round trip.
  const std::vector<float> g0 = {2.0f, 4.0f, -2.0f, 0.0f};
  Result<worker::PsClient::StepResult> r = c.chief.PushPull(Tag(0, 11, 1), g0, params, /*sync=*/false);
  REQUIRE(r.ok());
  CHECK(r->global_step == 1);
  CHECK(params == std::vector<float>{0.0f, 0.0f, 4.0f, 4.0f});
  const std::vector<float> g1 = {1.0f, -1.0f, 1.0f, 2.0f};
  r = c.other.PushPull(Tag(1, 22, 1), g1, params, /*sync=*/false);
  REQUIRE(r.ok());
  CHECK(r->global_step == 2);
  CHECK(params == std::vector<float>{-0.5f, 0.5f, 3.5f, 3.0f});

  // The same push again (same incarnation and local step: a retry) is not applied a second time.
  r = c.other.PushPull(Tag(1, 22, 1), g1, params, /*sync=*/false);
  REQUIRE(r.ok());
  CHECK(r->global_step == 2);
  CHECK(params == std::vector<float>{-0.5f, 0.5f, 3.5f, 3.0f});
  CHECK(c.ps.store().global_step() == 2);

  c.DoneFromBoth();
}

TEST_CASE("async, overlap: a gradient computed before the last exchange completed is scaled by its true staleness",
          "[integration][ps]") {
  TwoWorkers c(config::UpdateSpec::Mode::kAsync, config::UpdateSpec::OnWorkerLoss::kFail, {}, /*scale_stale=*/true);
  std::vector<float> params(4, -1.0f);
  REQUIRE(c.chief.Pull(params, /*sync=*/false).ok());
  REQUIRE(c.chief.steps() == std::vector<std::uint64_t>{0});
  // Exchange 1 travels while the next gradient is computed, on the same step-0 parameters.
  const std::vector<float> g0 = {2.0f, 4.0f, -2.0f, 0.0f};
  c.chief.StartPushPull(Tag(0, 11, 1), g0, /*sync=*/false, nullptr, c.chief.steps());
  const std::vector<std::uint64_t> g1_computed_on = c.chief.steps();
  const std::vector<float> g1 = {4.0f, -4.0f, 8.0f, 2.0f};
  Result<worker::PsClient::StepResult> r = c.chief.CompletePushPull(params);
  REQUIRE(r.ok());
  CHECK(r->global_step == 1);
  CHECK(params == std::vector<float>{0.0f, 0.0f, 4.0f, 4.0f});
  CHECK(c.chief.steps() == std::vector<std::uint64_t>{1});
  // g1 is older than the parameters this worker now holds: applied at step 1 on step 0's
  // parameters, its staleness is 1 and half of it is applied (p - 0.5 * g1 / 2).
  c.chief.StartPushPull(Tag(0, 11, 2), g1, /*sync=*/false, nullptr, g1_computed_on);
  r = c.chief.CompletePushPull(params);
  REQUIRE(r.ok());
  CHECK(r->global_step == 2);
  CHECK(params == std::vector<float>{-1.0f, 1.0f, 2.0f, 3.5f});
  // Without computed_on the push claims the parameters held now (step 2): staleness 0, all of it.
  c.chief.StartPushPull(Tag(0, 11, 3), g1, /*sync=*/false, nullptr);
  r = c.chief.CompletePushPull(params);
  REQUIRE(r.ok());
  CHECK(r->global_step == 3);
  CHECK(params == std::vector<float>{-3.0f, 3.0f, -2.0f, 2.5f});
  c.DoneFromBoth();
}

TEST_CASE("sync over loopback: a step of two workers applies the average of their gradients once", "[integration][ps]") {
  TwoWorkers c(config::UpdateSpec::Mode::kSync);
  CHECK(c.ps.store().sync());
  CHECK(c.ps.store().to_aggregate() == 2);

  // Both exchanges go out before either waits: each pull is answered once the second gradient
  // has completed the step.
  const std::vector<float> g0 = {2.0f, 4.0f, -2.0f, 0.0f}, g1 = {6.0f, 0.0f, 2.0f, 4.0f};
  c.chief.StartPushPull(Tag(0, 11, 1), g0, /*sync=*/true, nullptr);
  c.other.StartPushPull(Tag(1, 22, 1), g1, /*sync=*/true, nullptr);
  std::vector<float> p0(4, -1.0f), p1(4, -1.0f);
  Result<worker::PsClient::StepResult> r0 = c.chief.CompletePushPull(p0);
  Result<worker::PsClient::StepResult> r1 = c.other.CompletePushPull(p1);
  REQUIRE(r0.ok());
  REQUIRE(r1.ok());
  CHECK(r0->global_step == 1);
  CHECK(r1->global_step == 1);
  CHECK(r0->stale == 0);
  CHECK(r1->stale == 0);
  // mean = (4, 2, 0, 2); p - 0.5 * mean, once.
  const std::vector<float> expected = {-1.0f, 1.0f, 3.0f, 3.0f};
  CHECK(p0 == expected);
  CHECK(p1 == expected);
  CHECK(c.ps.store().global_step() == 1);

  c.DoneFromBoth();
}

// No wait is forever: the ps gives up on a worker away past the return timeout (60 s by default;
// Tick is handed a clock that far ahead instead of waiting for it). A clock moved ahead acts on
// what the ps has recorded by then, so each test moves it only once the ps has recorded the event
// it must follow: a worker Tick does not know connected and then lost counts as one that never
// connected, which the startup timeout (120 s) gives up on with another message.

using WorkerState = ps::PsService::WorkerState;

TEST_CASE("async: the ps gives up on a lost worker and, the chief done, ends with success naming it", "[integration][ps][fault]") {
  TwoWorkers c(config::UpdateSpec::Mode::kAsync);
  REQUIRE(c.ps.worker(1) == WorkerState::kConnected);  // its WAIT_READY was answered
  c.other.Close();  // lost before its DONE
  Ok(c.chief.Done(0, kInitial));
  REQUIRE(Eventually([&] { return c.ps.worker(1) == WorkerState::kLost; }));
  c.ps.Tick(0s);
  CHECK_FALSE(c.ps.ending().has_value());  // within the timeout: it may come back
  c.ps.Tick(120s);
  REQUIRE(c.ps.ending().has_value());
  CHECK(c.ps.worker(1) == WorkerState::kGivenUp);
  const ps::PsService::Ending end = *c.ps.ending();
  INFO(end.message);
  CHECK(end.ok);
  CHECK(end.message.find("gave up on worker:1") != std::string::npos);
  CHECK(end.message.find("(lost at global_step 0)") != std::string::npos);
  CHECK(end.message.find("never connected") == std::string::npos);
  CHECK(end.message.find("global_step=0") != std::string::npos);
}

TEST_CASE("async: the chief lost for good ends the run, and the other worker's next request names it", "[integration][ps][fault]") {
  ps::PsService::Limits limits;
  limits.end_grace = std::chrono::hours(1);  // the ps waits for the other worker to leave
  TwoWorkers c(config::UpdateSpec::Mode::kAsync, config::UpdateSpec::OnWorkerLoss::kFail, limits);
  REQUIRE(c.ps.worker(0) == WorkerState::kConnected);  // its INIT was answered
  c.chief.Close();
  REQUIRE(Eventually([&] { return c.ps.worker(0) == WorkerState::kLost; }));
  c.ps.Tick(120s);
  CHECK(c.ps.worker(0) == WorkerState::kGivenUp);
  std::vector<float> params(4);
  const Status pulled = c.other.Pull(params, /*sync=*/false).status();
  REQUIRE_FALSE(pulled.ok());
  INFO(pulled.message());
  CHECK(pulled.message().find("the chief worker:0") != std::string::npos);
  CHECK(pulled.message().find("did not come back within 60 s") != std::string::npos);
  c.ps.Tick(120s);
  CHECK_FALSE(c.ps.ending().has_value());  // the other worker is still connected: it may not have heard yet
  c.other.Close();
  // The run ends once the ps has seen the other worker leave (its loss is recorded after that).
  REQUIRE(Eventually([&] { return c.ps.worker(1) == WorkerState::kLost; }));
  c.ps.Tick(120s);
  REQUIRE(c.ps.ending().has_value());
  CHECK_FALSE(c.ps.ending()->ok);  // the chief never finished: exit 1
  CHECK(c.ps.ending()->message.find("global_step=0") != std::string::npos);
}

TEST_CASE("sync, on_worker_loss wait: a step waits for a lost worker, then fails naming it once it is given up on",
          "[integration][ps][fault]") {
  TwoWorkers c(config::UpdateSpec::Mode::kSync, config::UpdateSpec::OnWorkerLoss::kWait);
  REQUIRE(c.ps.worker(1) == WorkerState::kConnected);
  c.other.Close();
  REQUIRE(Eventually([&] { return c.ps.worker(1) == WorkerState::kLost; }));
  const std::vector<float> g = {1.0f, 1.0f, 1.0f, 1.0f};
  std::vector<float> params(4);
  c.chief.StartPushPull(Tag(0, 11, 1), g, /*sync=*/true, nullptr);
  // The step holds the chief's gradient and waits for worker:1's. (Its pull may reach the ps before
  // or after the give-up below: either way it is answered with the step's failure.)
  REQUIRE(Eventually([&] {
    const std::vector<bool> received = c.ps.store().received();
    return received.size() == 2 && received[0];
  }));
  c.ps.Tick(0s);
  CHECK_FALSE(c.ps.ending().has_value());
  CHECK(c.ps.worker(1) == WorkerState::kLost);  // within the return timeout: it may come back
  c.ps.Tick(120s);
  CHECK(c.ps.worker(1) == WorkerState::kGivenUp);
  Result<worker::PsClient::StepResult> r = c.chief.CompletePushPull(params);
  REQUIRE_FALSE(r.ok());
  INFO(r.status().message());
  CHECK(r.status().message().find("sync step 1 cannot complete") != std::string::npos);
  CHECK(r.status().message().find("worker:1") != std::string::npos);
  CHECK(r.status().message().find("did not come back within 60 s") != std::string::npos);
  CHECK(c.ps.store().global_step() == 0);  // the half step was never applied
}

// A DONE's ack waits until a worker still training has heard of it, so that a ps killed in between
// is one the finished worker reconnects to and tells again (docs/reliability.md).
TEST_CASE("a DONE is answered once another worker still training has received it in a PUSH_ACK", "[integration][ps]") {
  TwoWorkers c(config::UpdateSpec::Mode::kAsync);
  std::future<Status> chief_done = std::async(std::launch::async, [&] { return c.chief.Done(0, kInitial); });
  REQUIRE(Eventually([&] { return c.ps.worker(0) == WorkerState::kDone; }));
  CHECK(chief_done.wait_for(200ms) == std::future_status::timeout);  // counted, not answered
  CHECK(c.other.progress().done.empty());
  std::vector<float> params(4);
  const std::vector<float> g = {0.0f, 0.0f, 0.0f, 0.0f};
  Ok(c.other.PushPull(Tag(1, 22, 1), g, params, /*sync=*/false).status());
  CHECK(c.other.progress().done == std::vector<std::uint32_t>{0});  // heard: it passes it on to a restarted ps
  // The ps sent it, but has no proof yet that it arrived: the next request after the push's pull is.
  CHECK(chief_done.wait_for(200ms) == std::future_status::timeout);
  Ok(c.other.Pull(params, /*sync=*/false).status());
  REQUIRE(chief_done.wait_for(30s) == std::future_status::ready);
  Ok(chief_done.get());
  CHECK_FALSE(c.ps.ending().has_value());  // worker:1 trains on
}

TEST_CASE("a held DONE is answered when the last worker that could hear of it is lost, or after done_hold", "[integration][ps][fault]") {
  SECTION("the other worker lost") {
    TwoWorkers c(config::UpdateSpec::Mode::kAsync);
    std::future<Status> chief_done = std::async(std::launch::async, [&] { return c.chief.Done(0, kInitial); });
    REQUIRE(Eventually([&] { return c.ps.worker(0) == WorkerState::kDone; }));
    CHECK(chief_done.wait_for(200ms) == std::future_status::timeout);
    c.other.Close();
    REQUIRE(chief_done.wait_for(30s) == std::future_status::ready);
    Ok(chief_done.get());
  }
  SECTION("the other worker silent past done_hold") {
    TwoWorkers c(config::UpdateSpec::Mode::kAsync);
    std::future<Status> chief_done = std::async(std::launch::async, [&] { return c.chief.Done(0, kInitial); });
    REQUIRE(Eventually([&] { return c.ps.worker(0) == WorkerState::kDone; }));
    c.ps.Tick(0s);
    CHECK(chief_done.wait_for(200ms) == std::future_status::timeout);
    c.ps.Tick(21s);  // past the 20 s default
    REQUIRE(chief_done.wait_for(30s) == std::future_status::ready);
    Ok(chief_done.get());
    CHECK(c.ps.worker(1) == WorkerState::kConnected);
  }
}

TEST_CASE("a save's STATE_PULL is held until the other worker's deposit comes, and answered with it; a lost worker holds it no more",
          "[integration][ps]") {
  LoopbackPs ps(2);
  Workers workers;
  worker::PsClient& chief = workers.Connect(ps.WorkerConfig(0), 11, wire::GradEncoding::kSparse);
  worker::PsClient& other = workers.Connect(ps.WorkerConfig(1), 22, wire::GradEncoding::kSparse);
  const config::UpdateSpec update = Update(config::UpdateSpec::Mode::kAsync);
  Ok(chief.Initialize(/*chief=*/true, Sgd(), update, kInitial));
  std::vector<float> params(4, 9.0f);
  Ok(other.Initialize(/*chief=*/false, Sgd(), update, params));
  const std::vector<float> g = {0.0f, 1.0f, 0.0f, 0.0f};
  // The chief's push announces save 7; the other worker's next PARAMS asks it for its residual.
  chief.AnnounceSave(7);
  Ok(chief.PushPull(Tag(0, 11, 1), g, params, /*sync=*/false).status());
  Ok(other.PushPull(Tag(1, 22, 1), g, params, /*sync=*/false).status());
  REQUIRE(other.FeedbackAsked());
  // The chief's STATE_PULL for save 7 waits: the deposit is on its way.
  std::future<Result<std::vector<worker::PsClient::PsState>>> state =
      std::async(std::launch::async, [&] { return chief.FetchState(kInitial, 7); });
  CHECK(state.wait_for(300ms) == std::future_status::timeout);
  other.Deposit(std::make_shared<const std::vector<float>>(std::vector<float>{0.5f, -0.5f, 0.25f, 0.0f}));
  Ok(other.PushPull(Tag(1, 22, 2), g, params, /*sync=*/false).status());
  REQUIRE(state.wait_for(30s) == std::future_status::ready);
  Result<std::vector<worker::PsClient::PsState>> got = state.get();
  Ok(got.status());
  REQUIRE(got->size() == 1);
  REQUIRE((*got)[0].feedback.size() == 1);
  CHECK((*got)[0].feedback[0].first == 1);
  CHECK((*got)[0].feedback[0].second == std::vector<float>{0.5f, -0.5f, 0.25f, 0.0f});
  CHECK((*got)[0].absent.empty());
  // A later save: the other worker is lost before it deposits; the held pull is answered at once
  // (at the ps's next tick), naming it absent, with no deposit.
  chief.AnnounceSave(9);
  Ok(chief.PushPull(Tag(0, 11, 2), g, params, /*sync=*/false).status());
  Ok(other.PushPull(Tag(1, 22, 3), g, params, /*sync=*/false).status());
  state = std::async(std::launch::async, [&] { return chief.FetchState(kInitial, 9); });
  CHECK(state.wait_for(300ms) == std::future_status::timeout);
  other.Close();
  REQUIRE(Eventually([&] { return ps.worker(1) == WorkerState::kLost; }));
  ps.Tick(0s);
  REQUIRE(state.wait_for(30s) == std::future_status::ready);
  got = state.get();
  Ok(got.status());
  REQUIRE(got->size() == 1);
  CHECK((*got)[0].feedback.empty());
  CHECK((*got)[0].absent == std::vector<std::uint32_t>{1});
}

TEST_CASE("a worker that never connects is given up on after the startup timeout", "[integration][ps][fault]") {
  LoopbackPs ps(2);
  Workers workers;
  worker::PsClient& chief = workers.Connect(ps.WorkerConfig(0), 11);
  Ok(chief.Initialize(/*chief=*/true, Sgd(), Update(config::UpdateSpec::Mode::kAsync), kInitial));
  Ok(chief.Done(0, kInitial));
  ps.Tick(0s);
  CHECK_FALSE(ps.ending().has_value());
  CHECK(ps.worker(1) == WorkerState::kNone);  // it never shook hands
  ps.Tick(120s);
  REQUIRE(ps.ending().has_value());
  INFO(ps.ending()->message);
  CHECK(ps.ending()->ok);
  CHECK(ps.ending()->message.find("worker:1 (never connected)") != std::string::npos);
  // The run is over: a worker that turns up now is told so, not served.
  const Status late = workers.TryConnect(ps.WorkerConfig(1), 33);
  INFO(late.message());
  CHECK(late.message().find("the run is over: every worker is done") != std::string::npos);
}

TEST_CASE("a ps that no worker ever connects to ends after the startup timeout", "[integration][ps][fault]") {
  LoopbackPs ps(2);
  ps.Tick(0s);
  CHECK_FALSE(ps.ending().has_value());
  ps.Tick(121s);
  REQUIRE(ps.ending().has_value());
  INFO(ps.ending()->message);
  CHECK_FALSE(ps.ending()->ok);
  CHECK(ps.ending()->message.find("the chief worker:0 never connected within 120 s") != std::string::npos);
}

}  // namespace
}  // namespace tfd::testing::ps_loopback_test
