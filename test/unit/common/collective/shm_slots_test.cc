// collective::ShmSlots, a ring link's shared slots, in one process: the sender's area opened by
// the receiver through /proc/self's pid, a chunk through it slot by slot, and what either side refuses.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "common/collective/shm_slots.h"
#include "common/wire/crc32c.h"

namespace tfd::collective {
namespace {

constexpr std::uint64_t kNonce = 0x5eed'1234'abcd'0001;

wire::RingShmOffer OfferOf(const ShmSlots& s, std::uint64_t nonce = kNonce) {
  return {static_cast<std::uint32_t>(s.fd()), s.slots(), s.slot_bytes(), nonce};
}

std::string RefusalOf(const wire::RingShmOffer& offer, std::size_t max_slot_bytes = 1 << 20) {
  Result<ShmSlots> r = ShmSlots::Open(::getpid(), offer, max_slot_bytes);
  return r.ok() ? std::string("accepted") : r.status().message();
}

TEST_CASE("shared slots: an area created and opened in one process carries chunks slot by slot", "[unit][ring]") {
  Result<ShmSlots> made = ShmSlots::Create(3, 10, kNonce);  // 10 bytes round up to a 64-byte slot
  REQUIRE(made.ok());
  ShmSlots sender = std::move(made).value();
  REQUIRE(sender.mapped());
  CHECK(sender.fd() >= 0);
  CHECK(sender.slots() == 3);
  CHECK(sender.slot_bytes() == 64);

  Result<ShmSlots> opened = ShmSlots::Open(::getpid(), OfferOf(sender), 1 << 20);
  REQUIRE(opened.ok());
  ShmSlots receiver = std::move(opened).value();
  CHECK(receiver.fd() == -1);  // the mapping alone keeps the memory
  sender.CloseFd();
  CHECK(sender.fd() == -1);

  // Five chunks through three slots: the sender waits for a free slot, the slot numbers wrap.
  for (int k = 0; k < 5; ++k) {
    const std::vector<float> values = {1.5f * static_cast<float>(k), -2.0f, static_cast<float>(k)};
    const std::span<const std::byte> bytes = std::as_bytes(std::span<const float>(values));
    REQUIRE(sender.HasFreeSlot());
    const ShmSlots::Filled f = sender.Fill(bytes);
    CHECK(f.slot == static_cast<std::uint32_t>(k % 3));
    CHECK(f.crc == wire::Crc32c(bytes));
    REQUIRE(receiver.CheckNext(f.slot, values.size(), "worker:0").ok());
    const std::span<const std::byte> got = receiver.NextBytes(bytes.size());
    CHECK(std::memcmp(got.data(), bytes.data(), bytes.size()) == 0);
    CHECK(wire::Crc32c(got) == f.crc);
    const std::uint64_t read = receiver.MarkRead();
    CHECK(read == static_cast<std::uint64_t>(k + 1));
    REQUIRE(sender.Free(read, "worker:1").ok());
  }
  // Every slot filled and none freed: the sender must wait.
  const float one = 1.0f;
  for (int k = 0; k < 3; ++k) (void)sender.Fill(std::as_bytes(std::span<const float>(&one, 1)));
  CHECK(!sender.HasFreeSlot());
}

TEST_CASE("shared slots: offers out of bounds, of another size, unsealed or with another nonce are refused", "[unit][ring]") {
  Result<ShmSlots> made = ShmSlots::Create(2, 256, kNonce);
  REQUIRE(made.ok());
  const wire::RingShmOffer good = OfferOf(*made);
  CHECK(RefusalOf(good) == "accepted");

  wire::RingShmOffer o = good;
  o.slots = 0;
  CHECK(RefusalOf(o) == "0 slots of 256 bytes is out of bounds");
  o.slots = ShmSlots::kMaxSlots + 1;
  CHECK(RefusalOf(o) == "1025 slots of 256 bytes is out of bounds");
  o = good;
  o.slot_bytes = 254;  // not whole floats
  CHECK(RefusalOf(o) == "2 slots of 254 bytes is out of bounds");
  CHECK(RefusalOf(good, /*max_slot_bytes=*/128) == "2 slots of 256 bytes is out of bounds");
  o = good;
  o.slot_bytes = 512;  // a larger area than the file
  const std::string path = fmt::format("/proc/{}/fd/{}", ::getpid(), good.fd);
  CHECK(RefusalOf(o) == path + " is not a file of " + std::to_string(4096 + 2 * 512) + " bytes");
  o = good;
  o.nonce = kNonce + 1;
  CHECK(RefusalOf(o) == fmt::format("pid {} did not make that offer", ::getpid()));
  o = good;
  o.fd = 1u << 30;  // no such descriptor
  CHECK(RefusalOf(o).starts_with(fmt::format("cannot open /proc/{}/fd/{}: ", ::getpid(), o.fd)));

  // The right size but not sealed: it could shrink under the reader's mapping.
  const int unsealed = ::memfd_create("tfd-test-unsealed", MFD_CLOEXEC);
  REQUIRE(unsealed >= 0);
  REQUIRE(::ftruncate(unsealed, 4096 + 2 * 256) == 0);
  o = good;
  o.fd = static_cast<std::uint32_t>(unsealed);
  CHECK(RefusalOf(o) == fmt::format("/proc/{}/fd/{} may shrink under this member's mapping", ::getpid(), unsealed));
  ::close(unsealed);
}

TEST_CASE("shared slots: a slot out of turn, a count over a slot and frees out of range are refused, naming the peer", "[unit][ring]") {
  Result<ShmSlots> made = ShmSlots::Create(2, 16, kNonce);
  REQUIRE(made.ok());
  ShmSlots sender = std::move(made).value();
  Result<ShmSlots> opened = ShmSlots::Open(::getpid(), OfferOf(sender), 1 << 20);
  REQUIRE(opened.ok());
  const ShmSlots& receiver = *opened;

  const Status out_of_turn = receiver.CheckNext(1, 4, "worker:0 (h:1)");
  CHECK(out_of_turn.code() == Code::kCorruption);
  CHECK(out_of_turn.message() == "worker:0 (h:1) filled shared slot 1 where slot 0 was next");
  CHECK(receiver.CheckNext(0, 16, "worker:0 (h:1)").ok());  // 64 bytes: 16 floats fit
  CHECK(receiver.CheckNext(0, 17, "worker:0 (h:1)").message() == "worker:0 (h:1) sent 17 floats in a shared slot of 64 bytes");

  const float v = 3.0f;
  (void)sender.Fill(std::as_bytes(std::span<const float>(&v, 1)));
  CHECK(sender.Free(0, "worker:1 (h:1)").message() == "worker:1 (h:1) freed shared slots up to 0, but 0 were freed and 1 filled");
  CHECK(sender.Free(2, "worker:1 (h:1)").code() == Code::kCorruption);  // more than were filled
  CHECK(sender.Free(1, "worker:1 (h:1)").ok());
  CHECK(!sender.Free(1, "worker:1 (h:1)").ok());  // no new slot freed
}

}  // namespace
}  // namespace tfd::collective
