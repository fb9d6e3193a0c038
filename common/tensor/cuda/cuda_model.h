#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/base/status.h"
#include "common/model/model.h"
#include "common/optim/optimizer.h"
#include "common/tensor/layers.h"
#include "common/tensor/loss.h"

// A model::Model's twin on a GPU: the same layers and the same flat variable layout, with the
// parameters, gradients, activations (and, when it trains alone, the optimizer's slots) in device
// memory carved from one DeviceArena. A step is captured once as a CUDA graph (for full batches)
// and replayed; the batch comes in through pinned host buffers. Plain C++ header. Single-threaded.
namespace tfd::cuda {

class CudaModel {
 public:
  // Builds the twin of `model` on device `device` (an index CheckDevice accepted) within
  // `memory_fraction` of its memory. With `optimizer` (the standalone path) the update runs on the
  // device too (TrainStep) and its slots live there; without it only ComputeGradients is
  // available. FailedPrecondition naming the need and the limit when the memory does not fit.
  static Result<std::unique_ptr<CudaModel>> Create(const model::Model& model, int device, double memory_fraction,
                                                   const optim::Optimizer* optimizer = nullptr);
  ~CudaModel();

  // The gradient of the mean loss of the batch (x: rows of the model's input size, y: class ids, or
  // a regression model's targets, `classes` a row; InvalidArgument for the other kind) at
  // `params` (host floats, copied in), written to `grads` (host); dropout seeded by `dropout_seed`
  // (the same seed gives the same masks, though not the CPU's bits). A batch norm's moving
  // statistics in `params` come back moved by the step, as the CPU's forward pass moves them. This
  // is the cluster modes' path: each step's parameters come from the ps or the ring as host floats.
  Result<tensor::LossResult> ComputeGradients(std::span<float> params, const float* x, const tensor::Labels& y,
                                              std::uint64_t dropout_seed, std::span<float> grads);

  // The standalone path: UploadParams once, then TrainStep each step (forward, backward, weight
  // decay and the optimizer's update at the rate of update number updates(), as OptimizerState
  // does), and DownloadParams whenever the host needs them (evaluation, checkpoints, the hash).
  Status UploadParams(std::span<const float> params);
  Result<tensor::LossResult> TrainStep(const float* x, const tensor::Labels& y, std::uint64_t dropout_seed);
  Status DownloadParams(std::span<float> params);
  // The optimizer's slots as OptimizerState lays them out, and the count of updates applied.
  Status DownloadSlots(std::span<float> slots);
  std::int64_t updates() const;
  // The reverse, for a run resumed from a checkpoint: the next TrainStep is update updates + 1.
  Status UploadState(std::span<const float> slots, std::int64_t updates);

  // A synchronised batch norm's sums (forward and backward, as the CPU layer makes them) go
  // through `sum` over every replica (null: this replica's batch alone), as
  // Model::SetCrossReplicaSum. A model with one then runs each step eagerly, the stream waiting at
  // each sum for the host's all-reduce, instead of replaying a graph. `sum` must outlive its use.
  void SetCrossReplicaSum(tensor::CrossReplicaSum* sum);

  // Inference (tfd predict --device cuda:N): the outputs (logits, or regression outputs) of `batch`
  // rows of `x` at the parameters UploadParams gave, as at evaluation (dropout the identity),
  // written to `out` (batch x classes host floats). Not captured as a graph: each call is eager.
  Status Forward(const float* x, int batch, std::span<float> out);

  // "NVIDIA H100 ..., 3.2 MiB of a 39.6 GiB limit": for the start-up log.
  std::string Describe() const;

 private:
  struct Impl;
  explicit CudaModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfd::cuda
