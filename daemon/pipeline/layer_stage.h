#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/collective/ring.h"
#include "common/config/job.h"
#include "common/model/model.h"
#include "common/tensor/aligned.h"
#include "common/tensor/loss.h"

namespace tfd::pipeline {

// What one stage did since the last TakeNote: compute time, bytes sent, and the bubble (the share
// of the schedule's wall time this stage's compute was idle) beside GPipe's theory (S-1)/(M+S-1).
struct StageStats {
  double forward_s = 0, backward_s = 0, schedule_s = 0;
  double replicas_s = -1;  // the all-reduce among the replicas' same stage, outside the schedule; < 0: one replica
  std::uint64_t bytes_sent = 0;
  int peak_in_flight = 0;  // micro-batches whose activations this stage held at once
  std::int64_t peak_activation_bytes = 0;
  bool pipeline = true;  // a `layers` stage: the bubble has a theory to compare with
  // "stage=1/2 forward_s=... bubble=0.12 theory=0.11 ..." for the epoch line, and the same
  // figures as `stage` event fields into `fields` when not null; resets the counts.
  std::string TakeNote(int stage, int stages, int microbatches, std::vector<EventField>* fields = nullptr);
};

// One stage of a `layers` split: layers [first, last) of the full `model` (every stage builds the
// whole network from the seed; it computes and updates only its own layers). Step runs one step's
// micro-batches through the stage on the chosen schedule, exchanging activations with the previous
// stage and their gradients with the next over `ring` (the replica's stages in stage order), and
// leaves the step's gradient of its layers in model.grads(): micro-batch gradients summed in order
// 0 .. M-1 and scaled by 1/M, as Model::ComputeMicrobatchGradients does in one process. Every
// stage returns the last stage's figures (they travel back with the gradients): the micro-batches'
// mean loss and their summed hits, or a regression model's summed errors.
//
// GPipe runs every forward, then every backward. 1F1B (PipeDream-flush) runs S-1-s forwards, then
// alternates one forward and one backward, then the remaining backwards, so at most S-s
// micro-batches are in flight on stage s. Micro-batch m lives at rows [m*mb, (m+1)*mb) of the
// model's buffers; a layer that keeps forward state (dropout, conv2d) is run forward again just
// before its backward when another micro-batch went through since.
//
// Frames are checked before use: a frame from a stage other than the expected neighbour, of
// another replica, or for a micro-batch or step not due now is refused (Corruption naming both;
// the ring is closed with it, so the neighbours are told). Training thread only.
class LayerStage {
 public:
  LayerStage(collective::Ring& ring, model::Model& model, std::size_t first, std::size_t last, int stage, int stages, int replica,
             const config::ModelParallelSpec& spec, int batch_size);

  Result<tensor::LossResult> Step(const float* x, const tensor::Labels& y, std::uint64_t dropout_seed);
  StageStats& stats() { return stats_; }

 private:
  Status Forward(int m, const float* x, std::uint64_t seed);
  Status Backward(int m, const float* x, const tensor::Labels& y, std::uint64_t seed);
  // The next frame from `side`, checked: `type`, this replica, stage `from_stage`, this step,
  // micro-batch `m`, `width` floats per row.
  Result<wire::InFrame> ReceiveChecked(collective::Ring::Side side, wire::MessageType type, int from_stage, int m, std::size_t width,
                                       wire::PipeTensor* out);
  Status Refuse(const Status& why);  // closes the ring with `why` and returns it
  const float* Input(int m, const float* x) const;

  collective::Ring& ring_;
  model::Model& model_;
  const std::size_t first_, last_;
  const int stage_, stages_, replica_, microbatches_, mb_;
  const bool one_f_one_b_;
  const std::size_t in_width_, out_width_;  // floats per example into and out of this stage
  const std::size_t param_begin_, param_end_;
  bool keeps_state_ = false;
  tensor::AlignedFloats inputs_;    // stages > 0: the received activations, micro-batch m at rows m*mb
  tensor::AlignedFloats grad_out_;  // a received gradient of this stage's output
  tensor::AlignedFloats din_;       // the gradient of this stage's input, to send back
  std::vector<float> acc_;       // the micro-batch gradients' sum over [param_begin_, param_end_)
  std::uint64_t step_ = 0;       // the step being run, from 1
  int last_forward_ = -1;        // the micro-batch whose forward state the layers hold
  int in_flight_ = 0;
  double loss_sum_ = 0;
  tensor::LossResult metrics_;  // the step's hits (classification) or error sums (regression), over its micro-batches
  StageStats stats_;
};

}  // namespace tfd::pipeline
