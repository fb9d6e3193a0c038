// Regression on the GPU: the loss kernel against tensor::RegressionLoss, and CudaModel against
// Model and OptimizerState for models with regression outputs under the mean squared and the mean
// absolute error. Part of tfd_cuda_tests (its main() is cuda_kernels_test.cc's).
//
// Tolerances, and why:
// - the loss's gradient: bit for bit (the CPU's expressions, two products and no sum to contract);
// - the loss and the sums of |o - t| and (o - t)²: 1e-12 relative (the same double terms, summed
//   per row and then in a tree where the CPU sums them in one run);
// - whole models: as cuda_kernels_test.cc's, gradients and parameters within 1e-4 x max|g|.
#include <cmath>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/model/model.h"
#include "common/optim/optimizer.h"
#include "common/tensor/cuda/cuda_model.h"
#include "common/tensor/cuda/kernels.h"
#include "common/tensor/loss.h"
#include "test/unit/common/tensor/cuda_test_util.h"

// Its own namespace: a unity build puts this file in one translation unit with cuda_kernels_test.cc.
namespace tfd::cuda_regression_test {
namespace {

using namespace tfd::cuda_test;

void CheckRelative(double got, double want, double tolerance) {
  INFO("device " << got << " cpu " << want);
  CHECK(std::abs(got - want) <= tolerance * std::abs(want));
}

const char* Name(tensor::LossKind kind) { return kind == tensor::LossKind::kMae ? "mae" : "mse"; }

}  // namespace

TEST_CASE("cuda regression loss matches tensor::RegressionLoss for mse and mae", "[cuda]") {
  const int batch = 37, width = 3;  // a batch that is no multiple of a warp
  for (tensor::LossKind kind : {tensor::LossKind::kMse, tensor::LossKind::kMae}) {
    INFO(Name(kind));
    auto outputs = Random(batch * width, 31, -3, 3), targets = Random(batch * width, 32, -3, 3);
    for (int i = 0; i < batch * width; i += 7) targets[static_cast<std::size_t>(i)] = outputs[static_cast<std::size_t>(i)];  // o == t: mae's 0
    std::vector<float> want_d(outputs.size());
    const tensor::LossResult want = tensor::RegressionLoss(outputs.data(), targets, kind, want_d.data());
    Dev<float> d_out(outputs), d_t(targets), d_grad(outputs.size());
    Dev<double> row_err(std::size_t{3} * batch);
    Dev<cuda::LossSums> sums(std::size_t{1});
    cuda::RegressionLoss(d_out.p, d_t.p, batch, width, kind, d_grad.p, row_err.p, sums.p, nullptr);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    const cuda::LossSums got = sums.Get()[0];
    CheckRelative(got.loss_sum / (batch * width), want.loss, 1e-12);
    CheckRelative(got.abs_sum, want.abs_error, 1e-12);
    CheckRelative(got.squared_sum, want.squared_error, 1e-12);
    CHECK(got.correct == 0);
    ExpectEqualBits(d_grad.Get(), want_d);
  }
}

TEST_CASE("CudaModel computes a regression model's gradients as Model does, and refuses the other kind of labels", "[cuda]") {
  const int batch = 24, targets = 2;
  for (tensor::LossKind kind : {tensor::LossKind::kMse, tensor::LossKind::kMae}) {
    INFO(Name(kind));
    auto made = model::Model::Build(Layers(R"([{"type": "dense", "units": 32, "activation": "tanh"}, {"type": "dense", "units": 16, "activation": "relu"},
                                               {"type": "dense", "units": 2}])"),
                                    {5, 1, 1}, model::Outputs(targets, kind), batch);
    REQUIRE(made.ok());
    model::Model& m = **made;
    m.Initialize(8);
    auto x = Random(static_cast<std::size_t>(batch * m.input_size()), 41, -1, 1);
    auto y = Random(static_cast<std::size_t>(batch * targets), 42, -2, 2);
    const tensor::Labels labels(std::span<const float>(y), targets);
    const tensor::LossResult want = m.ComputeGradients(x.data(), labels);
    std::vector<float> want_g(m.grads().begin(), m.grads().end());
    auto dev = cuda::CudaModel::Create(m, 0, 0.5);
    REQUIRE(dev.ok());
    std::vector<float> got_g(want_g.size());
    for (int run = 0; run < 3; ++run) {  // eager, captured, replayed
      auto got = (*dev)->ComputeGradients(m.params(), x.data(), labels, 7, got_g);
      REQUIRE(got.ok());
      CheckRelative(got->loss, want.loss, 1e-5);
      CheckRelative(got->abs_error, want.abs_error, 1e-5);
      CheckRelative(got->squared_error, want.squared_error, 1e-5);
      ExpectNear(got_g, want_g, 1e-4f * MaxAbs(want_g), 0);
    }
    const tensor::Labels short_labels = labels.Rows(0, 9);  // a short batch: eager
    const tensor::LossResult want_short = m.ComputeGradients(x.data(), short_labels);
    std::vector<float> want_short_g(m.grads().begin(), m.grads().end());
    auto got_short = (*dev)->ComputeGradients(m.params(), x.data(), short_labels, 7, got_g);
    REQUIRE(got_short.ok());
    CheckRelative(got_short->loss, want_short.loss, 1e-5);
    ExpectNear(got_g, want_short_g, 1e-4f * MaxAbs(want_short_g), 0);
    // Class ids, or targets of another width, are refused by name.
    auto ids = (*dev)->ComputeGradients(m.params(), x.data(), Labels(batch, 2, 1), 7, got_g);
    CHECK(ids.status().code() == Code::kInvalidArgument);
    CHECK(ids.status().message() == "cuda model: class ids for a model of 2 regression outputs");
    auto narrow = (*dev)->ComputeGradients(m.params(), x.data(), tensor::Labels(std::span<const float>(y), 1), 7, got_g);
    CHECK(narrow.status().message() == "cuda model: 1 targets a row for a model of 2 regression outputs");
  }
  // And a classifier refuses targets.
  auto made = model::Model::Build(Layers(R"([{"type": "dense", "units": 4}])"), {5, 1, 1}, 4, batch);
  REQUIRE(made.ok());
  auto dev = cuda::CudaModel::Create(**made, 0, 0.5);
  REQUIRE(dev.ok());
  std::vector<float> x(static_cast<std::size_t>(batch * 5)), y(static_cast<std::size_t>(batch * 4)), g((*made)->params().size());
  auto got = (*dev)->ComputeGradients((*made)->params(), x.data(), tensor::Labels(std::span<const float>(y), 4), 1, g);
  CHECK(got.status().message() == "cuda model: 4 targets a row for a model of 4 classes");
}

TEST_CASE("CudaModel trains a regression model on the device as OptimizerState does on the host", "[cuda]") {
  const int batch = 20, targets = 3;
  for (tensor::LossKind kind : {tensor::LossKind::kMse, tensor::LossKind::kMae}) {
    INFO(Name(kind));
    auto made = model::Model::Build(Layers(R"([{"type": "dense", "units": 24, "activation": "elu"}, {"type": "dense", "units": 3}])"),
                                    {6, 1, 1}, model::Outputs(targets, kind), batch);
    REQUIRE(made.ok());
    model::Model& m = **made;
    m.Initialize(9);
    config::OptimizerSpec spec;  // momentum, as cuda_kernels_test.cc says why
    spec.type = config::OptimizerSpec::Type::kMomentum;
    spec.learning_rate = 0.02;
    spec.momentum = 0.9;
    auto opt = optim::MakeOptimizer(spec);
    auto dev = cuda::CudaModel::Create(m, 0, 0.5, opt.get());
    REQUIRE(dev.ok());
    REQUIRE((*dev)->UploadParams(m.params()).ok());
    optim::OptimizerState state(*opt, m.params().size(), optim::DecayedRanges(model::VariableRuns(m)));
    for (int step = 0; step < 10; ++step) {
      auto x = Random(static_cast<std::size_t>(batch * m.input_size()), 500 + static_cast<std::uint64_t>(step), -1, 1);
      auto y = Random(static_cast<std::size_t>(batch * targets), 600 + static_cast<std::uint64_t>(step), -1, 1);
      const tensor::Labels labels(std::span<const float>(y), targets);
      const tensor::LossResult want = m.ComputeGradients(x.data(), labels);
      state.Apply(m.params(), m.grads());
      auto got = (*dev)->TrainStep(x.data(), labels, 1);
      REQUIRE(got.ok());
      CheckRelative(got->loss, want.loss, 1e-4);
      CheckRelative(got->abs_error, want.abs_error, 1e-4);
    }
    std::vector<float> got_p(m.params().size());
    REQUIRE((*dev)->DownloadParams(got_p).ok());
    std::vector<float> want_p(m.params().begin(), m.params().end());
    ExpectNear(got_p, want_p, 1e-4f * MaxAbs(want_p), 0);
  }
}

}  // namespace tfd::cuda_regression_test
