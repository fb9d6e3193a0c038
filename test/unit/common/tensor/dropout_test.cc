// The dropout layer: its mask for a fixed seed, the kept fraction, the 1 / (1 - rate) scaling, the
// backward pass through the mask, and that evaluation (Model::Forward) is unaffected.
#include <catch2/catch.hpp>

#include <vector>

#include "common/config/job.h"
#include "common/model/model.h"
#include "common/tensor/layers.h"
#include "daemon/train/trainer.h"

namespace tfd::tensor {
namespace {

TEST_CASE("dropout keeps about 1 - rate of the values, scaled by 1 / (1 - rate), the same for one seed", "[unit][dropout]") {
  const int n = 20000;
  auto layer = MakeDropout({1, 1, n}, 0.2);
  layer->Reserve(1);
  std::vector<float> in(n, 2.0f), a(n), b(n), c(n);
  layer->SetTraining(true, 5);
  layer->Forward(in.data(), a.data(), 1);
  layer->Forward(in.data(), b.data(), 1);
  CHECK(a == b);  // the mask is a function of the seed
  int kept = 0;
  for (float v : a) {
    REQUIRE((v == 0.0f || v == 2.5f));  // 2 / (1 - 0.2)
    kept += v != 0.0f;
  }
  CHECK(kept > n * 0.78);  // 0.8 expected; the binomial's sd is 0.0028 n
  CHECK(kept < n * 0.82);
  layer->SetTraining(true, 6);
  layer->Forward(in.data(), c.data(), 1);
  CHECK(c != a);  // another seed, another mask
  std::vector<float> first(a.begin(), a.begin() + 8);
  std::vector<float> again(8);
  auto small = MakeDropout({1, 1, 8}, 0.2);
  small->Reserve(1);
  small->SetTraining(true, 5);
  small->Forward(in.data(), again.data(), 1);
  CHECK(again == first);  // the mask of a prefix does not depend on the batch's size
}

TEST_CASE("dropout's backward pass sends the gradient through the same mask", "[unit][dropout]") {
  auto layer = MakeDropout({1, 1, 6}, 0.5);
  layer->Reserve(2);
  layer->SetTraining(true, 9);
  std::vector<float> in(12, 1.0f), out(12), dout(12, 3.0f), din(12);
  layer->Forward(in.data(), out.data(), 2);
  layer->Backward(in.data(), out.data(), dout.data(), din.data(), 2);
  for (int i = 0; i < 12; ++i) CHECK(din[i] == 3.0f * out[i]);  // out = mask here (input ones)
}

TEST_CASE("dropout is the identity at evaluation", "[unit][dropout]") {
  auto layer = MakeDropout({1, 1, 4}, 0.9);
  layer->Reserve(1);
  std::vector<float> in = {1, -2, 3, 4}, out(4), dout = {5, 6, 7, 8}, din(4);
  layer->SetTraining(false, 1);
  layer->Forward(in.data(), out.data(), 1);
  CHECK(out == in);
  layer->Backward(in.data(), out.data(), dout.data(), din.data(), 1);
  CHECK(din == dout);
}

TEST_CASE("a model with dropout evaluates deterministically and trains with a mask per step", "[unit][dropout]") {
  config::ModelSpec spec;
  spec.name = "layers";
  spec.layers = {{.kind = config::LayerSpec::Kind::kDense, .units = 16, .activation = config::Activation::kRelu},
                 {.kind = config::LayerSpec::Kind::kDropout, .rate = 0.5},
                 {.kind = config::LayerSpec::Kind::kDense, .units = 3}};
  auto built = model::Model::Build(spec, {1, 1, 4}, 3, 2);
  REQUIRE(built.ok());
  model::Model& m = **built;
  CHECK(m.variables().size() == 4);  // dropout holds no variables
  CHECK(m.variables()[2].name == "dense_1/kernel");
  m.Initialize(1);
  std::vector<float> x = {0.5f, -1, 2, 0.25f, 1, 1, -1, 0};
  std::vector<ClassId> y = {0, 2};
  const float* logits = m.Forward(x.data(), 2);
  const std::vector<float> eval1(logits, logits + 6);
  m.SetDropoutSeed(train::DropoutSeed(1, 0, 0));
  const auto a = m.ComputeGradients(x.data(), y).loss;
  const std::vector<float> grads_a(m.grads().begin(), m.grads().end());
  m.SetDropoutSeed(train::DropoutSeed(1, 0, 0));
  CHECK(m.ComputeGradients(x.data(), y).loss == a);  // same seed, rank and step: same mask
  CHECK(std::vector<float>(m.grads().begin(), m.grads().end()) == grads_a);
  logits = m.Forward(x.data(), 2);
  CHECK(std::vector<float>(logits, logits + 6) == eval1);  // training left evaluation alone
  CHECK(train::DropoutSeed(1, 0, 0) != train::DropoutSeed(1, 1, 0));
  CHECK(train::DropoutSeed(1, 0, 0) != train::DropoutSeed(1, 0, 1));
  CHECK(train::DropoutSeed(1, 0, 0) != train::DropoutSeed(2, 0, 0));
}

}  // namespace
}  // namespace tfd::tensor
