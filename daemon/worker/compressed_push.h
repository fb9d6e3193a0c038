#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "common/wire/compressed_messages.h"

namespace tfd::worker {

// A PUSH_COMPRESSED of one ps's slices of the gradient (`slices`, in the ps's order), encoded as
// `encoding` says: fp16/bf16 (every value as 16 bits), or sparse (the nonzero values with their
// index in the ps's shard; top-k has zeroed the rest). The frame owns its encoded values and keeps
// `keepalive` too. *bytes: the gradient's bytes in the frame (values and indices).
// The optional sections (wire::PushCompressed): a save the chief announces, and this worker's error
// feedback deposited for one (its slices of the residual, in the ps's order).
struct CompressedExtras {
  std::uint64_t save_request = 0;
  std::uint64_t deposit_request = 0;
  std::vector<std::span<const float>> deposit;
};
wire::OutFrame EncodeCompressedPush(const wire::Push& push, wire::GradEncoding encoding, std::span<const std::span<const float>> slices,
                                    const CompressedExtras& extras, std::shared_ptr<const void> keepalive, std::size_t* bytes);

}  // namespace tfd::worker
