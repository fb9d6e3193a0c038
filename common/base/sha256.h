#pragma once

#include <cstddef>
#include <span>
#include <cstdint>
#include <string>
#include <string_view>

namespace tfd {

// Incremental SHA-256 (OpenSSL libcrypto). Not copyable.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(std::span<const std::byte> bytes);
  // Lower-case hex of the digest; the object must not be updated afterwards.
  std::string HexDigest();

 private:
  void* ctx_;  // EVP_MD_CTX*, kept opaque so callers need no OpenSSL headers
};

// The first 8 bytes of SHA-256(text) as a number: a fingerprint for ids (cluster, layout).
std::uint64_t Fingerprint64(std::string_view text);

}  // namespace tfd
