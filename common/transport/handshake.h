#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/base/status.h"
#include "common/wire/messages.h"

namespace tfd::transport {

// The HELLO/WELCOME handshake that every connection between tasks starts with (docs/protocol.md,
// "Conversation"): what a task says about itself, and the checks every receiver makes of what its
// peer said. Each role adds its own checks on top (a ps takes workers only, a ring member its
// previous neighbour only). Pure functions, any thread.

// This task, as its handshakes present it.
struct HandshakeIdentity {
  std::string name;  // "ps:0", for messages
  wire::TaskKind kind = wire::TaskKind::kWorker;
  std::uint32_t index = 0;
  std::uint64_t incarnation = 0;
  std::uint64_t cluster_id = 0;
};

// "worker:1": the task a HELLO or WELCOME says it comes from.
std::string TaskName(wire::TaskKind kind, std::uint32_t index);

wire::Hello MakeHello(const HandshakeIdentity& self);
// A WELCOME from `self`: not initialised, at step 0 (a ps fills in its own state).
wire::Welcome MakeWelcome(const HandshakeIdentity& self);

// A HELLO received by `self`. FailedPrecondition, its message naming both sides, when the peer
// speaks another protocol version or belongs to another cluster ("cluster id mismatch: worker:0 has
// cluster id ..., ps:0 has ...: their TF_CONFIG cluster specs differ").
Status CheckHello(const wire::Hello& hello, const HandshakeIdentity& self);

// A WELCOME received from the task `self` dialed as `expected_kind`:`expected_index` (named `peer`
// in messages, "ps:0 (10.0.0.5:2222)"). FailedPrecondition naming both when another task answered.
Status CheckWelcome(const wire::Welcome& welcome, std::string_view peer, wire::TaskKind expected_kind,
                    std::uint32_t expected_index);

}  // namespace tfd::transport
