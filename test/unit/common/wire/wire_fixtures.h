#pragma once
// What the wire tests share: frames flattened and sent through header encode/decode as a receiver
// sees them, bytes poked into place, every truncation and trailing byte checked for a message
// type, and a sample INIT.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include <catch2/catch.hpp>

#include "common/wire/bytes.h"
#include "common/wire/frame.h"
#include "common/wire/messages.h"

namespace tfd::wire::fixtures {

using Catch::Matchers::Contains;
using HeaderBytes = std::array<std::byte, kFrameHeaderBytes>;

inline HeaderBytes EncodedHeader(const FrameHeader& h) {
  HeaderBytes raw{};
  EncodeHeader(h, raw);
  return raw;
}

template <typename T>
void Poke(HeaderBytes& raw, std::size_t offset, T v) {
  std::memcpy(raw.data() + offset, &v, sizeof v);
}
template <typename T>
void Poke(std::vector<std::byte>& raw, std::size_t offset, T v) {
  REQUIRE(offset + sizeof v <= raw.size());
  std::memcpy(raw.data() + offset, &v, sizeof v);
}

// The payload of a frame as it goes on the wire: head, then every tail span.
inline std::vector<std::byte> Flatten(const OutFrame& f) {
  std::vector<std::byte> out(f.head.begin(), f.head.end());
  for (const auto& t : f.tail) out.insert(out.end(), t.begin(), t.end());
  return out;
}

// Seals `f`, sends its header through Encode/DecodeHeader and checks the payload against it, as a
// receiver does; returns the payload for Decode.
inline std::vector<std::byte> Transmit(OutFrame& f, MessageType expected_type) {
  REQUIRE(f.Seal().ok());
  std::vector<std::byte> payload = Flatten(f);
  CHECK(f.header.payload_len == payload.size());
  CHECK(f.payload_size() == payload.size());
  Result<FrameHeader> h = DecodeHeader(EncodedHeader(f.header));
  REQUIRE(h.ok());
  CHECK(h->type == expected_type);
  CHECK(h->payload_len == payload.size());
  Status verified = VerifyPayload(*h, payload);
  CHECK(verified.ok());
  return payload;
}

inline std::vector<float> FloatsOf(std::span<const std::byte> bytes) {
  REQUIRE(bytes.size() % 4 == 0);
  std::vector<float> out(bytes.size() / 4);
  CopyFloats(bytes, out);
  return out;
}

// Every proper prefix of `payload` (lengths 0 .. size-1) decodes to Corruption.
template <typename M>
void CheckEveryTruncationRejected(const std::vector<std::byte>& payload) {
  for (std::size_t n = 0; n < payload.size(); ++n) {
    INFO("truncated to " << n << " of " << payload.size() << " bytes");
    M m;
    Status s = Decode(std::span(payload).first(n), &m);
    CHECK(s.code() == Code::kCorruption);
  }
}

// As CheckEveryTruncationRejected, but the prefixes of the lengths in `valid` (an older form of
// the message, without its optional fields) must decode.
template <typename M>
void CheckTruncationsRejectedExcept(const std::vector<std::byte>& payload, std::vector<std::size_t> valid) {
  for (std::size_t n = 0; n < payload.size(); ++n) {
    INFO("truncated to " << n << " of " << payload.size() << " bytes");
    M m;
    Status s = Decode(std::span(payload).first(n), &m);
    if (std::find(valid.begin(), valid.end(), n) != valid.end()) {
      CHECK(s.ok());
    } else {
      CHECK(s.code() == Code::kCorruption);
    }
  }
}

// `payload` with extra bytes after it decodes to Corruption naming the trailing bytes.
template <typename M>
void CheckTrailingBytesRejected(std::vector<std::byte> payload) {
  payload.push_back(std::byte{0});
  M m;
  Status s = Decode(payload, &m);
  CHECK(s.code() == Code::kCorruption);
  CHECK_THAT(s.message(), Contains("1 unexpected trailing bytes"));
  payload.insert(payload.end(), 4, std::byte{0});
  M m2;
  s = Decode(payload, &m2);
  CHECK(s.code() == Code::kCorruption);
  CHECK_THAT(s.message(), Contains("5 unexpected trailing bytes"));
}

template <typename M>
void CheckMalformedRejected(const std::vector<std::byte>& payload) {
  CheckEveryTruncationRejected<M>(payload);
  CheckTrailingBytesRejected<M>(payload);
}

// An INIT with every field set: Adam, sync with backups and worker-loss rules, three chunks.
inline Init SampleInit() {
  Init m;
  m.layout_hash = 0xABCDEF0123456789ull;
  m.optimizer.type = OptimizerKind::kAdam;
  m.optimizer.learning_rate = 0.001;
  m.optimizer.momentum = 0.9;
  m.optimizer.beta1 = 0.8;
  m.optimizer.beta2 = 0.999;
  m.optimizer.epsilon = 1e-7;
  m.optimizer.use_nesterov = true;
  m.update.mode = UpdateMode::kSync;
  m.update.scale_stale = true;
  m.update.replicas_to_aggregate = 2;
  m.update.total_num_replicas = 3;
  m.update.num_workers = 3;
  m.update.on_worker_loss = WorkerLossPolicy::kShrink;
  m.update.min_replicas = 2;
  m.global_step = 0x0a0b0c0d0e0f1011ull;
  m.chunks = {{"dense/kernel[0:3]", 3}, {"dense/bias", 2}, {"dense_1/bias", 1}};
  return m;
}
inline const std::vector<float> kInitValues = {0.5f, -1.25f, 3.0e-38f, -0.0f, 1.0e30f, 42.0f};

}  // namespace tfd::wire::fixtures
