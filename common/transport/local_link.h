// Same-host links over Unix domain sockets.
//
// Tasks on one host talk through the kernel either way, but a Unix stream socket skips TCP/IP
// (segmentation, checksums, the loopback device's soft interrupts): measured here, the ring moves
// 1 MB about 1.3x and 16 MB 1.8x as fast (docs/benchmarks.md, "Same-host links").
//
// A Listener also listens on the abstract Unix socket named after what it bound ("tfd:*:2222" for
// every interface, "tfd:127.0.0.1:2222" for one address), in its network namespace; nothing is
// left on the file system. Dial to an address of this host (a loopback address, or one of its
// interfaces') tries that socket first and falls back to TCP. The link carries the same frames as
// TCP (the handshake, then a CRC or a MAC on every frame, every length bounded), so nothing above
// the transport knows which it got: the socket handed over is a tcp::socket object wrapping the
// Unix one (Asio's stream reads and writes are the same system calls on either). PeerAddress
// names such a peer "local".
//
// TFD_LOCAL_LINK=tcp in a task's environment turns it off for that task (the dials it makes and
// the listener it opens), to measure one against the other or to debug with TCP tools.
#pragma once

#include <cstdint>
#include <string>

#include "common/base/status.h"
#include "common/transport/asio.h"

namespace tfd::transport {

// False when the environment has TFD_LOCAL_LINK=tcp.
bool LocalLinksEnabled();

// The abstract socket's name (without its leading NUL) for a listener bound to `address` ("" or
// an unspecified address: every interface) and `port`.
std::string LocalLinkName(const std::string& address, std::uint16_t port);

// Whether `address` is this host's: a loopback address (IPv4-mapped too) or one of its interfaces'.
bool IsThisHost(const asio::ip::address& address);

// A connection to the Unix socket of the listener at address:port of this host (the listener
// bound to that address, else the one bound to every interface), as a tcp::socket on a strand of
// its own; Unavailable when there is none to connect to.
Result<tcp::socket> DialLocal(asio::io_context& ioc, const asio::ip::address& address, std::uint16_t port);

// Whether `socket` (or the descriptor `fd`) is a Unix socket (a same-host link).
bool IsLocalSocket(const tcp::socket& socket);
bool IsLocalFd(int fd);
// The process at the other end of the Unix socket `fd` (SO_PEERCRED, in this task's pid namespace);
// 0 when `fd` is not a Unix socket or the kernel cannot say.
int LocalPeerPid(int fd);

// The other end: for a same-host link "local" (with `with_port`, "local pid N": the peer's process),
// else its IP address (with `with_port`, and ":port"); "" when the socket cannot say (closed).
std::string PeerAddress(const tcp::socket& socket, bool with_port = false);

}  // namespace tfd::transport
