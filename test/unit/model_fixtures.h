// Small models the unit tests build without data.
#pragma once

#include <memory>

#include <catch2/catch.hpp>

#include "common/model/model.h"

namespace tfd::testing {

// The softmax classifier on 2x2x1 inputs, 10 classes, batches of up to 4: 50 parameters.
inline std::unique_ptr<model::Model> SmallSoftmax() {
  config::ModelSpec spec;
  spec.name = "softmax";
  auto m = model::Model::Build(spec, {.h = 2, .w = 2, .c = 1}, 10, 4);
  INFO(m.status().ToString());
  REQUIRE(m.ok());
  return std::move(m).value();
}

}  // namespace tfd::testing
