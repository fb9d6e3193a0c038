#include <utility>

#include "daemon/coordinator/generic_worker.h"

#include <unistd.h>

#include <filesystem>
#include <new>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/ckpt/format.h"
#include "common/config/job.h"
#include "common/data/dataset.h"
#include "common/data/source.h"
#include "common/model/model.h"
#include "common/transport/dial.h"
#include "common/transport/handshake.h"
#include "common/transport/io_thread.h"
#include "common/transport/rpc.h"
#include "common/wire/messages.h"
#include "common/wire/trial_messages.h"
#include "daemon/train/standalone.h"
#include "daemon/task/lifecycle.h"

namespace tfd::coordinator {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(200);

// Waits for a reply of `type`, polling the stop flag; FailedPrecondition when stopped.
Result<wire::InFrame> Await(transport::RpcClient& rpc, std::future<Result<wire::InFrame>>& reply, wire::MessageType type,
                            const std::atomic<bool>* stop, const char* what) {
  while (reply.wait_for(kPoll) != std::future_status::ready)
    if (stop != nullptr && stop->load()) return Status::FailedPrecondition(fmt::format("stopped while waiting for {}", what));
  TFD_ASSIGN_OR_RETURN(wire::InFrame frame, reply.get());
  if (frame.header.type != type)
    return Status::Corruption(fmt::format("{} answered {} where {} was expected", rpc.peer(), wire::MessageTypeName(frame.header.type),
                                          wire::MessageTypeName(type)));
  return frame;
}

// The epoch's metrics under their event names; a regression model's MAEs and RMSEs in place of
// the accuracies (its `accuracy` is a placeholder 0, not sent, so no objective can rank by it).
std::vector<std::pair<std::string, double>> EpochMetrics(const train::EpochStats& e) {
  std::vector<std::pair<std::string, double>> m = {{"loss", e.loss}};
  if (!e.mae) m.emplace_back("accuracy", e.accuracy);
  for (const auto& [name, value] : {std::pair{"test_accuracy", e.test_accuracy}, std::pair{"val_accuracy", e.val_accuracy},
                                    std::pair{"val_loss", e.val_loss}, std::pair{"mae", e.mae}, std::pair{"rmse", e.rmse},
                                    std::pair{"val_mae", e.val_mae}, std::pair{"val_rmse", e.val_rmse}, std::pair{"test_mae", e.test_mae},
                                    std::pair{"test_rmse", e.test_rmse}})
    if (value) m.emplace_back(name, *value);
  return m;
}

// An ensemble member's test-set outputs after an epoch; a regression's carry the targets (and a
// label of 0 per row, which the frame's layout keeps).
wire::TrialPredictions MemberPredictions(std::uint32_t trial, int epoch, model::Model& m, const data::Dataset& test) {
  wire::TrialPredictions p{.trial = trial, .epoch = static_cast<std::uint32_t>(epoch), .classes = static_cast<std::uint32_t>(m.classes()),
                           .labels = test.labels, .probabilities = model::PredictProbabilities(m, test), .targets = {}};
  if (test.regression()) {
    p.labels.assign(static_cast<std::size_t>(test.size), 0);
    p.targets = test.targets;
  }
  return p;
}

// Reports each epoch of one trial and sets `trial_stop` when the coordinator (or a signal) says
// stop. Runs on the training thread.
class TrialReporter final : public train::TrainObserver {
 public:
  // `test`: an ensemble member's test set, whose predictions go to the coordinator after each
  // epoch; null otherwise.
  TrialReporter(transport::RpcClient& rpc, std::uint32_t trial, const std::atomic<bool>* signal, std::atomic<bool>* trial_stop,
                const data::Dataset* test)
      : rpc_(rpc), trial_(trial), signal_(signal), trial_stop_(trial_stop), test_(test) {}
  void OnStep(const train::StepStats&) override {
    if (signal_ != nullptr && signal_->load()) trial_stop_->store(true);
  }
  void OnEpoch(const train::EpochStats& e) override {
    if (!lost_.ok()) return;
    last_ = EpochMetrics(e);
    if (test_ != nullptr && e.model != nullptr) {
      // Forward writes only the model's activation buffers, which the epoch loop does not read
      // across epochs; the parameters stay as they are.
      model::Model& m = const_cast<model::Model&>(*e.model);
      auto reply = rpc_.Call(wire::Encode(MemberPredictions(trial_, e.epoch, m, *test_)));
      Result<wire::InFrame> frame = Await(rpc_, reply, wire::MessageType::kTrialControl, signal_, "TRIAL_CONTROL");
      if (!frame.ok()) {
        lost_ = frame.status();
        trial_stop_->store(true);
        return;
      }
    }
    auto reply = rpc_.Call(wire::Encode(wire::TrialEpoch{.trial = trial_, .epoch = static_cast<std::uint32_t>(e.epoch), .metrics = last_}));
    Result<wire::InFrame> frame = Await(rpc_, reply, wire::MessageType::kTrialControl, signal_, "TRIAL_CONTROL");
    wire::TrialControl control;
    if (!frame.ok() || !wire::Decode(frame->payload, &control).ok()) {
      lost_ = frame.ok() ? Status::Corruption("a bad TRIAL_CONTROL") : frame.status();
      trial_stop_->store(true);
      return;
    }
    if (control.stop) {
      told_to_stop_ = true;
      trial_stop_->store(true);
    }
  }
  // The trial's state after `epoch`, sent before that epoch's report (which commits it at the
  // coordinator), so a re-placed trial resumes after the last epoch it reported.
  void SendCheckpoint(int epoch, const ckpt::Checkpoint& c) {
    if (!lost_.ok() || skip_checkpoints_) return;
    Result<std::vector<std::byte>> bytes = ckpt::Serialize(c);
    if (!bytes.ok() || bytes->size() > wire::kMaxTrialCheckpointBytes) {
      spdlog::warn("trial {}: no per-trial checkpoints ({}): a re-placed trial starts again from its first epoch", trial_,
                   bytes.ok() ? fmt::format("{} bytes, over the {} a TRIAL_CHECKPOINT carries", bytes->size(), wire::kMaxTrialCheckpointBytes)
                              : bytes.status().message());
      skip_checkpoints_ = true;
      return;
    }
    auto reply = rpc_.Call(wire::Encode(wire::TrialCheckpoint{.trial = trial_, .epoch = static_cast<std::uint32_t>(epoch), .bytes = std::move(bytes).value()}));
    Result<wire::InFrame> frame = Await(rpc_, reply, wire::MessageType::kTrialControl, signal_, "TRIAL_CONTROL");
    if (!frame.ok()) {
      lost_ = frame.status();
      trial_stop_->store(true);
    }
  }
  bool told_to_stop() const { return told_to_stop_; }
  const Status& lost() const { return lost_; }
  const std::vector<std::pair<std::string, double>>& last() const { return last_; }

 private:
  transport::RpcClient& rpc_;
  std::uint32_t trial_;
  const std::atomic<bool>* signal_;
  std::atomic<bool>* trial_stop_;
  const data::Dataset* test_;
  bool told_to_stop_ = false;
  bool skip_checkpoints_ = false;
  Status lost_;
  std::vector<std::pair<std::string, double>> last_;
};

}  // namespace

Status RunGenericWorker(const GenericWorkerOptions& options, EventWriter& events, const transport::ConnectionOptions& connection) {
  transport::IoThread io;
  const std::string peer = fmt::format("coordinator ({}:{})", options.host, options.port);
  TFD_ASSIGN_OR_RETURN(transport::tcp::socket socket,
                       transport::Dial(io.context(), options.host, options.port, peer, transport::Clock::now() + options.startup_timeout, options.stop));
  std::shared_ptr<transport::RpcClient> rpc = transport::RpcClient::Start(std::move(socket), peer, connection);
  struct Closer {
    std::shared_ptr<transport::RpcClient> rpc;
    ~Closer() { rpc->Close(Status::Unavailable("the worker is done")); }
  } closer{rpc};
  transport::HandshakeIdentity self{.name = fmt::format("worker:{}", options.index), .kind = wire::TaskKind::kWorker,
                                    .index = static_cast<std::uint32_t>(options.index), .cluster_id = options.cluster_id};
  {
    auto reply = rpc->Call(wire::Encode(transport::MakeHello(self)));
    TFD_ASSIGN_OR_RETURN(wire::InFrame frame, Await(*rpc, reply, wire::MessageType::kWelcome, options.stop, "WELCOME"));
    wire::Welcome welcome;
    TFD_RETURN_IF_ERROR(wire::Decode(frame.payload, &welcome).WithContext(peer));
    TFD_RETURN_IF_ERROR(transport::CheckWelcome(welcome, peer, wire::TaskKind::kCoordinator, 0));
  }
  spdlog::info("connected to {}", peer);
  task::EmitStart(events, {.role = "generic_worker", .rank = options.index});
  while (true) {
    auto reply = rpc->Call(wire::Encode(wire::TrialRequest{.worker = static_cast<std::uint32_t>(options.index)}));
    TFD_ASSIGN_OR_RETURN(wire::InFrame frame, Await(*rpc, reply, wire::MessageType::kTrialAssign, options.stop, "TRIAL_ASSIGN"));
    wire::TrialAssign assign;
    TFD_RETURN_IF_ERROR(wire::Decode(frame.payload, &assign).WithContext(peer));
    if (assign.trial == wire::kNoTrial) {
      spdlog::info("the sweep is over");
      return Status::Ok();
    }
    if (assign.checkpoint.empty()) spdlog::info("trial {} (attempt {})", assign.trial, assign.attempt);
    else spdlog::info("trial {} (attempt {}): resuming after epoch {}", assign.trial, assign.attempt, assign.resume_epoch);
    wire::TrialEnd end{.trial = assign.trial};
    std::atomic<bool> trial_stop{false};
    Result<config::JobSpec> job = config::ParseJobSpec(assign.job, fmt::format("trial {}'s job", assign.trial));
    Status s = job.status();
    if (s.ok() && !options.export_root.empty())
      job->export_model.dir = (std::filesystem::path(options.export_root) / std::to_string(assign.trial) / "model").string();
    std::optional<ckpt::Checkpoint> resume;
    if (s.ok() && !assign.checkpoint.empty()) {
      const std::string source = fmt::format("trial {}'s checkpoint after epoch {}", assign.trial, assign.resume_epoch);
      Result<ckpt::Checkpoint> parsed = ckpt::Parse(assign.checkpoint, source);
      s = parsed.status();
      if (s.ok() && (parsed->cursors.size() != 1 || parsed->cursors[0].epoch != assign.resume_epoch + 1))
        s = Status::Corruption(fmt::format("{}: its data cursor is not at epoch {}", source, assign.resume_epoch + 1));
      if (s.ok()) resume = std::move(parsed).value();
    }
    data::Dataset test;  // an ensemble member's test set
    if (s.ok() && assign.predictions) {
      Result<data::DataSplits> data = data::LoadData(job->data, job->seed);
      s = data.status();
      if (s.ok()) test = std::move(data->test);
      // The predictions travel in one TRIAL_PREDICTIONS frame, bounded to this many outputs a row.
      if (s.ok() && static_cast<std::uint32_t>(test.outputs()) > wire::kMaxPredictionClasses)
        s = Status::InvalidArgument(fmt::format("trial {}'s data: {} classes; an ensemble's members send at most {} a row",
                                                assign.trial, test.outputs(), wire::kMaxPredictionClasses));
    }
    TrialReporter reporter(*rpc, assign.trial, options.stop, &trial_stop, assign.predictions ? &test : nullptr);
    if (s.ok()) {
      // A trial is not the task's start: this worker wrote its one start event above.
      train::StandaloneOptions sopts{.stop = &trial_stop, .params_out = "", .observers = options.observers, .emit_start = false};
      sopts.observers.push_back(&reporter);
      sopts.resume = resume ? &*resume : nullptr;
      sopts.epoch_checkpoint = [&reporter](int epoch, const ckpt::Checkpoint& c) { reporter.SendCheckpoint(epoch, c); };
      try {
        s = train::RunStandalone(*job, events, sopts);
      } catch (const std::bad_alloc&) {
        s = Status::InvalidArgument("out of memory: the model or batch_size is too large for this machine");
      }
    }
    if (!reporter.lost().ok()) return reporter.lost();
    if (options.stop != nullptr && options.stop->load()) {
      end.stopped = true;
      end.reason = "the worker was stopped by a signal";
      (void)rpc->Call(wire::Encode(end));  // best effort: the coordinator also sees the connection close
      return Status::FailedPrecondition("stopped by a signal");
    }
    end.ok = s.ok();
    end.stopped = !s.ok() && reporter.told_to_stop();
    end.reason = s.ok() ? "" : s.message();
    end.metrics = reporter.last();
    if (!end.ok && !end.stopped) spdlog::warn("trial {} failed: {}", assign.trial, end.reason);
    auto ack = rpc->Call(wire::Encode(end));
    TFD_RETURN_IF_ERROR(Await(*rpc, ack, wire::MessageType::kTrialControl, options.stop, "TRIAL_CONTROL").status());
  }
}

}  // namespace tfd::coordinator
