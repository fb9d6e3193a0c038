#include "daemon/worker/ps_client.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include "common/base/sha256.h"
#include "common/optim/optimizer.h"
#include "common/transport/dial.h"
#include "common/transport/handshake.h"
#include "daemon/task_kind.h"
#include "daemon/worker/compressed_push.h"

namespace tfd::worker {
namespace {

using transport::Clock;

// The worker's one conversion of the job's settings into their INIT form.
wire::OptimizerParams ToWire(const config::OptimizerSpec& o) {
  wire::OptimizerParams w;
  switch (o.type) {
    case config::OptimizerSpec::Type::kSgd: w.type = wire::OptimizerKind::kSgd; break;
    case config::OptimizerSpec::Type::kMomentum: w.type = wire::OptimizerKind::kMomentum; break;
    case config::OptimizerSpec::Type::kAdam: w.type = wire::OptimizerKind::kAdam; break;
  }
  w.learning_rate = o.learning_rate;
  w.momentum = o.momentum;
  w.use_nesterov = o.use_nesterov;
  w.beta1 = o.beta1;
  w.beta2 = o.beta2;
  w.epsilon = o.epsilon;
  w.weight_decay = o.weight_decay;
  const config::LrSchedule& sc = o.schedule;
  switch (sc.kind) {
    case config::LrSchedule::Kind::kConstant: w.schedule = wire::LrScheduleKind::kConstant; break;
    case config::LrSchedule::Kind::kExponentialDecay: w.schedule = wire::LrScheduleKind::kExponentialDecay; break;
    case config::LrSchedule::Kind::kPiecewiseConstant: w.schedule = wire::LrScheduleKind::kPiecewiseConstant; break;
    case config::LrSchedule::Kind::kCosineDecay: w.schedule = wire::LrScheduleKind::kCosineDecay; break;
  }
  w.warmup_steps = static_cast<std::uint64_t>(sc.warmup_steps);
  w.decay_steps = static_cast<std::uint64_t>(sc.decay_steps);
  w.decay_rate = sc.decay_rate;
  w.staircase = sc.staircase;
  w.alpha = sc.alpha;
  w.boundaries.assign(sc.boundaries.begin(), sc.boundaries.end());
  w.values = sc.values;
  return w;
}

Result<wire::UpdateParams> ToWire(const config::UpdateSpec& u, int num_workers, const config::ElasticSpec& elastic) {
  wire::UpdateParams w;
  switch (u.mode) {
    case config::UpdateSpec::Mode::kAsync: w.mode = wire::UpdateMode::kAsync; break;
    case config::UpdateSpec::Mode::kSync: w.mode = wire::UpdateMode::kSync; break;
    case config::UpdateSpec::Mode::kAllreduce: return Status::InvalidArgument("update.mode: allreduce has no ps");
  }
  switch (u.on_worker_loss) {
    case config::UpdateSpec::OnWorkerLoss::kFail: w.on_worker_loss = wire::WorkerLossPolicy::kFail; break;
    case config::UpdateSpec::OnWorkerLoss::kWait: w.on_worker_loss = wire::WorkerLossPolicy::kWait; break;
    case config::UpdateSpec::OnWorkerLoss::kShrink: w.on_worker_loss = wire::WorkerLossPolicy::kShrink; break;
  }
  const bool sync = u.mode == config::UpdateSpec::Mode::kSync;
  w.scale_stale = !sync && u.scale_stale;
  w.num_workers = static_cast<std::uint32_t>(num_workers);
  w.replicas_to_aggregate = static_cast<std::uint32_t>(u.replicas_to_aggregate == 0 ? num_workers : u.replicas_to_aggregate);
  w.total_num_replicas = static_cast<std::uint32_t>(num_workers);
  w.min_replicas = static_cast<std::uint32_t>(u.min_replicas);
  if (elastic.enabled()) {
    w.min_workers = static_cast<std::uint32_t>(elastic.min_workers);
    w.max_workers = static_cast<std::uint32_t>(elastic.max_workers);
  }
  return w;
}

// The reply must be of `type`; an ERROR has already failed the call in RpcClient.
Status Expect(const wire::InFrame& frame, wire::MessageType type, const std::string& peer) {
  if (frame.header.type == type) return Status::Ok();
  return Status::Corruption(fmt::format("{} answered {} where {} was expected", peer, wire::MessageTypeName(frame.header.type),
                                        wire::MessageTypeName(type)));
}

}  // namespace

Result<std::unique_ptr<PsClient>> PsClient::Connect(transport::asio::io_context& ioc, const config::TfConfig& config,
                                                    std::uint64_t incarnation, const Placement& placement,
                                                    const PsClientOptions& options) {
  std::unique_ptr<PsClient> client(new PsClient(ioc, config, incarnation, placement, options));
  const auto deadline = Clock::now() + options.startup_timeout;
  const std::size_t n = config.cluster.ps.size();
  client->ps_.resize(n);
  client->initialized_.resize(n);
  client->steps_.resize(n);
  client->feedback_.resize(n);
  client->heard_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    TFD_ASSIGN_OR_RETURN(wire::Welcome welcome, client->ConnectUntil(i, deadline));
    client->initialized_[i] = welcome.initialized;
    client->steps_[i] = welcome.global_step;
    // The largest: a step some ps applied is never pushed again (at most one step's gradient is
    // missing on the others, if this worker died between its pushes).
    client->resume_step_ = std::max(client->resume_step_, welcome.resume_step);
    spdlog::info("connected to {} (incarnation {:016x}, {})", client->ps_[i]->peer(), welcome.incarnation,
                 welcome.initialized ? fmt::format("initialised, global_step {}", welcome.global_step) : "not initialised yet");
  }
  if (options.metrics != nullptr) options.metrics->connected_peers->Set(static_cast<double>(n));
  return client;
}

Result<wire::Welcome> PsClient::ConnectOne(std::size_t i, Clock::time_point deadline) {
  const config::Endpoint& ep = config_.cluster.ps[i];
  const std::string name = fmt::format("ps:{} ({})", i, ep.ToString());
  TFD_ASSIGN_OR_RETURN(transport::tcp::socket socket, transport::Dial(ioc_, ep.host, ep.port, fmt::format("ps:{}", i), deadline, options_.stop));
  auto rpc = transport::RpcClient::Start(std::move(socket), name, options_.connection);
  ps_[i] = rpc;
  auto reply = rpc->Call(wire::Encode(transport::MakeHello(HandshakeIdentityOf(config_, incarnation_))));
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  TFD_ASSIGN_OR_RETURN(wire::InFrame frame, Await(*rpc, reply, std::max(left, std::chrono::milliseconds(1000)), "HELLO"));
  TFD_RETURN_IF_ERROR(Expect(frame, wire::MessageType::kWelcome, name));
  wire::Welcome welcome;
  TFD_RETURN_IF_ERROR(wire::Decode(frame.payload, &welcome).WithContext(name));
  TFD_RETURN_IF_ERROR(transport::CheckWelcome(welcome, name, wire::TaskKind::kPs, static_cast<std::uint32_t>(i)));
  return welcome;
}

Result<wire::Welcome> PsClient::ConnectUntil(std::size_t i, Clock::time_point deadline) {
  Result<wire::Welcome> welcome = ConnectOne(i, deadline);
  // A ps starting or being torn down may accept a connection and then reset it, and one across a
  // partition may not answer: try again until the deadline. A refusal (an ERROR) is final.
  for (auto pause = std::chrono::milliseconds(100);
       !welcome.ok() && (welcome.status().code() == Code::kUnavailable || welcome.status().code() == Code::kDeadlineExceeded) &&
       ps_[i] != nullptr && !ps_[i]->refused() && Clock::now() + pause < deadline;
       pause = std::min(pause * 2, std::chrono::milliseconds(1000))) {
    if (options_.stop != nullptr && options_.stop->load()) break;
    std::this_thread::sleep_for(pause);
    welcome = ConnectOne(i, deadline);
  }
  return welcome;
}

Status PsClient::Reconnect(std::size_t i, const Status& why, std::span<const float> params) {
  const std::string name = ps_[i]->peer();
  spdlog::warn("lost {}: {}; reconnecting (for up to {:.0f} s)", name, why.message(),
               std::chrono::duration<double>(options_.reconnect_timeout).count());
  ps_[i]->Close(why);
  if (options_.metrics != nullptr) options_.metrics->connected_peers->Add(-1);
  feedback_[i].deposited = 0;  // a restarted ps has lost what was deposited with it: it may ask again
  const auto deadline = Clock::now() + options_.reconnect_timeout;
  Result<wire::Welcome> welcome = ConnectUntil(i, deadline);
  if (welcome.ok() && options_.metrics != nullptr) {
    options_.metrics->connected_peers->Add(1);
    options_.metrics->reconnects->Increment();
  }
  if (!welcome.ok()) {
    return Status::Unavailable(fmt::format("lost {} ({}) and could not reconnect: {}", name, why.message(),
                                           welcome.status().message()));
  }
  const bool restarted = !welcome->initialized;
  if (!restarted) steps_[i] = welcome->global_step;
  initialized_[i] = welcome->initialized;
  // A restarted ps holds nothing: the chief initialises it again from the parameters it last pulled
  // from it, at the step it last saw (once the chief has finished, any worker does, from its own);
  // the others wait until it has.
  const bool initialises = MayInit();
  auto ready = InitOne(i, params);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  TFD_ASSIGN_OR_RETURN(wire::InFrame frame, Await(*ps_[i], ready, std::max(left, std::chrono::milliseconds(1000)),
                                                  initialises ? std::string("INIT") : WaitReadyWhat()));
  TFD_RETURN_IF_ERROR(Expect(frame, wire::MessageType::kReady, name));
  wire::Ready answer;
  TFD_RETURN_IF_ERROR(wire::Decode(frame.payload, &answer).WithContext(name));
  Heard(i, std::move(answer.progress));
  // The chief initialised a restarted ps at the step it last saw, which may be one behind the step
  // this worker last pulled (its pull was answered, the chief's was lost with the ps): the step in
  // flight is sent again as one for the ps's step, so the sync step completes instead of the push
  // being refused as one from the future.
  if (restarted && steps_[i] != answer.global_step) {
    spdlog::info("{} was initialised again at global_step {}; this worker had pulled global_step {}: its step in flight counts for {}",
                 name, answer.global_step, steps_[i], answer.global_step);
    steps_[i] = answer.global_step;
  }
  spdlog::info("reconnected to {} (incarnation {:016x}{})", name, welcome->incarnation,
               restarted ? fmt::format(", restarted: initialised again {} at global_step {}{}",
                                       chief_        ? "from this chief's parameters"
                                       : initialises ? "from this worker's parameters (the chief has finished)"
                                                     : "by the chief",
                                       steps_[i],
                                       !chief_ ? ""
                                       : restart_slots_.empty()
                                           ? " (fresh optimizer slots: no checkpoint yet)"
                                           : fmt::format(" with the latest checkpoint's optimizer slots ({} updates)", restart_updates_))
                         : fmt::format(", global_step {}", steps_[i]));
  return Status::Ok();
}

void PsClient::Heard(std::size_t i, wire::Progress progress) {
  heard_[i] = std::move(progress);
  const std::uint32_t self = static_cast<std::uint32_t>(config_.cluster.WorkerRank(config_.task));
  for (std::uint32_t r : heard_[i].done) {
    if (r == self || !known_done_.insert(r).second) continue;
    const std::string peer = config_.cluster.WorkerTask(static_cast<int>(r)).ToString();
    spdlog::info("{} has finished ({} says)", peer, ps_[i]->peer());
    if (options_.events != nullptr) options_.events->Emit("peer_done", {{"peer", peer}, {"global_step", static_cast<std::int64_t>(steps_[i])}});
  }
}

wire::Progress PsClient::progress() const {
  std::set<std::uint32_t> done, given_up;
  wire::Progress merged;
  for (const wire::Progress& p : heard_) {
    done.insert(p.done.begin(), p.done.end());
    given_up.insert(p.given_up.begin(), p.given_up.end());
    merged.stop = merged.stop || p.stop;
  }
  merged.done.assign(done.begin(), done.end());
  for (std::uint32_t r : given_up)
    if (!done.contains(r)) merged.given_up.push_back(r);
  return merged;
}

bool PsClient::MayInit() const {
  if (chief_) return true;
  for (const wire::Progress& p : heard_)
    if (std::ranges::find(p.done, 0u) != p.done.end()) return true;
  return false;
}

// A connection that closed (the ps died, restarted or was unreachable for --peer-timeout) is
// worth reconnecting to; an ERROR answer on an open connection is the ps's verdict.
bool PsClient::Lost(std::size_t i) const { return !ps_[i]->closed_reason().ok(); }

PsClient::~PsClient() { Close(); }

void PsClient::Close() {
  for (auto& ps : ps_)
    if (ps != nullptr) ps->Close(Status::Unavailable("worker closing"));
}

std::string PsClient::WaitReadyWhat() const {
  return fmt::format("WAIT_READY: the chief {} has not initialised it (is the chief running?)", config_.cluster.WorkerTask(0).ToString());
}

Result<wire::InFrame> PsClient::Await(transport::RpcClient& ps, std::future<Result<wire::InFrame>>& reply,
                                      std::chrono::milliseconds timeout, std::string_view what) {
  const auto deadline = Clock::now() + timeout;
  while (reply.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (options_.stop != nullptr && options_.stop->load()) return Status::FailedPrecondition(fmt::format("stopped by a signal while waiting for {}", ps.peer()));
    if (Clock::now() >= deadline)
      return Status::DeadlineExceeded(fmt::format("{} did not answer {} within {:.0f} s", ps.peer(), what,
                                                  std::chrono::duration<double>(timeout).count()));
  }
  return reply.get();
}

std::vector<std::span<const float>> PsClient::Slices(std::size_t ps, std::span<const float> flat) const {
  std::vector<std::span<const float>> out;
  for (const Slice& s : placement_.shards[ps]) out.push_back(flat.subspan(static_cast<std::size_t>(s.flat_offset), static_cast<std::size_t>(s.length)));
  return out;
}

Status PsClient::Initialize(bool chief, const config::OptimizerSpec& optimizer_spec, const config::UpdateSpec& update_spec,
                            std::span<const float> params) {
  TFD_ASSIGN_OR_RETURN(update_, ToWire(update_spec, config_.cluster.base_num_workers(), options_.elastic));
  optimizer_ = ToWire(optimizer_spec);
  chief_ = chief;
  const wire::OptimizerParams& optimizer = optimizer_;
  const wire::UpdateParams& update = update_;
  // The placement and how the ps updates it: a worker whose job differs in any of them is refused.
  const std::string settings =
      fmt::format("{:016x}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", placement_.LayoutHash(), fmt::underlying(optimizer.type),
                  optimizer.learning_rate, optimizer.momentum, optimizer.beta1, optimizer.beta2, optimizer.epsilon,
                  optimizer.use_nesterov, fmt::underlying(update.mode), update.scale_stale, update.replicas_to_aggregate,
                  update.total_num_replicas, update.num_workers, fmt::underlying(update.on_worker_loss), update.min_replicas,
                  optim::MakeOptimizer(optimizer_spec)->Describe());
  layout_ = Fingerprint64(settings);
  std::vector<std::future<Result<wire::InFrame>>> replies(ps_.size());
  restored_ = 0;
  for (std::size_t i = 0; i < ps_.size(); ++i) {
    if (chief_ && !initialized_[i] && !restore_.values.empty()) {
      ++restored_;
      replies[i] = InitFromState(i, restore_.values[i], restore_.slots[i], restore_.updates, restore_.resume_steps, restore_.global_step);
    } else {
      replies[i] = InitOne(i, params);
    }
  }
  for (std::size_t i = 0; i < ps_.size(); ++i) {
    if (!chief) spdlog::debug("waiting for {} to be initialised by the chief", ps_[i]->peer());
    Result<wire::InFrame> frame = Await(*ps_[i], replies[i], options_.startup_timeout, chief ? std::string("INIT") : WaitReadyWhat());
    if (!frame.ok() && Lost(i)) {
      // A ps lost before it answered (stopped past the peer timeout, restarted): dial it again
      // and have it initialised, as a step would.
      TFD_RETURN_IF_ERROR(Reconnect(i, frame.status(), params));
      initialized_[i] = true;
      continue;
    }
    TFD_RETURN_IF_ERROR(frame.status());
    TFD_RETURN_IF_ERROR(Expect(*frame, wire::MessageType::kReady, ps_[i]->peer()));
    wire::Ready ready;
    TFD_RETURN_IF_ERROR(wire::Decode(frame->payload, &ready).WithContext(ps_[i]->peer()));
    resume_step_ = std::max(resume_step_, ready.resume_step);
    if (i == 0 && ready.membership) membership_ = ready.membership;
    Heard(i, std::move(ready.progress));
    initialized_[i] = true;
  }
  return Status::Ok();
}

void PsClient::SetRestore(Restore restore) {
  TFD_CHECK(restore.values.size() == ps_.size() && restore.slots.size() == ps_.size());
  for (std::size_t i = 0; i < ps_.size(); ++i) steps_[i] = initialized_[i] ? steps_[i] : restore.global_step;
  restart_slots_ = restore.slots;
  restart_updates_ = restore.updates;
  restore_ = std::move(restore);
}

void PsClient::SetRestartSlots(std::vector<std::vector<float>> slots, std::uint64_t updates) {
  TFD_CHECK(slots.size() == ps_.size());
  restart_slots_ = std::move(slots);
  restart_updates_ = updates;
}

std::future<Result<wire::InFrame>> PsClient::InitFromState(std::size_t i, std::span<const float> values, std::span<const float> slots,
                                                           std::uint64_t updates, const std::vector<std::uint64_t>& resume_steps,
                                                           std::uint64_t global_step) {
  wire::Init init;
  init.layout_hash = layout_;
  init.optimizer = optimizer_;
  init.update = update_;
  init.global_step = global_step;
  init.has_state = true;
  init.updates = updates;
  init.resume_steps = resume_steps;
  init.progress = progress();
  for (const Slice& s : placement_.shards[i]) init.chunks.push_back({s.name, static_cast<std::uint64_t>(s.length)});
  // The frame owns copies of what its tail points to, and the encoder's trailer.
  auto held = std::make_shared<std::pair<std::vector<float>, std::vector<float>>>(std::vector<float>(values.begin(), values.end()),
                                                                                   std::vector<float>(slots.begin(), slots.end()));
  wire::OutFrame f = wire::Encode(init, held->first, held->second);
  f.keepalive = std::make_shared<std::pair<std::shared_ptr<const void>, std::shared_ptr<const void>>>(std::move(f.keepalive), held);
  return ps_[i]->Call(std::move(f));
}

void PsClient::ScatterShard(std::size_t ps, std::span<const float> shard, std::span<float> out) const {
  std::size_t at = 0;
  for (const Slice& s : placement_.shards[ps]) {
    const auto n = static_cast<std::size_t>(s.length);
    std::copy_n(shard.begin() + static_cast<std::ptrdiff_t>(at), n, out.begin() + static_cast<std::ptrdiff_t>(s.flat_offset));
    at += n;
  }
}

Result<std::vector<PsClient::PsState>> PsClient::FetchState(std::span<const float> params, std::uint64_t feedback_request) {
  const wire::StatePull ask{.feedback_request = feedback_request};
  std::vector<std::future<Result<wire::InFrame>>> replies(ps_.size());
  for (std::size_t i = 0; i < ps_.size(); ++i) replies[i] = ps_[i]->Call(wire::Encode(ask));
  std::vector<PsState> out(ps_.size());
  for (std::size_t i = 0; i < ps_.size(); ++i) {
    Result<wire::InFrame> answer = Await(*ps_[i], replies[i], options_.step_timeout, "STATE_PULL");
    if (!answer.ok() && Lost(i)) {
      TFD_RETURN_IF_ERROR(Reconnect(i, answer.status(), params));
      auto again = ps_[i]->Call(wire::Encode(ask));
      answer = Await(*ps_[i], again, options_.step_timeout, "STATE_PULL");
    }
    TFD_ASSIGN_OR_RETURN(wire::InFrame frame, std::move(answer));
    TFD_RETURN_IF_ERROR(Expect(frame, wire::MessageType::kState, ps_[i]->peer()));
    wire::State st;
    TFD_RETURN_IF_ERROR(wire::Decode(frame.payload, &st).WithContext(ps_[i]->peer()));
    const auto n = static_cast<std::size_t>(placement_.ShardSize(i));
    const std::size_t slots = n * static_cast<std::size_t>(wire::SlotsPerValue(optimizer_.type));
    if (st.values.size() != n * 4 || st.slots.size() != slots * 4)
      return Status::Corruption(fmt::format("{} sent a state of {} values and {} slot floats for a shard of {} and {} slot floats",
                                            ps_[i]->peer(), st.values.size() / 4, st.slots.size() / 4, n, slots));
    PsState& p = out[i];
    p.global_step = st.global_step;
    p.updates = st.updates;
    p.resume_steps = std::move(st.resume_steps);
    p.values.resize(n);
    wire::CopyFloats(st.values, p.values);
    p.slots.resize(slots);
    wire::CopyFloats(st.slots, p.slots);
    p.progress = std::move(st.progress);
    p.absent = std::move(st.absent);
    if (st.feedback_request == feedback_request)
      for (const wire::Deposit& d : st.feedback) {
        std::vector<float> values(n);
        wire::CopyFloats(d.values, values);  // STATE's decoder held each to the shard's size
        p.feedback.emplace_back(d.worker, std::move(values));
      }
  }
  return out;
}

std::future<Result<wire::InFrame>> PsClient::InitOne(std::size_t i, std::span<const float> params) {
  if (!MayInit() || initialized_[i]) return ps_[i]->Call(wire::Encode(wire::WaitReady{layout_}));
  if (!restart_slots_.empty()) {  // the latest checkpoint's slots, with these parameters
    std::vector<float> values;
    for (const Slice& s : placement_.shards[i]) {
      auto src = params.subspan(static_cast<std::size_t>(s.flat_offset), static_cast<std::size_t>(s.length));
      values.insert(values.end(), src.begin(), src.end());
    }
    return InitFromState(i, values, restart_slots_[i], restart_updates_, {}, steps_[i]);
  }
  wire::Init init;
  init.layout_hash = layout_;
  init.optimizer = optimizer_;
  init.update = update_;
  init.global_step = steps_[i];
  init.progress = progress();
  // The INIT values travel as frame tails: the frame owns its buffer (an early return must not
  // free what the I/O thread is still writing).
  auto values = std::make_shared<std::vector<float>>();
  for (const Slice& s : placement_.shards[i]) {
    init.chunks.push_back({s.name, static_cast<std::uint64_t>(s.length)});
    auto src = params.subspan(static_cast<std::size_t>(s.flat_offset), static_cast<std::size_t>(s.length));
    values->insert(values->end(), src.begin(), src.end());
  }
  wire::OutFrame f = wire::Encode(init, *values);
  // ... and the encoder's trailer (the schedule and elastic sections), which its tail points into.
  f.keepalive = std::make_shared<std::pair<std::shared_ptr<const void>, std::shared_ptr<const void>>>(std::move(f.keepalive), values);
  return ps_[i]->Call(std::move(f));
}

Result<std::uint64_t> PsClient::TakeParams(std::size_t ps, const wire::InFrame& frame, std::span<float> params) {
  TFD_RETURN_IF_ERROR(Expect(frame, wire::MessageType::kParams, ps_[ps]->peer()));
  wire::Params p;
  TFD_RETURN_IF_ERROR(wire::Decode(frame.payload, &p).WithContext(ps_[ps]->peer()));
  if (static_cast<std::int64_t>(p.values.size() / 4) != placement_.ShardSize(ps))
    return Status::Corruption(fmt::format("{} sent {} floats for a shard of {}", ps_[ps]->peer(), p.values.size() / 4, placement_.ShardSize(ps)));
  std::size_t at = 0;
  for (const Slice& s : placement_.shards[ps]) {
    const std::size_t n = static_cast<std::size_t>(s.length) * 4;
    wire::CopyFloats(p.values.subspan(at, n), params.subspan(static_cast<std::size_t>(s.flat_offset), static_cast<std::size_t>(s.length)));
    at += n;
  }
  steps_[ps] = p.global_step;
  if (p.feedback_request != 0) feedback_[ps].asked = p.feedback_request;  // the latest (a restored chief's ids start lower)
  if (options_.metrics != nullptr) options_.metrics->pull_bytes->Increment(static_cast<double>(p.values.size()));
  return p.global_step;
}

bool PsClient::Feedback::Owed() const { return asked != 0 && asked != deposited && asked != sending; }

bool PsClient::FeedbackAsked() const {
  return std::any_of(feedback_.begin(), feedback_.end(), [](const Feedback& f) { return f.Owed(); });
}

void PsClient::Deposit(std::shared_ptr<const std::vector<float>> residual) {
  for (Feedback& f : feedback_)
    if (f.Owed()) f.sending = f.asked, f.residual = residual;
}

void PsClient::StartPushPull(const wire::Push& tag, std::span<const float> grads, bool sync,
                             std::shared_ptr<const void> keepalive, std::vector<std::uint64_t> computed_on) {
  TFD_CHECK(!in_flight());
  TFD_CHECK(computed_on.empty() || computed_on.size() == ps_.size());
  tag_ = tag;
  grads_ = grads;
  announcing_ = std::exchange(announce_, 0);
  computed_on_ = std::move(computed_on);
  sync_ = sync;
  keepalive_ = std::move(keepalive);
  acks_.resize(ps_.size());
  pulls_.resize(ps_.size());
  if (options_.metrics != nullptr) exchange_start_ = last_ack_ = Clock::now();
  ack_times_.resize(ps_.size(), exchange_start_);
  for (std::size_t i = 0; i < ps_.size(); ++i) SendPushPull(i);
}

void PsClient::SendPushPull(std::size_t i) {
  wire::Push push = tag_;
  // Without computed_on, the step of the parameters held now: a push sent again after a reconnect
  // claims the step the (maybe restarted) ps is at, so a sync step in flight still completes. With
  // it (async overlap), the older step the gradient was computed on, never more than the ps's.
  push.based_on_step = computed_on_.empty() ? steps_[i] : std::min(computed_on_[i], steps_[i]);
  wire::OutFrame f;
  std::size_t bytes = static_cast<std::size_t>(placement_.ShardSize(i)) * sizeof(float);
  if (options_.encoding) {  // update.compression: the frame owns its encoded copy (and keepalive_)
    CompressedExtras extras{.save_request = announcing_};
    if (feedback_[i].sending != 0) extras.deposit_request = feedback_[i].sending, extras.deposit = Slices(i, *feedback_[i].residual);
    f = EncodeCompressedPush(push, *options_.encoding, Slices(i, grads_), extras, keepalive_, &bytes);  // copies the deposit
  } else {
    f = wire::Encode(push, Slices(i, grads_));
    // The encoder's trailer (the epoch), when it made one, and the gradient's owner.
    if (f.keepalive != nullptr && keepalive_ != nullptr)
      f.keepalive = std::make_shared<std::pair<std::shared_ptr<const void>, std::shared_ptr<const void>>>(std::move(f.keepalive), keepalive_);
    else if (keepalive_ != nullptr)
      f.keepalive = keepalive_;
  }
  if (options_.metrics != nullptr) options_.metrics->push_bytes->Increment(static_cast<double>(bytes));
  std::uint64_t push_id = 0;
  acks_[i] = ps_[i]->Call(std::move(f), 0, &push_id, options_.metrics != nullptr ? &ack_times_[i] : nullptr);
  // A refused push fails the pull behind it, so the pull can be awaited first.
  pulls_[i] = ps_[i]->Call(wire::Encode(wire::Pull{sync_ ? steps_[i] + 1 : 0}), push_id, nullptr);
}

Result<PsClient::StepResult> PsClient::CompletePushPull(std::span<float> params) {
  TFD_CHECK(in_flight());
  StepResult r;
  Status failed;
  for (std::size_t i = 0; i < ps_.size(); ++i) {
    for (int attempt = 0;; ++attempt) {
      Result<bool> stale = AwaitPushPull(i, params, i == 0 ? &r.global_step : nullptr);
      if (stale.ok()) {
        r.stale += *stale;
        break;
      }
      // A lost ps: reconnect and send this step's push again. Its (incarnation, local step) is the
      // same, so a ps that had applied it before the loss drops it as a duplicate.
      if (!Lost(i) || attempt >= 3) {
        failed = stale.status();
        break;
      }
      if (Status s = Reconnect(i, stale.status(), params); !s.ok()) {
        failed = s;
        break;
      }
      SendPushPull(i);
    }
    if (!failed.ok()) break;
  }
  acks_.clear();
  pulls_.clear();
  keepalive_.reset();
  for (Feedback& f : feedback_)
    if (f.sending != 0) {
      if (failed.ok()) f.deposited = f.sending;
      f.sending = 0;
      f.residual.reset();
    }
  if (!failed.ok()) return failed;
  if (options_.metrics != nullptr) {
    options_.metrics->push_seconds->Observe(std::chrono::duration<double>(last_ack_ - exchange_start_).count());
    options_.metrics->pull_seconds->Observe(std::chrono::duration<double>(Clock::now() - exchange_start_).count());
  }
  return r;
}

Result<bool> PsClient::AwaitPushPull(std::size_t i, std::span<float> params, std::uint64_t* step) {
  // The parameters first: the ack was sent before them on the same connection, so it is there by
  // then, and the training thread wakes once per ps instead of twice. (A refused push fails its
  // pull with the same error: see SendPushPull.)
  Result<wire::InFrame> pulled = Await(*ps_[i], pulls_[i], options_.step_timeout, "PULL");
  TFD_ASSIGN_OR_RETURN(wire::InFrame ack_frame, Await(*ps_[i], acks_[i], options_.step_timeout, "PUSH"));
  last_ack_ = std::max(last_ack_, ack_times_[i]);
  TFD_RETURN_IF_ERROR(Expect(ack_frame, wire::MessageType::kPushAck, ps_[i]->peer()));
  wire::PushAck ack;
  TFD_RETURN_IF_ERROR(wire::Decode(ack_frame.payload, &ack).WithContext(ps_[i]->peer()));
  stop_requested_ = stop_requested_ || ack.stop;
  if (i == 0 && ack.membership) membership_ = ack.membership;
  Heard(i, std::move(ack.progress));
  if (!pulled.ok()) return pulled.status();
  TFD_ASSIGN_OR_RETURN(std::uint64_t got, TakeParams(i, *pulled, params));
  if (step != nullptr) *step = got;
  return ack.outcome == wire::PushOutcome::kStale;
}

Result<PsClient::StepResult> PsClient::PushPull(const wire::Push& tag, std::span<const float> grads, std::span<float> params,
                                                bool sync) {
  StartPushPull(tag, grads, sync, nullptr);
  return CompletePushPull(params);
}

Result<std::uint64_t> PsClient::Pull(std::span<float> params, bool sync) {
  const Clock::time_point start = Clock::now();
  std::vector<std::future<Result<wire::InFrame>>> pulls(ps_.size());
  for (std::size_t i = 0; i < ps_.size(); ++i) pulls[i] = ps_[i]->Call(wire::Encode(wire::Pull{sync ? steps_[i] : 0}));
  std::uint64_t step0 = 0;
  for (std::size_t i = 0; i < ps_.size(); ++i) {
    Result<wire::InFrame> frame = Await(*ps_[i], pulls[i], options_.step_timeout, "PULL");
    if (!frame.ok() && Lost(i)) {
      TFD_RETURN_IF_ERROR(Reconnect(i, frame.status(), params));
      auto again = ps_[i]->Call(wire::Encode(wire::Pull{sync ? steps_[i] : 0}));
      frame = Await(*ps_[i], again, options_.step_timeout, "PULL");
    }
    if (!frame.ok()) return frame.status();
    TFD_ASSIGN_OR_RETURN(std::uint64_t step, TakeParams(i, *frame, params));
    if (i == 0) step0 = step;
  }
  if (options_.metrics != nullptr) options_.metrics->pull_seconds->Observe(std::chrono::duration<double>(Clock::now() - start).count());
  return step0;
}

Status PsClient::Done(std::uint32_t rank, std::span<const float> params, bool stop) {
  std::vector<std::future<Result<wire::InFrame>>> acks(ps_.size());
  for (std::size_t i = 0; i < ps_.size(); ++i) acks[i] = ps_[i]->Call(wire::Encode(wire::Done{rank, stop}));
  for (std::size_t i = 0; i < ps_.size(); ++i) {
    Result<wire::InFrame> frame = Await(*ps_[i], acks[i], std::chrono::seconds(30), "DONE");
    if (!frame.ok() && Lost(i)) {
      TFD_RETURN_IF_ERROR(Reconnect(i, frame.status(), params));
      acks[i] = ps_[i]->Call(wire::Encode(wire::Done{rank, stop}));
      frame = Await(*ps_[i], acks[i], std::chrono::seconds(30), "DONE");
    }
    TFD_RETURN_IF_ERROR(frame.status());
    TFD_RETURN_IF_ERROR(Expect(*frame, wire::MessageType::kDoneAck, ps_[i]->peer()));
  }
  return Status::Ok();
}

}  // namespace tfd::worker
