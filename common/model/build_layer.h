#pragma once
// Internal to common/model: one layer of a model built from its spec (Model::Build's loop body).

#include <memory>
#include <string>

#include "common/base/status.h"
#include "common/config/job.h"
#include "common/data/dataset.h"
#include "common/tensor/gemm.h"
#include "common/tensor/layers.h"

namespace tfd::model {

struct BuiltLayer {
  std::unique_ptr<tensor::Layer> layer;
  // The spec it was built from, with the model's init applied; a residual's `layers` are its
  // inner layers without flatten, one per layer of the block's Inner(), in order, and its
  // `strides` its projection's stride (0: the identity shortcut).
  config::LayerSpec spec;
};

// Builds `l` (not a flatten: it has no layer) on inputs of shape `in`; `where` names it in errors
// ("model.layers[2]", "model.layers[2].layers[0]"), `model_init` overrides every kernel's init
// when not the default, `on_rows` says the input is the data's rows of features (a conv2d then is
// refused). InvalidArgument naming `where` when it does not fit its input.
Result<BuiltLayer> BuildLayer(config::LayerSpec l, tensor::ActShape in, const std::string& where, const config::InitSpec& model_init,
                              tensor::GemmConfig gemm, bool on_rows);

// Builds an embedding or one_hot layer `l` (the model's first, at `where`) on input rows of shape
// `in` whose `categorical` features hold category ids. Its spec's columns become the names taken
// (all of `categorical` when it names none), with their places and id counts. InvalidArgument
// naming `where`.columns[j] for a name that is not a categorical column, `where`.columns for a
// categorical column left out, `where` when the data has none.
Result<BuiltLayer> BuildCategorical(config::LayerSpec l, tensor::ActShape in, const std::string& where,
                                    const std::vector<data::CategoricalColumn>& categorical);

}  // namespace tfd::model
