#include "daemon/train/standalone.h"

#include <unistd.h>

#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/data/dataset.h"
#include "common/model/model.h"
#include "common/optim/optimizer.h"
#include "common/tensor/gemm.h"
#include "daemon/train/device.h"
#include "daemon/train/job_data.h"
#include "daemon/train/trainer.h"
#include "daemon/task/lifecycle.h"

namespace tfd::train {
namespace {

// Applies the gradient to the local parameters, as one process does.
class LocalUpdater final : public Updater {
 public:
  LocalUpdater(const optim::Optimizer& optimizer, const model::Model& model)
      : state_(optimizer, model.params().size(), optim::DecayedRanges(model::VariableRuns(model))) {}
  optim::OptimizerState& state() { return state_; }
  Result<std::int64_t> Step(model::Model& model, std::int64_t local_step) override {
    state_.Apply(model.params(), model.grads());
    return local_step;
  }
  Result<std::int64_t> Finish(model::Model&) override { return state_.updates(); }
  bool FinishChangesParams() const override { return false; }

 private:
  optim::OptimizerState state_;
};

// Hands the run's state to StandaloneOptions::epoch_checkpoint at each epoch's end.
class EpochCheckpointer final : public TrainObserver {
 public:
  EpochCheckpointer(const config::JobSpec& job, LocalUpdater& updater, const std::function<void(int, const ckpt::Checkpoint&)>& fn)
      : job_(job), updater_(updater), fn_(fn) {}
  void OnEpoch(const EpochStats& e) override {
    if (e.model == nullptr) return;
    ckpt::Checkpoint c = EpochCheckpoint(job_, *e.model, updater_.state().slots(), updater_.state().updates(), e.epoch, e.local_step);
    c.early_stopping = e.early_stopping;
    fn_(e.epoch, c);
  }

 private:
  const config::JobSpec& job_;
  LocalUpdater& updater_;
  const std::function<void(int, const ckpt::Checkpoint&)>& fn_;
};

}  // namespace

ckpt::Checkpoint EpochCheckpoint(const config::JobSpec& job, const model::Model& model, std::span<const float> slots,
                                 std::int64_t updates, int epoch, std::int64_t local_step) {
  ckpt::Checkpoint c;
  c.global_step = static_cast<std::uint64_t>(local_step);
  c.num_workers = 1;
  c.optimizer.spec = job.optimizer;
  c.optimizer.updates = updates;
  c.optimizer.slot_names = optim::MakeOptimizer(job.optimizer)->SlotNames();
  c.cursors.push_back({.rank = 0, .epoch = static_cast<std::uint32_t>(epoch + 1), .base = 0, .next = 0});
  const std::size_t n = model.params().size();
  for (const model::Variable& v : model.variables()) {
    ckpt::NamedTensor t{.name = v.name, .shape = v.shape, .values = {}, .slots = {}};
    const auto b = model.params().begin() + v.offset;
    t.values.assign(b, b + v.size);
    for (std::size_t k = 0; k < c.optimizer.slot_names.size(); ++k) {
      const auto sb = slots.begin() + static_cast<std::ptrdiff_t>(k * n) + v.offset;
      t.slots.push_back({c.optimizer.slot_names[k], std::vector<float>(sb, sb + v.size)});
    }
    c.tensors.push_back(std::move(t));
  }
  return c;
}

Result<std::int64_t> RestoreEpochCheckpoint(const ckpt::Checkpoint& c, const config::JobSpec& job, const model::Model& model,
                                            std::int64_t steps_per_epoch, std::span<float> params, std::span<float> slots,
                                            std::string_view source) {
  TFD_RETURN_IF_ERROR(ckpt::CheckOptimizer(c, job.optimizer, source));
  if (c.num_workers != 1 || c.cursors.size() != 1 || c.cursors[0].next != 0 || c.cursors[0].base != 0 || c.cursors[0].epoch < 1)
    return Status::FailedPrecondition(fmt::format("{}: not taken at the end of an epoch of one process", source));
  const std::uint64_t epochs_done = c.cursors[0].epoch - 1;
  if (c.global_step != epochs_done * static_cast<std::uint64_t>(steps_per_epoch) || epochs_done > static_cast<std::uint64_t>(job.epochs))
    return Status::FailedPrecondition(fmt::format("{}: step {} after {} epochs does not fit this job's {} steps per epoch and {} epochs", source,
                                                  c.global_step, epochs_done, steps_per_epoch, job.epochs));
  const std::size_t n = params.size(), k_slots = c.optimizer.slot_names.size();
  if (slots.size() != n * k_slots)
    return Status::FailedPrecondition(fmt::format("{}: {} optimizer slots do not fit this job's optimizer", source, k_slots));
  std::map<std::string_view, const ckpt::NamedTensor*> by_name;
  for (const ckpt::NamedTensor& t : c.tensors) by_name[t.name] = &t;
  if (by_name.size() != model.variables().size())
    return Status::FailedPrecondition(
        fmt::format("{}: holds {} variables, this job's model has {}", source, by_name.size(), model.variables().size()));
  for (const model::Variable& v : model.variables()) {
    auto it = by_name.find(v.name);
    if (it == by_name.end() || it->second->values.size() != static_cast<std::size_t>(v.size) || it->second->slots.size() != k_slots)
      return Status::FailedPrecondition(fmt::format("{}: has no variable {} of {} values: another model", source, v.name, v.size));
    std::copy(it->second->values.begin(), it->second->values.end(), params.begin() + v.offset);
    for (std::size_t k = 0; k < k_slots; ++k)
      std::copy(it->second->slots[k].values.begin(), it->second->slots[k].values.end(),
                slots.begin() + static_cast<std::ptrdiff_t>(k * n) + v.offset);
  }
  return static_cast<std::int64_t>(c.global_step);
}

Status RunStandalone(const config::JobSpec& job, EventWriter& events, const StandaloneOptions& options) {
  TFD_ASSIGN_OR_RETURN(LoadedJob loaded, LoadJobData(job, 1));
  std::unique_ptr<optim::Optimizer> optimizer = optim::MakeOptimizer(job.optimizer);
  spdlog::info("model: {}", loaded.model->Summary());
  if (loaded.model->has_sync_layers()) spdlog::info("batch_norm sync: one process, whose batch statistics are the whole batch's already");
  spdlog::info("optimizer: {}; batch_size={} epochs={} seed={} threads={} gemm={}", optimizer->Describe(), job.batch_size,
               job.epochs, job.seed, job.threads, tensor::GemmBackendName(loaded.model->gemm().backend));
  spdlog::info("data: {} training and {} test examples from {}", loaded.data.train.size, loaded.data.test.size, job.data.Describe());
  if (options.emit_start)
    task::EmitStart(events, {.role = "standalone",
                             .mode = "standalone",
                             .chief = true,
                             .extra = {{"parameters", static_cast<std::int64_t>(loaded.model->params().size())},
                                       {"train_examples", loaded.data.train.size}}});
  LocalUpdater updater(*optimizer, *loaded.model);
  TrainerOptions topts;
  topts.stop = options.stop;
  topts.exports = true;
  topts.params_out = options.params_out;
  topts.prefetch = job.Prefetch();
  if (options.resume != nullptr) {
    const std::int64_t steps = StepsPerEpoch(loaded.data.train.size, 1, job.batch_size);
    std::vector<float> slots(updater.state().slots().size());
    TFD_ASSIGN_OR_RETURN(topts.start_local_step, RestoreEpochCheckpoint(*options.resume, job, *loaded.model, steps, loaded.model->params(),
                                                                        slots, "the checkpoint to resume from"));
    TFD_RETURN_IF_ERROR(updater.state().Restore(slots, options.resume->optimizer.updates));
    if (options.resume->early_stopping) topts.early_stopping.push_back(*options.resume->early_stopping);
    spdlog::info("resuming from a checkpoint after epoch {} (step {}, {} optimizer updates)", topts.start_local_step / steps,
                 topts.start_local_step, options.resume->optimizer.updates);
  }
  EpochCheckpointer checkpointer(job, updater, options.epoch_checkpoint);
  if (options.epoch_checkpoint) topts.observers.push_back(&checkpointer);
  topts.observers.insert(topts.observers.end(), options.observers.begin(), options.observers.end());
  topts.evaluate_each_epoch = job.evaluation == config::Evaluation::kChief;
  // A model-parallel job runs every stage here: its micro-batches become gradient accumulation,
  // summed in the order the stages sum them, and the split is ignored.
  std::vector<float> accumulated;
  if (const int m = job.model_parallel.microbatches; job.model_parallel.enabled() && m > 1) {
    spdlog::info("model_parallel: {} micro-batches of {} examples per step, their gradients summed (split ignored here)", m,
                 job.batch_size / m);
    topts.compute = [&model = *loaded.model, m, &accumulated](const float* x, const tensor::Labels& y,
                                                             std::uint64_t seed) -> Result<tensor::LossResult> {
      return model.ComputeMicrobatchGradients(x, y, m, seed, accumulated);
    };
  }
  if (job.cuda_device >= 0) {
    TFD_ASSIGN_OR_RETURN(std::unique_ptr<Updater> device,
                         MakeDeviceStandalone(job, *loaded.model, *optimizer, updater.state(),
                                              StepsPerEpoch(loaded.data.train.size, 1, job.batch_size), topts));
    return Train(job, loaded.data, *loaded.model, *device, events, topts);
  }
  return Train(job, loaded.data, *loaded.model, updater, events, topts);
}

}  // namespace tfd::train
