// The HELLO/WELCOME checks every role shares, and the one mapping between config task types and
// wire task kinds.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "common/transport/handshake.h"
#include "daemon/task_kind.h"

namespace tfd::transport {
namespace {

HandshakeIdentity Ps0() { return {.name = "ps:0", .kind = wire::TaskKind::kPs, .index = 0, .incarnation = 5, .cluster_id = 0xabc}; }

TEST_CASE("MakeHello and MakeWelcome say who this task is", "[unit][handshake]") {
  const HandshakeIdentity w1{.name = "worker:1", .kind = wire::TaskKind::kWorker, .index = 1, .incarnation = 9, .cluster_id = 0xabc};
  const wire::Hello hello = MakeHello(w1);
  CHECK(hello.version == wire::kProtocolVersion);
  CHECK(hello.kind == wire::TaskKind::kWorker);
  CHECK(hello.index == 1);
  CHECK(hello.incarnation == 9);
  CHECK(hello.cluster_id == 0xabc);
  CHECK(CheckHello(hello, Ps0()).ok());
  const wire::Welcome welcome = MakeWelcome(Ps0());
  CHECK(welcome.kind == wire::TaskKind::kPs);
  CHECK(welcome.index == 0);
  CHECK(welcome.incarnation == 5);
  CHECK_FALSE(welcome.initialized);
  CHECK(CheckWelcome(welcome, "ps:0 (127.0.0.1:2222)", wire::TaskKind::kPs, 0).ok());
}

TEST_CASE("a HELLO of another cluster or protocol version is refused naming both sides", "[unit][handshake]") {
  wire::Hello hello = MakeHello({.name = "worker:0", .kind = wire::TaskKind::kWorker, .index = 0, .cluster_id = 0x123});
  Status s = CheckHello(hello, Ps0());
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK(s.message() ==
        "cluster id mismatch: worker:0 has cluster id 0000000000000123, ps:0 has 0000000000000abc: their TF_CONFIG cluster specs "
        "differ");
  hello.cluster_id = 0xabc;
  hello.version = wire::kProtocolVersion + 1;
  s = CheckHello(hello, Ps0());
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK(s.message() == fmt::format("protocol version mismatch: worker:0 speaks version {}, ps:0 speaks version {}",
                                   wire::kProtocolVersion + 1, wire::kProtocolVersion));
}

TEST_CASE("a WELCOME from another task than the one dialed is refused naming both", "[unit][handshake]") {
  wire::Welcome welcome = MakeWelcome({.name = "worker:2", .kind = wire::TaskKind::kWorker, .index = 2});
  Status s = CheckWelcome(welcome, "ps:1 (10.0.0.5:2222)", wire::TaskKind::kPs, 1);
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK(s.message() == "ps:1 (10.0.0.5:2222) answered as worker:2, not as ps:1: is that address another task's?");
  welcome.kind = wire::TaskKind::kPs;
  CHECK_FALSE(CheckWelcome(welcome, "ps:1", wire::TaskKind::kPs, 1).ok());  // the right kind, another index
}

TEST_CASE("every config task type maps to a wire task kind and back", "[unit][handshake]") {
  for (config::TaskType t : config::kAllTypes) {
    Result<config::TaskType> back = TaskTypeFromWire(ToWireKind(t));
    REQUIRE(back.ok());
    CHECK(*back == t);
    CHECK(wire::TaskKindName(ToWireKind(t)) == config::TaskTypeName(t));
  }
  CHECK(ToWireKind(config::TaskType::kChief) == wire::TaskKind::kChief);
  CHECK(ToWireKind(config::TaskType::kPs) == wire::TaskKind::kPs);
  CHECK_FALSE(TaskTypeFromWire(static_cast<wire::TaskKind>(200)).ok());
}

TEST_CASE("HandshakeIdentityOf takes the task, its kind and the cluster id from the TF_CONFIG", "[unit][handshake]") {
  config::TfConfig c;
  c.cluster.worker = {{"127.0.0.1", 1000}, {"127.0.0.1", 1001}};
  c.cluster.ps = {{"127.0.0.1", 2000}};
  c.task = {config::TaskType::kWorker, 1};
  const HandshakeIdentity id = HandshakeIdentityOf(c, 77);
  CHECK(id.name == "worker:1");
  CHECK(id.kind == wire::TaskKind::kWorker);
  CHECK(id.index == 1);
  CHECK(id.incarnation == 77);
  CHECK(id.cluster_id == c.cluster.Id());
}

}  // namespace
}  // namespace tfd::transport
