#include "daemon/standalone.h"

#include <chrono>
#include <cmath>

#include <spdlog/spdlog.h>

#include "common/model/dataset.h"
#include "common/model/model.h"
#include "common/optim/optimizer.h"
#include "common/tensor/gemm.h"

namespace tfd::daemon {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Status RunStandalone(const config::JobSpec& job, EventWriter& events, const StandaloneOptions& options) {
  if (job.cuda_device >= 0) {
    return Status::InvalidArgument(fmt::format("device: \"{}\": this tfd trains on the CPU only (set \"device\": \"cpu\")", job.device));
  }
  TFD_ASSIGN_OR_RETURN(model::MnistData data, model::LoadMnist(job.data));
  if (data.train.size < job.batch_size) {
    return Status::InvalidArgument(fmt::format("batch_size: {} is more than the {} training examples in {}", job.batch_size,
                                               data.train.size, job.data));
  }
  tensor::ActShape input{data.train.height, data.train.width, data.train.channels};
  TFD_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model,
                       model::Model::Build(job.model, input, data.train.num_classes, job.batch_size));
  model->Initialize(job.seed);
  std::unique_ptr<optim::Optimizer> optimizer = optim::MakeOptimizer(job.optimizer);
  optim::OptimizerState state(*optimizer, model->params().size());
  tensor::SetComputeThreads(job.threads);

  spdlog::info("model: {}", model->Summary());
  spdlog::info("optimizer: {}; batch_size={} epochs={} seed={} threads={} gemm={}", optimizer->Describe(), job.batch_size,
               job.epochs, job.seed, job.threads, tensor::GemmBackendName());
  spdlog::info("data: {} training and {} test examples from {}", data.train.size, data.test.size, job.data);
  events.Emit("start", {{"mode", std::string("standalone")},
                        {"parameters", static_cast<std::int64_t>(model->params().size())},
                        {"train_examples", data.train.size}});

  const int batch = job.batch_size;
  std::vector<float> x(static_cast<std::size_t>(batch * model->input_size()));
  std::vector<std::uint8_t> y(static_cast<std::size_t>(batch));
  std::int64_t global_step = 0;
  double test_accuracy = 0;
  for (int epoch = 1; epoch <= job.epochs; ++epoch) {
    std::vector<std::uint32_t> shard = model::EpochShard(data.train.size, job.seed, epoch, 0, 1, job.shuffle);
    const std::int64_t steps = static_cast<std::int64_t>(shard.size()) / batch;  // the tail is dropped
    double loss_sum = 0;
    std::int64_t correct = 0, seen = 0;
    const Clock::time_point start = Clock::now();
    for (std::int64_t s = 0; s < steps; ++s) {
      if (options.stop != nullptr && options.stop->load(std::memory_order_relaxed)) {
        return Status::FailedPrecondition(fmt::format("stopped by a signal at epoch {} global_step {}", epoch, global_step));
      }
      model::FillBatch(data.train, std::span(shard).subspan(static_cast<std::size_t>(s * batch), batch), x.data(), y.data());
      tensor::LossResult r = model->ComputeGradients(x.data(), y);
      state.Apply(model->params(), model->grads());
      ++global_step;
      loss_sum += r.loss * batch;
      correct += r.correct;
      seen += batch;
      if (!std::isfinite(r.loss)) {
        return Status::Internal(fmt::format("loss is {} at epoch {} global_step {}: training diverged (lower the learning rate)",
                                            r.loss, epoch, global_step));
      }
      if (job.log_every_steps > 0 && global_step % job.log_every_steps == 0) {
        events.Emit("step", {{"epoch", std::int64_t{epoch}}, {"global_step", global_step}, {"loss", r.loss},
                             {"accuracy", static_cast<double>(r.correct) / batch}});
      }
    }
    const double train_secs = Seconds(Clock::now() - start);
    const double samples_per_sec = train_secs > 0 ? static_cast<double>(seen) / train_secs : 0;
    test_accuracy = model::Evaluate(*model, data.test);
    const double loss = seen ? loss_sum / static_cast<double>(seen) : 0;
    const double accuracy = seen ? static_cast<double>(correct) / static_cast<double>(seen) : 0;
    spdlog::info("epoch={} global_step={} loss={:.4f} accuracy={:.4f} test_accuracy={:.4f} samples_per_sec={:.0f}", epoch,
                 global_step, loss, accuracy, test_accuracy, samples_per_sec);
    events.Emit("epoch", {{"epoch", std::int64_t{epoch}}, {"global_step", global_step}, {"local_step", global_step},
                          {"loss", loss}, {"accuracy", accuracy}, {"test_accuracy", test_accuracy},
                          {"samples_per_sec", samples_per_sec}});
  }
  const std::string sha = model::ParamsSha256(*model);
  spdlog::info("done: global_step={} test_accuracy={:.4f} params_sha256={}", global_step, test_accuracy, sha);
  events.Emit("done", {{"global_step", global_step}, {"test_accuracy", test_accuracy}, {"params_sha256", sha}});
  return Status::Ok();
}

}  // namespace tfd::daemon
