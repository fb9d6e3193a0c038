#pragma once
// What the CUDA backend's test files share: random inputs, device copies of host vectors, the
// comparisons (within a tolerance, or bit for bit), a model's layers from their JSON and random labels.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include "common/base/class_id.h"
#include "common/base/random.h"
#include "common/config/job.h"

namespace tfd::cuda_test {

inline std::vector<float> Random(std::size_t n, std::uint64_t seed, float lo = -1, float hi = 1) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = lo + (hi - lo) * static_cast<float>(rng.Uniform());
  return v;
}

// A device copy of a host vector, freed at scope exit.
template <typename T>
struct Dev {
  T* p = nullptr;
  std::size_t n = 0;
  explicit Dev(const std::vector<T>& h) : n(h.size()) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), sizeof(T) * n + 1) == cudaSuccess);
    REQUIRE(cudaMemcpy(p, h.data(), sizeof(T) * n, cudaMemcpyHostToDevice) == cudaSuccess);
  }
  explicit Dev(std::size_t count) : Dev(std::vector<T>(count)) {}
  ~Dev() { cudaFree(p); }
  std::vector<T> Get() const {
    std::vector<T> h(n);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(h.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};

inline void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float abs_tol, float rel_tol) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= abs_tol + rel_tol * std::abs(want[i]))) {
      if (bad++ == 0) first = i;
    }
  }
  INFO("first mismatch at " << first << ": device " << got[first] << " cpu " << want[first]);
  CHECK(bad == 0);
}

inline void ExpectEqualBits(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  CHECK(std::memcmp(got.data(), want.data(), sizeof(float) * got.size()) == 0);
}

inline float MaxAbs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::abs(x));
  return m;
}

inline config::ModelSpec Layers(const std::string& json_layers) {
  auto job = config::ParseJobSpec(R"({"model": {"layers": )" + json_layers +
                                      R"(}, "data": "x", "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 0.1}})",
                                  "test");
  INFO((job.ok() ? std::string() : job.status().message()));
  REQUIRE(job.ok());
  return job->model;
}

inline std::vector<ClassId> Labels(int batch, int classes, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<ClassId> y(batch);
  for (auto& v : y) v = static_cast<ClassId>(rng.Below(classes));
  return y;
}

}  // namespace tfd::cuda_test
