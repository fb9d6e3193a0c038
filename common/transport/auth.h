#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/base/status.h"

namespace tfd::transport {

inline constexpr std::size_t kTokenBytes = 32;
using SessionKey = std::array<std::byte, 32>;

// The cluster token: 32 secret random bytes that every task of a cluster holds in a file only its
// owner can read. It never appears on a command line or in a log; only its file's path does.
class ClusterToken {
 public:
  // 32 bytes from OpenSSL's RAND_bytes.
  static ClusterToken Generate();
  // Reads a token file: 64 hex digits (what `tfctl gen-token` writes, a newline allowed) or 32 raw
  // bytes. PermissionDenied when the file's group or others may read or write it (chmod 600), as ssh
  // refuses such keys; InvalidArgument naming the file when its content is neither form.
  static Result<ClusterToken> ReadFile(const std::string& path);
  // Writes the token as hex to a new file with mode 0600; FailedPrecondition if `path` exists.
  Status WriteFile(const std::string& path) const;
  std::string Hex() const;

  // HMAC-SHA256(token, label || a || b): the handshake's proofs and session keys.
  SessionKey Derive(std::string_view label, std::span<const std::byte> a, std::span<const std::byte> b) const;

 private:
  std::array<std::byte, kTokenBytes> key_{};
};

// Labels of the handshake's HMACs (docs/protocol.md, "Authentication"). The two proofs and the two
// directions' keys differ, so nothing one side sends can be reflected back as the other's.
inline constexpr std::string_view kServerProofLabel = "tfd1 server proof";
inline constexpr std::string_view kClientProofLabel = "tfd1 client proof";
inline constexpr std::string_view kServerToClientLabel = "tfd1 server-to-client key";
inline constexpr std::string_view kClientToServerLabel = "tfd1 client-to-server key";

// Constant-time comparison (CRYPTO_memcmp).
bool SameBytes(std::span<const std::byte> a, std::span<const std::byte> b);
// Fills `out` from OpenSSL's RAND_bytes.
void RandomBytes(std::span<std::byte> out);

// The MAC of one direction of an authenticated connection: AES-256-GMAC under a session key, the
// frame's sequence number as its nonce, so a frame cannot be forged, altered, replayed, reordered
// or moved to another connection. Runs at several GB/s (AES-NI, carry-less multiply).
class FrameMac {
 public:
  explicit FrameMac(const SessionKey& key);
  ~FrameMac();
  FrameMac(const FrameMac&) = delete;
  FrameMac& operator=(const FrameMac&) = delete;

  // The 16-byte tag of frame number `seq` over `parts` (the encoded header, then the payload's parts).
  void Tag(std::uint64_t seq, std::span<const std::span<const std::byte>> parts, std::span<std::byte, 16> tag);
  // The same over a frame to send, as its writer holds it: header, encoded fields, tensor spans.
  void TagFrame(std::uint64_t seq, std::span<const std::byte> header, std::span<const std::byte> head,
                std::span<const std::span<const std::byte>> tail, std::span<std::byte, 16> tag);
  // Whether `tag` is the tag of frame number `seq` over `parts` (compared in constant time).
  bool Verify(std::uint64_t seq, std::span<const std::span<const std::byte>> parts, std::span<const std::byte, 16> tag);

 private:
  void Begin(std::uint64_t seq);
  void Update(std::span<const std::byte> part);
  void End(std::span<std::byte, 16> tag);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfd::transport
