#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/ckpt/checkpoint.h"

namespace tfd::ckpt {

// The checkpoint file's bytes, as docs/checkpoints.md specifies them: a file header, then
// META, OPTIMIZER, CURSORS, an optional CARD, an optional EARLY_STOPPING, one TENSOR per variable and END, each record with its own CRC-32C.
// Pure functions over memory: no files, no logging; safe from any thread.

inline constexpr std::uint32_t kFileMagic = 0x4B444654;  // the bytes 'T' 'F' 'D' 'K'
inline constexpr std::uint16_t kFormatVersion = 1;
inline constexpr std::size_t kMaxNameBytes = 1024;
inline constexpr std::size_t kMaxRank = 8;
inline constexpr std::size_t kMaxSlots = 8;
inline constexpr std::uint32_t kMaxTensors = 1u << 20;
inline constexpr std::uint32_t kMaxCursors = 1u << 16;
inline constexpr std::size_t kMaxCardBytes = 64u << 20;  // the model card's JSON (a standardized model's per-feature statistics)
// A record's payload is at most 4 GiB (its u32 length): the FEEDBACK record's floats, every
// worker's residual and the shared part, must stay under this many (the header's bytes aside).
inline constexpr std::uint64_t kMaxFeedbackFloats = (std::uint64_t{0xffffffffu} - 64) / 4;
// META's optional flags word (written only when a flag is set, so other files keep the old layout).
inline constexpr std::uint32_t kMetaFlagFinal = 1u << 0;

// The file's bytes. InvalidArgument when the checkpoint is inconsistent (a shape that does not
// match the values, slots that do not match the optimizer's names, a name over kMaxNameBytes).
Result<std::vector<std::byte>> Serialize(const Checkpoint& ckpt);
// Parses a whole file's bytes. Corruption with one line naming `source`, the record and the fault
// ("ckpt-000000000100.tfdckpt: record 4 (TENSOR): CRC 0x... does not match 0x..."). Every length
// is checked against the bytes that remain before anything is allocated.
Result<Checkpoint> Parse(std::span<const std::byte> bytes, std::string_view source = "checkpoint");

}  // namespace tfd::ckpt
