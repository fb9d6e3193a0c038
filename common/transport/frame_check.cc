#include "common/transport/frame_check.h"

#include <array>

#include <fmt/format.h>

namespace tfd::transport {

Result<wire::FrameHeader> CheckFrameHeader(std::span<const std::byte, wire::kFrameHeaderBytes> raw, std::uint32_t limit,
                                           std::string_view peer) {
  Result<wire::FrameHeader> header = wire::DecodeHeader(raw, limit);
  if (!header.ok()) return Status::Corruption(fmt::format("{}: {}", peer, header.status().message()));
  return header;
}

Status CheckMacFlag(const wire::FrameHeader& header, bool mac_expected, std::string_view peer, std::string_view unexpected) {
  const bool has_mac = (header.flags & wire::kFlagMac) != 0;
  if (has_mac == mac_expected) return Status::Ok();
  if (has_mac)
    return Status::PermissionDenied(fmt::format("{} sent a MAC'd {} frame {}", peer, wire::MessageTypeName(header.type), unexpected));
  return Status::PermissionDenied(
      fmt::format("{} sent a {} frame without a MAC on an authenticated connection", peer, wire::MessageTypeName(header.type)));
}

Status CheckFrameBody(const wire::FrameHeader& header, std::span<const std::byte> raw_header,
                      std::span<const std::span<const std::byte>> payload_parts, FrameMac* mac, std::uint64_t seq,
                      std::span<const std::byte, wire::kMacBytes> tag, std::string_view peer) {
  if (mac == nullptr) {
    if (Status ok = wire::VerifyPayloadParts(header, payload_parts); !ok.ok()) return Status::Corruption(fmt::format("{}: {}", peer, ok.message()));
    return Status::Ok();
  }
  // The header, then the payload's parts (one to three in every caller).
  std::array<std::span<const std::byte>, 4> tagged;
  if (payload_parts.size() + 1 > tagged.size()) return Status::Internal("CheckFrameBody: more than 3 payload parts");
  tagged[0] = raw_header;
  for (std::size_t i = 0; i < payload_parts.size(); ++i) tagged[i + 1] = payload_parts[i];
  if (!mac->Verify(seq, std::span<const std::span<const std::byte>>(tagged.data(), payload_parts.size() + 1), tag)) {
    return Status::PermissionDenied(fmt::format(
        "{}: the MAC of a {} frame does not verify: the frame was altered, injected or replayed on the way", peer,
        wire::MessageTypeName(header.type)));
  }
  return Status::Ok();
}

}  // namespace tfd::transport
