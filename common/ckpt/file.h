#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/ckpt/checkpoint.h"
#include "common/config/job.h"

namespace tfd::ckpt {

// Checkpoint files in a folder, written so that a crash at any moment leaves the previous
// checkpoints readable, and read back newest first, skipping any that fails to parse.

// "ckpt-000000000100.tfdckpt" for step 100.
std::string FileName(std::uint64_t global_step);
// The step a checkpoint file's name (no folder) says; false for any other name (a .tmp file too).
bool StepOfFileName(std::string_view name, std::uint64_t* step);

// Writes `bytes` to `path` (created or truncated) and fsyncs it; on failure the file is removed
// and the error names the path. SyncFolder fsyncs a folder, so that renames and new files in it last.
Status WriteSynced(const std::string& path, std::span<const std::byte> bytes);
Status SyncFolder(const std::string& dir);

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

// The early-stopping rule's state after the last epoch the chief judged, in
// `dir`/early_stopping.json (JSON, written durably as a checkpoint is: temporary file, fsync,
// rename). The chief writes it at each judgement, so a chief restarted between two checkpoints
// resumes its patience from the epoch it last judged. `model` is a fingerprint of the model card:
// a record of another model or data is not read back.
inline constexpr const char* kEarlyStoppingFile = "early_stopping.json";
Status WriteEarlyStopping(const std::string& dir, std::uint64_t model, const EarlyStopping& state);
// NotFound when there is no record, or it belongs to another model; Corruption naming the file and
// the field when it does not parse.
Result<EarlyStopping> ReadEarlyStopping(const std::string& dir, std::uint64_t model);

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

}  // namespace tfd::ckpt
