#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "common/transport/auth.h"
#include "test/test_util.h"

namespace tfd::transport {
namespace {

using testing::TempDir;
using testing::WriteFile;

std::string Hex(std::span<const std::byte> b) {
  std::string s;
  for (std::byte x : b) s += fmt::format("{:02x}", static_cast<unsigned>(x));
  return s;
}

std::span<const std::byte> Bytes(std::string_view s) { return std::as_bytes(std::span<const char>(s.data(), s.size())); }

TEST_CASE("a token file is read as 64 hex digits or 32 raw bytes, only when its owner alone can read it", "[unit][auth]") {
  TempDir dir;
  const std::string made = dir / "made";
  const ClusterToken t = ClusterToken::Generate();
  REQUIRE(t.WriteFile(made).ok());
  struct stat st {};
  REQUIRE(stat(made.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  Result<ClusterToken> back = ClusterToken::ReadFile(made);
  REQUIRE(back.ok());
  CHECK(back->Hex() == t.Hex());
  CHECK(t.Hex().size() == 64);
  CHECK(ClusterToken::Generate().Hex() != t.Hex());
  // Never overwritten.
  Status again = ClusterToken::Generate().WriteFile(made);
  CHECK(again.code() == Code::kFailedPrecondition);
  CHECK(again.message() == made + " already exists: not overwriting a token");

  const std::string raw = dir / "raw";
  WriteFile(raw, std::string(32, 'x'));
  chmod(raw.c_str(), 0600);
  Result<ClusterToken> r = ClusterToken::ReadFile(raw);
  REQUIRE(r.ok());
  std::string xs;
  for (int i = 0; i < 32; ++i) xs += "78";  // 'x'
  CHECK(r->Hex() == xs);

  const std::string loose = dir / "loose";
  REQUIRE(ClusterToken::Generate().WriteFile(loose).ok());
  chmod(loose.c_str(), 0640);
  Result<ClusterToken> l = ClusterToken::ReadFile(loose);
  REQUIRE_FALSE(l.ok());
  CHECK(l.status().code() == Code::kPermissionDenied);
  CHECK(l.status().message() == fmt::format("token file {} has mode 0640: others may read it; run chmod 600 {}", loose, loose));

  for (const std::string& bad : {std::string(), std::string("abc\n"), std::string(63, 'a'), std::string(64, 'g'), std::string(65, 'a')}) {
    const std::string p = dir / "bad";
    WriteFile(p, bad);
    chmod(p.c_str(), 0600);
    Result<ClusterToken> b = ClusterToken::ReadFile(p);
    INFO(bad);
    REQUIRE_FALSE(b.ok());
    CHECK(b.status().code() == Code::kInvalidArgument);
    CHECK(b.status().message() == "token file " + p + ": expected 64 hex digits (as `tfctl gen-token` writes) or 32 raw bytes");
  }
  Result<ClusterToken> missing = ClusterToken::ReadFile(dir / "none");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == Code::kNotFound);
  CHECK(missing.status().message() == "token file " + (dir / "none") + ": No such file or directory");
}

TEST_CASE("the handshake's HMACs differ by label, token and nonce", "[unit][auth]") {
  const ClusterToken a = ClusterToken::Generate(), b = ClusterToken::Generate();
  const auto n1 = Bytes("nonce-one"), n2 = Bytes("nonce-two");
  CHECK(Hex(a.Derive(kServerProofLabel, n1, n2)) == Hex(a.Derive(kServerProofLabel, n1, n2)));
  CHECK(Hex(a.Derive(kServerProofLabel, n1, n2)) != Hex(a.Derive(kClientProofLabel, n1, n2)));
  CHECK(Hex(a.Derive(kServerProofLabel, n1, n2)) != Hex(b.Derive(kServerProofLabel, n1, n2)));
  CHECK(Hex(a.Derive(kServerProofLabel, n1, n2)) != Hex(a.Derive(kServerProofLabel, n2, n1)));
  CHECK(Hex(a.Derive(kClientToServerLabel, n1, n2)) != Hex(a.Derive(kServerToClientLabel, n1, n2)));
}

TEST_CASE("the frame MAC is AES-256-GMAC: a known answer, and every byte, part split and sequence number counts", "[unit][auth]") {
  // NIST GCM test case 13: zero key, zero IV, nothing authenticated.
  FrameMac zero(SessionKey{});
  std::array<std::byte, 16> tag;
  zero.Tag(0, {}, tag);
  CHECK(Hex(tag) == "530f8afbc74536b9a963b4f1c4cb738b");

  SessionKey key{};
  key[0] = std::byte{1};
  FrameMac mac(key);
  const std::string frame = "header bytes then the payload of a frame, 64 bytes or so long....";
  auto tag_of = [&](std::uint64_t seq, std::vector<std::span<const std::byte>> parts) {
    std::array<std::byte, 16> t;
    mac.Tag(seq, parts, t);
    return Hex(t);
  };
  const auto whole = Bytes(frame);
  const std::string reference = tag_of(7, {whole});
  // Scatter/gather: the same bytes in any split give the same tag.
  for (std::size_t cut : {std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{28}, frame.size() - 1})
    CHECK(tag_of(7, {whole.first(cut), whole.subspan(cut)}) == reference);
  CHECK(tag_of(7, {whole.first(3), whole.subspan(3, 20), whole.subspan(23)}) == reference);
  CHECK(tag_of(8, {whole}) != reference);
  for (std::size_t i = 0; i < frame.size(); i += 9) {
    std::string altered = frame;
    altered[i] ^= 0x01;
    CHECK(tag_of(7, {Bytes(altered)}) != reference);
  }
  key[0] = std::byte{2};
  FrameMac other(key);
  other.Tag(7, std::array{whole}, tag);
  CHECK(Hex(tag) != reference);
}

}  // namespace
}  // namespace tfd::transport
