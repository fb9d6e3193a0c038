#include <utility>

#include "daemon/coordinator/coordinator.h"

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/base/mutex.h"
#include "common/ckpt/file.h"
#include "common/ckpt/format.h"
#include "common/transport/handshake.h"
#include "common/transport/io_thread.h"
#include "common/transport/listener.h"
#include "common/transport/local_link.h"
#include "common/wire/messages.h"
#include "common/wire/trial_messages.h"

namespace tfd::coordinator {
namespace {

using ConnectionPtr = std::shared_ptr<transport::Connection>;

double Now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

void Reply(transport::Connection& to, wire::OutFrame f, std::uint64_t request_id) {
  f.header.request_id = request_id;
  to.Send(std::move(f));
}

}  // namespace

// The frame handler: one per coordinator, shared by every worker connection. Runs on the
// connections' strands (one io thread); mu_ guards the scheduler and the connection tables, and
// frames are sent after it is released.
class Coordinator::Service final : public transport::FrameHandler {
 public:
  Service(const config::SweepSpec& sweep, std::vector<config::Trial> trials, int parallel, std::string trials_dir, std::uint64_t cluster_id)
      : scheduler_(sweep, std::move(trials), parallel), trials_dir_(std::move(trials_dir)) {
    identity_.name = "coordinator:0";
    identity_.kind = wire::TaskKind::kCoordinator;
    identity_.cluster_id = cluster_id;
  }

  void OnFrame(const ConnectionPtr& from, wire::InFrame frame) override {
    const wire::MessageType type = frame.header.type;
    const std::uint64_t id = frame.header.request_id;
    int worker = -1;
    {
      MutexLock lock(&mu_);
      if (auto it = workers_.find(from.get()); it != workers_.end()) worker = it->second;
    }
    if (type == wire::MessageType::kHello) return HandleHello(from, frame);
    if (worker < 0) return Refuse(*from, Status::FailedPrecondition(fmt::format("{} sent {} before HELLO", from->peer_name(), wire::MessageTypeName(type))));
    switch (type) {
      case wire::MessageType::kTrialRequest: {
        wire::TrialRequest m;
        if (!DecodeOr(*from, frame, &m)) return;
        std::vector<Send> out;
        {
          MutexLock lock(&mu_);
          pending_[worker] = {from, id};
          ServePendingLocked(&out);
        }
        return Flush(out);
      }
      case wire::MessageType::kTrialEpoch: {
        wire::TrialEpoch m;
        if (!DecodeOr(*from, frame, &m)) return;
        bool stop;
        std::optional<Stored> committed;  // to write to the run folder
        {
          MutexLock lock(&mu_);
          const int trial = static_cast<int>(m.trial);
          stop = scheduler_.OnEpoch(worker, trial, static_cast<int>(m.epoch), m.metrics, Now());
          auto p = pending_ckpt_.find(trial);
          if (p != pending_ckpt_.end() && trial >= 0 && trial < static_cast<int>(scheduler_.trials().size()) &&
              scheduler_.trials()[static_cast<std::size_t>(trial)].checkpoint_epoch == p->second.epoch) {
            if (!trials_dir_.empty()) committed = Stored{.epoch = p->second.epoch, .bytes = {}, .parsed = std::move(p->second.parsed)};
            p->second.parsed = {};
            committed_ckpt_[trial] = std::move(p->second);
            pending_ckpt_.erase(p);
          }
        }
        Reply(*from, wire::Encode(wire::TrialControl{.stop = stop}), id);
        if (committed) WriteCheckpoint(static_cast<int>(m.trial), committed->parsed);
        return;
      }
      case wire::MessageType::kTrialCheckpoint: {
        wire::TrialCheckpoint m;
        if (!DecodeOr(*from, frame, &m)) return;
        Result<ckpt::Checkpoint> parsed = ckpt::Parse(m.bytes, fmt::format("trial {}'s checkpoint after epoch {}", m.trial, m.epoch));
        if (!parsed.ok()) return Refuse(*from, Status::Corruption(fmt::format("{}: {}", from->peer_name(), parsed.status().message())));
        {
          MutexLock lock(&mu_);
          const int trial = static_cast<int>(m.trial);
          if (scheduler_.OnCheckpoint(worker, trial, static_cast<int>(m.epoch)))
            pending_ckpt_[trial] = Stored{.epoch = static_cast<int>(m.epoch), .bytes = std::move(m.bytes), .parsed = std::move(parsed).value()};
        }
        return Reply(*from, wire::Encode(wire::TrialControl{.stop = false}), id);
      }
      case wire::MessageType::kTrialEnd: {
        wire::TrialEnd m;
        if (!DecodeOr(*from, frame, &m)) return;
        std::vector<Send> out;
        {
          MutexLock lock(&mu_);
          scheduler_.OnEnd(worker, static_cast<int>(m.trial), m.ok, m.stopped, m.reason, m.metrics, Now());
          DropEndedLocked();
          ServePendingLocked(&out);
        }
        Reply(*from, wire::Encode(wire::TrialControl{.stop = false}), id);
        return Flush(out);
      }
      case wire::MessageType::kTrialPredictions: {
        wire::TrialPredictions m;
        if (!DecodeOr(*from, frame, &m)) return;
        bool taken;
        {
          MutexLock lock(&mu_);
          taken = scheduler_.OnPredictions(worker, static_cast<int>(m.trial), static_cast<int>(m.epoch), static_cast<int>(m.classes), m.labels,
                                           m.probabilities, m.targets, Now());
        }
        if (!taken) spdlog::warn("worker:{}: trial {}'s predictions for epoch {} were not taken (not its trial, or another shape)", worker, m.trial, m.epoch);
        return Reply(*from, wire::Encode(wire::TrialControl{.stop = false}), id);
      }
      case wire::MessageType::kError: return;  // the connection closes; OnClosed re-places its trial
      default:
        return Refuse(*from, Status::InvalidArgument(fmt::format("{} sent {}, which a coordinator does not take", from->peer_name(),
                                                                 wire::MessageTypeName(type))));
    }
  }

  void OnClosed(const ConnectionPtr& from, const Status& why) override {
    std::vector<Send> out;
    {
      MutexLock lock(&mu_);
      auto it = workers_.find(from.get());
      if (it == workers_.end()) return;
      const int worker = it->second;
      workers_.erase(it);
      if (auto p = pending_.find(worker); p != pending_.end() && p->second.to.get() == from.get()) pending_.erase(p);
      if (scheduler_.finished()) spdlog::debug("worker:{} left: {}", worker, why.message());
      else spdlog::warn("worker:{} lost: {}", worker, why.message());
      scheduler_.OnWorkerLost(worker, why.message(), Now());
      DropEndedLocked();
      ServePendingLocked(&out);
    }
    Flush(out);
  }

  // Runs `fn` on the scheduler under the lock, then serves waiting workers.
  template <typename Fn>
  void Change(Fn fn) {
    std::vector<Send> out;
    {
      MutexLock lock(&mu_);
      fn(scheduler_);
      DropEndedLocked();
      ServePendingLocked(&out);
    }
    Flush(out);
  }
  template <typename Fn>
  auto Read(Fn fn) const {
    MutexLock lock(&mu_);
    return fn(scheduler_, workers_.size());
  }
  // The sweep rebuilt from its trials.jsonl; each waiting trial's checkpoint read from the run
  // folder (the newest at or before its last reported epoch that loads) into committed_ckpt_.
  Result<SweepScheduler::Restored> Restore(const std::vector<nlohmann::ordered_json>& lines) {
    std::map<int, Stored> loaded;  // the callback's own: the analysis checks a lambda apart from the lock held around it
    const auto load = [this, &loaded](int trial, int epoch) {
      std::optional<Stored> c = LoadCheckpoint(trial, epoch);
      if (!c) return 0;
      const int at = c->epoch;
      loaded[trial] = std::move(*c);
      return at;
    };
    MutexLock lock(&mu_);
    Result<SweepScheduler::Restored> r = scheduler_.Restore(lines, load, Now());
    if (r.ok()) committed_ckpt_ = std::move(loaded);
    return r;
  }
  int EverConnected() const {
    MutexLock lock(&mu_);
    return static_cast<int>(seen_.size());
  }
  std::vector<std::string> TakeLines() {
    MutexLock lock(&mu_);
    return scheduler_.TakeLines();
  }

 private:
  struct Pending {
    ConnectionPtr to;
    std::uint64_t request_id = 0;
  };
  struct Send {
    ConnectionPtr to;
    wire::OutFrame frame;
  };
  // A trial's checkpoint: the bytes as the worker sent them (sent on to the next worker as they
  // are) and, until it is written to the run folder, the parsed form.
  struct Stored {
    int epoch = 0;
    std::vector<std::byte> bytes;
    ckpt::Checkpoint parsed;
  };

  // Checkpoints of trials no longer running or waiting are of no more use: a pending one belongs to
  // a lost attempt, a committed one to an ended trial.
  void DropEndedLocked() TFD_REQUIRES(mu_) {
    const std::vector<TrialState>& trials = scheduler_.trials();
    auto ended = [&](int trial) {
      const TrialStatus s = trials[static_cast<std::size_t>(trial)].status;
      return s != TrialStatus::kRunning && s != TrialStatus::kPaused;
    };
    std::erase_if(pending_ckpt_, [&](const auto& kv) {
      const TrialState& t = trials[static_cast<std::size_t>(kv.first)];
      return ended(kv.first) || t.pending_checkpoint != kv.second.epoch;
    });
    std::erase_if(committed_ckpt_, [&](const auto& kv) { return ended(kv.first); });
  }

  // <trials_dir>/<trial>/ckpt/ckpt-<step>.tfdckpt, the newest two. A failure is a warning: the
  // checkpoint a re-placed trial needs is in memory.
  void WriteCheckpoint(int trial, const ckpt::Checkpoint& c) {
    const std::string dir = (std::filesystem::path(trials_dir_) / std::to_string(trial) / "ckpt").string();
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    // Two kept: after a coordinator's crash, trials.jsonl may lack the newest checkpoint's epoch
    // line (written a moment later), and the trial then resumes from the one before.
    Result<std::string> path = ckpt::Write(dir, c, /*keep_last=*/2);
    if (!path.ok()) spdlog::warn("trial {}'s checkpoint not written: {}", trial, path.status().message());
  }

  // The trial's newest checkpoint file at or before `epoch` that loads (checked as any checkpoint
  // is; a bad one is skipped with a warning); none: it starts again from its first epoch.
  std::optional<Stored> LoadCheckpoint(int trial, int epoch) const {
    if (trials_dir_.empty()) return std::nullopt;
    Result<std::vector<std::string>> files = ckpt::List((std::filesystem::path(trials_dir_) / std::to_string(trial) / "ckpt").string());
    if (!files.ok()) return std::nullopt;
    for (const std::string& path : *files) {
      Result<ckpt::Checkpoint> c = ckpt::Load(path);
      if (!c.ok()) {
        spdlog::warn("trial {}: {} skipped: {}", trial, path, c.status().message());
        continue;
      }
      // A trial's checkpoint after epoch k has its data cursor at epoch k + 1 (train/standalone.cc).
      if (c->cursors.size() != 1 || c->cursors[0].epoch < 2 || static_cast<int>(c->cursors[0].epoch) - 1 > epoch) continue;
      Result<std::vector<std::byte>> bytes = ckpt::Serialize(*c);
      if (!bytes.ok()) continue;
      return Stored{.epoch = static_cast<int>(c->cursors[0].epoch) - 1, .bytes = std::move(bytes).value(), .parsed = {}};
    }
    return std::nullopt;
  }

  template <typename M>
  bool DecodeOr(transport::Connection& from, const wire::InFrame& frame, M* m) {
    Status s = wire::Decode(frame.payload, m);
    if (s.ok()) return true;
    Refuse(from, Status::Corruption(fmt::format("{}: {}", from.peer_name(), s.message())));
    return false;
  }
  void Refuse(transport::Connection& from, const Status& why) {
    spdlog::warn("{}", why.message());
    from.SendErrorAndClose(why);
  }

  void HandleHello(const ConnectionPtr& from, const wire::InFrame& frame) {
    wire::Hello hello;
    if (!DecodeOr(*from, frame, &hello)) return;
    if (Status s = transport::CheckHello(hello, identity_); !s.ok()) {
      from->CountRefusal(transport::Refusal::kMismatch);
      return Refuse(*from, s);
    }
    if (hello.kind != wire::TaskKind::kWorker)
      return Refuse(*from, Status::FailedPrecondition(fmt::format("{} is not a worker: only generic workers talk to a coordinator",
                                                                  transport::TaskName(hello.kind, hello.index))));
    const int worker = static_cast<int>(hello.index);
    {
      MutexLock lock(&mu_);
      for (const auto& [conn, index] : workers_)
        if (index == worker)
          return Refuse(*from, Status::FailedPrecondition(fmt::format("worker:{} is connected already", worker)));
      workers_[from.get()] = worker;
      seen_.insert(worker);
    }
    from->set_peer_name(fmt::format("worker:{} ({})", worker, from->peer_name()));
    from->MarkEstablished();
    spdlog::info("worker:{} connected", worker);
    Reply(*from, wire::Encode(transport::MakeWelcome(identity_)), frame.header.request_id);
  }

  void ServePendingLocked(std::vector<Send>* out) TFD_REQUIRES(mu_) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      SweepScheduler::Assignment a;
      const SweepScheduler::Next next = scheduler_.NextFor(it->first, Now(), &a);
      if (next == SweepScheduler::Next::kWait) {
        ++it;
        continue;
      }
      wire::TrialAssign m;
      if (next == SweepScheduler::Next::kAssigned) {
        m.trial = static_cast<std::uint32_t>(a.trial);
        m.attempt = static_cast<std::uint32_t>(a.attempt);
        m.job = std::move(a.job);
        m.predictions = a.predictions;
        if (a.resume_epoch > 0) {
          auto c = committed_ckpt_.find(a.trial);
          if (c != committed_ckpt_.end() && c->second.epoch == a.resume_epoch) {
            m.resume_epoch = static_cast<std::uint32_t>(a.resume_epoch);
            m.checkpoint = c->second.bytes;
          }
        }
      }
      wire::OutFrame f = wire::Encode(m);
      f.header.request_id = it->second.request_id;
      out->push_back({it->second.to, std::move(f)});
      it = pending_.erase(it);
    }
  }
  static void Flush(std::vector<Send>& out) {
    for (Send& s : out) s.to->Send(std::move(s.frame));
  }

  transport::HandshakeIdentity identity_;
  mutable Mutex mu_;
  SweepScheduler scheduler_ TFD_GUARDED_BY(mu_);
  std::map<const transport::Connection*, int> workers_ TFD_GUARDED_BY(mu_);  // established connections
  std::map<int, Pending> pending_ TFD_GUARDED_BY(mu_);                        // idle workers waiting for a trial
  std::set<int> seen_ TFD_GUARDED_BY(mu_);                                    // every worker index that said HELLO
  const std::string trials_dir_;
  std::map<int, Stored> pending_ckpt_ TFD_GUARDED_BY(mu_);    // trial -> its checkpoint awaiting its epoch report
  std::map<int, Stored> committed_ckpt_ TFD_GUARDED_BY(mu_);  // trial -> the checkpoint it resumes from
};

struct Coordinator::Impl {
  std::unique_ptr<Service> service;
  SweepScheduler::Restored restored;
  std::mutex connections_mu;
  std::set<ConnectionPtr> connections;  // guarded by connections_mu
  std::unique_ptr<transport::Listener> listener;
  std::unique_ptr<transport::IoThread> io;  // last: stopped and joined first
};

Result<std::unique_ptr<Coordinator>> Coordinator::Start(const config::SweepSpec& sweep, std::vector<config::Trial> trials, int parallel,
                                                        CoordinatorOptions options) {
  std::unique_ptr<Coordinator> c(new Coordinator());
  c->impl_ = std::make_unique<Impl>();
  Impl* impl = c->impl_.get();
  impl->service = std::make_unique<Service>(sweep, std::move(trials), parallel, options.trials_dir, options.cluster_id);
  if (options.resume) {
    Result<SweepScheduler::Restored> restored = impl->service->Restore(options.resume->lines);
    if (!restored.ok()) return restored.status().WithContext(options.resume->path);
    impl->restored = *restored;
  }
  if (options.connection.guard == nullptr) options.connection.guard = std::make_shared<transport::PeerGuard>();
  impl->io = std::make_unique<transport::IoThread>([impl] {
    if (impl->listener) impl->listener->Stop();
    std::lock_guard<std::mutex> lock(impl->connections_mu);
    for (const ConnectionPtr& conn : impl->connections) conn->Close(Status::Unavailable("the coordinator is stopping"));
  });
  TFD_ASSIGN_OR_RETURN(impl->listener, transport::Listener::Bind(impl->io->context(), options.bind_address, options.port,
                                                                 [impl, conn_options = options.connection](transport::tcp::socket socket) {
                                                                   const std::string remote = transport::PeerAddress(socket, /*with_port=*/true);
                                                                   auto conn = std::make_shared<transport::Connection>(
                                                                       std::move(socket), *impl->service,
                                                                       remote.empty() ? std::string("a peer") : remote,
                                                                       conn_options);
                                                                   {
                                                                     std::lock_guard<std::mutex> lock(impl->connections_mu);
                                                                     std::erase_if(impl->connections, [](const auto& x) { return x->closed(); });
                                                                     impl->connections.insert(conn);
                                                                   }
                                                                   conn->Start();
                                                                 }));
  impl->listener->Start();
  return c;
}

Coordinator::~Coordinator() {
  if (impl_) impl_->io.reset();  // closes the listener and connections, joins the io thread
}

std::uint16_t Coordinator::port() const { return impl_->listener->port(); }
SweepScheduler::Restored Coordinator::restored() const { return impl_->restored; }

std::vector<TrialState> Coordinator::Trials() const {
  return impl_->service->Read([](const SweepScheduler& s, std::size_t) { return s.trials(); });
}
int Coordinator::Best() const {
  return impl_->service->Read([](const SweepScheduler& s, std::size_t) { return s.best(); });
}
bool Coordinator::Finished() const {
  return impl_->service->Read([](const SweepScheduler& s, std::size_t) { return s.finished(); });
}
int Coordinator::Connected() const {
  return impl_->service->Read([](const SweepScheduler&, std::size_t n) { return static_cast<int>(n); });
}
int Coordinator::EverConnected() const { return impl_->service->EverConnected(); }
std::vector<std::string> Coordinator::TakeLines() { return impl_->service->TakeLines(); }
std::vector<SweepScheduler::EnsembleEpoch> Coordinator::EnsembleEpochs() const {
  return impl_->service->Read([](const SweepScheduler& s, std::size_t) { return s.ensemble_epochs(); });
}
SweepScheduler::Predictions Coordinator::LastPredictions() const {
  return impl_->service->Read([](const SweepScheduler& s, std::size_t) { return s.last_predictions(); });
}
void Coordinator::StopAll() {
  impl_->service->Change([](SweepScheduler& s) { s.StopAll(Now()); });
}
void Coordinator::FailWaiting(const std::string& why) {
  impl_->service->Change([&](SweepScheduler& s) { s.FailQueued(why, Now()); });
}

}  // namespace tfd::coordinator
