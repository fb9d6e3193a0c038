// Checkpoint parsing, on the input as it is and on a copy whose record CRCs are recomputed (so
// mutations reach the record payload parsers instead of stopping at the CRC check). A checkpoint
// that parses must serialize back to the same bytes, and its cursors must re-shard onto another
// worker count.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "common/ckpt/format.h"
#include "common/ckpt/reshard.h"
#include "common/wire/crc32c.h"

namespace {

void Check(std::span<const std::byte> bytes) {
  auto ckpt = tfd::ckpt::Parse(bytes, "fuzz.tfdckpt");
  if (!ckpt.ok()) return;
  auto again = tfd::ckpt::Serialize(*ckpt);
  if (!again.ok() || again->size() != bytes.size() || std::memcmp(again->data(), bytes.data(), bytes.size()) != 0) std::abort();
  if (ckpt->num_workers > 0) (void)tfd::ckpt::ReshardCursors(*ckpt, ckpt->num_workers % 7 + 1);
}

// Rewrites each record's CRC (type u16 | reserved u16 | length u32 | payload | crc u32, after an
// 8-byte file header) for as many whole records as the bytes hold.
void FixCrcs(std::vector<std::byte>* b) {
  std::size_t pos = 8;
  while (pos + 8 <= b->size()) {
    std::uint32_t len = 0;
    std::memcpy(&len, b->data() + pos + 4, 4);
    if (len > b->size() - pos - 8 || b->size() - pos - 8 - len < 4) return;
    const std::uint32_t crc = tfd::wire::Crc32c(std::span<const std::byte>(*b).subspan(pos, 8 + len));
    std::memcpy(b->data() + pos + 8 + len, &crc, 4);
    pos += 8 + len + 4;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span<const std::uint8_t>(data, size));
  Check(bytes);
  std::vector<std::byte> fixed(bytes.begin(), bytes.end());
  FixCrcs(&fixed);
  Check(fixed);
  return 0;
}
