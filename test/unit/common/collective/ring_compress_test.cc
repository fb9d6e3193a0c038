// The ring's collectives for gradient compression, between threads over loopback TCP: a 16-bit
// all-reduce (fp16 / bf16) leaves the same bits on every member, within the format's rounding of
// the float32 sum, through the socket and through shared slots; it sends half the bytes of a
// float32 one; and an all-gather carries every member's part unchanged, whatever its bits.
#include <cmath>
#include <cstring>
#include <random>

#include <catch2/catch.hpp>

#include "test/ring_harness.h"
#include "test/test_util.h"

namespace tfd::testing {
namespace {

using namespace std::chrono_literals;

collective::RingOptions Options(std::size_t chunk_floats, bool shared_slots) {
  collective::RingOptions o;
  o.chunk_floats = chunk_floats;
  o.startup_timeout = 30s;
  o.step_timeout = 30s;
  o.shared_slots = shared_slots;
  return o;
}

Status FirstError(const std::vector<Status>& s) {
  for (const auto& x : s)
    if (!x.ok()) return x;
  return Status::Ok();
}

std::vector<std::vector<float>> RandomData(int n, std::size_t len) {
  std::vector<std::vector<float>> data(static_cast<std::size_t>(n), std::vector<float>(len));
  for (int r = 0; r < n; ++r) {
    std::mt19937 gen(static_cast<unsigned>(r + 11));
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& v : data[static_cast<std::size_t>(r)]) v = d(gen) * 1e-2f;
  }
  return data;
}

TEST_CASE("a 16-bit all-reduce leaves the same bits on every member, close to the float32 sum", "[unit][ring][compress]") {
  const ScopedEnv local("TFD_LOCAL_LINK", nullptr), slots_on("TFD_RING_SHM", nullptr);
  for (compress::Half h : {compress::Half::kFp16, compress::Half::kBf16})
    for (int n : {2, 3})
      for (bool shared : {false, true}) {
        INFO("format " << (h == compress::Half::kFp16 ? "fp16" : "bf16") << ", " << n << " members, shared slots " << shared);
        const std::size_t len = 10007;
        LocalRing ring(n, Options(1000, shared));
        REQUIRE(FirstError(ring.Connect()).ok());
        std::vector<std::vector<float>> data = RandomData(n, len);
        std::vector<double> exact(len, 0.0), magnitude(len, 0.0);
        for (const auto& d : data)
          for (std::size_t i = 0; i < len; ++i) {
            exact[i] += d[i];
            magnitude[i] += std::fabs(d[i]);
          }
        const Status s = FirstError(ring.OnEach([&](int r) -> Status {
          TFD_ASSIGN_OR_RETURN(std::uint64_t id, ring.ring(r).StartAllReduceHalf(data[static_cast<std::size_t>(r)], h));
          return ring.ring(r).Wait(id);
        }));
        REQUIRE(s.ok());
        for (int r = 1; r < n; ++r) CHECK(std::memcmp(data[0].data(), data[static_cast<std::size_t>(r)].data(), len * 4) == 0);
        // Each value is a 16-bit one, within n + 1 of the format's relative rounding steps of the sum
        // (every hop rounds the partial sum it sends, each no larger than the sum of magnitudes).
        const double unit = h == compress::Half::kFp16 ? 0x1p-11 : 0x1p-8;
        std::vector<float> again = data[0];
        compress::RoundHalf(h, again);
        CHECK(again == data[0]);
        std::size_t bad = 0;
        for (std::size_t i = 0; i < len; ++i)
          if (std::fabs(data[0][i] - exact[i]) > (n + 1) * unit * magnitude[i] + 1e-7) ++bad;
        CHECK(bad == 0);
      }
}

TEST_CASE("a 16-bit all-reduce sends half the value bytes of a float32 one", "[unit][ring][compress]") {
  const std::size_t len = 40000;
  LocalRing ring(2, Options(4096, false));
  REQUIRE(FirstError(ring.Connect()).ok());
  std::vector<std::vector<float>> data = RandomData(2, len);
  REQUIRE(FirstError(ring.OnEach([&](int r) { return ring.ring(r).AllReduce(data[static_cast<std::size_t>(r)]); })).ok());
  const std::uint64_t f32 = ring.ring(0).value_bytes_sent();
  REQUIRE(FirstError(ring.OnEach([&](int r) -> Status {
            TFD_ASSIGN_OR_RETURN(std::uint64_t id, ring.ring(r).StartAllReduceHalf(data[static_cast<std::size_t>(r)], compress::Half::kFp16));
            return ring.ring(r).Wait(id);
          })).ok());
  // Two members: each sends its half of the buffer in the reduce-scatter and the other half's sum in the all-gather.
  CHECK(f32 == len * 4);
  CHECK(ring.ring(0).value_bytes_sent() - f32 == len * 2);
}

TEST_CASE("an all-gather gives every member every part with its bits unchanged", "[unit][ring][compress]") {
  for (int n : {2, 3, 4}) {
    const std::size_t part = 1001;
    LocalRing ring(n, Options(100, false));
    REQUIRE(FirstError(ring.Connect()).ok());
    std::vector<std::vector<float>> data(static_cast<std::size_t>(n), std::vector<float>(part * static_cast<std::size_t>(n), 0.0f));
    auto bits = [](int r, std::size_t i) { return static_cast<std::uint32_t>(0x7fc00001u + 977u * i + 13u * static_cast<unsigned>(r)); };
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < part; ++i) {
        const std::uint32_t b = bits(r, i);  // NaN payloads and integers: copied, never added
        std::memcpy(&data[static_cast<std::size_t>(r)][static_cast<std::size_t>(r) * part + i], &b, 4);
      }
    REQUIRE(FirstError(ring.OnEach([&](int r) { return ring.ring(r).AllGather(data[static_cast<std::size_t>(r)]); })).ok());
    std::size_t bad = 0;
    for (int r = 0; r < n; ++r)
      for (int owner = 0; owner < n; ++owner)
        for (std::size_t i = 0; i < part; ++i) {
          std::uint32_t got = 0;
          std::memcpy(&got, &data[static_cast<std::size_t>(r)][static_cast<std::size_t>(owner) * part + i], 4);
          bad += got != bits(owner, i);
        }
    INFO(n << " members");
    CHECK(bad == 0);
  }
}

}  // namespace
}  // namespace tfd::testing
