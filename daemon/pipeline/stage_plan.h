#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/config/job.h"
#include "common/model/model.h"

namespace tfd::pipeline {

// Which layers each stage of a `layers` split holds: stage s runs layers [first[s], first[s + 1]).
struct StagePlan {
  std::vector<std::size_t> first;  // stages + 1 entries, from 0 to the model's layer count
  std::vector<double> cost;        // each stage's share of the cost (parameters and FLOPs), summing to 1
  int stages() const { return static_cast<int>(first.size()) - 1; }
  // "stage 0: layers 0-2 (dense 160 elu, ...) 55% | stage 1: ..." for the start-up log.
  std::string Describe(const model::Model& model) const;
};

// Each layer's share of the model's cost: half its share of the parameters, half its share of the
// forward multiply-adds per example. Sums to 1.
std::vector<double> LayerCosts(const model::Model& model);

// The stages of a `layers` split of `model`: the job's boundaries, or else the contiguous cut that
// makes the most costly stage as cheap as it can be. InvalidArgument naming
// model_parallel.stages or model_parallel.boundaries[i] and what was expected (more stages than
// layers, a boundary past the last layer).
Result<StagePlan> PlanLayers(const config::ModelParallelSpec& spec, const model::Model& model);

// Whether `model` can be split by units among spec.stages tasks: dense layers only (dropout and
// flatten need no split), each hidden one with at least one unit per stage (the output layer may
// have fewer: a regression model's one target). InvalidArgument naming
// model_parallel.split or model_parallel.stages otherwise.
Status CheckUnits(const config::ModelParallelSpec& spec, const model::Model& model);

// The columns [begin, end) of a layer of `units` units that stage `s` of `stages` computes.
std::pair<int, int> UnitSlice(int units, int s, int stages);

}  // namespace tfd::pipeline
