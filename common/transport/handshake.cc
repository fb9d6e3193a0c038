#include "common/transport/handshake.h"

#include <fmt/format.h>

namespace tfd::transport {

std::string TaskName(wire::TaskKind kind, std::uint32_t index) { return fmt::format("{}:{}", wire::TaskKindName(kind), index); }

wire::Hello MakeHello(const HandshakeIdentity& self) {
  wire::Hello hello;
  hello.version = wire::kProtocolVersion;
  hello.kind = self.kind;
  hello.index = self.index;
  hello.incarnation = self.incarnation;
  hello.cluster_id = self.cluster_id;
  return hello;
}

wire::Welcome MakeWelcome(const HandshakeIdentity& self) {
  wire::Welcome welcome;
  welcome.kind = self.kind;
  welcome.index = self.index;
  welcome.incarnation = self.incarnation;
  return welcome;
}

Status CheckHello(const wire::Hello& hello, const HandshakeIdentity& self) {
  const std::string peer = TaskName(hello.kind, hello.index);
  if (hello.version != wire::kProtocolVersion) {
    return Status::FailedPrecondition(fmt::format("protocol version mismatch: {} speaks version {}, {} speaks version {}", peer,
                                                  hello.version, self.name, wire::kProtocolVersion));
  }
  if (hello.cluster_id != self.cluster_id) {
    return Status::FailedPrecondition(fmt::format("cluster id mismatch: {} has cluster id {:016x}, {} has {:016x}: their TF_CONFIG "
                                                  "cluster specs differ",
                                                  peer, hello.cluster_id, self.name, self.cluster_id));
  }
  return Status::Ok();
}

Status CheckWelcome(const wire::Welcome& welcome, std::string_view peer, wire::TaskKind expected_kind,
                    std::uint32_t expected_index) {
  if (welcome.kind == expected_kind && welcome.index == expected_index) return Status::Ok();
  return Status::FailedPrecondition(fmt::format("{} answered as {}, not as {}: is that address another task's?", peer,
                                                TaskName(welcome.kind, welcome.index), TaskName(expected_kind, expected_index)));
}

}  // namespace tfd::transport
