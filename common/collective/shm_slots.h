#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/base/status.h"
#include "common/wire/messages.h"

namespace tfd::collective {

// One direction's shared slots between ring neighbours on one host (docs/protocol.md, "Shared
// slots"): an area of one page (the offer's nonce first), then `slots` slots of `slot_bytes`, used
// in turn. The sender creates the area (a memfd sealed at its size) and maps it writable; the
// receiver opens the sender's descriptor as /proc/PID/fd/FD and maps it read-only. This class owns
// the descriptor and the mapping, and every system call on them; moving it moves them.
// Not thread-safe: the ring uses it from its collective thread, under its io_mu_.
class ShmSlots {
 public:
  static constexpr std::size_t kPage = 4096;
  static constexpr std::uint32_t kMaxSlots = 1024;  // what a receiver accepts

  ShmSlots() = default;  // nothing mapped
  ShmSlots(ShmSlots&& other) noexcept;
  ShmSlots& operator=(ShmSlots&& other) noexcept;
  ShmSlots(const ShmSlots&) = delete;
  ShmSlots& operator=(const ShmSlots&) = delete;
  ~ShmSlots();  // unmaps and closes the descriptor

  // The sender's area: `slots` slots for chunks of up to `chunk_bytes` (each rounded up to 64
  // bytes), `nonce` at its start, and the memfd kept open (fd()) for the receiver to open. The
  // error's message is the system's reason.
  static Result<ShmSlots> Create(std::uint32_t slots, std::size_t chunk_bytes, std::uint64_t nonce);
  // The receiver's mapping of `offer`, made by process `pid`: its bounds (1 to kMaxSlots slots of
  // 4 .. max_slot_bytes bytes, a multiple of 4), then /proc/PID/fd/FD opened non-blocking (never
  // waiting on a FIFO there), which must be a regular file of the offered size sealed against
  // shrinking (a mapping can then never lose pages under the reader: no SIGBUS), mapped
  // read-only, with the offer's nonce at its start. The error's message says why not.
  static Result<ShmSlots> Open(int pid, const wire::RingShmOffer& offer, std::size_t max_slot_bytes);

  bool mapped() const { return base_ != nullptr; }
  std::uint32_t slots() const { return slots_; }
  std::size_t slot_bytes() const { return slot_bytes_; }
  // The sender's memfd until CloseFd(); -1 on the receiver's side.
  int fd() const { return fd_; }
  void CloseFd();  // once the receiver has opened it: the mappings keep the memory

  // Sender. Whether a slot is free (the receiver has read it, or it was never used).
  bool HasFreeSlot() const { return used_ - freed_ < slots_; }
  struct Filled {
    std::uint32_t slot;  // its number, for RING_CHUNK_SHM
    std::uint32_t crc;   // CRC-32C of the bytes copied
  };
  // Copies `bytes` (at most slot_bytes()) into the next slot, which must be free.
  Filled Fill(std::span<const std::byte> bytes);
  // The receiver has read the slots up to `freed` (RING_SLOT_FREE). Corruption naming `from`
  // unless that is more than it had freed and no more than were filled.
  Status Free(std::uint64_t freed, std::string_view from);

  // Receiver. Corruption naming `from` unless `slot` is the one due and `count` floats fit a slot.
  Status CheckNext(std::uint32_t slot, std::uint64_t count, std::string_view from) const;
  std::uint32_t next_slot() const { return static_cast<std::uint32_t>(used_ % slots_); }
  // The first `bytes` of the slot due (CheckNext has bounded them).
  std::span<const std::byte> NextBytes(std::size_t bytes) const { return {slot(used_), bytes}; }
  // The slot due is read and free again: returns the slots read so far, for RING_SLOT_FREE.
  std::uint64_t MarkRead() { return ++used_; }

 private:
  std::byte* slot(std::uint64_t n) const { return base_ + kPage + (n % slots_) * slot_bytes_; }
  void Reset();

  std::byte* base_ = nullptr;
  std::size_t size_ = 0, slot_bytes_ = 0;
  std::uint32_t slots_ = 0;
  int fd_ = -1;
  std::uint64_t used_ = 0;   // slots filled (sender) or read (receiver), from the first
  std::uint64_t freed_ = 0;  // sender: slots the receiver has read (its last RING_SLOT_FREE)
};

}  // namespace tfd::collective
