// The ps's shard: INIT, async and sync (SyncReplicasOptimizer-style) updates, stale and duplicate
// gradients, bad pushes, snapshot immutability, and the schedule and weight decay INIT gives the
// store. One file (over 500 lines) because every case shares MakeInit and MakePush.
#include <catch2/catch.hpp>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "daemon/ps/parameter_store.h"

namespace tfd::ps {
namespace {

constexpr std::uint64_t kHash = 0x5eed5eed5eed5eedull;

using Mode = config::UpdateSpec::Mode;

struct InitSpec {
  Mode mode = Mode::kAsync;
  std::uint32_t num_workers = 3;
  std::uint32_t replicas_to_aggregate = 0;
  double learning_rate = 0.5;
  std::uint64_t layout_hash = kHash;
};

// An INIT of one chunk "w" holding `values` (which must outlive the call to Init: not copied here).
StoreInit MakeInit(const std::vector<float>& values, const InitSpec& spec) {
  StoreInit init;
  init.layout_hash = spec.layout_hash;
  init.optimizer.type = config::OptimizerSpec::Type::kSgd;
  init.optimizer.learning_rate = spec.learning_rate;
  init.update.mode = spec.mode;
  init.update.num_workers = spec.num_workers;
  init.update.replicas_to_aggregate = spec.replicas_to_aggregate;
  init.update.total_num_replicas = spec.num_workers;
  init.chunks = {{"w", values.size()}};
  init.values = std::as_bytes(std::span(values));
  return init;
}

PushRequest MakePush(std::uint32_t worker, std::uint64_t based_on_step, const std::vector<float>& grads) {
  PushRequest p;
  p.worker = worker;
  p.incarnation = 1;
  p.local_step = based_on_step + 1;
  p.based_on_step = based_on_step;
  p.grads = std::as_bytes(std::span(grads));
  return p;
}

ParameterStore::PushResult PushOk(ParameterStore& store, const PushRequest& p) {
  auto r = store.Push(p);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return *r;
}

void CheckValues(ParameterStore& store, const std::vector<float>& expected) {
  auto snap = store.Read();
  REQUIRE(snap->values.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("value " << i);
    CHECK(snap->values[i] == Approx(expected[i]));
  }
}

const std::vector<float> kInitial = {1.0f, 2.0f, 3.0f, 4.0f};

TEST_CASE("Init takes the chunks, values and update rule", "[unit][ps]") {
  ParameterStore store;
  CHECK_FALSE(store.initialized());
  REQUIRE(store.Init(MakeInit(kInitial, {.mode = Mode::kSync, .num_workers = 3})).ok());
  CHECK(store.initialized());
  CHECK(store.layout_hash() == kHash);
  CHECK(store.size() == 4);
  CHECK(store.sync());
  CHECK(store.to_aggregate() == 3);  // replicas_to_aggregate 0: every worker
  CHECK(store.global_step() == 0);
  REQUIRE(store.chunks().size() == 1);
  CHECK(store.chunks()[0].name == "w");
  CHECK(store.chunks()[0].length == 4);
  CHECK(store.stale_counts() == std::vector<std::uint64_t>{0, 0, 0});
  auto snap = store.Read();
  CHECK(snap->global_step == 0);
  CHECK(snap->values == kInitial);
}

TEST_CASE("a push before Init is FailedPrecondition", "[unit][ps]") {
  ParameterStore store;
  const std::vector<float> g = {1, 1, 1, 1};
  auto r = store.Push(MakePush(0, 0, g));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kFailedPrecondition);
}

TEST_CASE("async applies each push at once with sgd", "[unit][ps]") {
  ParameterStore store;
  REQUIRE(store.Init(MakeInit(kInitial, {.mode = Mode::kAsync, .num_workers = 3})).ok());
  CHECK_FALSE(store.sync());

  const std::vector<float> g0 = {2.0f, 4.0f, -2.0f, 0.0f};
  auto r = PushOk(store, MakePush(0, 0, g0));
  CHECK(r.outcome == PushOutcome::kApplied);
  CHECK(r.step_advanced);
  CHECK(r.global_step == 1);
  CHECK(store.global_step() == 1);
  CheckValues(store, {0.0f, 0.0f, 4.0f, 4.0f});  // p - 0.5 g

  // Another worker's gradient, computed on the old step 0: async applies it all the same.
  const std::vector<float> g1 = {1.0f, -1.0f, 1.0f, 2.0f};
  r = PushOk(store, MakePush(2, 0, g1));
  CHECK(r.outcome == PushOutcome::kApplied);
  CHECK(r.global_step == 2);
  CheckValues(store, {-0.5f, 0.5f, 3.5f, 3.0f});
  CHECK(store.stale_counts() == std::vector<std::uint64_t>{0, 0, 0});
  CHECK(store.Read()->global_step == 2);
}

TEST_CASE("async with staleness scaling divides a stale gradient by 1 + staleness", "[unit][ps]") {
  ParameterStore store;
  StoreInit init = MakeInit(kInitial, {.mode = Mode::kAsync, .num_workers = 3});
  init.update.scale_stale = true;
  REQUIRE(store.Init(init).ok());
  const std::vector<float> g = {2.0f, 4.0f, -2.0f, 0.0f};
  PushOk(store, MakePush(0, 0, g));  // fresh: p - 0.5 g
  CheckValues(store, {0.0f, 0.0f, 4.0f, 4.0f});
  PushOk(store, MakePush(1, 0, g));  // computed on step 0, applied at step 1: staleness 1, half the step
  CheckValues(store, {-0.5f, -1.0f, 4.5f, 4.0f});
  PushOk(store, MakePush(2, 0, g));  // staleness 2: a third
  CheckValues(store, {-0.5f - 1.0f / 3, -1.0f - 2.0f / 3, 4.5f + 1.0f / 3, 4.0f});
}

TEST_CASE("async applies a retried push at most once per worker incarnation and local step", "[unit][ps]") {
  ParameterStore store;
  REQUIRE(store.Init(MakeInit(kInitial, {.mode = Mode::kAsync, .num_workers = 2})).ok());
  const std::vector<float> g = {2.0f, 4.0f, -2.0f, 0.0f};
  PushRequest p = MakePush(0, 0, g);
  CHECK(PushOk(store, p).outcome == PushOutcome::kApplied);
  CHECK(PushOk(store, p).outcome == PushOutcome::kDuplicate);  // the same push again: a retry
  CheckValues(store, {0.0f, 0.0f, 4.0f, 4.0f});                       // applied once
  CHECK(store.global_step() == 1);
  p.incarnation = 2;  // the worker restarted: its step count starts over
  CHECK(PushOk(store, p).outcome == PushOutcome::kApplied);
  CHECK(store.global_step() == 2);
}

TEST_CASE("Init refuses settings and values the decoder would also refuse", "[unit][ps]") {
  ParameterStore store;
  StoreInit bad_mode = MakeInit(kInitial, {.mode = Mode::kAsync, .num_workers = 1});
  bad_mode.update.mode = Mode::kAllreduce;  // no ps mode
  CHECK(store.Init(bad_mode).code() == Code::kInvalidArgument);
  StoreInit bad_opt = MakeInit(kInitial, {.mode = Mode::kAsync, .num_workers = 1});
  bad_opt.optimizer.type = static_cast<config::OptimizerSpec::Type>(9);
  CHECK(store.Init(bad_opt).code() == Code::kInvalidArgument);
  StoreInit short_values = MakeInit(kInitial, {.mode = Mode::kAsync, .num_workers = 1});
  short_values.values = short_values.values.first(8);
  CHECK(store.Init(short_values).code() == Code::kInvalidArgument);
  CHECK_FALSE(store.initialized());
}

TEST_CASE("async applies a gradient whose bytes are not float-aligned", "[unit][ps]") {
  ParameterStore store;
  REQUIRE(store.Init(MakeInit(kInitial, {.mode = Mode::kAsync, .num_workers = 1})).ok());
  const std::vector<float> g = {2.0f, 4.0f, -2.0f, 0.0f};
  std::vector<std::byte> buffer(g.size() * 4 + 1);
  std::memcpy(buffer.data() + 1, g.data(), g.size() * 4);  // as a frame's payload may place them
  PushRequest p = MakePush(0, 0, g);
  p.grads = std::span<const std::byte>(buffer).subspan(1);
  REQUIRE(reinterpret_cast<std::uintptr_t>(p.grads.data()) % alignof(float) != 0);
  auto r = PushOk(store, p);
  CHECK(r.global_step == 1);
  CheckValues(store, {0.0f, 0.0f, 4.0f, 4.0f});
}

TEST_CASE("sync with 3 of 3 applies the average once, on the third gradient", "[unit][ps]") {
  ParameterStore store;
  REQUIRE(store.Init(MakeInit(kInitial, {.mode = Mode::kSync, .num_workers = 3, .replicas_to_aggregate = 3})).ok());
  const std::vector<float> g0 = {1, 2, 3, 4}, g1 = {3, 0, -3, 2}, g2 = {2, 1, 0, 0};

  auto r = PushOk(store, MakePush(1, 0, g1));
  CHECK(r.outcome == PushOutcome::kApplied);
  CHECK_FALSE(r.step_advanced);
  CHECK(r.global_step == 0);
  CheckValues(store, kInitial);

  r = PushOk(store, MakePush(0, 0, g0));
  CHECK(r.outcome == PushOutcome::kApplied);
  CHECK_FALSE(r.step_advanced);
  CHECK(r.global_step == 0);
  CHECK(store.global_step() == 0);
  CheckValues(store, kInitial);

  r = PushOk(store, MakePush(2, 0, g2));
  CHECK(r.outcome == PushOutcome::kApplied);
  CHECK(r.step_advanced);
  CHECK(r.global_step == 1);
  CHECK(store.global_step() == 1);
  // mean = (6, 3, 0, 6) / 3 = (2, 1, 0, 2); p - 0.5 * mean, once.
  CheckValues(store, {0.0f, 1.5f, 3.0f, 3.0f});
  CHECK(store.Read()->global_step == 1);

  // The next step starts empty: one more gradient changes nothing yet.
  r = PushOk(store, MakePush(0, 1, g0));
  CHECK_FALSE(r.step_advanced);
  CHECK(r.global_step == 1);
  CheckValues(store, {0.0f, 1.5f, 3.0f, 3.0f});
}

TEST_CASE("sync drops a gradient for an older step as stale and counts it for its worker", "[unit][ps]") {
  ParameterStore store;
  REQUIRE(store.Init(MakeInit(kInitial, {.mode = Mode::kSync, .num_workers = 3, .replicas_to_aggregate = 3})).ok());
  const std::vector<float> g = {2, 2, 2, 2};
  for (std::uint32_t w = 0; w < 3; ++w) PushOk(store, MakePush(w, 0, g));
  REQUIRE(store.global_step() == 1);
  CheckValues(store, {0.0f, 1.0f, 2.0f, 3.0f});

  auto r = PushOk(store, MakePush(1, 0, g));  // computed on step 0; the ps is at step 1
  CHECK(r.outcome == PushOutcome::kStale);
  CHECK_FALSE(r.step_advanced);
  CHECK(r.global_step == 1);
  CHECK(store.stale_counts() == std::vector<std::uint64_t>{0, 1, 0});
  r = PushOk(store, MakePush(1, 0, g));
  CHECK(r.outcome == PushOutcome::kStale);
  CHECK(store.stale_counts() == std::vector<std::uint64_t>{0, 2, 0});
  CheckValues(store, {0.0f, 1.0f, 2.0f, 3.0f});
  CHECK(store.global_step() == 1);

  // Stale gradients took no place in step 1: it still needs all three workers.
  PushOk(store, MakePush(0, 1, g));
  r = PushOk(store, MakePush(1, 1, g));
  CHECK_FALSE(r.step_advanced);
  r = PushOk(store, MakePush(2, 1, g));
  CHECK(r.step_advanced);
  CHECK(r.global_step == 2);
  CheckValues(store, {-1.0f, 0.0f, 1.0f, 2.0f});
}

TEST_CASE("sync drops a second gradient from one worker for one step as a duplicate", "[unit][ps]") {
  ParameterStore store;
  REQUIRE(store.Init(MakeInit(kInitial, {.mode = Mode::kSync, .num_workers = 3, .replicas_to_aggregate = 3})).ok());
  const std::vector<float> first = {3, 3, 3, 3}, retry = {300, 300, 300, 300}, g = {0, 0, 0, 0};

  auto r = PushOk(store, MakePush(1, 0, first));
  CHECK(r.outcome == PushOutcome::kApplied);
  r = PushOk(store, MakePush(1, 0, retry));
  CHECK(r.outcome == PushOutcome::kDuplicate);
  CHECK_FALSE(r.step_advanced);
  CHECK(r.global_step == 0);
  r = PushOk(store, MakePush(1, 0, first));  // an identical retry too
  CHECK(r.outcome == PushOutcome::kDuplicate);
  // Duplicates are neither stale nor a step's worth of gradients.
  CHECK(store.stale_counts() == std::vector<std::uint64_t>{0, 0, 0});
  CHECK(store.global_step() == 0);
  CheckValues(store, kInitial);

  PushOk(store, MakePush(0, 0, g));
  r = PushOk(store, MakePush(2, 0, g));
  CHECK(r.step_advanced);
  CHECK(r.global_step == 1);
  // mean = (3 + 0 + 0) / 3 = 1: the first gradient counted once, the retry not at all.
  CheckValues(store, {0.5f, 1.5f, 2.5f, 3.5f});

  // A retry after the step completed is stale, still not applied.
  r = PushOk(store, MakePush(1, 0, first));
  CHECK(r.outcome == PushOutcome::kStale);
  CheckValues(store, {0.5f, 1.5f, 2.5f, 3.5f});
}

TEST_CASE("sync with 2 of 3 completes on the second gradient; the third is stale", "[unit][ps]") {
  ParameterStore store;
  REQUIRE(store.Init(MakeInit(kInitial, {.mode = Mode::kSync, .num_workers = 3, .replicas_to_aggregate = 2})).ok());
  CHECK(store.to_aggregate() == 2);
  const std::vector<float> g0 = {1, 2, 3, 4}, g1 = {100, 100, 100, 100}, g2 = {2, 1, 0, 0};

  auto r = PushOk(store, MakePush(2, 0, g2));
  CHECK_FALSE(r.step_advanced);
  CheckValues(store, kInitial);
  r = PushOk(store, MakePush(0, 0, g0));
  CHECK(r.outcome == PushOutcome::kApplied);
  CHECK(r.step_advanced);
  CHECK(r.global_step == 1);
  // mean of g0 and g2 = (1.5, 1.5, 1.5, 2); p - 0.5 * mean.
  CheckValues(store, {0.25f, 1.25f, 2.25f, 3.0f});

  r = PushOk(store, MakePush(1, 0, g1));  // the slowest worker, for step 0
  CHECK(r.outcome == PushOutcome::kStale);
  CHECK_FALSE(r.step_advanced);
  CHECK(r.global_step == 1);
  CHECK(store.stale_counts() == std::vector<std::uint64_t>{0, 1, 0});
  CheckValues(store, {0.25f, 1.25f, 2.25f, 3.0f});
}

TEST_CASE("sync refuses a gradient for a step the ps has not reached", "[unit][ps]") {
  ParameterStore store;
  REQUIRE(store.Init(MakeInit(kInitial, {.mode = Mode::kSync, .num_workers = 2})).ok());
  const std::vector<float> g = {1, 1, 1, 1};
  auto r = store.Push(MakePush(0, 1, g));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message() == "PUSH for step 1 while the ps is at step 0");
  CheckValues(store, kInitial);
}

TEST_CASE("a push of the wrong length or from a worker out of range is InvalidArgument", "[unit][ps]") {
  for (Mode mode : {Mode::kAsync, Mode::kSync}) {
    INFO((mode == Mode::kAsync ? "async" : "sync"));
    ParameterStore store;
    REQUIRE(store.Init(MakeInit(kInitial, {.mode = mode, .num_workers = 3})).ok());
    const std::vector<float> short_g = {1, 1, 1}, long_g = {1, 1, 1, 1, 1}, g = {1, 1, 1, 1};

    auto r = store.Push(MakePush(0, 0, short_g));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message() == "PUSH of 3 floats to a shard of 4");
    r = store.Push(MakePush(0, 0, long_g));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message() == "PUSH of 5 floats to a shard of 4");
    PushRequest ragged = MakePush(0, 0, g);
    ragged.grads = ragged.grads.first(15);  // not a whole number of floats
    r = store.Push(ragged);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);

    r = store.Push(MakePush(3, 0, g));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message() == "PUSH from worker rank 3 of a cluster with 3 workers");
    r = store.Push(MakePush(0xffffffffu, 0, g));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);

    // None of them changed anything.
    CHECK(store.global_step() == 0);
    CHECK(store.stale_counts() == std::vector<std::uint64_t>{0, 0, 0});
    CheckValues(store, kInitial);
  }
}

TEST_CASE("a second Init is FailedPrecondition with the same layout, InvalidArgument with another", "[unit][ps]") {
  ParameterStore store;
  REQUIRE(store.Init(MakeInit(kInitial, {.mode = Mode::kAsync, .num_workers = 2})).ok());
  const std::vector<float> g = {2, 2, 2, 2};
  PushOk(store, MakePush(0, 0, g));

  const std::vector<float> other = {9, 9, 9, 9};
  Status s = store.Init(MakeInit(other, {.mode = Mode::kSync, .num_workers = 2}));
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK(s.message() == "already initialised");
  s = store.Init(MakeInit(other, {.mode = Mode::kAsync, .num_workers = 2, .layout_hash = kHash + 1}));
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message() == "already initialised with another variable layout (another job or model?)");

  // Neither touched the store.
  CHECK(store.layout_hash() == kHash);
  CHECK_FALSE(store.sync());
  CHECK(store.global_step() == 1);
  CheckValues(store, {0.0f, 1.0f, 2.0f, 3.0f});
}

TEST_CASE("Init refuses bad optimizer settings and replica counts", "[unit][ps]") {
  {
    ParameterStore store;
    Status s = store.Init(MakeInit(kInitial, {.learning_rate = 0.0}));
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message() == "INIT: optimizer settings out of range");
    CHECK_FALSE(store.initialized());
  }
  {
    ParameterStore store;
    Status s = store.Init(MakeInit(kInitial, {.mode = Mode::kSync, .num_workers = 3, .replicas_to_aggregate = 4}));
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message() == "INIT: replicas_to_aggregate 4 with 3 workers");
    CHECK_FALSE(store.initialized());
    // A failed Init leaves the store open for a good one.
    REQUIRE(store.Init(MakeInit(kInitial, {.mode = Mode::kSync, .num_workers = 3, .replicas_to_aggregate = 2})).ok());
    CHECK(store.to_aggregate() == 2);
  }
}

TEST_CASE("a snapshot from Read keeps its values and step after later pushes", "[unit][ps]") {
  SECTION("async") {
    ParameterStore store;
    REQUIRE(store.Init(MakeInit(kInitial, {.mode = Mode::kAsync, .num_workers = 1})).ok());
    auto before = store.Read();
    CHECK(store.Read() == before);  // readers of one version share it
    const std::vector<float> g = {2, 2, 2, 2};
    PushOk(store, MakePush(0, 0, g));
    CHECK(before->global_step == 0);
    CHECK(before->values == kInitial);
    auto after = store.Read();
    CHECK(after != before);
    CHECK(after->global_step == 1);
    CHECK(after->values == std::vector<float>{0, 1, 2, 3});
    PushOk(store, MakePush(0, 1, g));
    CHECK(after->values == std::vector<float>{0, 1, 2, 3});
    CHECK(before->values == kInitial);
    CHECK(store.Read()->values == std::vector<float>{-1, 0, 1, 2});
  }
  SECTION("sync") {
    ParameterStore store;
    REQUIRE(store.Init(MakeInit(kInitial, {.mode = Mode::kSync, .num_workers = 2})).ok());
    auto before = store.Read();
    const std::vector<float> g = {2, 2, 2, 2};
    PushOk(store, MakePush(0, 0, g));
    CHECK(store.Read() == before);  // a partial step changes nothing
    PushOk(store, MakePush(1, 0, g));
    CHECK(before->global_step == 0);
    CHECK(before->values == kInitial);
    CHECK(store.Read()->global_step == 1);
    CHECK(store.Read()->values == std::vector<float>{0, 1, 2, 3});
  }
}

TEST_CASE("Init with state restores the slots and update count; ReadState gives them back with resume steps", "[unit][ps]") {
  ParameterStore store;
  StoreInit init = MakeInit(kInitial, {.mode = Mode::kAsync, .num_workers = 2});
  init.optimizer.type = config::OptimizerSpec::Type::kMomentum;  // one slot per value
  init.optimizer.momentum = 0.5;
  init.global_step = 40;
  const std::vector<float> slots = {0.25f, -1.0f, 2.0f, 0.0f};
  init.has_state = true;
  init.updates = 40;
  init.resume_steps = {30, 12};
  init.slots = std::as_bytes(std::span(slots));
  REQUIRE(store.Init(init).ok());
  CHECK(store.ResumeStep(0) == 30);
  CHECK(store.ResumeStep(1) == 12);
  Result<ParameterStore::State> st = store.ReadState();
  REQUIRE(st.ok());
  CHECK(st->params->global_step == 40);
  CHECK(st->params->values == kInitial);
  CHECK(*st->slots == slots);
  CHECK(st->updates == 40);
  CHECK(st->resume_steps == std::vector<std::uint64_t>{30, 12});
  // The restored accumulator is used: a = 0.5 * 0.25 + 1 = 1.125; p = 1 - 0.5 * 1.125.
  const std::vector<float> grad = {1.0f, 0.0f, 0.0f, 0.0f};
  PushRequest push = MakePush(0, 40, grad);
  push.local_step = 31;
  PushOk(store, push);
  CheckValues(store, {1.0f - 0.5f * 1.125f, 2.0f + 0.5f * 0.5f, 3.0f - 0.5f * 1.0f, 4.0f});
  CHECK(store.ResumeStep(0) == 31);
  // ReadState copied the slots: the push did not change what was read.
  CHECK(*st->slots == slots);
}

TEST_CASE("Init with state of the wrong size is refused and leaves the store uninitialised", "[unit][ps]") {
  ParameterStore store;
  StoreInit init = MakeInit(kInitial, {.mode = Mode::kAsync, .num_workers = 2});
  init.optimizer.type = config::OptimizerSpec::Type::kMomentum;
  init.optimizer.momentum = 0.5;
  const std::vector<float> slots = {0.25f, -1.0f};
  init.has_state = true;
  init.slots = std::as_bytes(std::span(slots));
  Status s = store.Init(init);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message() == "INIT: optimizer state: 2 slot floats where 4 are kept");
  CHECK_FALSE(store.initialized());
  CHECK(store.ReadState().status().code() == Code::kFailedPrecondition);
}

TEST_CASE("sync: restored resume steps follow the global step", "[unit][ps]") {
  ParameterStore store;
  StoreInit init = MakeInit(kInitial, {.mode = Mode::kSync, .num_workers = 2});
  init.global_step = 100;
  init.has_state = true;
  init.resume_steps = {50, 50};  // the worker count changed: local steps restart at an epoch's start
  REQUIRE(store.Init(init).ok());
  CHECK(store.ResumeStep(1) == 50);
  const std::vector<float> grad = {1.0f, 1.0f, 1.0f, 1.0f};
  PushOk(store, MakePush(0, 100, grad));
  PushOk(store, MakePush(1, 100, grad));
  CHECK(store.global_step() == 101);
  CHECK(store.ResumeStep(0) == 51);
}

}  // namespace
}  // namespace tfd::ps

namespace tfd::ps {
namespace {

TEST_CASE("the applied learning rate follows the store's global step (schedule from INIT)", "[unit][ps][schedule]") {
  const std::vector<float> zero = {0.0f};
  const std::vector<float> one = {1.0f};
  for (Mode mode : {Mode::kAsync, Mode::kSync}) {
    INFO("sync " << (mode == Mode::kSync));
    ParameterStore store;
    StoreInit init = MakeInit(zero, {.mode = mode, .num_workers = 1, .learning_rate = 1.0});
    init.optimizer.schedule.kind = config::LrSchedule::Kind::kPiecewiseConstant;
    init.optimizer.schedule.boundaries = {1, 3};
    init.optimizer.schedule.values = {1.0, 0.5, 0.25};
    init.global_step = 2;  // a ps restarted at step 2: its first update has step 2's rate
    REQUIRE(store.Init(init).ok());
    // steps 2, 3 at 0.5; steps 4, 5 at 0.25
    for (std::uint64_t step = 2; step < 6; ++step) PushOk(store, MakePush(0, step, one));
    CheckValues(store, {-1.5f});
    CHECK(store.global_step() == 6);
  }
}

TEST_CASE("INIT refuses a schedule out of range", "[unit][ps][schedule]") {
  ParameterStore store;
  StoreInit init = MakeInit(kInitial, {});
  init.optimizer.schedule.kind = config::LrSchedule::Kind::kPiecewiseConstant;
  init.optimizer.schedule.boundaries = {1};
  init.optimizer.schedule.values = {0.5};  // one short
  CHECK(store.Init(init).message() == "INIT: learning-rate schedule or weight decay out of range");
  init.optimizer.schedule = {};
  init.optimizer.weight_decay = -1;
  CHECK(store.Init(init).message() == "INIT: learning-rate schedule or weight decay out of range");
}

TEST_CASE("weight decay on the ps applies to kernel chunks only", "[unit][ps][schedule]") {
  const std::vector<float> values = {2.0f, 2.0f};
  StoreInit init = MakeInit(values, {.num_workers = 1, .learning_rate = 0.5});
  init.chunks = {{"dense/kernel[1:2]", 1}, {"dense/bias", 1}};
  init.optimizer.weight_decay = 0.1;
  ParameterStore store;
  REQUIRE(store.Init(init).ok());
  PushOk(store, MakePush(0, 0, {1.0f, 1.0f}));
  CheckValues(store, {2.0f - 0.5f * 1.2f, 1.5f});
}

}  // namespace
}  // namespace tfd::ps
