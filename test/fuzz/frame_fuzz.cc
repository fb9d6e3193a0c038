// Frame header and message payload decoding. Input: a selector byte, then the bytes as they would
// arrive on a socket (a 28-byte header, then the payload). The selector picks the receiver's
// payload limit (small, so the oversize paths are hit) and which message the bytes after the
// header are also decoded as, whatever the header says.
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/wire/frame.h"
#include "common/wire/compressed_messages.h"
#include "common/wire/messages.h"
#include "common/wire/ring_join_messages.h"
#include "common/wire/trial_messages.h"

namespace tfd::wire {
namespace {

template <typename M>
void DecodeAs(std::span<const std::byte> payload) {
  M m;
  (void)Decode(payload, &m);
}

void DecodeByType(MessageType type, std::span<const std::byte> payload) {
  switch (type) {
    case MessageType::kHello: DecodeAs<Hello>(payload); break;
    case MessageType::kWelcome: DecodeAs<Welcome>(payload); break;
    case MessageType::kInit: DecodeAs<Init>(payload); break;
    case MessageType::kWaitReady: DecodeAs<WaitReady>(payload); break;
    case MessageType::kReady: DecodeAs<Ready>(payload); break;
    case MessageType::kPull: DecodeAs<Pull>(payload); break;
    case MessageType::kParams: DecodeAs<Params>(payload); break;
    case MessageType::kPush: DecodeAs<Push>(payload); break;
    case MessageType::kPushAck: DecodeAs<PushAck>(payload); break;
    case MessageType::kStatePull: DecodeAs<StatePull>(payload); break;
    case MessageType::kState: DecodeAs<State>(payload); break;
    case MessageType::kDone: DecodeAs<Done>(payload); break;
    case MessageType::kError: DecodeAs<ErrorMessage>(payload); break;
    case MessageType::kAuthHello: DecodeAs<AuthHello>(payload); break;
    case MessageType::kAuthChallenge: DecodeAs<AuthChallenge>(payload); break;
    case MessageType::kAuthProof: DecodeAs<AuthProof>(payload); break;
    case MessageType::kRingChunk: DecodeAs<RingChunk>(payload); break;
    case MessageType::kRingChunkShm: DecodeAs<RingChunkShm>(payload); break;
    case MessageType::kRingShmOffer: DecodeAs<RingShmOffer>(payload); break;
    case MessageType::kRingShmAccept: DecodeAs<RingShmAccept>(payload); break;
    case MessageType::kRingSlotFree: DecodeAs<RingSlotFree>(payload); break;
    case MessageType::kPipeActivation:
    case MessageType::kPipeGradient: DecodeAs<PipeTensor>(payload); break;
    case MessageType::kTrialRequest: DecodeAs<TrialRequest>(payload); break;
    case MessageType::kTrialAssign: DecodeAs<TrialAssign>(payload); break;
    case MessageType::kTrialEpoch: DecodeAs<TrialEpoch>(payload); break;
    case MessageType::kTrialControl: DecodeAs<TrialControl>(payload); break;
    case MessageType::kTrialEnd: DecodeAs<TrialEnd>(payload); break;
    case MessageType::kTrialPredictions: DecodeAs<TrialPredictions>(payload); break;
    case MessageType::kTrialCheckpoint: DecodeAs<TrialCheckpoint>(payload); break;
    case MessageType::kRingJoin: DecodeAs<RingJoin>(payload); break;
    case MessageType::kRingJoinAccept: DecodeAs<RingJoinAccept>(payload); break;
    case MessageType::kPushCompressed: DecodeAs<PushCompressed>(payload); break;
    case MessageType::kRingChunk16: {
      RingChunk c;
      (void)DecodeRingChunk16(payload, &c);
      break;
    }
    case MessageType::kDoneAck:
    case MessageType::kHeartbeat: break;
  }
}

constexpr MessageType kDecodable[] = {MessageType::kHello,   MessageType::kWelcome, MessageType::kInit,  MessageType::kWaitReady,
                                      MessageType::kReady,   MessageType::kPull,    MessageType::kParams, MessageType::kPush,
                                      MessageType::kPushAck, MessageType::kDone,    MessageType::kError, MessageType::kAuthHello,
                                      MessageType::kAuthChallenge, MessageType::kAuthProof, MessageType::kRingChunk, MessageType::kStatePull,
                                      MessageType::kState, MessageType::kPipeActivation, MessageType::kPipeGradient,
                                      MessageType::kRingChunkShm, MessageType::kRingShmOffer, MessageType::kRingShmAccept,
                                      MessageType::kRingSlotFree, MessageType::kTrialRequest, MessageType::kTrialAssign, MessageType::kTrialEpoch,
                                      MessageType::kTrialControl, MessageType::kTrialEnd, MessageType::kTrialPredictions,
                                      MessageType::kTrialCheckpoint, MessageType::kPushCompressed, MessageType::kRingChunk16};

}  // namespace
}  // namespace tfd::wire

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tfd::wire;
  if (size < 1) return 0;
  const std::uint8_t selector = data[0];
  const auto in = std::as_bytes(std::span<const std::uint8_t>(data + 1, size - 1));
  const std::uint32_t max_payload = 64u << (selector >> 5);  // 64 B .. 8 KiB
  std::span<const std::byte> after_header = in;
  if (in.size() >= kFrameHeaderBytes) {
    after_header = in.subspan(kFrameHeaderBytes);
    auto header = DecodeHeader(in.first<kFrameHeaderBytes>(), max_payload);
    if (header.ok() && header->payload_len <= after_header.size()) {
      const auto payload = after_header.first(header->payload_len);
      if (VerifyPayload(*header, payload).ok()) DecodeByType(header->type, payload);
    }
  }
  DecodeByType(kDecodable[(selector & 0x1f) % std::size(kDecodable)], after_header);
  return 0;
}
