// TF_CONFIG parsing and validation.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/config/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = tfd::config::ParseTfConfig(text, "TF_CONFIG");
  if (config.ok()) (void)config->cluster.Id();
  return 0;
}
