#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "common/wire/compressed_messages.h"

namespace tfd::worker {

// A PUSH_COMPRESSED of one ps's slices of the gradient (`slices`, in the ps's order), encoded as
// `encoding` says: fp16/bf16 (every value as 16 bits), or sparse (the nonzero values with their
// index in the ps's shard; top-k has zeroed the rest). The frame owns its encoded values and keeps
// `keepalive` too. *bytes: the gradient's bytes in the frame (values and indices).
wire::OutFrame EncodeCompressedPush(const wire::Push& push, wire::GradEncoding encoding, std::span<const std::span<const float>> slices,
                                    std::shared_ptr<const void> keepalive, std::size_t* bytes);

}  // namespace tfd::worker
