#include "common/transport/local_link.h"

#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

namespace tfd::transport {
namespace {

bool IsLoopbackAddress(const asio::ip::address& a) {
  if (a.is_loopback()) return true;
  return a.is_v6() && a.to_v6().is_v4_mapped() && asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6()).is_loopback();
}

// Fills `addr` with the abstract name; returns the address length to pass to bind or connect.
socklen_t AbstractAddress(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  const std::size_t n = std::min(name.size(), sizeof addr->sun_path - 1);
  std::memcpy(addr->sun_path + 1, name.data(), n);  // sun_path[0] = 0: the abstract namespace
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

}  // namespace

bool LocalLinksEnabled() {
  const char* v = std::getenv("TFD_LOCAL_LINK");  // read at each dial and listen: rare, and benchmarks switch it
  return v == nullptr || std::string_view(v) != "tcp";
}

std::string LocalLinkName(const std::string& address, std::uint16_t port) {
  boost::system::error_code ec;
  const asio::ip::address a = address.empty() ? asio::ip::address() : asio::ip::make_address(address, ec);
  const bool any = address.empty() || ec || a.is_unspecified();
  return fmt::format("tfd:{}:{}", any ? std::string("*") : a.to_string(), port);
}

bool IsThisHost(const asio::ip::address& address) {
  if (IsLoopbackAddress(address)) return true;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool mine = false;
  for (const ifaddrs* i = list; i != nullptr && !mine; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family == AF_INET && address.is_v4()) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      mine = address.to_v4().to_uint() == ntohl(in->sin_addr.s_addr);
    } else if (i->ifa_addr->sa_family == AF_INET6 && address.is_v6()) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      asio::ip::address_v6::bytes_type bytes;
      std::memcpy(bytes.data(), in6->sin6_addr.s6_addr, bytes.size());
      mine = address.to_v6() == asio::ip::address_v6(bytes, in6->sin6_scope_id);
    }
  }
  freeifaddrs(list);
  return mine;
}

Result<tcp::socket> DialLocal(asio::io_context& ioc, const asio::ip::address& address, std::uint16_t port) {
  std::string last = "no local listener";
  for (const std::string& name : {LocalLinkName(address.to_string(), port), LocalLinkName("", port)}) {
    // Non-blocking: a listener whose backlog is full (stopped, say) refuses at once with EAGAIN,
    // and the dial goes on over TCP instead of waiting in connect().
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return Status::Unavailable(fmt::format("socket(AF_UNIX): {}", std::strerror(errno)));
    sockaddr_un addr;
    const socklen_t len = AbstractAddress(name, &addr);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {  // at once: accepted, refused or full
      last = fmt::format("{}: {}", name, std::strerror(errno));
      ::close(fd);
      continue;
    }
    // Any local user may bind an abstract name: take the link only from a listener of this user
    // (or root), as a task of the same run is; another's is passed over for TCP.
    ucred cred{};
    socklen_t cred_len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0 || (cred.uid != ::geteuid() && cred.uid != 0)) {
      last = fmt::format("{} is held by another user's process (uid {})", name, cred.uid);
      ::close(fd);
      continue;
    }
    tcp::socket socket(asio::make_strand(ioc));
    boost::system::error_code ec;
    socket.assign(tcp::v4(), fd, ec);
    if (ec) {
      ::close(fd);
      return Status::Unavailable(fmt::format("{}: {}", name, ec.message()));
    }
    return socket;
  }
  return Status::Unavailable(last);
}

bool IsLocalSocket(const tcp::socket& socket) {
  tcp::socket& s = const_cast<tcp::socket&>(socket);  // native_handle() is not const in Asio
  return IsLocalFd(s.native_handle());
}

bool IsLocalFd(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  return addr.ss_family == AF_UNIX;
}

int LocalPeerPid(int fd) {
  if (!IsLocalFd(fd)) return 0;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid <= 0) return 0;
  return cred.pid;
}

std::string PeerAddress(const tcp::socket& socket, bool with_port) {
  if (IsLocalSocket(socket)) {
    if (!with_port) return "local";
    // The peer's process, which on one host says more than a port would.
    const int pid = LocalPeerPid(const_cast<tcp::socket&>(socket).native_handle());
    return pid > 0 ? fmt::format("local pid {}", pid) : std::string("local");
  }
  boost::system::error_code ec;
  const tcp::endpoint remote = socket.remote_endpoint(ec);
  if (ec) return "";
  return with_port ? fmt::format("{}:{}", remote.address().to_string(), remote.port()) : remote.address().to_string();
}

}  // namespace tfd::transport
