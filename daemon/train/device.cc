#include "daemon/train/device.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/tensor/cuda/runtime.h"
#ifdef TFD_HAVE_CUDA
#include "common/tensor/cuda/cuda_model.h"
#endif

namespace tfd::train {
namespace {

#ifdef TFD_HAVE_CUDA
// The standalone path's updater: the device applied the update inside the step; the host copies
// of the parameters and of the optimizer's state (slots and update count, which epoch checkpoints
// save) are refreshed at each epoch's end and at the finish.
class DeviceUpdater final : public Updater {
 public:
  DeviceUpdater(std::shared_ptr<cuda::CudaModel> device, optim::OptimizerState& host_state, std::int64_t steps_per_epoch)
      : device_(std::move(device)), host_state_(host_state), steps_(steps_per_epoch), slots_(host_state.slots().size()) {}
  Result<std::int64_t> Step(model::Model& model, std::int64_t local_step) override {
    if (local_step % steps_ == 0) TFD_RETURN_IF_ERROR(Download(model));
    return local_step;
  }
  Result<std::int64_t> Finish(model::Model& model) override {
    TFD_RETURN_IF_ERROR(Download(model));
    return device_->updates();
  }
  bool FinishChangesParams() const override { return false; }

 private:
  Status Download(model::Model& model) {
    TFD_RETURN_IF_ERROR(device_->DownloadParams(model.params()));
    TFD_RETURN_IF_ERROR(device_->DownloadSlots(slots_));
    return host_state_.Restore(slots_, device_->updates());
  }

  std::shared_ptr<cuda::CudaModel> device_;
  optim::OptimizerState& host_state_;
  std::int64_t steps_;
  std::vector<float> slots_;
};
#endif

[[maybe_unused]] Status NotBuilt(const config::JobSpec& job) {
  return Status::InvalidArgument(fmt::format("device: \"{}\": {}", job.device, cuda::CheckDevice(job.cuda_device).message()));
}

}  // namespace

Result<decltype(TrainerOptions::compute)> DeviceGradients(const config::JobSpec& job, model::Model& model) {
  using Compute = decltype(TrainerOptions::compute);
  if (job.cuda_device < 0) return Compute();
#ifdef TFD_HAVE_CUDA
  TFD_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaModel> made, cuda::CudaModel::Create(model, job.cuda_device, job.gpu_memory_fraction));
  std::shared_ptr<cuda::CudaModel> device = std::move(made);
  spdlog::info("device: {} (gradients on the GPU, updates as the update mode makes them)", device->Describe());
  return Compute([device, &model](const float* x, const tensor::Labels& y, std::uint64_t seed) {
    device->SetCrossReplicaSum(model.cross_replica_sum());  // an allreduce ring's, for synchronised batch norms
    return device->ComputeGradients(model.params(), x, y, seed, model.grads());
  });
#else
  (void)model;
  return NotBuilt(job);
#endif
}

Result<std::unique_ptr<Updater>> MakeDeviceStandalone(const config::JobSpec& job, model::Model& model, const optim::Optimizer& optimizer,
                                                      optim::OptimizerState& host_state, std::int64_t steps_per_epoch,
                                                      TrainerOptions& options) {
  if (job.cuda_device < 0) return std::unique_ptr<Updater>();
#ifdef TFD_HAVE_CUDA
  TFD_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaModel> made,
                       cuda::CudaModel::Create(model, job.cuda_device, job.gpu_memory_fraction, &optimizer));
  std::shared_ptr<cuda::CudaModel> device = std::move(made);
  TFD_RETURN_IF_ERROR(device->UploadParams(model.params()));
  TFD_RETURN_IF_ERROR(device->UploadState(host_state.slots(), host_state.updates()));  // a resumed run's, else zeros
  if (options.compute) {
    spdlog::info("model_parallel: micro-batches are not split on the GPU: one batch per step, the same update up to rounding");
  }
  spdlog::info("device: {} (forward, backward and the optimizer on the GPU, one CUDA graph per step)", device->Describe());
  options.compute = [device](const float* x, const tensor::Labels& y, std::uint64_t seed) {
    return device->TrainStep(x, y, seed);
  };
  return std::unique_ptr<Updater>(new DeviceUpdater(device, host_state, steps_per_epoch));
#else
  (void)model;
  (void)optimizer;
  (void)host_state;
  (void)steps_per_epoch;
  (void)options;
  return NotBuilt(job);
#endif
}

}  // namespace tfd::train
