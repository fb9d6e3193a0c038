// RING_JOIN and RING_JOIN_ACCEPT (docs/protocol.md, "Joining a ring"): a joiner's frames are
// untrusted, so every field is bounded and a short, oversize or trailing payload is Corruption.
#include <catch2/catch.hpp>

#include "common/wire/bytes.h"
#include "common/wire/ring_join_messages.h"
#include "test/unit/common/wire/wire_fixtures.h"

namespace tfd::wire {
namespace {

using namespace fixtures;  // Transmit, CheckMalformedRejected

TEST_CASE("RING_JOIN round-trips its fields and refuses an empty or oversize host", "[unit][wire]") {
  const RingJoin m{.index = 2, .port = 40123, .job = 0x1122334455667788ull, .host = "pc-04"};
  OutFrame f = Encode(m);
  const auto payload = Transmit(f, MessageType::kRingJoin);
  RingJoin got;
  REQUIRE(Decode(payload, &got).ok());
  CHECK(got.index == 2);
  CHECK(got.port == 40123);
  CHECK(got.job == 0x1122334455667788ull);
  CHECK(got.host == "pc-04");
  CheckMalformedRejected<RingJoin>(payload);
  CHECK(Decode(Encode(RingJoin{.index = 2, .port = 1, .job = 1, .host = ""}).head, &got).code() == Code::kCorruption);
  CHECK(Decode(Encode(RingJoin{.index = 2, .port = 1, .job = 1, .host = std::string(kMaxHostBytes + 1, 'h')}).head, &got).code() ==
        Code::kCorruption);
}

TEST_CASE("RING_JOIN_ACCEPT round-trips the members and refuses a rank or count out of range", "[unit][wire]") {
  RingJoinAccept m{.cluster_id = 0xabcdefull, .rank = 2, .commit_step = 70};
  m.members = {{TaskKind::kChief, 0, 2222, "chief:0", "pc-01"}, {TaskKind::kWorker, 0, 2223, "worker:0", "pc-02"},
               {TaskKind::kWorker, 1, 2224, "worker:1", "pc-03"}};
  OutFrame f = Encode(m);
  const auto payload = Transmit(f, MessageType::kRingJoinAccept);
  RingJoinAccept got;
  REQUIRE(Decode(payload, &got).ok());
  CHECK(got.cluster_id == 0xabcdefull);
  CHECK(got.rank == 2);
  CHECK(got.commit_step == 70);
  REQUIRE(got.members.size() == 3);
  CHECK(got.members[0].kind == TaskKind::kChief);
  CHECK(got.members[2].task == "worker:1");
  CHECK(got.members[2].host == "pc-03");
  CHECK(got.members[2].port == 2224);
  CheckMalformedRejected<RingJoinAccept>(payload);
  RingJoinAccept bad = m;
  bad.rank = 3;  // past the members
  CHECK(Decode(Encode(bad).head, &got).code() == Code::kCorruption);
  bad = m;
  bad.members.resize(1);  // a ring of one is no ring to join
  bad.rank = 0;
  CHECK(Decode(Encode(bad).head, &got).code() == Code::kCorruption);
  bad = m;
  bad.members[1].kind = TaskKind::kPs;
  CHECK(Decode(Encode(bad).head, &got).code() == Code::kCorruption);
}

}  // namespace
}  // namespace tfd::wire
