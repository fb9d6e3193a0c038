#include "daemon/train/standalone.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "common/model/dataset.h"
#include "common/model/model.h"
#include "common/optim/optimizer.h"
#include "common/tensor/gemm.h"
#include "daemon/train/device.h"
#include "daemon/train/job_data.h"
#include "daemon/train/trainer.h"

namespace tfd::train {
namespace {

// Applies the gradient to the local parameters, as one process does.
class LocalUpdater final : public Updater {
 public:
  LocalUpdater(const optim::Optimizer& optimizer, const model::Model& model)
      : state_(optimizer, model.params().size(), optim::DecayedRanges(model::VariableRuns(model))) {}
  Result<std::int64_t> Step(model::Model& model, std::int64_t local_step) override {
    state_.Apply(model.params(), model.grads());
    return local_step;
  }
  Result<std::int64_t> Finish(model::Model&) override { return state_.updates(); }
  bool FinishChangesParams() const override { return false; }

 private:
  optim::OptimizerState state_;
};

}  // namespace

Status RunStandalone(const config::JobSpec& job, EventWriter& events, const StandaloneOptions& options) {
  TFD_ASSIGN_OR_RETURN(LoadedJob loaded, LoadJobData(job, 1));
  std::unique_ptr<optim::Optimizer> optimizer = optim::MakeOptimizer(job.optimizer);
  spdlog::info("model: {}", loaded.model->Summary());
  spdlog::info("optimizer: {}; batch_size={} epochs={} seed={} threads={} gemm={}", optimizer->Describe(), job.batch_size,
               job.epochs, job.seed, job.threads, tensor::GemmBackendName());
  spdlog::info("data: {} training and {} test examples from {}", loaded.data.train.size, loaded.data.test.size, job.data);
  events.Emit("start", {{"mode", std::string("standalone")},
                        {"parameters", static_cast<std::int64_t>(loaded.model->params().size())},
                        {"train_examples", loaded.data.train.size}, {"pid", std::int64_t{getpid()}}});
  LocalUpdater updater(*optimizer, *loaded.model);
  TrainerOptions topts;
  topts.stop = options.stop;
  topts.params_out = options.params_out;
  topts.observers = options.observers;
  topts.evaluate_each_epoch = job.evaluation == config::Evaluation::kChief;
  // A model-parallel job runs every stage here: its micro-batches become gradient accumulation,
  // summed in the order the stages sum them, and the split is ignored.
  std::vector<float> accumulated;
  if (const int m = job.model_parallel.microbatches; job.model_parallel.enabled() && m > 1) {
    spdlog::info("model_parallel: {} micro-batches of {} examples per step, their gradients summed (split ignored here)", m,
                 job.batch_size / m);
    topts.compute = [&model = *loaded.model, m, &accumulated](const float* x, std::span<const std::uint8_t> y,
                                                             std::uint64_t seed) -> Result<tensor::LossResult> {
      return model.ComputeMicrobatchGradients(x, y, m, seed, accumulated);
    };
  }
  if (job.cuda_device >= 0) {
    TFD_ASSIGN_OR_RETURN(std::unique_ptr<Updater> device,
                         MakeDeviceStandalone(job, *loaded.model, *optimizer, StepsPerEpoch(loaded.data.train.size, 1, job.batch_size), topts));
    return Train(job, loaded.data, *loaded.model, *device, events, topts);
  }
  return Train(job, loaded.data, *loaded.model, updater, events, topts);
}

}  // namespace tfd::train
