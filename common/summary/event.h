#pragma once
// The protobuf messages of a TensorBoard event file, encoded by hand (field numbers from
// tensorflow/core/util/event.proto and tensorboard/compat/proto/{summary,histogram}.proto):
//   Event          1 wall_time double, 2 step int64, 3 file_version string, 5 summary Summary
//   Summary        1 value repeated Value
//   Summary.Value  1 tag string, 2 simple_value float, 5 histo HistogramProto
//   HistogramProto 1 min, 2 max, 3 num, 4 sum, 5 sum_squares double; 6 bucket_limit, 7 bucket packed double
// Zero-valued scalar fields are left out, as proto3 encoders do.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tfd::summary {

inline constexpr std::string_view kFileVersion = "brain.Event:2";

// A histogram as TensorFlow's histogram.cc builds it: exponential buckets (limits ±1e-12 * 1.1^k
// up to 1e20, 0, and ±DBL_MAX at the edges); bucket i counts the values v with
// bucket_limit[i-1] <= v < bucket_limit[i]. Runs of empty buckets are merged into one, so at
// most kMaxBuckets are kept, whatever the number of values.
struct Histogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;
};
inline constexpr std::size_t kMaxBuckets = 1600;

// The histogram of the finite values among `values` (NaN and infinities are left out).
Histogram MakeHistogram(std::span<const float> values);

struct Value {
  std::string tag;
  std::variant<float, Histogram> value;
};

// The first record of every event file: wall_time and file_version "brain.Event:2".
std::string EncodeFileVersionEvent(double wall_time);
// An Event whose summary holds `values`, at `step`.
std::string EncodeSummaryEvent(double wall_time, std::int64_t step, std::span<const Value> values);

}  // namespace tfd::summary
