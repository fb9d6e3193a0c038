// Checkpoint parsing. A checkpoint that parses must serialize back to the same bytes, and its
// cursors must re-shard onto another worker count without trouble.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "common/ckpt/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span<const std::uint8_t>(data, size));
  auto ckpt = tfd::ckpt::Parse(bytes, "fuzz.tfdckpt");
  if (!ckpt.ok()) return 0;
  auto again = tfd::ckpt::Serialize(*ckpt);
  if (!again.ok() || again->size() != size || std::memcmp(again->data(), data, size) != 0) std::abort();
  if (ckpt->num_workers > 0) (void)tfd::ckpt::ReshardCursors(*ckpt, ckpt->num_workers % 7 + 1);
  return 0;
}
