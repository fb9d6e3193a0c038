#include "common/summary/event.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

namespace tfd::summary {
namespace {

enum WireType : std::uint8_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void Varint(std::uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void Tag(int field, WireType type, std::string* out) { Varint((static_cast<std::uint64_t>(field) << 3) | type, out); }

void Double(int field, double v, std::string* out) {
  if (v == 0) return;
  Tag(field, kFixed64, out);
  out->append(reinterpret_cast<const char*>(&v), 8);
}

void Bytes(int field, std::string_view b, std::string* out) {
  Tag(field, kLengthDelimited, out);
  Varint(b.size(), out);
  out->append(b);
}

void PackedDoubles(int field, const std::vector<double>& v, std::string* out) {
  if (v.empty()) return;
  Tag(field, kLengthDelimited, out);
  Varint(v.size() * 8, out);
  out->append(reinterpret_cast<const char*>(v.data()), v.size() * 8);
}

std::string EncodeHistogram(const Histogram& h) {
  std::string out;
  Double(1, h.min, &out);
  Double(2, h.max, &out);
  Double(3, h.num, &out);
  Double(4, h.sum, &out);
  Double(5, h.sum_squares, &out);
  PackedDoubles(6, h.bucket_limit, &out);
  PackedDoubles(7, h.bucket, &out);
  return out;
}

std::string EncodeValue(const Value& v) {
  std::string out;
  Bytes(1, v.tag, &out);
  if (const float* f = std::get_if<float>(&v.value)) {
    Tag(2, kFixed32, &out);
    out.append(reinterpret_cast<const char*>(f), 4);
  } else {
    Bytes(5, EncodeHistogram(std::get<Histogram>(v.value)), &out);
  }
  return out;
}

// histogram.cc's default limits: -DBL_MAX, -1e20 ... -1e-12, 0, 1e-12 ... 1e20, DBL_MAX.
std::vector<double> DefaultLimits() {
  std::vector<double> pos;
  for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) pos.push_back(v);
  pos.push_back(DBL_MAX);
  std::vector<double> limits;
  limits.reserve(2 * pos.size() + 1);
  for (auto it = pos.rbegin(); it != pos.rend(); ++it) limits.push_back(-*it);
  limits.push_back(0.0);
  limits.insert(limits.end(), pos.begin(), pos.end());
  return limits;
}

}  // namespace

Histogram MakeHistogram(std::span<const float> values) {
  static const std::vector<double> kLimits = DefaultLimits();  // immutable after first use
  std::vector<double> counts(kLimits.size(), 0.0);
  Histogram h;
  h.min = DBL_MAX;
  h.max = -DBL_MAX;
  for (float f : values) {
    if (!std::isfinite(f)) continue;
    const double v = f;
    const std::size_t b = std::min<std::size_t>(std::upper_bound(kLimits.begin(), kLimits.end(), v) - kLimits.begin(), kLimits.size() - 1);
    counts[b] += 1;
    h.min = std::min(h.min, v);
    h.max = std::max(h.max, v);
    h.num += 1;
    h.sum += v;
    h.sum_squares += v * v;
  }
  if (h.num == 0) h.min = h.max = 0;
  // As histogram.cc's EncodeToProto: a run of empty buckets becomes one, with the run's last limit.
  for (std::size_t i = 0; i < counts.size();) {
    double end = kLimits[i], count = counts[i];
    ++i;
    if (count <= 0) {
      while (i < counts.size() && counts[i] <= 0) end = kLimits[i++];
    }
    h.bucket_limit.push_back(end);
    h.bucket.push_back(count);
  }
  return h;
}

std::string EncodeFileVersionEvent(double wall_time) {
  std::string out;
  Double(1, wall_time, &out);
  Bytes(3, kFileVersion, &out);
  return out;
}

std::string EncodeSummaryEvent(double wall_time, std::int64_t step, std::span<const Value> values) {
  std::string summary;
  for (const Value& v : values) Bytes(1, EncodeValue(v), &summary);
  std::string out;
  Double(1, wall_time, &out);
  if (step != 0) {
    Tag(2, kVarint, &out);
    Varint(static_cast<std::uint64_t>(step), &out);
  }
  Bytes(5, summary, &out);
  return out;
}

}  // namespace tfd::summary
