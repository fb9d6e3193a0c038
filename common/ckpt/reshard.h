#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/ckpt/checkpoint.h"

namespace tfd::ckpt {

// A checkpoint holds whole variables and one data cursor per worker, never ps shards, so a run can
// resume on another number of ps or workers: these functions cut whole tensors into each ps's
// flat ranges (and back), and move data cursors onto another worker count. Pure functions over
// memory; safe from any thread.

// Where a named variable sits in the model's flat parameter buffer.
struct Variable {
  std::string name;
  std::int64_t flat_offset = 0;
  std::int64_t size = 0;  // floats
};
// A run of the flat buffer held by one ps (daemon::Slice's flat_offset and length).
struct FlatRange {
  std::int64_t flat_offset = 0;
  std::int64_t length = 0;
};
// One ps's state: its ranges' values back to back, and its slots laid out as
// optim::OptimizerState keeps them (slot k of every value, then slot k + 1).
struct ShardState {
  std::vector<float> values;
  std::vector<float> slots;
};

// Cuts the checkpoint's tensors into the ranges of each ps (`shards[ps]`, in the order the ps
// keeps them). `variables` says where each tensor lives in the flat buffer; tensors are matched by
// name, so the new placement may differ from the one that wrote the checkpoint. InvalidArgument
// when a variable is missing from the checkpoint or has another size, or a range leaves the buffer.
Result<std::vector<ShardState>> Reshard(const Checkpoint& ckpt, const std::vector<Variable>& variables,
                                        const std::vector<std::vector<FlatRange>>& shards);

// The inverse: whole named tensors from each ps's state (as the chief gathers them to save).
// `shapes[i]` is variables[i]'s shape. InvalidArgument when the ranges do not cover every variable
// exactly once or a shard's state has the wrong size.
Result<std::vector<NamedTensor>> Assemble(const std::vector<Variable>& variables,
                                          const std::vector<std::vector<std::int64_t>>& shapes,
                                          const std::vector<std::string>& slot_names,
                                          const std::vector<std::vector<FlatRange>>& shards,
                                          const std::vector<ShardState>& states);

// Where each of `new_workers` workers resumes, from cursors saved under ckpt.num_workers workers.
// Same count: each rank's cursor as saved. Another count: every worker restarts in the oldest
// epoch any worker was in, from the lowest permutation position not yet finished by all (so no
// example is skipped; a few may be read twice); see docs/checkpoints.md. Result is in rank order.
// InvalidArgument when the cursors are not one per rank.
Result<std::vector<DataCursor>> ReshardCursors(const Checkpoint& ckpt, std::uint32_t new_workers);

}  // namespace tfd::ckpt
