#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/base/status.h"
#include "common/collective/ring.h"
#include "common/model/model.h"
#include "common/tensor/aligned.h"
#include "common/tensor/loss.h"
#include "daemon/pipeline/layer_stage.h"

namespace tfd::pipeline {

// One of the S tasks of a `units` split (vertical slices): every dense layer's units are divided
// among the tasks (UnitSlice), each computing the columns of its kernel and bias slice. A layer's
// output is all-gathered over the ring (each task contributes its columns and -0.0 elsewhere, so
// the sum is exact); on the way back each task computes its slice's parameter gradients and its
// share of the input gradient, and the shares are summed by an all-reduce. Dropout is elementwise
// and the same on every task (same seed), so it needs no exchange. An output layer narrower than
// the stages (a regression model's one target) leaves some tasks none of its units: they
// contribute -0.0 to its gather and to its input gradient's sum. Micro-batches are run one after
// another (forward, then backward) and their gradients summed in order, as in one process; the
// sums inside each layer are split, so the result is close to one process's, not bitwise equal.
// Training thread only.
class UnitStage {
 public:
  UnitStage(collective::Ring& ring, model::Model& model, int stage, int stages, int microbatches, int batch_size);

  Result<tensor::LossResult> Step(const float* x, const tensor::Labels& y, std::uint64_t dropout_seed);
  StageStats& stats() { return stats_; }

 private:
  Status ForwardLayer(std::size_t i, const float* in, int row);
  Status BackwardLayer(std::size_t i, const float* in, int row, float* dout, float* din);
  Status AllReduce(std::span<float> data);

  collective::Ring& ring_;
  model::Model& model_;
  const int stage_, stages_, microbatches_, mb_;
  std::vector<tensor::AlignedFloats> out_;  // out_[i]: layer i's full output, micro-batch rows at row 0
  tensor::AlignedFloats dbuf_[2];           // ping-pong gradients of a layer's output
  std::vector<float> acc_;
  StageStats stats_;
};

}  // namespace tfd::pipeline
