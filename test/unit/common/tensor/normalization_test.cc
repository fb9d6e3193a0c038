// batch_norm and layer_norm: values computed here from their definitions, the moving statistics,
// a synchronised batch norm over two replicas against one layer on the concatenated batch, and a
// model's moving statistics through a checkpoint. Gradients: gradient_test.cc.
#include <cmath>
#include <random>
#include <thread>

#include <catch2/catch.hpp>

#include "common/ckpt/format.h"
#include "common/config/job.h"
#include "common/model/model.h"
#include "common/tensor/batch_norm_passes.h"
#include "common/tensor/layers.h"
#include "test/unit/common/tensor/two_replica_sum.h"

namespace tfd::tensor {
namespace {

std::vector<float> Random(std::size_t n, std::uint32_t seed, float offset = 0) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(offset, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// A layer bound to its own parameters (gamma 1.5 + 0.1 c, beta 0.2 c, moving mean 0, variance 1).
struct Bound {
  std::unique_ptr<Layer> layer;
  std::vector<std::vector<float>> params, grads;
  Bound(std::unique_ptr<Layer> l, int max_batch) : layer(std::move(l)) {
    std::vector<std::span<float>> ps, gs;
    for (const ParamSpec& p : layer->Params()) {
      std::vector<float> v(static_cast<std::size_t>(NumElements(p.shape)));
      for (std::size_t c = 0; c < v.size(); ++c)
        v[c] = p.name == "gamma" ? 1.5f + 0.1f * c : p.name == "beta" ? 0.2f * c : p.name == "moving_variance" ? 1.0f : 0.0f;
      params.push_back(v);
      grads.emplace_back(v.size());
    }
    for (std::size_t i = 0; i < params.size(); ++i) ps.emplace_back(params[i]), gs.emplace_back(grads[i]);
    layer->Bind(ps, gs);
    layer->Reserve(max_batch);
  }
};

// Per channel c of `rows` x `c` values: mean and biased variance, in double.
std::pair<std::vector<double>, std::vector<double>> Moments(const std::vector<float>& x, int c) {
  const std::size_t rows = x.size() / c;
  std::vector<double> mean(c), var(c);
  for (std::size_t r = 0; r < rows; ++r)
    for (int k = 0; k < c; ++k) mean[k] += x[r * c + k] / static_cast<double>(rows);
  for (std::size_t r = 0; r < rows; ++r)
    for (int k = 0; k < c; ++k) var[k] += (x[r * c + k] - mean[k]) * (x[r * c + k] - mean[k]) / static_cast<double>(rows);
  return {mean, var};
}

TEST_CASE("batch_norm normalises each NHWC channel with the batch's statistics while training", "[unit][norm]") {
  const ActShape shape{3, 2, 4};
  const int batch = 5;
  Bound bn(MakeBatchNorm(shape, {}), batch);
  CHECK(bn.layer->output_shape().size() == shape.size());
  const std::vector<float> x = Random(static_cast<std::size_t>(shape.size() * batch), 1, 3.0f);
  std::vector<float> out(x.size());
  bn.layer->SetTraining(true, 0);
  bn.layer->Forward(x.data(), out.data(), batch);
  const auto [mean, var] = Moments(x, shape.c);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const int c = static_cast<int>(i % shape.c);
    const double want = (x[i] - mean[c]) / std::sqrt(var[c] + 1e-3) * (1.5 + 0.1 * c) + 0.2 * c;
    REQUIRE(out[i] == Approx(want).margin(1e-4));
  }
  // Keras: moving = moving * 0.99 + batch * 0.01 (the biased variance).
  for (int c = 0; c < shape.c; ++c) {
    CHECK(bn.params[2][c] == Approx(0.01 * mean[c]).margin(1e-6));
    CHECK(bn.params[3][c] == Approx(0.99 + 0.01 * var[c]).margin(1e-5));
  }
}

// One replica's statistics come from one pass of shifted sums when that is exact enough, else from
// two, channel by channel: either way within float rounding of the definitions, on channels that
// would break a pass of plain sums (far from zero), that hold one value (one of them not a sum of
// powers of two), and one whose shift lands far off its mean (every row the shift samples an
// outlier), which takes the two passes while the others keep their one.
TEST_CASE("batch_norm's batch statistics stay exact far from zero, with outliers and on constant channels", "[unit][norm]") {
  const ActShape shape{20, 20, 5};
  const int batch = 40, rows = batch * 400;
  std::mt19937 gen(7);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(rows * shape.c));
  std::vector<bool> sampled(rows);
  for (std::int64_t i = 0; i < kBatchNormShiftRows; ++i) sampled[BatchNormShiftRow(i, rows)] = true;
  for (int r = 0; r < rows; ++r) {
    float* row = x.data() + r * shape.c;
    row[0] = unit(gen);                                // plain
    row[1] = 1e5f + unit(gen);                         // mean(x)² is 1e10 times var(x)
    row[2] = sampled[r] ? 1000.0f : 0.1f * unit(gen);  // the shift far off: 16 outliers, all sampled
    row[3] = 7.0f;                                     // constant
    row[4] = 0.1f;                                     // constant, 16 of it not exact in float
  }
  Bound bn(MakeBatchNorm(shape, {.momentum = 0.5}), batch);
  std::vector<float> out(x.size());
  bn.layer->SetTraining(true, 0);
  bn.layer->Forward(x.data(), out.data(), batch);
  const auto [mean, var] = Moments(x, shape.c);
  for (int c = 0; c < shape.c; ++c) {
    INFO("channel " << c << ": mean " << mean[c] << ", variance " << var[c]);
    CHECK(bn.params[2][c] == Approx(0.5 * mean[c]).epsilon(1e-6).margin(1e-6));
    CHECK(bn.params[3][c] == Approx(0.5 + 0.5 * var[c]).epsilon(2e-5));
  }
  CHECK(bn.params[3][3] == 0.5f);  // a constant channel's variance: 0 exactly
  CHECK(bn.params[3][4] == 0.5f);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const int c = static_cast<int>(i % shape.c);
    const double want = (x[i] - mean[c]) / std::sqrt(var[c] + 1e-3) * (1.5 + 0.1 * c) + 0.2 * c;
    INFO("row " << i / shape.c << " channel " << c);
    // y = x scale + (beta - mean scale), as PyTorch computes it: rounded at x scale's magnitude,
    // which is 1.6e5 on channel 1.
    REQUIRE(out[i] == Approx(want).margin(c == 1 ? 0.05 : 2e-3));
  }
}

TEST_CASE("batch_norm at evaluation uses the moving statistics and leaves them alone", "[unit][norm]") {
  const ActShape shape{1, 1, 3};
  Bound bn(MakeBatchNorm(shape, {.epsilon = 0.01, .center = false}), 4);
  REQUIRE(bn.params.size() == 3);  // gamma, moving_mean, moving_variance
  bn.params[1] = {1.0f, -2.0f, 0.5f};
  bn.params[2] = {4.0f, 0.25f, 9.0f};
  const std::vector<float> x = Random(12, 2);
  std::vector<float> out(x.size());
  bn.layer->SetTraining(false, 0);
  bn.layer->Forward(x.data(), out.data(), 4);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const int c = static_cast<int>(i % 3);
    REQUIRE(out[i] == Approx((x[i] - bn.params[1][c]) / std::sqrt(bn.params[2][c] + 0.01) * (1.5 + 0.1 * c)).margin(1e-5));
  }
  CHECK(bn.params[1] == std::vector<float>{1.0f, -2.0f, 0.5f});
  CHECK(bn.params[2] == std::vector<float>{4.0f, 0.25f, 9.0f});
}

TEST_CASE("a batch_norm recomputing a batch gives the same outputs and gradients and leaves the moving statistics as they were",
          "[unit][norm]") {
  const ActShape shape{2, 2, 3};
  Bound bn(MakeBatchNorm(shape, {.momentum = 0.9}), 4);
  // Inside a block too: SetRecomputing reaches it through Inner().
  std::vector<BlockLayer> inner;
  inner.push_back({"batch_norm", MakeBatchNorm(shape, {.momentum = 0.9})});
  Bound block(MakeResidual(shape, std::move(inner), {}), 4);
  for (Bound* b : {&bn, &block}) {
    const std::vector<float> x = Random(48, 7, 1.0f);
    std::vector<float> out(x.size()), again(x.size()), dout(x.size(), 0.5f), din(x.size()), din_again(x.size());
    b->layer->SetTraining(true, 0);
    b->layer->Forward(x.data(), out.data(), 4);
    const std::vector<std::vector<float>> moved = b->params;
    CHECK(moved[2] != std::vector<float>(3, 0.0f));  // the first pass moved the moving mean
    REQUIRE(SetRecomputing(*b->layer, true));
    b->layer->Forward(x.data(), again.data(), 4);
    CHECK(SetRecomputing(*b->layer, false));
    CHECK(again == out);
    CHECK(b->params == moved);  // not moved a second time
    std::vector<float> g = dout;
    b->layer->Backward(x.data(), again.data(), g.data(), din_again.data(), 4);
    const std::vector<std::vector<float>> grads_again = b->grads;
    // The same batch's Backward after a plain pass: the same gradients.
    b->layer->Forward(x.data(), out.data(), 4);
    g = dout;
    b->layer->Backward(x.data(), out.data(), g.data(), din.data(), 4);
    CHECK(din_again == din);
    CHECK(grads_again == b->grads);
    // ... and that plain pass moved them again.
    CHECK(b->params != moved);
  }
  Bound ln(MakeLayerNorm(shape, {}), 4);
  CHECK_FALSE(SetRecomputing(*ln.layer, true));
}

TEST_CASE("layer_norm normalises each row's last axis, the same in training and evaluation", "[unit][norm]") {
  const ActShape shape{2, 2, 5};
  Bound ln(MakeLayerNorm(shape, {}), 3);
  const std::vector<float> x = Random(static_cast<std::size_t>(shape.size() * 3), 3, -1.0f);
  std::vector<float> train(x.size()), eval(x.size());
  ln.layer->SetTraining(true, 0);
  ln.layer->Forward(x.data(), train.data(), 3);
  ln.layer->SetTraining(false, 0);
  ln.layer->Forward(x.data(), eval.data(), 3);
  CHECK(train == eval);
  for (std::size_t r = 0; r < x.size() / 5; ++r) {
    const std::vector<float> row(x.begin() + r * 5, x.begin() + r * 5 + 5);
    const auto [mean, var] = Moments(row, 1);
    for (int c = 0; c < 5; ++c)
      REQUIRE(train[r * 5 + c] == Approx((row[c] - mean[0]) / std::sqrt(var[0] + 1e-3) * (1.5 + 0.1 * c) + 0.2 * c).margin(1e-4));
  }
}

using testing::TwoReplicaSum;

TEST_CASE("sync batch_norm over two replicas equals one batch_norm on the concatenated batch", "[unit][norm][sync]") {
  const ActShape shape{2, 3, 4};
  const int half = 3, rows = 2 * half;
  const std::size_t n = static_cast<std::size_t>(shape.size() * half);
  const std::vector<float> x = Random(2 * n, 4, 1.0f), dout = Random(2 * n, 5);
  // One process, the whole batch.
  Bound whole(MakeBatchNorm(shape, {.momentum = 0.9}), rows);
  std::vector<float> out(2 * n), din(2 * n), g(dout);
  whole.layer->SetTraining(true, 0);
  whole.layer->Forward(x.data(), out.data(), rows);
  whole.layer->Backward(x.data(), out.data(), g.data(), din.data(), rows);
  // Two replicas, half each.
  TwoReplicaSum sum;
  std::vector<Bound> replica;
  std::vector<std::vector<float>> r_out(2, std::vector<float>(n)), r_din(2, std::vector<float>(n));
  for (int r = 0; r < 2; ++r) replica.emplace_back(MakeBatchNorm(shape, {.momentum = 0.9, .sync = true}), half);
  std::vector<std::unique_ptr<TwoReplicaSum::Member>> members;
  for (int r = 0; r < 2; ++r) {
    members.push_back(std::make_unique<TwoReplicaSum::Member>(sum, r));
    REQUIRE(SetCrossReplicaSum(*replica[r].layer, members[r].get()));
  }
  auto run = [&](int r) {
    const float* xr = x.data() + r * n;
    std::vector<float> gr(dout.begin() + r * n, dout.begin() + (r + 1) * n);
    replica[r].layer->SetTraining(true, 0);
    replica[r].layer->Forward(xr, r_out[r].data(), half);
    replica[r].layer->Backward(xr, r_out[r].data(), gr.data(), r_din[r].data(), half);
  };
  std::thread other(run, 1);
  run(0);
  other.join();
  REQUIRE_FALSE(sum.failed());
  for (int r = 0; r < 2; ++r)
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(r_out[r][i] == Approx(out[r * n + i]).margin(1e-5));
      REQUIRE(r_din[r][i] == Approx(din[r * n + i]).margin(1e-4));
    }
  for (std::size_t p = 0; p < 4; ++p)
    for (int c = 0; c < shape.c; ++c) {
      INFO("variable " << p << " channel " << c);
      if (p < 2) CHECK(replica[0].grads[p][c] + replica[1].grads[p][c] == Approx(whole.grads[p][c]).margin(1e-4));  // gamma, beta
      else CHECK(replica[0].params[p][c] == Approx(whole.params[p][c]).margin(1e-6));                              // moving
      CHECK(replica[0].params[p][c] == replica[1].params[p][c]);  // the same bits on both replicas
    }
}

TEST_CASE("a sync batch_norm replica that joins a step without rows leaves the other's batch statistics and moves as it does",
          "[unit][norm][sync]") {
  const ActShape shape{2, 2, 3};
  const int batch = 4;
  const std::size_t n = static_cast<std::size_t>(shape.size() * batch);
  const std::vector<float> x = Random(n, 6, 2.0f), dout = Random(n, 7);
  Bound alone(MakeBatchNorm(shape, {.momentum = 0.9}), batch);
  std::vector<float> out(n), din(n), g(dout);
  alone.layer->SetTraining(true, 0);
  alone.layer->Forward(x.data(), out.data(), batch);
  alone.layer->Backward(x.data(), out.data(), g.data(), din.data(), batch);
  TwoReplicaSum sum;
  Bound with_rows(MakeBatchNorm(shape, {.momentum = 0.9, .sync = true}), batch), joining(MakeBatchNorm(shape, {.momentum = 0.9, .sync = true}), batch);
  TwoReplicaSum::Member m0(sum, 0), m1(sum, 1);
  REQUIRE(SetCrossReplicaSum(*with_rows.layer, &m0));
  REQUIRE(SetCrossReplicaSum(*joining.layer, &m1));
  std::vector<float> r_out(n), r_din(n), r_g(dout);
  bool joined = false;  // Catch's assertions belong to the test's thread
  std::thread other([&] { joined = JoinCrossReplicaSums(*joining.layer, /*forward=*/true) && JoinCrossReplicaSums(*joining.layer, /*forward=*/false); });
  with_rows.layer->SetTraining(true, 0);
  with_rows.layer->Forward(x.data(), r_out.data(), batch);
  with_rows.layer->Backward(x.data(), r_out.data(), r_g.data(), r_din.data(), batch);
  other.join();
  REQUIRE(joined);
  REQUIRE_FALSE(sum.failed());
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(r_out[i] == Approx(out[i]).margin(1e-5));
    REQUIRE(r_din[i] == Approx(din[i]).margin(1e-4));
  }
  for (std::size_t p = 2; p < 4; ++p)
    for (int c = 0; c < shape.c; ++c) {
      INFO("moving variable " << p << " channel " << c);
      CHECK(with_rows.params[p][c] == Approx(alone.params[p][c]).margin(1e-6));
      CHECK(joining.params[p][c] == with_rows.params[p][c]);  // the same bits on the joining replica
    }
}

TEST_CASE("a model's batch_norm and layer_norm variables are named as Keras names them and survive a checkpoint", "[unit][norm][model]") {
  using K = config::LayerSpec::Kind;
  config::ModelSpec spec;
  spec.name = "layers";
  spec.layers = {config::LayerSpec{.kind = K::kConv2D, .filters = 3, .kernel_size = 3}, config::LayerSpec{.kind = K::kBatchNorm},
                 config::LayerSpec{.kind = K::kLayerNorm, .center = false}, config::LayerSpec{.kind = K::kFlatten},
                 config::LayerSpec{.kind = K::kDense, .units = 2}};
  auto built = model::Model::Build(spec, {5, 5, 1}, 2, 8);
  REQUIRE(built.ok());
  model::Model& m = **built;
  std::vector<std::string> names;
  for (const model::Variable& v : m.variables()) names.push_back(v.name + (v.trainable ? "" : " (moving)"));
  CHECK(names == std::vector<std::string>{"conv2d/kernel", "conv2d/bias", "batch_norm/gamma", "batch_norm/beta", "batch_norm/moving_mean (moving)",
                                          "batch_norm/moving_variance (moving)", "layer_norm/gamma", "dense/kernel", "dense/bias"});
  m.Initialize(7);
  CHECK(m.params()[m.variables()[5].offset] == 1.0f);  // moving_variance starts at 1
  // Two training steps move the moving statistics; a checkpoint carries them into a fresh model.
  const std::vector<float> x = Random(8 * 25, 8);
  const std::vector<ClassId> y = {0, 1, 1, 0, 1, 0, 0, 1};
  for (int step = 0; step < 2; ++step) (void)m.ComputeGradients(x.data(), Labels(std::span(y)));
  for (std::size_t v = 4; v < 6; ++v) CHECK(m.grads()[m.variables()[v].offset] == 0.0f);  // never trained by an optimizer
  CHECK(m.params()[m.variables()[4].offset] != 0.0f);
  ckpt::Checkpoint c;
  for (const model::Variable& v : m.variables())
    c.tensors.push_back({v.name, v.shape, std::vector<float>(m.params().begin() + v.offset, m.params().begin() + v.offset + v.size), {}});
  auto bytes = ckpt::Serialize(c);
  REQUIRE(bytes.ok());
  auto back = ckpt::Parse(*bytes);
  REQUIRE(back.ok());
  auto fresh = model::Model::Build(spec, {5, 5, 1}, 2, 8);
  REQUIRE(fresh.ok());
  (*fresh)->Initialize(99);
  for (std::size_t v = 0; v < back->tensors.size(); ++v)
    std::copy(back->tensors[v].values.begin(), back->tensors[v].values.end(), (*fresh)->params().begin() + m.variables()[v].offset);
  const float* a = m.Forward(x.data(), 8);
  const std::vector<float> want(a, a + 16);
  const float* b = (*fresh)->Forward(x.data(), 8);
  CHECK(std::vector<float>(b, b + 16) == want);  // evaluation reads the restored moving statistics
}

}  // namespace
}  // namespace tfd::tensor
