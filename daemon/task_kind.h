#pragma once

#include <cstdint>

#include "common/base/status.h"
#include "common/config/cluster.h"
#include "common/transport/handshake.h"
#include "common/wire/messages.h"

namespace tfd {

// The one place where the cluster config's task types and the wire's task kinds meet: every role
// converts through these, never by casting one enum to the other.

wire::TaskKind ToWireKind(config::TaskType type);
// Corruption naming the code when `kind` (already a known wire code) has no task type here.
Result<config::TaskType> TaskTypeFromWire(wire::TaskKind kind);

// How `config`'s own task presents itself in its handshakes.
transport::HandshakeIdentity HandshakeIdentityOf(const config::TfConfig& config, std::uint64_t incarnation);

}  // namespace tfd
