// The one-byte codes of the messages (task kind, optimizer, update mode, worker-loss policy, push
// outcome, ring phase): the decoder is where a wire number becomes its enum, so an unknown number
// is Corruption naming the field and its value, never a cast.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "common/wire/messages.h"

namespace tfd::wire {
namespace {

std::vector<std::byte> Payload(const OutFrame& f) {
  std::vector<std::byte> out(f.head.begin(), f.head.end());
  for (const auto& t : f.tail) out.insert(out.end(), t.begin(), t.end());
  return out;
}

// Decodes `payload` with byte `at` set to `code`.
template <typename M>
Status DecodeWith(std::vector<std::byte> payload, std::size_t at, std::uint8_t code) {
  REQUIRE(at < payload.size());
  payload[at] = std::byte{code};
  M m;
  return Decode(payload, &m);
}

template <typename M>
void CheckCode(const std::vector<std::byte>& payload, std::size_t at, int last, const std::string& field) {
  for (int code = 0; code <= last; ++code) {
    INFO(field << " " << code);
    CHECK(DecodeWith<M>(payload, at, static_cast<std::uint8_t>(code)).ok());
  }
  for (int code : {last + 1, 0xff}) {
    Status s = DecodeWith<M>(payload, at, static_cast<std::uint8_t>(code));
    CHECK(s.code() == Code::kCorruption);
    CHECK(s.message() == field + " " + std::to_string(code));
  }
}

TEST_CASE("HELLO and WELCOME refuse an unknown task kind, naming it", "[unit][wire]") {
  // HELLO: version u16, then the kind; WELCOME: the kind first.
  CheckCode<Hello>(Payload(Encode(Hello{})), 2, 4, "HELLO: unknown task kind");
  CheckCode<Welcome>(Payload(Encode(Welcome{})), 0, 4, "WELCOME: unknown task kind");
}

TEST_CASE("INIT refuses an unknown optimizer type, update mode or worker-loss policy, naming it", "[unit][wire]") {
  Init m;
  m.update.num_workers = 2;
  m.update.replicas_to_aggregate = m.update.total_num_replicas = 2;
  m.optimizer.learning_rate = 0.1;
  const std::vector<float> values = {1.0f};
  m.chunks = {{"w", 1}};
  const std::vector<std::byte> payload = Payload(Encode(m, values));
  // layout_hash u64 | type u8 | 5 x f64 | use_nesterov u8 | mode u8 | scale_stale u8 | 3 x u32 | on_worker_loss u8
  CheckCode<Init>(payload, 8, 2, "INIT: unknown optimizer type");
  CheckCode<Init>(payload, 8 + 1 + 40 + 1, 1, "INIT: unknown update mode");
  CheckCode<Init>(payload, 8 + 1 + 40 + 1 + 1 + 1 + 12, 2, "INIT: unknown worker-loss policy");
}

TEST_CASE("the typed codes keep their numbers on the wire", "[unit][wire]") {
  Init m;
  m.update.num_workers = 1;
  m.optimizer.type = OptimizerKind::kMomentum;
  m.update.mode = UpdateMode::kSync;
  m.update.on_worker_loss = WorkerLossPolicy::kWait;
  const std::vector<std::byte> payload = Payload(Encode(m, {}));
  CHECK(payload[8] == std::byte{1});
  CHECK(payload[8 + 1 + 40 + 1] == std::byte{1});
  CHECK(payload[8 + 1 + 40 + 1 + 1 + 1 + 12] == std::byte{1});
  Init got;
  REQUIRE(Decode(payload, &got).ok());
  CHECK(got.optimizer.type == OptimizerKind::kMomentum);
  CHECK(got.update.mode == UpdateMode::kSync);
  CHECK(got.update.on_worker_loss == WorkerLossPolicy::kWait);
  CHECK(SlotsPerValue(OptimizerKind::kSgd) == 0);
  CHECK(SlotsPerValue(OptimizerKind::kMomentum) == 1);
  CHECK(SlotsPerValue(OptimizerKind::kAdam) == 2);
  CHECK(Payload(Encode(Hello{.kind = TaskKind::kEvaluator}))[2] == std::byte{3});
  CHECK(TaskKindName(TaskKind::kChief) == "chief");
  CHECK(TaskKindName(TaskKind::kPs) == "ps");
}

TEST_CASE("PUSH_ACK and RING_CHUNK refuse an unknown outcome or phase, naming it", "[unit][wire]") {
  CheckCode<PushAck>(Payload(Encode(PushAck{})), 8, 2, "PUSH_ACK: unknown outcome");
  const std::vector<float> values = {1.0f, 2.0f};
  CheckCode<RingChunk>(Payload(Encode(RingChunk{}, values)), 8, 2, "RING_CHUNK: unknown phase");
}

}  // namespace
}  // namespace tfd::wire
