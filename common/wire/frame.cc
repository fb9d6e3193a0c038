#include "common/wire/frame.h"

#include <array>
#include <cstring>

#include <fmt/format.h>

#include "common/wire/crc32c.h"

namespace tfd::wire {
namespace {

template <typename T>
void Put(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);  // little-endian host (checked in bytes.h)
}
template <typename T>
T Get(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

bool IsKnownType(std::uint16_t t) {
  switch (static_cast<MessageType>(t)) {
    case MessageType::kHello:
    case MessageType::kWelcome:
    case MessageType::kInit:
    case MessageType::kWaitReady:
    case MessageType::kReady:
    case MessageType::kAuthHello:
    case MessageType::kAuthChallenge:
    case MessageType::kAuthProof:
    case MessageType::kPull:
    case MessageType::kParams:
    case MessageType::kPush:
    case MessageType::kPushAck:
    case MessageType::kStatePull:
    case MessageType::kState:
    case MessageType::kPushCompressed:
    case MessageType::kDone:
    case MessageType::kDoneAck:
    case MessageType::kHeartbeat:
    case MessageType::kError:
    case MessageType::kRingChunk:
    case MessageType::kPipeActivation:
    case MessageType::kPipeGradient:
    case MessageType::kRingChunkShm:
    case MessageType::kRingShmOffer:
    case MessageType::kRingShmAccept:
    case MessageType::kRingSlotFree:
    case MessageType::kRingJoin:
    case MessageType::kRingJoinAccept:
    case MessageType::kRingChunk16:
    case MessageType::kTrialRequest:
    case MessageType::kTrialAssign:
    case MessageType::kTrialEpoch:
    case MessageType::kTrialControl:
    case MessageType::kTrialEnd:
    case MessageType::kTrialPredictions:
    case MessageType::kTrialCheckpoint:
      return true;
  }
  return false;
}

const char* MessageTypeName(MessageType t) {
  switch (t) {
    case MessageType::kHello: return "HELLO";
    case MessageType::kWelcome: return "WELCOME";
    case MessageType::kInit: return "INIT";
    case MessageType::kWaitReady: return "WAIT_READY";
    case MessageType::kReady: return "READY";
    case MessageType::kAuthHello: return "AUTH_HELLO";
    case MessageType::kAuthChallenge: return "AUTH_CHALLENGE";
    case MessageType::kAuthProof: return "AUTH_PROOF";
    case MessageType::kPull: return "PULL";
    case MessageType::kParams: return "PARAMS";
    case MessageType::kPush: return "PUSH";
    case MessageType::kPushAck: return "PUSH_ACK";
    case MessageType::kStatePull: return "STATE_PULL";
    case MessageType::kState: return "STATE";
    case MessageType::kPushCompressed: return "PUSH_COMPRESSED";
    case MessageType::kDone: return "DONE";
    case MessageType::kDoneAck: return "DONE_ACK";
    case MessageType::kHeartbeat: return "HEARTBEAT";
    case MessageType::kError: return "ERROR";
    case MessageType::kRingChunk: return "RING_CHUNK";
    case MessageType::kPipeActivation: return "PIPE_ACTIVATION";
    case MessageType::kPipeGradient: return "PIPE_GRADIENT";
    case MessageType::kRingChunkShm: return "RING_CHUNK_SHM";
    case MessageType::kRingShmOffer: return "RING_SHM_OFFER";
    case MessageType::kRingShmAccept: return "RING_SHM_ACCEPT";
    case MessageType::kRingSlotFree: return "RING_SLOT_FREE";
    case MessageType::kRingJoin: return "RING_JOIN";
    case MessageType::kRingJoinAccept: return "RING_JOIN_ACCEPT";
    case MessageType::kRingChunk16: return "RING_CHUNK16";
    case MessageType::kTrialRequest: return "TRIAL_REQUEST";
    case MessageType::kTrialAssign: return "TRIAL_ASSIGN";
    case MessageType::kTrialEpoch: return "TRIAL_EPOCH";
    case MessageType::kTrialControl: return "TRIAL_CONTROL";
    case MessageType::kTrialEnd: return "TRIAL_END";
    case MessageType::kTrialPredictions: return "TRIAL_PREDICTIONS";
    case MessageType::kTrialCheckpoint: return "TRIAL_CHECKPOINT";
  }
  return "UNKNOWN";
}

void EncodeHeader(const FrameHeader& h, std::span<std::byte, kFrameHeaderBytes> out) {
  std::byte* p = out.data();
  Put<std::uint32_t>(p, kMagic);
  Put<std::uint16_t>(p + 4, h.version);
  Put<std::uint16_t>(p + 6, static_cast<std::uint16_t>(h.type));
  Put<std::uint16_t>(p + 8, h.flags);
  Put<std::uint16_t>(p + 10, 0);
  Put<std::uint64_t>(p + 12, h.request_id);
  Put<std::uint32_t>(p + 20, h.payload_len);
  Put<std::uint32_t>(p + 24, h.payload_crc);
}

Result<FrameHeader> DecodeHeader(std::span<const std::byte, kFrameHeaderBytes> raw, std::uint32_t max_payload) {
  const std::byte* p = raw.data();
  const auto magic = Get<std::uint32_t>(p);
  if (magic != kMagic) return Status::Corruption(fmt::format("bad magic 0x{:08x} (expected 0x{:08x}, \"TFD1\"): not a tfd peer", magic, kMagic));
  FrameHeader h;
  h.version = Get<std::uint16_t>(p + 4);
  if (h.version != kProtocolVersion)
    return Status::Corruption(fmt::format("protocol version {} (this tfd speaks version {})", h.version, kProtocolVersion));
  const auto type = Get<std::uint16_t>(p + 6);
  if (!IsKnownType(type)) return Status::Corruption(fmt::format("unknown message type {}", type));
  h.type = static_cast<MessageType>(type);
  h.flags = Get<std::uint16_t>(p + 8);
  if ((h.flags & ~kFlagMac) != 0)
    return Status::Corruption(fmt::format("unknown header flags 0x{:04x} (version 1 defines only 0x{:04x}, MAC)", h.flags, kFlagMac));
  if (Get<std::uint16_t>(p + 10) != 0) return Status::Corruption("reserved header bytes are not zero");
  h.request_id = Get<std::uint64_t>(p + 12);
  h.payload_len = Get<std::uint32_t>(p + 20);
  h.payload_crc = Get<std::uint32_t>(p + 24);
  if (h.payload_len > max_payload)
    return Status::Corruption(fmt::format("{} payload of {} bytes is over the limit of {}", MessageTypeName(h.type), h.payload_len, max_payload));
  return h;
}

std::size_t OutFrame::payload_size() const {
  std::size_t n = head.size();
  for (const auto& t : tail) n += t.size();
  return n;
}

Status OutFrame::Seal(bool with_crc) {
  const std::size_t n = payload_size();
  if (n > kMaxPayloadBytes)
    return Status::InvalidArgument(fmt::format("{} payload of {} bytes is over the limit of {}", MessageTypeName(header.type), n, kMaxPayloadBytes));
  header.payload_len = static_cast<std::uint32_t>(n);
  if (!with_crc) {
    header.payload_crc = 0;
    return Status::Ok();
  }
  std::uint32_t crc = Crc32c(head);
  for (const auto& t : tail) crc = Crc32c(t, crc);
  header.payload_crc = crc;
  return Status::Ok();
}

Status VerifyPayload(const FrameHeader& header, std::span<const std::byte> payload) {
  const std::array<std::span<const std::byte>, 1> parts = {payload};
  return VerifyPayloadParts(header, parts);
}

Status VerifyPayloadParts(const FrameHeader& header, std::span<const std::span<const std::byte>> parts) {
  std::size_t size = 0;
  std::uint32_t crc = 0;
  for (const auto& p : parts) {
    size += p.size();
    crc = Crc32c(p, crc);
  }
  if (size != header.payload_len)
    return Status::Corruption(fmt::format("{} payload is {} bytes, header says {}", MessageTypeName(header.type), size, header.payload_len));
  if (crc != header.payload_crc)
    return Status::Corruption(fmt::format("{} payload CRC 0x{:08x} does not match the header's 0x{:08x}", MessageTypeName(header.type), crc, header.payload_crc));
  return Status::Ok();
}

}  // namespace tfd::wire
