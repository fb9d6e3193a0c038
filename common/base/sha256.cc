#include "common/base/sha256.h"

#include <openssl/evp.h>

#include "common/base/check.h"

namespace tfd {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  TFD_CHECK(ctx_ != nullptr);
  TFD_CHECK(EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) == 1);
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::Update(std::span<const std::byte> bytes) {
  TFD_CHECK(EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), bytes.data(), bytes.size()) == 1);
}

std::string Sha256::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  TFD_CHECK(EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest, &len) == 1);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

std::uint64_t Fingerprint64(std::string_view text) {
  Sha256 h;
  h.Update(std::as_bytes(std::span(text.data(), text.size())));
  return std::stoull(h.HexDigest().substr(0, 16), nullptr, 16);
}

}  // namespace tfd
