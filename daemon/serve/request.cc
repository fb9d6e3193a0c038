#include "daemon/serve/request.h"

#include <cmath>
#include <iterator>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/base/logging.h"

namespace tfd::serve {
namespace {

using nlohmann::json;

std::string ShapeText(const std::vector<std::size_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ", ")); }

std::string ExpectedText(const Signature& sig) {
  if (sig.height == 1 && sig.width == 1 && sig.channels == 1) return "1 number";
  std::string nested = sig.height == 1 ? "" : fmt::format(" (or nested [{}, {}, {}])", sig.height, sig.width, sig.channels);
  return fmt::format("{} numbers{}", sig.features(), nested);
}

// The nesting of `v` along its first elements: [] for a number, [3] for [1, 2, 3], [2, 2] for [[1, 2], [3, 4]].
std::vector<std::size_t> ShapeOf(const json& v) {
  std::vector<std::size_t> dims;
  const json* at = &v;
  while (at->is_array() && !at->empty()) {
    dims.push_back(at->size());
    at = &(*at)[0];
  }
  if (at->is_array()) dims.push_back(0);
  return dims;
}

bool ShapeAccepted(const std::vector<std::size_t>& dims, const Signature& sig) {
  const auto n = static_cast<std::size_t>(sig.features());
  const auto h = static_cast<std::size_t>(sig.height), w = static_cast<std::size_t>(sig.width), c = static_cast<std::size_t>(sig.channels);
  if (dims.size() == 1) return dims[0] == n;
  if (dims.size() == 3) return dims[0] == h && dims[1] == w && dims[2] == c;
  return dims.size() == 2 && c == 1 && dims[0] == h && dims[1] == w;
}

const char* KindName(const json& v) {
  switch (v.type()) {
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "a list";
    default: return "a number";
  }
}

// A string at value `*index`: its id when that value is a categorical feature's.
Status Category(const std::string& text, const Signature& sig, std::string_view where, std::size_t* index, std::vector<float>* out) {
  for (const Signature::CategoricalInput& c : sig.categorical) {
    if (c.feature != static_cast<std::int64_t>(*index)) continue;
    auto it = c.ids.find(text);
    out->push_back(it == c.ids.end() ? 0.0f : it->second);
    ++*index;
    return Status::Ok();
  }
  return Status::InvalidArgument(fmt::format("{}: value {} is a string, expected a number{}", where, *index,
                                             sig.categorical.empty() ? "" : " (only the model's categorical features take strings)"));
}

// Appends the leaves of `v` (already known to have shape dims[depth..]) to `out`; the message names
// `where` and the first leaf that is not a finite number, or a list of another length.
Status Flatten(const json& v, const std::vector<std::size_t>& dims, std::size_t depth, const Signature& sig, std::string_view where,
               std::size_t* index, std::vector<float>* out) {
  if (depth == dims.size()) {
    if (v.is_string()) return Category(v.get_ref<const std::string&>(), sig, where, index, out);
    if (!v.is_number())
      return Status::InvalidArgument(fmt::format("{}: value {} is {}, expected a number", where, *index, KindName(v)));
    const float f = static_cast<float>(v.get<double>());
    if (!std::isfinite(f)) return Status::InvalidArgument(fmt::format("{}: value {} is not a finite float32 ({})", where, *index, v.dump()));
    out->push_back(f);
    ++*index;
    return Status::Ok();
  }
  if (!v.is_array() || v.size() != dims[depth])
    return Status::InvalidArgument(fmt::format("{}: not a rectangular list: expected {} elements at depth {}, got {}", where, dims[depth], depth,
                                               v.is_array() ? fmt::format("{}", v.size()) : std::string(KindName(v))));
  for (const json& e : v) TFD_RETURN_IF_ERROR(Flatten(e, dims, depth + 1, sig, where, index, out));
  return Status::Ok();
}

// One example, a list nested to its shape or {"input": list}, appended to `out`.
Status ParseInstance(const json& v, const Signature& sig, std::string_view where, std::vector<float>* out) {
  const json* value = &v;
  if (v.is_object()) {
    for (const auto& [key, unused] : v.items())
      if (key != kInputName) return Status::InvalidArgument(fmt::format("{}: unknown input \"{}\" (the signature's input is \"{}\")", where, key, kInputName));
    if (!v.contains(kInputName)) return Status::InvalidArgument(fmt::format("{}: an empty object, expected \"{}\"", where, kInputName));
    value = &v[std::string(kInputName)];
  }
  const std::vector<std::size_t> dims = ShapeOf(*value);
  if (!value->is_number() || sig.features() != 1) {  // a one-feature model's instance may be a bare number
    if (!value->is_array()) return Status::InvalidArgument(fmt::format("{}: {}, expected {}", where, KindName(*value), ExpectedText(sig)));
    if (!ShapeAccepted(dims, sig))
      return Status::InvalidArgument(fmt::format("{}: expected {}, got shape {}", where, ExpectedText(sig), ShapeText(dims)));
  }
  std::size_t index = 0;
  const std::size_t before = out->size();
  TFD_RETURN_IF_ERROR(Flatten(*value, dims, 0, sig, where, &index, out));
  if (static_cast<std::int64_t>(out->size() - before) != sig.features())  // ShapeOf follows first elements only
    return Status::InvalidArgument(fmt::format("{}: expected {}, got {}", where, ExpectedText(sig), out->size() - before));
  return Status::Ok();
}

Status ParseRows(const json& list, const Signature& sig, std::string_view what, PredictRequest* out) {
  if (!list.is_array()) return Status::InvalidArgument(fmt::format("\"{}\" is {}, expected a list of examples", what, KindName(list)));
  if (list.empty()) return Status::InvalidArgument(fmt::format("\"{}\" is an empty list, expected at least one example", what));
  if (std::ssize(list) > sig.max_instances)
    return Status::InvalidArgument(fmt::format("\"{}\" holds {} examples, at most {} per request (--batch-max)", what, list.size(), sig.max_instances));
  out->values.reserve(list.size() * static_cast<std::size_t>(sig.features()));
  const char* noun = out->columnar ? "inputs" : "instance";
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string where = out->columnar ? fmt::format("{}[{}]", noun, i) : fmt::format("{} {}", noun, i);
    TFD_RETURN_IF_ERROR(ParseInstance(list[i], sig, where, &out->values));
  }
  out->rows = static_cast<int>(list.size());
  return Status::Ok();
}

void AppendFloats(std::span<const float> v, fmt::memory_buffer* out) {
  out->push_back('[');
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out->push_back(',');
    fmt::format_to(std::back_inserter(*out), "{}", v[i]);
  }
  out->push_back(']');
}

// rows x width floats as [[...], ...].
void AppendMatrix(std::span<const float> v, int rows, int width, fmt::memory_buffer* out) {
  out->push_back('[');
  for (int r = 0; r < rows; ++r) {
    if (r) out->push_back(',');
    AppendFloats(v.subspan(static_cast<std::size_t>(r) * width, width), out);
  }
  out->push_back(']');
}

}  // namespace

Result<PredictRequest> ParsePredict(std::string_view body, const Signature& sig) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("the body is not JSON (expected {\"instances\": [...]} or {\"inputs\": ...})");
  if (!j.is_object()) return Status::InvalidArgument(fmt::format("the body is {}, expected an object {{\"instances\": [...]}}", KindName(j)));
  for (const auto& [key, unused] : j.items())
    if (key != "instances" && key != "inputs" && key != "signature_name")
      return Status::InvalidArgument(fmt::format("unknown field \"{}\" (expected \"instances\" or \"inputs\")", key));
  if (j.contains("signature_name") && j["signature_name"] != "serving_default")
    return Status::InvalidArgument(fmt::format("signature_name {}: this model has only \"serving_default\"", j["signature_name"].dump()));
  const bool rows = j.contains("instances"), columns = j.contains("inputs");
  if (rows == columns) return Status::InvalidArgument("expected exactly one of \"instances\" (rows) and \"inputs\" (columns)");
  PredictRequest out;
  out.columnar = columns;
  if (rows) {
    TFD_RETURN_IF_ERROR(ParseRows(j["instances"], sig, "instances", &out));
    return out;
  }
  const json& inputs = j["inputs"];
  if (inputs.is_object()) {
    for (const auto& [key, unused] : inputs.items())
      if (key != kInputName) return Status::InvalidArgument(fmt::format("inputs: unknown input \"{}\" (the signature's input is \"{}\")", key, kInputName));
    if (!inputs.contains(kInputName)) return Status::InvalidArgument(fmt::format("inputs: an empty object, expected \"{}\"", kInputName));
    TFD_RETURN_IF_ERROR(ParseRows(inputs[std::string(kInputName)], sig, "inputs", &out));
  } else {
    TFD_RETURN_IF_ERROR(ParseRows(inputs, sig, "inputs", &out));
  }
  return out;
}

std::string FormatPredict(const PredictRequest& request, const Signature& sig, std::span<const float> outputs,
                          std::span<const float> probabilities) {
  fmt::memory_buffer out;
  auto put = [&out](std::string_view s) { out.append(s.data(), s.data() + s.size()); };
  const int n = request.rows, k = sig.outputs;
  if (sig.regression) {
    put(request.columnar ? "{\"outputs\":" : "{\"predictions\":");
    AppendMatrix(outputs, n, k, &out);
  } else if (request.columnar) {
    put("{\"outputs\":{\"logits\":");
    AppendMatrix(outputs, n, k, &out);
    put(",\"probabilities\":");
    AppendMatrix(probabilities, n, k, &out);
    put("}");
  } else {
    put("{\"predictions\":[");
    for (int r = 0; r < n; ++r) {
      put(r ? ",{\"logits\":" : "{\"logits\":");
      AppendFloats(outputs.subspan(static_cast<std::size_t>(r) * k, k), &out);
      put(",\"probabilities\":");
      AppendFloats(probabilities.subspan(static_cast<std::size_t>(r) * k, k), &out);
      put("}");
    }
    put("]");
  }
  put("}\n");
  return fmt::to_string(out);
}

std::string ErrorJson(std::string_view message) {
  std::string out = "{\"error\":";
  AppendJsonString(message, &out);
  out += "}\n";
  return out;
}

}  // namespace tfd::serve
