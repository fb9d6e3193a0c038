// Job spec parsing and validation.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/config/job.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)tfd::config::ParseJobSpec(text, "job.json");
  return 0;
}
