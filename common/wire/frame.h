#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <span>
#include <string>
#include <vector>

#include "common/base/status.h"

namespace tfd::wire {

// docs/protocol.md specifies every byte. All integers are little-endian.
//
// Frame header, 28 bytes:
//   magic u32 ("TFD1") | version u16 | type u16 | flags u16 | reserved u16 (0) |
//   request_id u64 (0: none) | payload_len u32 (<= the receiver's limit) | payload_crc u32 (CRC-32C)
inline constexpr std::uint32_t kMagic = 0x31444654;  // the bytes 'T' 'F' 'D' '1'
inline constexpr std::uint16_t kProtocolVersion = 1;
inline constexpr std::size_t kFrameHeaderBytes = 28;
inline constexpr std::uint32_t kMaxPayloadBytes = 256u << 20;
// Header flag: a 16-byte MAC follows the payload (not counted in payload_len), and payload_crc is 0:
// the MAC is the stronger check. Every frame after a token handshake carries one.
inline constexpr std::uint16_t kFlagMac = 0x0001;
inline constexpr std::size_t kMacBytes = 16;

// Append-only: never renumber or reuse a value.
enum class MessageType : std::uint16_t {
  kHello = 1,
  kWelcome = 2,
  kInit = 3,
  kWaitReady = 4,
  kReady = 5,
  kAuthHello = 6,
  kAuthChallenge = 7,
  kAuthProof = 8,
  kPull = 10,
  kParams = 11,
  kPush = 12,
  kPushAck = 13,
  kStatePull = 14,
  kState = 15,
  kPushCompressed = 16,  // PUSH with a compressed gradient (update.compression)
  kDone = 20,
  kDoneAck = 21,
  kHeartbeat = 22,
  kError = 30,
  kRingChunk = 40,  // 40-49: collectives between workers
  kPipeActivation = 41,  // model parallelism: a micro-batch's activations, stage s -> s + 1
  kPipeGradient = 42,    // ... and their gradient, stage s + 1 -> s
  kRingChunkShm = 43,    // a ring chunk in a slot of memory shared with a same-host receiver
  kRingShmOffer = 44,    // shared slots: the sender offers them, the receiver maps them
  kRingShmAccept = 45,
  kRingSlotFree = 46,    // the receiver has read slots up to a count
  kRingJoin = 47,        // elastic allreduce: a joiner asks the ring's rank 0 to take it in
  kRingJoinAccept = 48,  // ... and rank 0's answer at the commit it joins at: the new ring
  kRingChunk16 = 49,     // RING_CHUNK with 16-bit values (update.compression fp16 / bf16)
  kTrialRequest = 50,  // 50-59: a coordinator and its generic workers
  kTrialAssign = 51,
  kTrialEpoch = 52,
  kTrialControl = 53,
  kTrialEnd = 54,
  kTrialPredictions = 55,
  kTrialCheckpoint = 56,
};
bool IsKnownType(std::uint16_t type);
const char* MessageTypeName(MessageType type);

struct FrameHeader {
  std::uint16_t version = kProtocolVersion;
  MessageType type = MessageType::kHeartbeat;
  std::uint16_t flags = 0;
  std::uint64_t request_id = 0;
  std::uint32_t payload_len = 0;
  std::uint32_t payload_crc = 0;
};

void EncodeHeader(const FrameHeader& h, std::span<std::byte, kFrameHeaderBytes> out);
// Checks the magic, version, type and length (against `max_payload`) before anything is allocated.
// Corruption naming the fault; the message is fit to send back in an ERROR frame.
Result<FrameHeader> DecodeHeader(std::span<const std::byte, kFrameHeaderBytes> raw,
                                 std::uint32_t max_payload = kMaxPayloadBytes);

// A frame to send: the payload is `head` (encoded fields) followed by the `tail` spans (tensor
// data written straight from their owners' memory: scatter/gather, no copy). The tail memory must
// stay valid until the frame is written; `keepalive` can own it.
struct OutFrame {
  FrameHeader header;
  std::vector<std::byte> head;
  std::vector<std::span<const std::byte>> tail;
  std::shared_ptr<const void> keepalive;

  // Sets payload_len and payload_crc (0 unless `with_crc`: a MAC'd connection) from head and tail;
  // call once the payload is complete. InvalidArgument when the payload would exceed kMaxPayloadBytes.
  Status Seal(bool with_crc = true);
  std::size_t payload_size() const;
};

// An allocator whose resize() leaves new bytes uninitialised: a received payload is overwritten
// by the socket read at once, so zeroing it first would only cost a pass over it.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  using std::allocator<T>::allocator;
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using Payload = std::vector<std::byte, DefaultInitAllocator<std::byte>>;

// A received frame, its payload checked against the header's CRC.
struct InFrame {
  FrameHeader header;
  Payload payload;
};

// Checks `payload` against the header's length and CRC. Corruption when they differ.
Status VerifyPayload(const FrameHeader& header, std::span<const std::byte> payload);
// The same for a payload received in pieces, in order.
Status VerifyPayloadParts(const FrameHeader& header, std::span<const std::span<const std::byte>> parts);

}  // namespace tfd::wire
