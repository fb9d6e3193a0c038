#include "daemon/standalone.h"

#include <spdlog/spdlog.h>

#include "common/model/dataset.h"
#include "common/model/model.h"
#include "common/optim/optimizer.h"
#include "common/tensor/gemm.h"
#include "daemon/trainer.h"

namespace tfd::daemon {
namespace {

// Applies the gradient to the local parameters, as one process does.
class LocalUpdater final : public Updater {
 public:
  LocalUpdater(const optim::Optimizer& optimizer, std::size_t params) : state_(optimizer, params) {}
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

Result<LoadedJob> LoadJobData(const config::JobSpec& job, int num_workers) {
  if (job.cuda_device >= 0) {
    return Status::InvalidArgument(
        fmt::format("device: \"{}\": this tfd trains on the CPU only (set \"device\": \"cpu\")", job.device));
  }
  LoadedJob loaded;
  Result<model::MnistData> data = model::LoadMnist(job.data);
  if (!data.ok()) {  // a corrupt input file is bad input, as a bad field is (exit code 2)
    return data.status().code() == Code::kCorruption ? Status::InvalidArgument(data.status().message()) : data.status();
  }
  loaded.data = std::move(data).value();
  if (StepsPerEpoch(loaded.data.train.size, num_workers, job.batch_size) == 0) {
    return Status::InvalidArgument(fmt::format("batch_size: {} is more than the {} training examples in {}{}", job.batch_size,
                                               loaded.data.train.size / num_workers, job.data,
                                               num_workers > 1 ? fmt::format(" per worker ({} workers)", num_workers) : ""));
  }
  tensor::ActShape input{loaded.data.train.height, loaded.data.train.width, loaded.data.train.channels};
  TFD_ASSIGN_OR_RETURN(loaded.model, model::Model::Build(job.model, input, loaded.data.train.num_classes, job.batch_size));
  loaded.model->Initialize(job.seed);
  tensor::SetComputeThreads(job.threads);
  return loaded;
}

Status RunStandalone(const config::JobSpec& job, EventWriter& events, const StandaloneOptions& options) {
  TFD_ASSIGN_OR_RETURN(LoadedJob loaded, LoadJobData(job, 1));
  std::unique_ptr<optim::Optimizer> optimizer = optim::MakeOptimizer(job.optimizer);
  spdlog::info("model: {}", loaded.model->Summary());
  spdlog::info("optimizer: {}; batch_size={} epochs={} seed={} threads={} gemm={}", optimizer->Describe(), job.batch_size,
               job.epochs, job.seed, job.threads, tensor::GemmBackendName());
  spdlog::info("data: {} training and {} test examples from {}", loaded.data.train.size, loaded.data.test.size, job.data);
  events.Emit("start", {{"mode", std::string("standalone")},
                        {"parameters", static_cast<std::int64_t>(loaded.model->params().size())},
                        {"train_examples", loaded.data.train.size}});
  LocalUpdater updater(*optimizer, loaded.model->params().size());
  TrainerOptions topts;
  topts.stop = options.stop;
  topts.params_out = options.params_out;
  return Train(job, loaded.data, *loaded.model, updater, events, topts);
}

}  // namespace tfd::daemon
