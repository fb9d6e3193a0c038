#include "daemon/worker/ps_client.h"

#include <thread>

#include <fmt/format.h>

#include "common/base/sha256.h"
#include <spdlog/spdlog.h>

namespace tfd::worker {
namespace {

using transport::Clock;

// The reply must be of `type`; an ERROR has already failed the call in RpcClient.
Status Expect(const wire::InFrame& frame, wire::MessageType type, const std::string& peer) {
  if (frame.header.type == type) return Status::Ok();
  return Status::Corruption(fmt::format("{} answered {} where {} was expected", peer, wire::MessageTypeName(frame.header.type),
                                        wire::MessageTypeName(type)));
}

}  // namespace

Result<std::unique_ptr<PsClient>> PsClient::Connect(transport::asio::io_context& ioc, const config::TfConfig& config,
                                                    std::uint64_t incarnation, const daemon::Placement& placement,
                                                    const PsClientOptions& options) {
  std::unique_ptr<PsClient> client(new PsClient(placement, options));
  const auto deadline = Clock::now() + options.startup_timeout;
  for (std::size_t i = 0; i < config.cluster.ps.size(); ++i) {
    const config::Endpoint& ep = config.cluster.ps[i];
    const std::string name = fmt::format("ps:{} ({})", i, ep.ToString());
    TFD_ASSIGN_OR_RETURN(transport::tcp::socket socket, transport::Dial(ioc, ep.host, ep.port, fmt::format("ps:{}", i), deadline));
    auto rpc = transport::RpcClient::Start(std::move(socket), name, options.connection);
    client->ps_.push_back(rpc);
    wire::Hello hello;
    hello.kind = static_cast<wire::TaskKind>(config.task.type);
    hello.index = static_cast<std::uint32_t>(config.task.index);
    hello.incarnation = incarnation;
    hello.cluster_id = config.cluster.Id();
    auto reply = rpc->Call(wire::Encode(hello));
    TFD_ASSIGN_OR_RETURN(wire::InFrame frame, client->Await(*rpc, reply, options.startup_timeout, "HELLO"));
    TFD_RETURN_IF_ERROR(Expect(frame, wire::MessageType::kWelcome, name));
    wire::Welcome welcome;
    TFD_RETURN_IF_ERROR(wire::Decode(frame.payload, &welcome).WithContext(name));
    client->initialized_.push_back(welcome.initialized);
    client->steps_.push_back(welcome.global_step);
    // The largest: a step some ps applied is never pushed again (at most one step's gradient is
    // missing on the others, if this worker died between its pushes).
    client->resume_step_ = std::max(client->resume_step_, welcome.resume_step);
    spdlog::info("connected to {} (incarnation {:016x}, {})", name, welcome.incarnation,
                 welcome.initialized ? fmt::format("initialised, global_step {}", welcome.global_step) : "not initialised yet");
  }
  return client;
}

PsClient::~PsClient() { Close(); }

void PsClient::Close() {
  for (auto& ps : ps_) ps->Close(Status::Unavailable("worker closing"));
}

Result<wire::InFrame> PsClient::Await(transport::RpcClient& ps, std::future<Result<wire::InFrame>>& reply,
                                      std::chrono::milliseconds timeout, const char* what) {
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
  for (const daemon::Slice& s : placement_.shards[ps]) out.push_back(flat.subspan(static_cast<std::size_t>(s.flat_offset), static_cast<std::size_t>(s.length)));
  return out;
}

Status PsClient::Initialize(bool chief, const wire::OptimizerParams& optimizer, const wire::UpdateParams& update,
                            std::span<const float> params) {
  // The placement and how the ps updates it: a worker whose job differs in any of them is refused.
  const std::string settings =
      fmt::format("{:016x}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", placement_.LayoutHash(), optimizer.type, optimizer.learning_rate,
                  optimizer.momentum, optimizer.beta1, optimizer.beta2, optimizer.epsilon, optimizer.use_nesterov, update.mode,
                  update.scale_stale, update.replicas_to_aggregate, update.total_num_replicas, update.num_workers);
  const std::uint64_t layout = Fingerprint64(settings);
  // The INIT values travel as frame tails: each frame owns its buffer (an early return must not
  // free what the I/O thread is still writing).
  std::vector<std::future<Result<wire::InFrame>>> replies(ps_.size());
  for (std::size_t i = 0; i < ps_.size(); ++i) {
    if (chief && !initialized_[i]) {
      wire::Init init;
      init.layout_hash = layout;
      init.optimizer = optimizer;
      init.update = update;
      auto values = std::make_shared<std::vector<float>>();
      for (const daemon::Slice& s : placement_.shards[i]) {
        init.chunks.push_back({s.name, static_cast<std::uint64_t>(s.length)});
        auto src = params.subspan(static_cast<std::size_t>(s.flat_offset), static_cast<std::size_t>(s.length));
        values->insert(values->end(), src.begin(), src.end());
      }
      wire::OutFrame f = wire::Encode(init, *values);
      f.keepalive = values;
      replies[i] = ps_[i]->Call(std::move(f));
    } else {
      replies[i] = ps_[i]->Call(wire::Encode(wire::WaitReady{layout}));
    }
  }
  for (std::size_t i = 0; i < ps_.size(); ++i) {
    if (!chief) spdlog::debug("waiting for {} to be initialised by the chief", ps_[i]->peer());
    TFD_ASSIGN_OR_RETURN(wire::InFrame frame, Await(*ps_[i], replies[i], options_.startup_timeout, chief ? "INIT" : "WAIT_READY (is the chief running?)"));
    TFD_RETURN_IF_ERROR(Expect(frame, wire::MessageType::kReady, ps_[i]->peer()));
  }
  return Status::Ok();
}

Result<std::uint64_t> PsClient::TakeParams(std::size_t ps, const wire::InFrame& frame, std::span<float> params) {
  TFD_RETURN_IF_ERROR(Expect(frame, wire::MessageType::kParams, ps_[ps]->peer()));
  wire::Params p;
  TFD_RETURN_IF_ERROR(wire::Decode(frame.payload, &p).WithContext(ps_[ps]->peer()));
  if (static_cast<std::int64_t>(p.values.size() / 4) != placement_.ShardSize(ps))
    return Status::Corruption(fmt::format("{} sent {} floats for a shard of {}", ps_[ps]->peer(), p.values.size() / 4, placement_.ShardSize(ps)));
  std::size_t at = 0;
  for (const daemon::Slice& s : placement_.shards[ps]) {
    const std::size_t n = static_cast<std::size_t>(s.length) * 4;
    wire::CopyFloats(p.values.subspan(at, n), params.subspan(static_cast<std::size_t>(s.flat_offset), static_cast<std::size_t>(s.length)));
    at += n;
  }
  steps_[ps] = p.global_step;
  return p.global_step;
}

void PsClient::StartPushPull(const wire::Push& tag, std::span<const float> grads, bool sync,
                             std::shared_ptr<const void> keepalive) {
  TFD_CHECK(!in_flight());
  acks_.resize(ps_.size());
  pulls_.resize(ps_.size());
  for (std::size_t i = 0; i < ps_.size(); ++i) {
    wire::Push push = tag;
    push.based_on_step = steps_[i];
    wire::OutFrame f = wire::Encode(push, Slices(i, grads));
    f.keepalive = keepalive;
    std::uint64_t push_id = 0;
    acks_[i] = ps_[i]->Call(std::move(f), 0, &push_id);
    // A refused push fails the pull behind it, so the pull can be awaited first.
    pulls_[i] = ps_[i]->Call(wire::Encode(wire::Pull{sync ? steps_[i] + 1 : 0}), push_id, nullptr);
  }
}

Result<PsClient::StepResult> PsClient::CompletePushPull(std::span<float> params) {
  TFD_CHECK(in_flight());
  auto acks = std::move(acks_);
  auto pulls = std::move(pulls_);
  acks_.clear();
  pulls_.clear();
  StepResult r;
  for (std::size_t i = 0; i < ps_.size(); ++i) {
    // The parameters first: the ack was sent before them on the same connection, so it is there
    // by then, and the training thread wakes once per ps instead of twice. (A refused push fails
    // its pull with the same error: see StartPushPull.)
    Result<wire::InFrame> pulled = Await(*ps_[i], pulls[i], options_.step_timeout, "PULL");
    TFD_ASSIGN_OR_RETURN(wire::InFrame ack_frame, Await(*ps_[i], acks[i], options_.step_timeout, "PUSH"));
    TFD_RETURN_IF_ERROR(Expect(ack_frame, wire::MessageType::kPushAck, ps_[i]->peer()));
    wire::PushAck ack;
    TFD_RETURN_IF_ERROR(wire::Decode(ack_frame.payload, &ack).WithContext(ps_[i]->peer()));
    r.stale += ack.outcome == wire::PushOutcome::kStale;
    if (!pulled.ok()) return pulled.status();
    TFD_ASSIGN_OR_RETURN(std::uint64_t step, TakeParams(i, *pulled, params));
    if (i == 0) r.global_step = step;
  }
  return r;
}

Result<PsClient::StepResult> PsClient::PushPull(const wire::Push& tag, std::span<const float> grads, std::span<float> params,
                                                bool sync) {
  StartPushPull(tag, grads, sync, nullptr);
  return CompletePushPull(params);
}

Result<std::uint64_t> PsClient::Pull(std::span<float> params, bool sync) {
  std::vector<std::future<Result<wire::InFrame>>> pulls(ps_.size());
  for (std::size_t i = 0; i < ps_.size(); ++i) pulls[i] = ps_[i]->Call(wire::Encode(wire::Pull{sync ? steps_[i] : 0}));
  std::uint64_t step0 = 0;
  for (std::size_t i = 0; i < ps_.size(); ++i) {
    TFD_ASSIGN_OR_RETURN(wire::InFrame frame, Await(*ps_[i], pulls[i], options_.step_timeout, "PULL"));
    TFD_ASSIGN_OR_RETURN(std::uint64_t step, TakeParams(i, frame, params));
    if (i == 0) step0 = step;
  }
  return step0;
}

Status PsClient::Done(std::uint32_t rank) {
  std::vector<std::future<Result<wire::InFrame>>> acks(ps_.size());
  for (std::size_t i = 0; i < ps_.size(); ++i) acks[i] = ps_[i]->Call(wire::Encode(wire::Done{rank}));
  for (std::size_t i = 0; i < ps_.size(); ++i) {
    TFD_ASSIGN_OR_RETURN(wire::InFrame frame, Await(*ps_[i], acks[i], std::chrono::seconds(30), "DONE"));
    TFD_RETURN_IF_ERROR(Expect(frame, wire::MessageType::kDoneAck, ps_[i]->peer()));
  }
  return Status::Ok();
}

}  // namespace tfd::worker
