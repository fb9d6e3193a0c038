// The .npy reader: the header parser on any bytes, then the features and labels of whatever
// parses (converted, reordered, checked for NaN), as ReadNpz reads an archive's members.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/data/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> bytes(data, size);
  auto header = tfd::data::ParseNpyHeader(bytes, size, "fuzz.npy");
  if (!header.ok()) return 0;
  tfd::data::Examples e;
  if (!tfd::data::NpyFeatures(std::vector<std::uint8_t>(bytes.begin(), bytes.end()), "fuzz.npy", &e).ok()) return 0;
  tfd::config::DataSpec spec;
  (void)tfd::data::NpyLabels(spec, bytes, "fuzz.npy", e.size, "fuzz.npy", &e);
  spec.task = tfd::config::DataSpec::Task::kRegression;
  (void)tfd::data::NpyLabels(spec, bytes, "fuzz.npy", e.size, "fuzz.npy", &e);
  return 0;
}
