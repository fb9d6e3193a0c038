#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/transport/auth.h"

namespace tfd::transport {

// A connection handed over to an owner that does its own I/O (the ring's collective thread): the
// socket, the bytes already read past the last frame, and the frame MAC state, so the stream goes
// on exactly where the connection left it (Connection::DetachAfterThisFrame).
struct DetachedLink {
  int fd = -1;                       // a connected TCP socket, now the receiver's to close
  std::vector<std::byte> buffered;   // read from the socket, not yet parsed: the start of the next frames
  std::unique_ptr<FrameMac> send_mac, recv_mac;  // both null without a token
  std::uint64_t send_seq = 0, recv_seq = 0;
};

}  // namespace tfd::transport
