#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/config/job.h"

namespace tfd::ckpt {

// A training checkpoint: everything needed to resume a run on any number of ps and workers.
// docs/checkpoints.md specifies the file byte by byte.

inline constexpr std::uint32_t kFileMagic = 0x4B444654;  // the bytes 'T' 'F' 'D' 'K'
inline constexpr std::uint16_t kFormatVersion = 1;
inline constexpr std::size_t kMaxNameBytes = 1024;
inline constexpr std::size_t kMaxRank = 8;
inline constexpr std::size_t kMaxSlots = 8;
inline constexpr std::uint32_t kMaxTensors = 1u << 20;
inline constexpr std::uint32_t kMaxCursors = 1u << 16;

// The update rule the slots belong to. A checkpoint restores only under the same rule.
struct OptimizerInfo {
  config::OptimizerSpec spec;
  std::int64_t updates = 0;             // updates applied (Adam's t: its beta powers are beta^t)
  std::vector<std::string> slot_names;  // as optim::Optimizer::SlotNames(): "momentum"; "m", "v"
};

// Where a worker is in the training data. Worker `rank` of `num_workers` reads, in `epoch`, the
// positions base + rank + j * num_workers of that epoch's permutation, j = 0, 1, ...; it has
// finished the first `next` of them.
struct DataCursor {
  std::uint32_t rank = 0;
  std::uint32_t epoch = 0;
  std::uint64_t base = 0;
  std::uint64_t next = 0;
};

struct Slot {
  std::string name;
  std::vector<float> values;  // as many as the tensor's values
};

// A whole variable of the model, with its optimizer slots in OptimizerInfo::slot_names order.
struct NamedTensor {
  std::string name;                 // "dense/kernel"
  std::vector<std::int64_t> shape;  // product == values.size(); {} for a scalar
  std::vector<float> values;
  std::vector<Slot> slots;
};

struct Checkpoint {
  std::uint64_t global_step = 0;
  std::uint32_t num_workers = 0;  // the worker count the cursors were taken under
  OptimizerInfo optimizer;
  std::vector<DataCursor> cursors;  // one per worker rank, in rank order
  std::vector<NamedTensor> tensors;  // in the model's flat order
};

// --- Bytes -----------------------------------------------------------------------------------

// The file's bytes. InvalidArgument when the checkpoint is inconsistent (a shape that does not
// match the values, slots that do not match the optimizer's names, a name over kMaxNameBytes).
Result<std::vector<std::byte>> Serialize(const Checkpoint& ckpt);
// Parses a whole file's bytes. Corruption with one line naming `source`, the record and the fault
// ("ckpt-000000000100.tfdckpt: record 4 (TENSOR): CRC 0x... does not match 0x..."). Every length
// is checked against the bytes that remain before anything is allocated.
Result<Checkpoint> Parse(std::span<const std::byte> bytes, std::string_view source = "checkpoint");

// --- Files -----------------------------------------------------------------------------------

// "ckpt-000000000100.tfdckpt" for step 100.
std::string FileName(std::uint64_t global_step);

// Writes `ckpt` into `dir` (which must exist) as FileName(global_step): a temporary file in the
// same folder, fsync, rename, fsync of the folder; then deletes all but the newest `keep_last`
// checkpoints. Returns the path written. Errors name the path and the errno text; a failed write
// leaves the previous checkpoints untouched. Not safe against two writers in one folder.
Result<std::string> Write(const std::string& dir, const Checkpoint& ckpt, int keep_last);

// Reads and parses one file. NotFound when it cannot be opened; Corruption as Parse.
Result<Checkpoint> Load(const std::string& path);

struct Loaded {
  std::string path;
  Checkpoint checkpoint;
  std::vector<std::string> skipped;  // one line per newer file that was rejected, and why
};
// The newest checkpoint in `dir` that loads. Each rejected file is logged as a warning (and listed
// in `skipped`) and the next older one is tried. NotFound when the folder is missing or holds no
// valid checkpoint (the message says which, and how many files were rejected).
Result<Loaded> LoadNewestValid(const std::string& dir);

// The checkpoint file paths in `dir`, newest (highest step) first; temporary files excluded.
Result<std::vector<std::string>> List(const std::string& dir);

// FailedPrecondition when `ckpt` was saved under another optimizer or other hyper-parameters, or
// its slots are not the ones `wanted` keeps: the message names `source` and both optimizers.
Status CheckOptimizer(const Checkpoint& ckpt, const config::OptimizerSpec& wanted, std::string_view source);

// When the chief saves: after every `every_steps` global steps and/or every `every_secs` seconds
// since the last save (a rule whose setting is 0 never fires). The final save at the end of a run
// is the caller's. Not thread-safe.
class Schedule {
 public:
  using Clock = std::chrono::steady_clock;
  Schedule(const config::CheckpointSpec& spec, std::uint64_t start_step, Clock::time_point start);
  bool Due(std::uint64_t global_step, Clock::time_point now) const;
  void Saved(std::uint64_t global_step, Clock::time_point now);

 private:
  std::int64_t every_steps_;
  double every_secs_;
  std::uint64_t last_step_;
  Clock::time_point last_time_;
};

// --- Re-sharding -----------------------------------------------------------------------------

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
