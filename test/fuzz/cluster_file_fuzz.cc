// tfctl's cluster file parser, and its event-line parser on the same bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/config/cluster_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)tfd::config::ParseClusterFile(text, "cluster.json");
  (void)tfd::config::ParseEvent(text);
  return 0;
}
