// A synchronised batch norm on the GPU (CudaModel::SetCrossReplicaSum): two GPU replicas against
// two CPU replicas (Model), a GPU replica paired with a CPU one, and a GPU replica beside one that
// joins the step without rows. Part of tfd_cuda_tests (its main() is cuda_kernels_test.cc's).
//
// What must hold, and why:
// - a GPU replica's loss and gradients are the CPU replica's within cuda_kernels_test.cc's whole-
//   model tolerance (1e-4 x max|g|), its moving statistics within 1e-5: each replica's column sums
//   are taken in another order than the CPU's, so the summed floats may differ in the last bit;
// - the replicas' moving statistics are the same bits, GPU with GPU and GPU with CPU: every replica
//   computes them from the same summed floats with the same float operations (kernels.h);
// - beside a replica that joins without rows (its sums zeros), a GPU replica's step is the same
//   bits as the same step with no summer at all.
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/model/model.h"
#include "common/tensor/cuda/cuda_model.h"
#include "test/unit/common/tensor/cuda_test_util.h"
#include "test/unit/common/tensor/two_replica_sum.h"

// Its own namespace: a unity build puts this file in one translation unit with cuda_kernels_test.cc.
namespace tfd::cuda_sync_test {
namespace {

using namespace tfd::cuda_test;
using testing::TwoReplicaSum;

// Synchronised batch norms after a convolution (NHWC channels), inside a residual block and after
// a dense layer (rows).
constexpr const char* kLayers = R"([{"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same", "activation": "relu"},
    {"type": "batch_norm", "momentum": 0.9, "sync": true},
    {"type": "residual", "activation": "relu", "layers": [{"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same"},
                                                          {"type": "batch_norm", "momentum": 0.8, "sync": true}]},
    {"type": "max_pool2d", "pool_size": 2}, {"type": "flatten"}, {"type": "dense", "units": 12, "activation": "tanh"},
    {"type": "batch_norm", "momentum": 0.9, "sync": true}, {"type": "dense", "units": 10}])";
constexpr int kHalf = 6;  // each replica's batch

std::unique_ptr<model::Model> Build() {
  auto made = model::Model::Build(Layers(kLayers), {6, 6, 1}, 10, kHalf);
  REQUIRE(made.ok());
  (*made)->Initialize(11);
  return std::move(*made);
}

// One replica's step: its parameters after (the moving statistics moved), gradients and loss.
struct Step {
  std::vector<float> params, grads;
  double loss = 0;
  bool ok = false;
};

std::vector<float> ReplicaInputs(const model::Model& m, int r) { return Random(static_cast<std::size_t>(kHalf * m.input_size()), 70 + r, 0, 1); }
std::vector<ClassId> ReplicaLabels(int r) { return Labels(kHalf, 10, 80 + static_cast<std::uint64_t>(r)); }

// Replica r's step on the GPU from `start`, its sums through `sum` (null: none).
Step GpuStep(cuda::CudaModel& dev, const std::vector<float>& start, const model::Model& m, int r, tensor::CrossReplicaSum* sum) {
  Step s;
  s.params = start;
  s.grads.resize(start.size());
  dev.SetCrossReplicaSum(sum);
  const std::vector<float> x = ReplicaInputs(m, r);
  const std::vector<ClassId> y = ReplicaLabels(r);
  auto got = dev.ComputeGradients(s.params, x.data(), y, 5, s.grads);
  s.ok = got.ok();
  if (s.ok) s.loss = got->loss;
  return s;
}

// Replica r's step on the CPU from `start`.
Step CpuStep(model::Model& m, const std::vector<float>& start, int r, tensor::CrossReplicaSum* sum) {
  Step s;
  std::copy(start.begin(), start.end(), m.params().begin());
  m.SetCrossReplicaSum(sum);
  const std::vector<float> x = ReplicaInputs(m, r);
  s.loss = m.ComputeGradients(x.data(), ReplicaLabels(r)).loss;
  m.SetCrossReplicaSum(nullptr);
  s.params.assign(m.params().begin(), m.params().end());
  s.grads.assign(m.grads().begin(), m.grads().end());
  s.ok = true;
  return s;
}

// The moving statistics (the variables that are not trained) of `params`.
std::vector<float> Moving(const model::Model& m, const std::vector<float>& params) {
  std::vector<float> v;
  for (const model::Variable& var : m.variables())
    if (!var.trainable) v.insert(v.end(), params.begin() + var.offset, params.begin() + var.offset + var.size);
  return v;
}

}  // namespace

TEST_CASE("two GPU replicas of a synchronised batch norm step as two CPU replicas do, with the same moving statistics", "[cuda]") {
  auto host = Build(), other_host = Build();
  const std::vector<float> start(host->params().begin(), host->params().end());
  // The CPU replicas.
  TwoReplicaSum cpu_sum;
  TwoReplicaSum::Member c0(cpu_sum, 0), c1(cpu_sum, 1);
  Step cpu[2];
  std::thread cpu_other([&] { cpu[1] = CpuStep(*other_host, start, 1, &c1); });
  cpu[0] = CpuStep(*host, start, 0, &c0);
  cpu_other.join();
  REQUIRE_FALSE(cpu_sum.failed());
  CHECK(cpu_sum.sums() == 9);  // three batch norms: two sums forward, one backward
  // The GPU replicas, twice (every step runs eagerly: it waits for the host's sums).
  auto d0 = cuda::CudaModel::Create(*host, 0, 0.2), d1 = cuda::CudaModel::Create(*host, 0, 0.2);
  REQUIRE(d0.ok());
  REQUIRE(d1.ok());
  for (int run = 0; run < 2; ++run) {
    INFO("run " << run);
    TwoReplicaSum gpu_sum;
    TwoReplicaSum::Member g0(gpu_sum, 0), g1(gpu_sum, 1);
    Step gpu[2];
    std::thread gpu_other([&] { gpu[1] = GpuStep(**d1, start, *host, 1, &g1); });
    gpu[0] = GpuStep(**d0, start, *host, 0, &g0);
    gpu_other.join();
    REQUIRE_FALSE(gpu_sum.failed());
    CHECK(gpu_sum.sums() == 9);
    for (int r = 0; r < 2; ++r) {
      INFO("replica " << r);
      REQUIRE(gpu[r].ok);
      CHECK(std::abs(gpu[r].loss - cpu[r].loss) <= 1e-5 * std::abs(cpu[r].loss));
      ExpectNear(gpu[r].grads, cpu[r].grads, 1e-4f * MaxAbs(cpu[r].grads), 0);
      ExpectNear(Moving(*host, gpu[r].params), Moving(*host, cpu[r].params), 1e-5f, 0);
    }
    ExpectEqualBits(Moving(*host, gpu[0].params), Moving(*host, gpu[1].params));
  }
}

TEST_CASE("a GPU replica and a CPU replica of a synchronised batch norm pair up and move the same statistics", "[cuda]") {
  auto host = Build(), cpu_host = Build();
  const std::vector<float> start(host->params().begin(), host->params().end());
  auto dev = cuda::CudaModel::Create(*host, 0, 0.2);
  REQUIRE(dev.ok());
  TwoReplicaSum sum;
  TwoReplicaSum::Member m0(sum, 0), m1(sum, 1);
  Step gpu, cpu;
  std::thread cpu_thread([&] { cpu = CpuStep(*cpu_host, start, 1, &m1); });
  gpu = GpuStep(**dev, start, *host, 0, &m0);
  cpu_thread.join();
  REQUIRE_FALSE(sum.failed());
  REQUIRE(gpu.ok);
  CHECK(sum.sums() == 9);
  ExpectEqualBits(Moving(*host, gpu.params), Moving(*host, cpu.params));
}

TEST_CASE("beside a replica that joins without rows, a GPU replica's synchronised step is its step alone", "[cuda]") {
  auto host = Build(), joining = Build();
  const std::vector<float> start(host->params().begin(), host->params().end());
  auto dev = cuda::CudaModel::Create(*host, 0, 0.2);
  REQUIRE(dev.ok());
  const Step alone = GpuStep(**dev, start, *host, 0, nullptr);
  REQUIRE(alone.ok);
  TwoReplicaSum sum;
  TwoReplicaSum::Member m0(sum, 0), m1(sum, 1);
  joining->SetCrossReplicaSum(&m1);
  std::thread join_thread([&] { joining->JoinCrossReplicaSums(); });
  const Step with_joiner = GpuStep(**dev, start, *host, 0, &m0);
  join_thread.join();
  joining->SetCrossReplicaSum(nullptr);
  REQUIRE_FALSE(sum.failed());
  REQUIRE(with_joiner.ok);
  CHECK(with_joiner.loss == alone.loss);
  ExpectEqualBits(with_joiner.grads, alone.grads);
  ExpectEqualBits(with_joiner.params, alone.params);
  std::vector<float> joined(joining->params().begin(), joining->params().end());
  ExpectEqualBits(Moving(*host, joined), Moving(*host, with_joiner.params));  // the joiner moved as the replica did
}

}  // namespace tfd::cuda_sync_test
