#include "common/config/json_reader.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace tfd::config {

Result<std::string> ReadTextFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("{}: cannot open {}", path, what));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Describe(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::null: return "null";
    default: {
      std::string s = v.dump();
      if (s.size() > 60) s = s.substr(0, 57) + "...";
      return s;
    }
  }
}

ObjectReader::ObjectReader(const nlohmann::json& j, std::string source, std::string path, Status* status)
    : j_(j), source_(std::move(source)), path_(std::move(path)), status_(status) {
  if (!j_.is_object()) Fail(path_.empty() ? "(top level)" : path_, "expected an object, got " + Describe(j_));
}

bool ObjectReader::Has(std::string_view key) const { return j_.is_object() && j_.contains(key); }

const nlohmann::json* ObjectReader::Get(std::string_view key) {
  known_.emplace(key);
  if (!j_.is_object()) return nullptr;
  auto it = j_.find(key);
  return it == j_.end() ? nullptr : &*it;
}

std::string ObjectReader::PathOf(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

std::string ObjectReader::PathOf(std::string_view key, std::size_t index) const {
  return fmt::format("{}[{}]", PathOf(key), index);
}

void ObjectReader::Fail(const std::string& path, const std::string& what) {
  if (status_->ok()) *status_ = Status::InvalidArgument(fmt::format("{}: {}: {}", source_, path, what));
}

void ObjectReader::Int(std::string_view key, std::int64_t min, std::int64_t max, std::int64_t* out, bool required) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) {
    if (required) Fail(PathOf(key), "missing (expected an integer)");
    return;
  }
  bool integral = v->is_number_integer() || (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
                                             std::abs(v->get<double>()) < 9e15);
  if (!integral) return Fail(PathOf(key), fmt::format("expected an integer in [{}, {}], got {}", min, max, Describe(*v)));
  std::int64_t x = v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)
                       ? INT64_MAX
                       : (v->is_number_float() ? static_cast<std::int64_t>(v->get<double>()) : v->get<std::int64_t>());
  if (x < min || x > max) return Fail(PathOf(key), fmt::format("expected an integer in [{}, {}], got {}", min, max, Describe(*v)));
  *out = x;
}

void ObjectReader::Int(std::string_view key, int min, int max, int* out, bool required) {
  std::int64_t x = *out;
  Int(key, std::int64_t{min}, std::int64_t{max}, &x, required);
  *out = static_cast<int>(x);
}

void ObjectReader::Double(std::string_view key, double min, double max, bool min_exclusive, double* out, bool required) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) {
    if (required) Fail(PathOf(key), "missing (expected a number)");
    return;
  }
  std::string range = fmt::format("{}{}, {}]", min_exclusive ? "(" : "[", min, max);
  if (!v->is_number()) return Fail(PathOf(key), fmt::format("expected a number in {}, got {}", range, Describe(*v)));
  double x = v->get<double>();
  if (!(min_exclusive ? x > min : x >= min) || !(x <= max))
    return Fail(PathOf(key), fmt::format("expected a number in {}, got {}", range, Describe(*v)));
  *out = x;
}

void ObjectReader::String(std::string_view key, std::string* out, bool required) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) {
    if (required) Fail(PathOf(key), "missing (expected a string)");
    return;
  }
  if (!v->is_string()) return Fail(PathOf(key), "expected a string, got " + Describe(*v));
  *out = v->get<std::string>();
}

void ObjectReader::Bool(std::string_view key, bool* out) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return;
  if (!v->is_boolean()) return Fail(PathOf(key), "expected true or false, got " + Describe(*v));
  *out = v->get<bool>();
}

Status ObjectReader::Finish() {
  if (status_->ok() && j_.is_object()) {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (!known_.contains(it.key())) {
        std::vector<std::string> names(known_.begin(), known_.end());
        Fail(PathOf(it.key()), fmt::format("unknown field (expected one of: {})", fmt::join(names, ", ")));
        break;
      }
    }
  }
  return *status_;
}

}  // namespace tfd::config
