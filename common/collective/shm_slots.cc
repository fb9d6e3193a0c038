#include "common/collective/shm_slots.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "common/base/check.h"
#include "common/wire/crc32c.h"

namespace tfd::collective {

ShmSlots::ShmSlots(ShmSlots&& other) noexcept { *this = std::move(other); }

ShmSlots& ShmSlots::operator=(ShmSlots&& other) noexcept {
  if (this == &other) return *this;
  Reset();
  base_ = std::exchange(other.base_, nullptr);
  size_ = std::exchange(other.size_, 0);
  slot_bytes_ = std::exchange(other.slot_bytes_, 0);
  slots_ = std::exchange(other.slots_, 0);
  fd_ = std::exchange(other.fd_, -1);
  used_ = std::exchange(other.used_, 0);
  freed_ = std::exchange(other.freed_, 0);
  return *this;
}

ShmSlots::~ShmSlots() { Reset(); }

void ShmSlots::Reset() {
  if (base_ != nullptr) ::munmap(base_, size_);
  base_ = nullptr;
  CloseFd();
}

void ShmSlots::CloseFd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<ShmSlots> ShmSlots::Create(std::uint32_t slots, std::size_t chunk_bytes, std::uint64_t nonce) {
  TFD_CHECK(slots >= 1 && slots <= kMaxSlots);
  const std::size_t slot_bytes = (chunk_bytes + 63) / 64 * 64;
  const std::size_t size = kPage + slots * slot_bytes;
  // Sealed at its size: the receiver's mapping can never lose pages under it (SIGBUS).
  const int fd = ::memfd_create("tfd-ring-slots", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void* base = MAP_FAILED;
  if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(size)) == 0 && ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
    base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    Status why = Status::Unavailable(std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return why;
  }
  ShmSlots s;
  s.base_ = static_cast<std::byte*>(base);
  s.size_ = size;
  s.slot_bytes_ = slot_bytes;
  s.slots_ = slots;
  s.fd_ = fd;
  std::memcpy(s.base_, &nonce, sizeof nonce);
  return s;
}

Result<ShmSlots> ShmSlots::Open(int pid, const wire::RingShmOffer& offer, std::size_t max_slot_bytes) {
  if (offer.slots == 0 || offer.slots > kMaxSlots || offer.slot_bytes == 0 || offer.slot_bytes > max_slot_bytes || offer.slot_bytes % 4 != 0)
    return Status::FailedPrecondition(fmt::format("{} slots of {} bytes is out of bounds", offer.slots, offer.slot_bytes));
  const std::size_t area = kPage + static_cast<std::size_t>(offer.slots) * offer.slot_bytes;
  const std::string path = fmt::format("/proc/{}/fd/{}", pid, offer.fd);
  std::string why;
  struct stat st {};
  void* base = MAP_FAILED;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // non-blocking: never wait on a FIFO there
  const int seals = fd < 0 ? 0 : ::fcntl(fd, F_GET_SEALS);
  if (fd < 0) why = fmt::format("cannot open {}: {}", path, std::strerror(errno));
  else if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::size_t>(st.st_size) != area)
    why = fmt::format("{} is not a file of {} bytes", path, area);
  else if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) why = fmt::format("{} may shrink under this member's mapping", path);
  else if ((base = ::mmap(nullptr, area, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED) why = fmt::format("mmap: {}", std::strerror(errno));
  else if (std::memcmp(base, &offer.nonce, sizeof offer.nonce) != 0) why = fmt::format("pid {} did not make that offer", pid);
  if (fd >= 0) ::close(fd);  // the mapping keeps the memory
  if (!why.empty()) {
    if (base != MAP_FAILED) ::munmap(base, area);
    return Status::FailedPrecondition(why);
  }
  ShmSlots s;
  s.base_ = static_cast<std::byte*>(base);
  s.size_ = area;
  s.slot_bytes_ = offer.slot_bytes;
  s.slots_ = offer.slots;
  return s;
}

ShmSlots::Filled ShmSlots::Fill(std::span<const std::byte> bytes) {
  TFD_CHECK(HasFreeSlot());
  TFD_CHECK(bytes.size() <= slot_bytes_);
  std::byte* dst = slot(used_);
  std::memcpy(dst, bytes.data(), bytes.size());
  const Filled f{static_cast<std::uint32_t>(used_ % slots_), wire::Crc32c(std::span<const std::byte>(dst, bytes.size()))};
  ++used_;
  return f;
}

Status ShmSlots::Free(std::uint64_t freed, std::string_view from) {
  if (freed <= freed_ || freed > used_)
    return Status::Corruption(fmt::format("{} freed shared slots up to {}, but {} were freed and {} filled", from, freed, freed_, used_));
  freed_ = freed;
  return Status::Ok();
}

Status ShmSlots::CheckNext(std::uint32_t slot, std::uint64_t count, std::string_view from) const {
  if (slot != next_slot()) return Status::Corruption(fmt::format("{} filled shared slot {} where slot {} was next", from, slot, next_slot()));
  if (count > slot_bytes_ / 4) return Status::Corruption(fmt::format("{} sent {} floats in a shared slot of {} bytes", from, count, slot_bytes_));
  return Status::Ok();
}

}  // namespace tfd::collective
