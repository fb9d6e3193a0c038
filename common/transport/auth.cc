#include "common/transport/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "common/base/check.h"

namespace tfd::transport {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void RandomBytes(std::span<std::byte> out) {
  TFD_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size())) == 1);
}

bool SameBytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

ClusterToken ClusterToken::Generate() {
  ClusterToken t;
  RandomBytes(t.key_);
  return t;
}

Result<ClusterToken> ClusterToken::ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::NotFound(fmt::format("token file {}: {}", path, std::strerror(errno)));
  struct stat st {};
  std::vector<char> text(200);
  ssize_t n = -1;
  if (::fstat(fd, &st) == 0) n = ::read(fd, text.data(), text.size());
  const int read_errno = errno;
  ::close(fd);
  if (n < 0) return Status::Unavailable(fmt::format("token file {}: {}", path, std::strerror(read_errno)));
  if ((st.st_mode & 077) != 0) {
    return Status::PermissionDenied(fmt::format("token file {} has mode {:04o}: others may read it; run chmod 600 {}", path,
                                                st.st_mode & 07777, path));
  }
  ClusterToken t;
  if (n == static_cast<ssize_t>(kTokenBytes)) {
    std::memcpy(t.key_.data(), text.data(), kTokenBytes);
    return t;
  }
  std::size_t len = static_cast<std::size_t>(n);
  while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' ')) --len;
  bool ok = len == 2 * kTokenBytes;
  for (std::size_t i = 0; ok && i < kTokenBytes; ++i) {
    const int hi = HexValue(text[2 * i]), lo = HexValue(text[2 * i + 1]);
    ok = hi >= 0 && lo >= 0;
    t.key_[i] = static_cast<std::byte>(hi * 16 + lo);
  }
  if (!ok) {
    return Status::InvalidArgument(fmt::format("token file {}: expected 64 hex digits (as `tfctl gen-token` writes) or 32 raw bytes",
                                               path));
  }
  return t;
}

Status ClusterToken::WriteFile(const std::string& path) const {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return Status::FailedPrecondition(fmt::format("{} already exists: not overwriting a token", path));
    return Status::Unavailable(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  }
  const std::string text = Hex() + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const int write_errno = errno;
  ::close(fd);
  if (!ok) return Status::Unavailable(fmt::format("writing {}: {}", path, std::strerror(write_errno)));
  return Status::Ok();
}

std::string ClusterToken::Hex() const {
  std::string s;
  for (std::byte b : key_) s += fmt::format("{:02x}", static_cast<unsigned>(b));
  return s;
}

SessionKey ClusterToken::Derive(std::string_view label, std::span<const std::byte> a, std::span<const std::byte> b) const {
  std::vector<unsigned char> msg(label.begin(), label.end());
  msg.push_back(0);  // the label ends here, whatever follows
  const auto* pa = reinterpret_cast<const unsigned char*>(a.data());
  const auto* pb = reinterpret_cast<const unsigned char*>(b.data());
  msg.insert(msg.end(), pa, pa + a.size());
  msg.insert(msg.end(), pb, pb + b.size());
  SessionKey out{};
  unsigned int len = 0;
  TFD_CHECK(HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()), msg.data(), msg.size(),
                 reinterpret_cast<unsigned char*>(out.data()), &len) != nullptr &&
            len == out.size());
  return out;
}

struct FrameMac::Impl {
  EVP_CIPHER_CTX* ctx = nullptr;
};

FrameMac::FrameMac(const SessionKey& key) : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_CIPHER_CTX_new();
  TFD_CHECK(impl_->ctx != nullptr);
  TFD_CHECK(EVP_EncryptInit_ex(impl_->ctx, EVP_aes_256_gcm(), nullptr, reinterpret_cast<const unsigned char*>(key.data()),
                               nullptr) == 1);
}

FrameMac::~FrameMac() { EVP_CIPHER_CTX_free(impl_->ctx); }

void FrameMac::Begin(std::uint64_t seq) {
  unsigned char iv[12] = {};
  for (int i = 0; i < 8; ++i) iv[i] = static_cast<unsigned char>(seq >> (8 * i));
  TFD_CHECK(EVP_EncryptInit_ex(impl_->ctx, nullptr, nullptr, nullptr, iv) == 1);
}

void FrameMac::Update(std::span<const std::byte> p) {
  // Authenticated-only data (GMAC): nothing is encrypted. At most 256 MiB per frame, so int is safe.
  int len = 0;
  if (!p.empty())
    TFD_CHECK(EVP_EncryptUpdate(impl_->ctx, nullptr, &len, reinterpret_cast<const unsigned char*>(p.data()), static_cast<int>(p.size())) == 1);
}

void FrameMac::End(std::span<std::byte, 16> tag) {
  unsigned char none[16];
  int len = 0;
  TFD_CHECK(EVP_EncryptFinal_ex(impl_->ctx, none, &len) == 1);
  TFD_CHECK(EVP_CIPHER_CTX_ctrl(impl_->ctx, EVP_CTRL_GCM_GET_TAG, 16, tag.data()) == 1);
}

void FrameMac::Tag(std::uint64_t seq, std::span<const std::span<const std::byte>> parts, std::span<std::byte, 16> tag) {
  Begin(seq);
  for (std::span<const std::byte> p : parts) Update(p);
  End(tag);
}

void FrameMac::TagFrame(std::uint64_t seq, std::span<const std::byte> header, std::span<const std::byte> head,
                        std::span<const std::span<const std::byte>> tail, std::span<std::byte, 16> tag) {
  Begin(seq);
  Update(header);
  Update(head);
  for (std::span<const std::byte> p : tail) Update(p);
  End(tag);
}

bool FrameMac::Verify(std::uint64_t seq, std::span<const std::span<const std::byte>> parts, std::span<const std::byte, 16> tag) {
  std::array<std::byte, 16> expected;
  Tag(seq, parts, expected);
  return SameBytes(expected, tag);
}

}  // namespace tfd::transport
