#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "common/base/status.h"
#include "common/transport/auth.h"
#include "common/wire/frame.h"

namespace tfd::transport {

// The checks every frame read from a peer passes, whoever reads it: Connection's read loop and a
// ring Link (collective/link.cc) call these, in this order, so both refuse the same frames with
// the same reasons. Each message starts with `peer`. No socket and no state of their own: the
// caller says what the connection expects.

// The 28 bytes of a frame's header: Corruption "PEER: <why>" for any DecodeHeader refuses (magic,
// version, type, flags, reserved bytes, a payload longer than `limit`).
Result<wire::FrameHeader> CheckFrameHeader(std::span<const std::byte, wire::kFrameHeaderBytes> raw, std::uint32_t limit,
                                           std::string_view peer);

// Whether the frame carries a MAC as the connection expects: `mac_expected` once both sides proved
// the cluster token. PermissionDenied "PEER sent a MAC'd TYPE frame <unexpected>" (`unexpected`
// says why none was: "before authenticating", "on a connection without a token"), or "PEER sent a
// TYPE frame without a MAC on an authenticated connection".
Status CheckMacFlag(const wire::FrameHeader& header, bool mac_expected, std::string_view peer, std::string_view unexpected);

// The frame once its payload (in `payload_parts`, in order) and MAC are in. With `mac` (the
// connection's receiving MAC), PermissionDenied unless `tag` is the MAC of frame number `seq` over
// the header bytes `raw_header` and the payload: the frame was altered, injected or replayed.
// Without, Corruption "PEER: ..." unless the payload's CRC-32C is the header's.
Status CheckFrameBody(const wire::FrameHeader& header, std::span<const std::byte> raw_header,
                      std::span<const std::span<const std::byte>> payload_parts, FrameMac* mac, std::uint64_t seq,
                      std::span<const std::byte, wire::kMacBytes> tag, std::string_view peer);

}  // namespace tfd::transport
