#pragma once

// The one writer of JSON text for tfd and tfctl (DESIGN §2: JSON is built with nlohmann, never
// concatenated): files of a run folder, JSON lines, TF_CONFIG. Readers parse what it writes with
// nlohmann::json::parse.
//
// What it writes is valid JSON whatever the value holds, and it never throws:
//   - a double that is NaN or infinite is written as null (JSON has no NaN; nlohmann's own choice),
//     so every reader of a number that may be non-finite (a loss, an accuracy, a metric) takes null
//     as "no value" rather than as an error;
//   - bytes of a string that are not UTF-8 (a path, a log line) are written as U+FFFD.
// Objects are written in the order their members were added (nlohmann::ordered_json); a
// nlohmann::json object, whose members are sorted, in sorted order. Thread-safe (pure functions).

#include <climits>
#include <string>

#include <nlohmann/json.hpp>

namespace tfd::config {

// No spaces at all: {"a":1,"b":[2,3]} (nlohmann's dump()). For TF_CONFIG (an environment
// variable) and HTTP answers.
std::string CompactJson(const nlohmann::ordered_json& j);
std::string CompactJson(const nlohmann::json& j);

inline constexpr int kAllLevels = INT_MAX;

// A space after each ':' and ',': {"a": 1, "b": [2, 3]}. The outermost `open_levels` levels of
// arrays and objects put each member on a line of its own, indented two spaces a level; deeper
// ones stay on one line. 0: one line (a JSON-lines record); 2 on {"tasks": [{...}, {...}]} gives
//   {
//     "tasks": [
//       {"task": "ps:0", ...},
//       {"task": "worker:0", ...}
//     ]
//   }
// and kAllLevels is nlohmann's dump(2). Empty arrays and objects are [] and {}. No final newline.
std::string JsonText(const nlohmann::ordered_json& j, int open_levels = 0);
std::string JsonText(const nlohmann::json& j, int open_levels = 0);

}  // namespace tfd::config
