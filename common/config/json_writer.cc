#include "common/config/json_writer.h"

namespace tfd::config {
namespace {

// nlohmann writes every scalar and key (and all of a compact text): its escapes, its numbers
// (non-finite as null), and U+FFFD for bytes that are not UTF-8 instead of throwing.
template <class J>
std::string Dump(const J& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, J::error_handler_t::replace);
}

void NewLine(int depth, std::string* out) {
  out->push_back('\n');
  out->append(2 * static_cast<std::size_t>(depth), ' ');
}

template <class J>
void Write(const J& j, int open_levels, int depth, std::string* out) {
  if (!j.is_structured() || j.empty()) {
    *out += Dump(j);
    return;
  }
  const bool open = depth < open_levels;
  out->push_back(j.is_object() ? '{' : '[');
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) out->append(open ? "," : ", ");
    first = false;
    if (open) NewLine(depth + 1, out);
    if (j.is_object()) {
      *out += Dump(J(it.key()));
      out->append(": ");
    }
    Write(it.value(), open_levels, depth + 1, out);
  }
  if (open) NewLine(depth, out);
  out->push_back(j.is_object() ? '}' : ']');
}

}  // namespace

std::string CompactJson(const nlohmann::ordered_json& j) { return Dump(j); }
std::string CompactJson(const nlohmann::json& j) { return Dump(j); }

std::string JsonText(const nlohmann::ordered_json& j, int open_levels) {
  std::string out;
  Write(j, open_levels, 0, &out);
  return out;
}

std::string JsonText(const nlohmann::json& j, int open_levels) {
  std::string out;
  Write(j, open_levels, 0, &out);
  return out;
}

}  // namespace tfd::config
