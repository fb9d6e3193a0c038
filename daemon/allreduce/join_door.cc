#include "daemon/allreduce/join_door.h"

#include <poll.h>

#include <algorithm>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/base/sha256.h"
#include "common/transport/dial.h"
#include "common/transport/handshake.h"
#include "common/transport/rpc.h"

namespace tfd::allreduce {

using Clock = std::chrono::steady_clock;

std::uint64_t JobFingerprint(const config::JobSpec& job, const model::Model& model) {
  const config::OptimizerSpec& o = job.optimizer;
  return Fingerprint64(fmt::format("model={};params={};optimizer={},{},{},{},{},{},{};batch={};seed={};epochs={};commit_every={}",
                                   model.Summary(), model.params().size(), static_cast<int>(o.type), o.learning_rate, o.momentum,
                                   o.beta1, o.beta2, o.epsilon, o.weight_decay, job.batch_size, job.seed, job.epochs,
                                   job.elastic.commit_every_steps));
}

JoinDoor::JoinDoor(std::uint64_t base_cluster_id, std::uint64_t job_fingerprint, int max_workers, int chiefs)
    : base_cluster_id_(base_cluster_id), job_(job_fingerprint), max_workers_(max_workers), chiefs_(chiefs) {}

bool JoinDoor::Offer(const std::shared_ptr<transport::Connection>& from, const wire::Hello& hello, std::uint64_t request_id,
                     const transport::HandshakeIdentity& self,
                     int rank) {
  // Before its HELLO the connection is "an unidentified peer (ADDRESS)": the joiner is named by its task and address.
  std::string address = from->peer_name();
  if (const std::size_t open = address.find('('); open != std::string::npos && address.ends_with(')'))
    address = address.substr(open + 1, address.size() - open - 2);
  const std::string name = fmt::format("{} ({})", transport::TaskName(hello.kind, hello.index), address);
  auto refuse = [&](const Status& why) {
    spdlog::warn("refused {}, which asked to join the ring: {}", name, why.message());
    from->SendErrorAndClose(why);
    return true;
  };
  if (rank != 0)  // Unavailable: the joiner asks the next member
    return refuse(Status::Unavailable(fmt::format("{} is rank {} of the ring, not rank 0, which takes joiners", self.name, rank)));
  if (hello.kind != wire::TaskKind::kWorker)
    return refuse(Status::FailedPrecondition(fmt::format("{}: only a worker task joins a running ring", name)));
  transport::HandshakeIdentity base = self;
  base.cluster_id = base_cluster_id_;
  if (Status s = transport::CheckHello(hello, base); !s.ok()) return refuse(s);
  {
    MutexLock lock(&mu_);
    if (joiners_.size() + arriving_ >= kMaxPending)
      return refuse(Status::Unavailable(fmt::format("{} already has {} joiners waiting for the next commit", self.name, kMaxPending)));
    ++arriving_;
  }
  from->set_peer_name(name);
  from->MarkEstablished();
  wire::OutFrame welcome = wire::Encode(transport::MakeWelcome(self));
  welcome.header.request_id = request_id;
  from->Send(std::move(welcome));
  from->DetachAfterThisFrame([weak = weak_from_this(), name, index = hello.index](transport::DetachedLink d) {
    auto door = weak.lock();
    if (door == nullptr) return;
    MutexLock lock(&door->mu_);
    --door->arriving_;
    door->joiners_.push_back({.link = std::make_unique<collective::Link>(std::move(d), name, kMaxJoinFrameBytes), .name = name,
                              .index = index, .since = Clock::now()});
  });
  return true;
}

Status JoinDoor::Read(Joiner& j, const std::vector<collective::RingMember>& members) {
  bool progress = false;
  for (;;) {
    TFD_ASSIGN_OR_RETURN(const wire::InFrame* frame, j.link->Read(&progress));
    if (frame == nullptr) break;
    if (j.ready || frame->header.type != wire::MessageType::kRingJoin)
      return Status::FailedPrecondition(fmt::format("{} sent {} where RING_JOIN was expected", j.name, wire::MessageTypeName(frame->header.type)));
    wire::RingJoin join;
    TFD_RETURN_IF_ERROR(wire::Decode(frame->payload, &join).WithContext(j.name));
    j.request_id = frame->header.request_id;
    const int rank = chiefs_ + static_cast<int>(join.index);
    const std::string task = fmt::format("worker:{}", join.index);
    if (join.index != j.index)
      return Status::FailedPrecondition(fmt::format("{}: RING_JOIN says worker index {}, its HELLO {}", j.name, join.index, j.index));
    if (join.job != job_)
      return Status::FailedPrecondition(fmt::format("{} runs another job (job fingerprint {:016x}, this ring's {:016x}): its job spec "
                                                    "must be the ring's", j.name, join.job, job_));
    if (rank >= max_workers_)
      return Status::FailedPrecondition(fmt::format("{} would be rank {}, past the job's elastic max_workers {}", j.name, rank, max_workers_));
    if (std::any_of(members.begin(), members.end(), [&](const collective::RingMember& m) { return m.task == task; }))
      return Status::FailedPrecondition(fmt::format("{}: {} is already a member of the ring", j.name, task));
    if (join.port == 0) return Status::FailedPrecondition(fmt::format("{}: RING_JOIN names port 0", j.name));
    j.member = {.kind = wire::TaskKind::kWorker, .index = join.index, .port = join.port, .task = task, .host = join.host};
    j.ready = true;
    spdlog::info("{} asks to join the ring (at {}:{}); it comes in at the next commit", j.name, join.host, join.port);
  }
  if (!j.ready && Clock::now() - j.since > std::chrono::seconds(30))
    return Status::DeadlineExceeded(fmt::format("{} sent no RING_JOIN within 30 s of its HELLO", j.name));
  return Status::Ok();
}

void JoinDoor::Flush(collective::Link& link) {
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  bool progress = false;
  while (link.pending_write() && link.Write(&progress).ok() && Clock::now() < deadline) {
    if (!link.pending_write()) break;
    pollfd p{link.fd(), POLLOUT, 0};
    (void)::poll(&p, 1, 10);
  }
}

bool JoinDoor::Poll(const std::vector<collective::RingMember>& members) {
  MutexLock lock(&mu_);
  bool any = false;
  for (auto it = joiners_.begin(); it != joiners_.end();) {
    Status s = Read(*it, members);
    if (s.ok()) {
      any = any || (it->ready && !it->taken);
      ++it;
      continue;
    }
    if (it->answered) {  // it has its answer and went on to the new ring: nothing to tell
      it = joiners_.erase(it);
      continue;
    }
    spdlog::warn("refused a worker that asked to join the ring: {}", s.message());
    wire::OutFrame error = wire::Encode(wire::ErrorMessage{static_cast<std::uint16_t>(s.code()), s.message()});
    error.header.request_id = it->request_id;
    if (it->link->Queue(std::move(error)).ok()) Flush(*it->link);
    it->link->Shutdown();
    it = joiners_.erase(it);
  }
  return any;
}

std::vector<wire::RingJoinMember> JoinDoor::TakeReady(const std::vector<collective::RingMember>& members) {
  MutexLock lock(&mu_);
  std::vector<Joiner*> ready;
  for (Joiner& j : joiners_)
    if (j.ready && !j.taken) ready.push_back(&j);
  std::sort(ready.begin(), ready.end(), [](const Joiner* a, const Joiner* b) { return a->index < b->index; });
  std::vector<wire::RingJoinMember> out;
  for (Joiner* j : ready) {
    const bool twice = std::any_of(out.begin(), out.end(), [&](const wire::RingJoinMember& m) { return m.index == j->index; });
    if (twice || static_cast<int>(members.size() + out.size()) >= max_workers_) continue;  // it waits for a later commit
    j->taken = true;
    out.push_back(j->member);
  }
  return out;
}

void JoinDoor::Answer(wire::RingJoinAccept accept) {
  MutexLock lock(&mu_);
  for (Joiner& j : joiners_) {
    if (!j.taken || j.answered) continue;
    for (std::size_t r = 0; r < accept.members.size(); ++r)
      if (accept.members[r].task == j.member.task) accept.rank = static_cast<std::uint32_t>(r);
    wire::OutFrame f = wire::Encode(accept);
    f.header.request_id = j.request_id;
    if (Status s = j.link->Queue(std::move(f)); !s.ok()) spdlog::warn("{}: {}", j.name, s.message());
    Flush(*j.link);
    j.answered = true;  // it closes the connection once it has read the answer
  }
}

namespace {

// One member of the ring asked: its WELCOME, then its answer to RING_JOIN.
Result<wire::RingJoinAccept> AskMember(transport::asio::io_context& ioc, const config::TfConfig& config, int member, std::uint64_t job,
                                       std::uint64_t incarnation, const transport::ConnectionOptions& connection, Clock::time_point deadline,
                                       const std::atomic<bool>* stop) {
  const config::TaskId task = config.cluster.WorkerTask(member);
  const config::Endpoint& ep = config.cluster.EndpointOf(task);
  const std::string name = fmt::format("{} ({})", task.ToString(), ep.ToString());
  const auto dial_by = std::min(deadline, Clock::now() + std::chrono::seconds(2));
  TFD_ASSIGN_OR_RETURN(transport::tcp::socket socket, transport::Dial(ioc, ep.host, ep.port, task.ToString(), dial_by, stop));
  transport::ConnectionOptions options = connection;
  // Rank 0 sends nothing until the commit it takes this worker in at: silence is not a loss here.
  options.peer_timeout = std::max(options.peer_timeout, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  auto rpc = transport::RpcClient::Start(std::move(socket), name, options);
  const config::TaskId self = config.task;
  const transport::HandshakeIdentity id{.name = self.ToString(), .kind = wire::TaskKind::kWorker,
                                        .index = static_cast<std::uint32_t>(self.index), .incarnation = incarnation,
                                        .cluster_id = config.cluster.Id()};
  auto hello = rpc->Call(wire::Encode(transport::MakeHello(id)));
  Result<wire::InFrame> welcome = rpc->Wait(hello, std::min(deadline, Clock::now() + std::chrono::seconds(10)), "HELLO");
  if (!welcome.ok()) {
    rpc->Close(Status::Ok());
    return welcome.status();
  }
  const config::Endpoint& own = config.self();
  auto joined = rpc->Call(wire::Encode(wire::RingJoin{.index = static_cast<std::uint32_t>(self.index), .port = own.port, .job = job,
                                                      .host = own.host}));
  spdlog::info("asked {} to take this worker into the ring; waiting for its next commit", name);
  Result<wire::InFrame> answer = rpc->Wait(joined, deadline, "RING_JOIN");
  rpc->Close(Status::Ok());
  if (!answer.ok()) return answer.status();
  if (answer->header.type != wire::MessageType::kRingJoinAccept)
    return Status::Corruption(fmt::format("{} answered RING_JOIN with {}", name, wire::MessageTypeName(answer->header.type)));
  wire::RingJoinAccept accept;
  TFD_RETURN_IF_ERROR(wire::Decode(answer->payload, &accept).WithContext(name));
  if (accept.members[accept.rank].task != self.ToString())
    return Status::Corruption(fmt::format("{}: RING_JOIN_ACCEPT puts {} at this worker's rank {}", name, accept.members[accept.rank].task,
                                          accept.rank));
  return accept;
}

}  // namespace

Result<wire::RingJoinAccept> AskToJoin(transport::asio::io_context& ioc, const config::TfConfig& config, std::uint64_t job_fingerprint,
                                       std::uint64_t incarnation, const transport::ConnectionOptions& connection, Clock::time_point deadline,
                                       const std::atomic<bool>* stop) {
  const int base = config.cluster.base_num_workers();
  Status last = Status::DeadlineExceeded("no member of the ring answered");
  while (Clock::now() < deadline) {
    for (int member = 0; member < base && Clock::now() < deadline; ++member) {
      if (stop != nullptr && stop->load()) return Status::FailedPrecondition("stopped by a signal while asking to join the ring");
      Result<wire::RingJoinAccept> accept = AskMember(ioc, config, member, job_fingerprint, incarnation, connection, deadline, stop);
      if (accept.ok()) return accept;
      last = accept.status();
      // A refusal is final, but for "not rank 0" (Unavailable) and a member that is gone or silent.
      if (last.code() != Code::kUnavailable && last.code() != Code::kDeadlineExceeded) return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return Status::DeadlineExceeded(fmt::format("joining the ring: no member took this worker in before the startup timeout: {}", last.message()));
}

}  // namespace tfd::allreduce
