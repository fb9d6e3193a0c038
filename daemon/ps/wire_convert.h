#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "common/wire/compressed_messages.h"
#include "common/wire/messages.h"
#include "daemon/ps/parameter_store.h"
#include "daemon/ps/worker_roster.h"

namespace tfd::ps {

// The ps's translation between decoded frames and the store's own types, used by PsService only:
// the store never sees a wire message, and PsService never hands one to it. The wire structs have
// been validated by their decoder, so every code is known; their byte spans are borrowed, not copied.

StoreInit FromWire(const wire::Init& init);
PushRequest FromWire(const wire::Push& push);
// A PUSH_COMPRESSED's gradient as float32 (fp16/bf16 decoded; sparse pairs into zeros; its decoder
// bounded every index by its count). InvalidArgument when its count is not the shard's size.
Result<std::vector<float>> DenseGradient(const wire::PushCompressed& m, std::uint64_t shard_size);

wire::PushAck ToWire(const ParameterStore::PushResult& result);
// The run's progress between the roster's ranks and the wire's (`stop`: the chief stopped the run early).
WorkerRoster::Progress FromWire(const wire::Progress& progress);
wire::Progress ToWire(const WorkerRoster::Progress& progress, bool stop);
// A STATE frame of `state`; the frame owns (keeps alive) the snapshot and slots its tail points into.
// `feedback`: the workers' error feedback deposits (rank, the shard's floats) for save `request`;
// `progress` and `absent` (the increasing ranks this ps has lost and not seen back) go with them.
wire::OutFrame EncodeState(const ParameterStore::State& state, std::uint64_t request = 0,
                           std::vector<std::pair<int, std::shared_ptr<const std::vector<float>>>> feedback = {},
                           wire::Progress progress = {}, std::vector<std::uint32_t> absent = {});
// A PARAMS frame of `snapshot`, which the frame keeps alive.
// `feedback_request`: the save whose error feedback the receiving worker is asked for (0: none).
wire::OutFrame EncodeParams(std::shared_ptr<const ParameterStore::Snapshot> snapshot, std::uint64_t feedback_request = 0);

}  // namespace tfd::ps
