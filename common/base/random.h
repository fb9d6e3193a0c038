#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace tfd {

// A seeded generator whose every output is fixed by the C++ standard and this header (mt19937_64
// plus our own bounded-integer and normal transforms, not the library's distributions), so a seed
// gives the same shuffles and initial weights with any standard library.
class Rng {
 public:
  // Distinct (seed, stream) pairs give unrelated sequences.
  explicit Rng(std::uint64_t seed, std::uint64_t stream = 0) : gen_(Mix(seed) ^ Mix(stream + 0x9e3779b97f4a7c15ULL)) {}

  std::uint64_t Next() { return gen_(); }
  // Uniform in [0, n), n > 0 (Lemire's multiply-shift; bias below 2^-32 for n < 2^32).
  std::uint64_t Below(std::uint64_t n) {
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }
  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Standard normal (Box-Muller, one value per call).
  double Normal() {
    double u1 = 1.0 - Uniform();  // (0, 1]
    double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
  }

 private:
  static std::uint64_t Mix(std::uint64_t x) {  // splitmix64 finaliser
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  std::mt19937_64 gen_;
};

}  // namespace tfd
