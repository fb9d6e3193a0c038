// update.compression: how a job spec names its gradient compression (docs/config.md, "Gradient compression").
#include <fmt/format.h>

#include "common/config/job.h"
#include "common/config/json_reader.h"

namespace tfd::config {

std::string_view CompressionName(CompressionSpec::Method m) {
  switch (m) {
    case CompressionSpec::Method::kNone: return "none";
    case CompressionSpec::Method::kFp16: return "fp16";
    case CompressionSpec::Method::kBf16: return "bf16";
    case CompressionSpec::Method::kTopK: return "topk";
    case CompressionSpec::Method::kPowerSgd: return "powersgd";
  }
  return "?";
}

namespace {

bool ParseMethod(std::string_view s, CompressionSpec::Method* out) {
  for (auto m : {CompressionSpec::Method::kNone, CompressionSpec::Method::kFp16, CompressionSpec::Method::kBf16,
                 CompressionSpec::Method::kTopK, CompressionSpec::Method::kPowerSgd}) {
    if (s == CompressionName(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

constexpr const char* kExpected = "expected \"none\", \"fp16\", \"bf16\", {\"method\": \"topk\", \"ratio\": R} or {\"method\": \"powersgd\", \"rank\": N}";

}  // namespace

// "compression": "fp16" | {"method": "topk", "ratio": 0.01} | {"method": "powersgd", "rank": 2}
void ReadCompression(ObjectReader& update, bool allreduce, CompressionSpec* out) {
  const nlohmann::json* v = update.Get("compression");
  if (v == nullptr) return;
  const std::string path = update.PathOf("compression");
  std::string method;
  std::string method_path = path;
  if (v->is_string()) {
    method = v->get<std::string>();
  } else if (v->is_object()) {
    ObjectReader o = update.Child(*v, path);
    o.String("method", &method, /*required=*/true);
    method_path = o.PathOf("method");
    if (method == "topk") o.Double("ratio", 0, 1, /*min_exclusive=*/true, &out->ratio);
    if (method == "topk") o.Double("warmup_epochs", 0, 1000, /*min_exclusive=*/false, &out->warmup_epochs);
    if (method == "powersgd") o.Int("rank", 1, 1024, &out->rank);
    if (!o.Finish().ok()) return;
  } else {
    return update.Fail(path, fmt::format("{}, got {}", kExpected, Describe(*v)));
  }
  if (!ParseMethod(method, &out->method)) return update.Fail(method_path, fmt::format("unknown method \"{}\" ({})", method, kExpected));
  if (out->method == CompressionSpec::Method::kPowerSgd && !allreduce)
    update.Fail(method_path, "powersgd needs \"mode\": \"allreduce\" (its two all-reduces per matrix have no ps counterpart in this version)");
}

}  // namespace tfd::config
