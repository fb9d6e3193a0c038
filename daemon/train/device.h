#pragma once

#include <memory>

#include "common/base/status.h"
#include "common/config/job.h"
#include "common/model/model.h"
#include "common/optim/optimizer.h"
#include "daemon/train/trainer.h"
#include "daemon/train/updater.h"

// Where a job with device "cuda:N" puts its GPU to work (train::LoadJobData has checked the device
// with cuda::CheckDevice). Built in every configuration: without the CUDA backend these are never
// reached with a cuda device, and say so if they are.
namespace tfd::train {

// The cluster modes (ps and allreduce workers): a TrainerOptions::compute that computes each step's
// gradient on the GPU from the host parameters (uploaded every step) into model.grads(); the
// updater then pushes or all-reduces host floats as on the CPU, so every update mode works with
// GPU workers unchanged. It owns the device model. Empty for a CPU job. Call it before joining the
// cluster, so a device that cannot hold the model fails the task before its peers count on it.
Result<decltype(TrainerOptions::compute)> DeviceGradients(const config::JobSpec& job, model::Model& model);

// A standalone run on the GPU: parameters and optimizer slots stay on the device, options.compute
// runs the whole step there (forward, backward, update; captured once as a CUDA graph), and the
// returned updater copies the parameters back to model.params(), and the optimizer's slots and
// update count back to `host_state`, at the end of every epoch (for evaluation, observers, epoch
// checkpoints and the final hash). `host_state` starts the device's optimizer (a resumed run's
// state, or zeros). Null for a CPU job.
Result<std::unique_ptr<Updater>> MakeDeviceStandalone(const config::JobSpec& job, model::Model& model, const optim::Optimizer& optimizer,
                                                      optim::OptimizerState& host_state, std::int64_t steps_per_epoch,
                                                      TrainerOptions& options);

}  // namespace tfd::train
