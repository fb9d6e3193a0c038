#include "daemon/pipeline/stage_plan.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "common/tensor/elementwise.h"

namespace tfd::pipeline {

using config::LayerSpec;

namespace {

// Multiply-adds of one sample through `layer` (built from `l`) on inputs of shape `in`; a
// residual block's are its layers' and its projection's. Other layers count one per input value.
double LayerFlops(const LayerSpec& l, const tensor::Layer& layer, tensor::ActShape in) {
  const tensor::ActShape out = layer.output_shape();
  switch (l.kind) {
    case LayerSpec::Kind::kDense: return static_cast<double>(in.size()) * out.size();
    case LayerSpec::Kind::kConv2D: return static_cast<double>(l.kernel_size) * l.kernel_size * in.c * out.size();
    case LayerSpec::Kind::kDepthwiseConv2D: return static_cast<double>(l.kernel_size) * l.kernel_size * out.size();
    case LayerSpec::Kind::kResidual: {
      double flops = 0;
      tensor::ActShape at = in;
      for (std::size_t j = 0; j < layer.Inner().size(); ++j) {
        flops += LayerFlops(l.layers[j], *layer.Inner()[j], at);
        at = layer.Inner()[j]->output_shape();
      }
      const bool projected = at.h != in.h || at.w != in.w || at.c != in.c;
      return flops + (projected ? static_cast<double>(in.c) * out.size() : 0) + static_cast<double>(out.size());
    }
    default: return static_cast<double>(in.size());
  }
}

}  // namespace

std::vector<double> LayerCosts(const model::Model& model) {
  const std::size_t n = model.num_layers();
  std::vector<double> params(n), flops(n);
  double total_params = 0, total_flops = 0;
  tensor::ActShape in = model.input_shape();
  for (std::size_t i = 0; i < n; ++i) {
    const tensor::ActShape out = model.layer_output_shape(i);
    const LayerSpec& l = model.layer_spec(i);
    params[i] = static_cast<double>(model.layer_starts()[i + 1] - model.layer_starts()[i]);
    flops[i] = LayerFlops(l, model.layer(i), in);
    total_params += params[i];
    total_flops += flops[i];
    in = out;
  }
  std::vector<double> cost(n);
  for (std::size_t i = 0; i < n; ++i)
    cost[i] = 0.5 * (total_params > 0 ? params[i] / total_params : 0) + 0.5 * (total_flops > 0 ? flops[i] / total_flops : 0);
  return cost;
}

Result<StagePlan> PlanLayers(const config::ModelParallelSpec& spec, const model::Model& model) {
  const int layers = static_cast<int>(model.num_layers()), s = spec.stages;
  if (s > layers)
    return Status::InvalidArgument(fmt::format("model_parallel.stages: expected at most {} (the model's layers: {}), got {}", layers,
                                               model.Summary(), s));
  const std::vector<double> cost = LayerCosts(model);
  StagePlan plan;
  if (!spec.boundaries.empty()) {
    plan.first.push_back(0);
    for (std::size_t i = 0; i < spec.boundaries.size(); ++i) {
      if (spec.boundaries[i] >= layers)
        return Status::InvalidArgument(fmt::format("model_parallel.boundaries[{}]: expected a layer index below {} (the model's layer "
                                                   "count), got {}",
                                                   i, layers, spec.boundaries[i]));
      plan.first.push_back(static_cast<std::size_t>(spec.boundaries[i]));
    }
    plan.first.push_back(static_cast<std::size_t>(layers));
  } else {
    // best[k][i]: the least possible cost of the costliest stage when k stages hold layers [0, i).
    std::vector<double> prefix(static_cast<std::size_t>(layers) + 1, 0);
    for (int i = 0; i < layers; ++i) prefix[i + 1] = prefix[i] + cost[i];
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<std::vector<double>> best(s + 1, std::vector<double>(layers + 1, inf));
    std::vector<std::vector<int>> cut(s + 1, std::vector<int>(layers + 1, 0));
    best[0][0] = 0;
    for (int k = 1; k <= s; ++k)
      for (int i = k; i <= layers; ++i)
        for (int j = k - 1; j < i; ++j) {
          const double c = std::max(best[k - 1][j], prefix[i] - prefix[j]);
          if (c < best[k][i] - 1e-12) best[k][i] = c, cut[k][i] = j;
        }
    plan.first.assign(s + 1, 0);
    plan.first[s] = static_cast<std::size_t>(layers);
    for (int k = s, i = layers; k > 0; --k) {
      i = cut[k][i];
      plan.first[k - 1] = static_cast<std::size_t>(i);
    }
  }
  for (int k = 0; k < s; ++k) {
    double c = 0;
    for (std::size_t i = plan.first[k]; i < plan.first[k + 1]; ++i) c += cost[i];
    plan.cost.push_back(c);
  }
  return plan;
}

std::string StagePlan::Describe(const model::Model& model) const {
  std::string out;
  for (int s = 0; s < stages(); ++s) {
    std::string layers;
    for (std::size_t i = first[s]; i < first[s + 1]; ++i) {
      const LayerSpec& l = model.layer_spec(i);
      layers += fmt::format("{}{}", i == first[s] ? "" : ", ",
                            l.kind == LayerSpec::Kind::kDense ? fmt::format("dense {}", l.units) : fmt::format("layer {}", i));
    }
    out += fmt::format("{}stage {}: layers {}-{} ({}) {:.0f}%", s == 0 ? "" : " | ", s, first[s], first[s + 1] - 1, layers,
                       100 * cost[s]);
  }
  return out;
}

Status CheckUnits(const config::ModelParallelSpec& spec, const model::Model& model) {
  for (std::size_t i = 0; i < model.num_layers(); ++i) {
    const LayerSpec& l = model.layer_spec(i);
    if (l.kind == LayerSpec::Kind::kDense && tensor::NeedsPreActivation(l.activation)) {
      // A unit slice's stage runs the activation on its columns alone and keeps no pre-activations.
      return Status::InvalidArgument(fmt::format("model_parallel.split: \"units\" has no {} activation (dense layer {}): split it by "
                                                 "\"layers\"",
                                                 config::ActivationName(l.activation), i));
    }
    if (l.kind == LayerSpec::Kind::kDense) {
      // The output layer may be narrower (a regression model's few targets): the stages without
      // any of its units only take part in its gathers.
      if (l.units < spec.stages && i + 1 < model.num_layers())
        return Status::InvalidArgument(fmt::format("model_parallel.stages: expected at most {} (the units of hidden dense layer {}), got {}",
                                                   l.units, i, spec.stages));
    } else if (l.kind != LayerSpec::Kind::kDropout) {
      return Status::InvalidArgument(fmt::format(
          "model_parallel.split: \"units\" divides dense layers only, and layer {} of this model is a {}: split it by \"layers\"", i,
          config::LayerKindName(l.kind)));
    }
  }
  return Status::Ok();
}

std::pair<int, int> UnitSlice(int units, int s, int stages) {
  return {static_cast<int>(std::int64_t{units} * s / stages), static_cast<int>(std::int64_t{units} * (s + 1) / stages)};
}

}  // namespace tfd::pipeline
