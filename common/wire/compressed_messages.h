#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/base/status.h"
#include "common/wire/frame.h"
#include "common/wire/messages.h"

namespace tfd::wire {

// The frames of gradient compression (docs/protocol.md, "Compressed gradients"; the job's
// update.compression). Decode returns Corruption on any short, oversize, out-of-range or trailing
// field: every count is bounded by the payload, every index by the dense length it names.

// How a compressed gradient's values travel.
enum class GradEncoding : std::uint8_t { kFp16 = 1, kBf16 = 2, kSparse = 3 };

// PUSH_COMPRESSED: PUSH's fields with the gradient encoded. fp16/bf16: `count` 16-bit values;
// sparse: `pairs` (<= count) u32 indices, strictly increasing and each below `count`, then as many
// floats (every other value is 0).
struct PushCompressed {
  Push push;  // its fields and epoch; push.grads is unused
  GradEncoding encoding = GradEncoding::kFp16;
  std::uint64_t count = 0;             // the dense gradient's floats (the ps's shard)
  std::span<const std::byte> values;   // fp16/bf16: count x 2 bytes; sparse: pairs x 4 (floats)
  std::span<const std::byte> indices;  // sparse: pairs x 4 (u32); empty otherwise
  // Optional, after the epoch, in this order (docs/checkpoints.md, "Error feedback"):
  // the chief announces a save after this step, whose error feedback the ps asks the other
  // workers for (tag 2; 0: none);
  std::uint64_t save_request = 0;
  // a worker's error feedback for the save `deposit_request` names: count floats, this shard's
  // part of its residual when the ps asked (tag 3; deposit_request 0: none).
  std::uint64_t deposit_request = 0;
  std::span<const std::byte> deposit;
};
// `values` and `indices` are the tail (kept alive by the caller until sent, or by `keepalive`).
OutFrame Encode(const PushCompressed& m, std::shared_ptr<const void> keepalive);
Status Decode(std::span<const std::byte> payload, PushCompressed* m);

// RING_CHUNK16: RING_CHUNK's fields and count, then count 16-bit values (which 16-bit format is
// the collective's, agreed by the job; the receiver's schedule checks the count). `values` holds
// count x 2 bytes.
OutFrame EncodeRingChunk16(const RingChunk& m, std::span<const std::uint16_t> values, std::shared_ptr<const void> keepalive);
Status DecodeRingChunk16(std::span<const std::byte> payload, RingChunk* m);

}  // namespace tfd::wire
