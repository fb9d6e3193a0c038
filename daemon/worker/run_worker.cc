#include "daemon/worker/run_worker.h"

#include <unistd.h>

#include <algorithm>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/base/service.h"
#include "common/transport/io_thread.h"
#include "common/compress/topk.h"
#include "common/optim/optimizer.h"
#include "daemon/train/compression.h"
#include "daemon/train/device.h"
#include "daemon/train/job_data.h"
#include "daemon/train/trainer.h"
#include "daemon/worker/checkpointer.h"
#include "daemon/worker/placement.h"
#include "daemon/worker/ps_client.h"
#include "daemon/task/lifecycle.h"

namespace tfd::worker {
namespace {

// Pushes each step's gradient to the ps tasks and pulls the parameters to use next.
//
// sync: push, then wait for the step this gradient completes (with the others') and take its
// parameters. async: push and take the current parameters. async with overlap: the exchange of step
// t travels while step t+1 computes on the parameters pulled at step t-1, so the worker never
// waits on the network, at the price of one more step of staleness (which momentum tolerates badly).
// A batch norm's moving statistics are this worker's own: every pull after the first leaves them as
// the worker's training moved them (the ps's copy, never moved, is read only at the start: the
// chief's initial values or a checkpoint's).
class PsUpdater final : public train::Updater {
 public:
  PsUpdater(PsClient& client, std::uint32_t rank, std::uint64_t incarnation, bool sync, bool overlap, std::uint64_t start_step,
            std::size_t num_params, Checkpointer* checkpointer)
      : checkpointer_(checkpointer),
        client_(client),
        rank_(rank),
        incarnation_(incarnation),
        sync_(sync),
        overlap_(overlap && !sync),
        step_(start_step),
        sending_(std::make_shared<std::vector<float>>(overlap_ ? num_params : 0)) {}

  // The model's variables its training Forward moves (batch norms' moving statistics).
  void KeepMoved(const model::Model& model) {
    std::size_t n = 0;
    for (const model::Variable& v : model.variables())
      if (!v.trainable) {
        moved_.push_back({static_cast<std::size_t>(v.offset), static_cast<std::size_t>(v.size)});
        n += static_cast<std::size_t>(v.size);
      }
    kept_.resize(n);
  }

  // update.compression topk: each step sends the top-k of its gradient plus what earlier steps
  // dropped, zeros elsewhere (PsClient sends the nonzeros as pairs).
  // `warmup_steps`: topk's warm-up, counted in this worker's local steps.
  void EnableTopK(const model::Model& model, double ratio, std::int64_t warmup_steps) {
    topk_ = std::make_unique<compress::TopK>(train::TrainableRuns(model), model.params().size(), ratio, warmup_steps);
    indices_.resize(topk_->max_kept());
    values_.resize(topk_->max_kept());
    sparse_.resize(model.params().size());
    if (checkpointer_ == nullptr) return;
    // The chief's saves take its residual from here, and a restore's summed feedback goes on from it.
    checkpointer_->SetOwnFeedback([this] { return std::vector<float>(topk_->residual().begin(), topk_->residual().end()); });
    if (std::vector<float> restored = checkpointer_->TakeRestoredFeedback(); !restored.empty()) topk_->Restore(restored);
  }

  Result<std::int64_t> Step(model::Model& model, std::int64_t local_step) override {
    wire::Push tag;
    tag.worker = rank_;
    tag.incarnation = incarnation_;
    tag.local_step = static_cast<std::uint64_t>(local_step);
    tag.epoch = static_cast<std::uint32_t>(epoch_);
    const std::span<const float> grads = Outgoing(model, local_step);
    if (checkpointer_ != nullptr) client_.AnnounceSave(checkpointer_->Announce(step_ + 1));
    if (!overlap_) {
      Keep(model.params());
      Result<PsClient::StepResult> pushed = client_.PushPull(tag, grads, model.params(), sync_);
      Restore(model.params());
      TFD_ASSIGN_OR_RETURN(PsClient::StepResult r, std::move(pushed));
      Count(r);
      DepositIfAsked();
      TFD_RETURN_IF_ERROR(MaybeSave(local_step));
      return static_cast<std::int64_t>(step_);
    }
    // This gradient was computed on the parameters pulled before the exchange completed here: it
    // is that much staler than the parameters that exchange brings, and the ps must know it.
    std::vector<std::uint64_t> computed_on = client_.steps();
    TFD_RETURN_IF_ERROR(CompleteInFlight(model));
    DepositIfAsked();  // overlap: the residual already has this step's gradient in it
    // The next step overwrites grads(): send a copy, owned by the frames until they are written
    // (reused once they are; a new buffer only if a frame still holds the old one).
    if (sending_.use_count() > 1) sending_ = std::make_shared<std::vector<float>>(grads.size());
    std::copy(grads.begin(), grads.end(), sending_->begin());
    client_.StartPushPull(tag, *sending_, false, sending_, std::move(computed_on));
    TFD_RETURN_IF_ERROR(MaybeSave(local_step));
    return static_cast<std::int64_t>(step_);
  }
  Result<std::int64_t> Finish(model::Model& model) override {
    TFD_RETURN_IF_ERROR(CompleteInFlight(model));
    Keep(model.params());
    Result<std::uint64_t> pulled = client_.Pull(model.params(), sync_);
    Restore(model.params());
    TFD_ASSIGN_OR_RETURN(step_, std::move(pulled));
    if (checkpointer_ != nullptr) TFD_RETURN_IF_ERROR(checkpointer_->Save());
    return static_cast<std::int64_t>(step_);
  }
  std::string EpochNote() override {
    if (!sync_) return "";
    std::string note = fmt::format("stale_dropped={}", epoch_stale_);
    epoch_stale_ = 0;
    return note;
  }
  std::uint64_t stale() const { return stale_; }
  std::uint64_t global_step() const { return step_; }  // the last the ps tasks reported
  Result<bool> EndOfEpoch(bool stop) override {
    stopped_early_ = stopped_early_ || stop;
    return stop;
  }
  bool StopRequested() const override { return client_.stop_requested(); }
  std::optional<Share> EpochShare() override {
    const std::optional<wire::Membership>& m = client_.membership();
    if (!m) return std::nullopt;
    return Share{static_cast<int>(m->index), static_cast<int>(m->count)};
  }
  void StartingEpoch(int epoch) override { epoch_ = epoch; }
  // A save due at an epoch's last step waits for the chief's judgement of that epoch (EpochJudged),
  // so the checkpoint holds the early-stopping rule's state after it.
  void DeferEpochEndSaves(std::int64_t steps_per_epoch) { defer_every_ = steps_per_epoch; }
  void EpochJudged(const ckpt::EarlyStopping& state) override {
    if (checkpointer_ == nullptr) return;
    checkpointer_->SetEarlyStopping(state);
    if (Status s = checkpointer_->MaybeSave(step_); !s.ok()) spdlog::warn("checkpoint after the epoch: {}", s.message());
  }
  bool stopped_early() const { return stopped_early_; }

 private:
  std::span<const float> Outgoing(model::Model& model, std::int64_t local_step) {
    if (!topk_) return model.grads();
    const std::size_t k = topk_->Compress(model.grads(), local_step - 1, indices_, values_);
    std::fill(sparse_.begin(), sparse_.end(), 0.0f);
    for (std::size_t j = 0; j < k; ++j) sparse_[indices_[j]] = values_[j];
    return sparse_;
  }
  // A ps asked for this worker's error feedback for the chief's save: it goes with the next push.
  void DepositIfAsked() {
    if (topk_ && client_.FeedbackAsked())
      client_.Deposit(std::make_shared<const std::vector<float>>(topk_->residual().begin(), topk_->residual().end()));
  }
  Status CompleteInFlight(model::Model& model) {
    if (!client_.in_flight()) return Status::Ok();
    Keep(model.params());
    Result<PsClient::StepResult> completed = client_.CompletePushPull(model.params());
    Restore(model.params());
    TFD_ASSIGN_OR_RETURN(PsClient::StepResult r, std::move(completed));
    Count(r);
    return Status::Ok();
  }
  Status MaybeSave(std::int64_t local_step) {
    if (checkpointer_ == nullptr || (defer_every_ > 0 && local_step % defer_every_ == 0)) return Status::Ok();
    return checkpointer_->MaybeSave(step_);
  }
  // Around a pull: the moved variables' values before it, and back after it.
  void Keep(std::span<const float> params) {
    std::size_t at = 0;
    for (const optim::Range& r : moved_) {
      std::copy_n(params.begin() + static_cast<std::ptrdiff_t>(r.offset), r.length, kept_.begin() + static_cast<std::ptrdiff_t>(at));
      at += r.length;
    }
  }
  void Restore(std::span<float> params) {
    std::size_t at = 0;
    for (const optim::Range& r : moved_) {
      std::copy_n(kept_.begin() + static_cast<std::ptrdiff_t>(at), r.length, params.begin() + static_cast<std::ptrdiff_t>(r.offset));
      at += r.length;
    }
  }
  void Count(const PsClient::StepResult& r) {
    stale_ += r.stale > 0;
    epoch_stale_ += r.stale > 0;
    step_ = r.global_step;
  }

  Checkpointer* checkpointer_;  // the chief's, with a checkpoint.dir; else null
  std::int64_t defer_every_ = 0;  // DeferEpochEndSaves
  PsClient& client_;
  std::uint32_t rank_;
  std::uint64_t incarnation_;
  bool sync_, overlap_;
  std::uint64_t step_;
  std::uint64_t stale_ = 0, epoch_stale_ = 0;
  bool stopped_early_ = false;  // the chief's decision, for its DONE
  int epoch_ = 0;               // elastic: sent with each push, so the ps knows the chief's epoch
  std::shared_ptr<std::vector<float>> sending_;  // overlap: the gradient of the exchange in flight
  std::unique_ptr<compress::TopK> topk_;         // update.compression topk; null otherwise
  std::vector<std::uint32_t> indices_;
  std::vector<float> values_, sparse_;           // the kept values, and as a dense gradient
  std::vector<optim::Range> moved_;              // KeepMoved's variables
  std::vector<float> kept_;                      // their values across a pull
};

// PUSH_COMPRESSED's encoding for update.compression (powersgd is refused in the ps modes at load).
std::optional<wire::GradEncoding> EncodingFor(const config::CompressionSpec& c) {
  switch (c.method) {
    case config::CompressionSpec::Method::kFp16: return wire::GradEncoding::kFp16;
    case config::CompressionSpec::Method::kBf16: return wire::GradEncoding::kBf16;
    case config::CompressionSpec::Method::kTopK: return wire::GradEncoding::kSparse;
    case config::CompressionSpec::Method::kNone:
    case config::CompressionSpec::Method::kPowerSgd: break;
  }
  return std::nullopt;
}

}  // namespace

Status RunWorker(const config::TfConfig& config, const config::JobSpec& job, EventWriter& events,
                 const train::WorkerTaskOptions& options, const transport::ConnectionOptions& connection) {
  // An elastic job's joining worker counts the workers the run started with, as they do.
  const int num_workers = config.cluster.base_num_workers();
  const int rank = config.cluster.WorkerRank(config.task);
  const bool joining = rank >= num_workers;
  if (joining && !job.elastic.enabled())
    return Status::InvalidArgument(fmt::format("{} joins a cluster of {} workers (TF_CONFIG tfd.base_workers), but the job has no "
                                               "\"elastic\" section", config.task.ToString(), num_workers));
  if (job.elastic.enabled() && (rank >= job.elastic.max_workers || num_workers < job.elastic.min_workers || num_workers > job.elastic.max_workers))
    return Status::InvalidArgument(fmt::format("elastic: {} (rank {}) in a cluster of {} workers is outside min_workers {} .. max_workers {}",
                                               config.task.ToString(), rank, num_workers, job.elastic.min_workers, job.elastic.max_workers));
  if (job.update.mode == config::UpdateSpec::Mode::kAllreduce)
    return Status::Internal("update.mode: allreduce runs without ps tasks; this worker serves the ps modes only");
  if (options.shard_limit > 0)
    return Status::InvalidArgument("--shard-limit: only in allreduce mode (the ps modes need every worker to take the same steps)");
  // The cluster was checked against the job before this role started (config::CheckJobOnCluster).
  const bool sync = job.update.mode == config::UpdateSpec::Mode::kSync;
  TFD_ASSIGN_OR_RETURN(train::LoadedJob loaded, train::LoadJobData(job, num_workers));
  model::Model& model = *loaded.model;
  TFD_ASSIGN_OR_RETURN(auto device_compute, train::DeviceGradients(job, model));  // device "cuda:N": gradients on the GPU
  std::vector<VariableInfo> variables;
  for (const model::Variable& v : model.variables()) variables.push_back({v.name, v.offset, v.size});
  std::vector<std::string> ps_hosts;
  for (const config::Endpoint& ps : config.cluster.ps) ps_hosts.push_back(ps.host);
  const Placement placement = Place(variables, static_cast<int>(config.cluster.ps.size()), job.placement, ps_hosts);
  const bool chief = config.is_chief();
  spdlog::info("{} (rank {} of {}{}); model: {}", config.task.ToString(), rank, num_workers, chief ? ", chief" : "", model.Summary());
  if (chief)
    for (const std::string& line : placement.Describe()) spdlog::info("placement: {}", line);
  task::EmitStart(events, {.role = "worker", .mode = sync ? "sync" : "async", .rank = rank, .chief = chief});

  transport::IoThread io;  // destroyed after the client below: its connections close first

  const std::uint64_t incarnation = task::NewIncarnation();
  PsClientOptions ps_options;
  ps_options.connection = connection;
  ps_options.startup_timeout = options.startup_timeout;
  ps_options.step_timeout = options.step_timeout;
  ps_options.reconnect_timeout = options.reconnect_timeout;
  ps_options.stop = options.stop;
  ps_options.metrics = options.metrics;
  ps_options.elastic = job.elastic;
  ps_options.events = &events;
  ps_options.encoding = EncodingFor(job.update.compression);
  if (job.update.compression.method == config::CompressionSpec::Method::kPowerSgd)
    return Status::InvalidArgument("update.compression: powersgd needs \"mode\": \"allreduce\"");
  if (options.metrics != nullptr) options.metrics->AddPsClientMetrics();
  Result<std::unique_ptr<PsClient>> connected = PsClient::Connect(io.context(), config, incarnation, placement, ps_options);
  if (!connected.ok()) return train::AtStartup(connected.status());
  std::unique_ptr<PsClient> client = std::move(connected).value();
  Checkpointer checkpointer(job, model, placement, *client, events, num_workers,
                            train::StepsPerEpoch(loaded.data.train.size, num_workers, job.batch_size));
  if (chief && checkpointer.enabled() && options.metrics != nullptr) checkpointer.set_metrics(options.metrics);
  if (chief && checkpointer.enabled()) checkpointer.SetModelCard(exporting::CardFor(job, loaded.data.train));
  if (chief && job.update.compression.method == config::CompressionSpec::Method::kTopK) (void)checkpointer.EnableFeedback();
  if (chief) TFD_RETURN_IF_ERROR(checkpointer.PrepareRestore());
  if (Status s = client->Initialize(chief, job.optimizer, job.update, model.params()); !s.ok()) return train::AtStartup(s);
  // Start from what the ps tasks hold (the chief's initial values, a checkpoint's, or further if
  // others began).
  Result<std::uint64_t> pulled = client->Pull(model.params(), false);
  if (!pulled.ok()) return train::AtStartup(pulled.status());
  const std::uint64_t start_step = *pulled;
  if (chief) checkpointer.Started(start_step);
  spdlog::info("ready: training from global_step {}", start_step);
  task::EmitReady(events, static_cast<std::int64_t>(start_step), fmt::format("{} training from global step {}", config.task.ToString(), start_step));

  PsUpdater updater(*client, static_cast<std::uint32_t>(rank), incarnation, sync, job.update.overlap, start_step,
                    model.params().size(), chief && checkpointer.enabled() ? &checkpointer : nullptr);
  if (job.update.compression.method == config::CompressionSpec::Method::kTopK)
    updater.EnableTopK(model, job.update.compression.ratio,
                       train::WarmupSteps(job.update.compression, train::StepsPerEpoch(loaded.data.train.size, num_workers, job.batch_size)));
  updater.KeepMoved(model);
  if (job.update.compression.enabled())
    spdlog::info("update.compression {}: pushes go as PUSH_COMPRESSED ({})", config::CompressionName(job.update.compression.method),
                 job.update.compression.method == config::CompressionSpec::Method::kTopK
                     ? fmt::format("top {} of each tensor's values with error feedback, as index and value, after a warm-up of {} epochs",
                                   job.update.compression.ratio, job.update.compression.warmup_epochs)
                     : "16-bit values; the ps sums in float32");
  train::TrainerOptions topts = train::TrainerOptionsFor(config, job, options);
  topts.start_local_step = static_cast<std::int64_t>(client->resume_step());
  if (chief && checkpointer.enabled() && job.can_stop_early() && topts.evaluate_each_epoch) {
    topts.early_stopping = checkpointer.restored_early_stopping();
    updater.DeferEpochEndSaves(train::StepsPerEpoch(loaded.data.train.size, num_workers, job.batch_size));
  }
  if (joining && client->membership()) {
    // From the epoch after the chief's: the others take their smaller shares from then on too.
    topts.first_epoch = static_cast<int>(client->membership()->run_epoch) + 1;
    topts.start_local_step = 0;
    spdlog::info("joined the run: {} workers, the chief at epoch {}; this worker trains from epoch {}", client->membership()->count,
                 client->membership()->run_epoch, topts.first_epoch);
  }
  if (device_compute) topts.compute = device_compute;
  TFD_RETURN_IF_ERROR(train::Train(job, loaded.data, model, updater, events, topts));
  if (sync) spdlog::info("{} gradients of this worker were dropped as stale", updater.stale());
  if (Status s = client->Done(static_cast<std::uint32_t>(rank), model.params(), updater.stopped_early()); !s.ok())
    return Status(s.code(), s.message() + fmt::format(" (this worker had finished training at global_step {} and was sending DONE)",
                                                      updater.global_step()));
  client->Close();
  return Status::Ok();
}

}  // namespace tfd::worker
