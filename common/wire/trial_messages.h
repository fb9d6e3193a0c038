#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/base/class_id.h"
#include "common/base/status.h"
#include "common/wire/frame.h"

namespace tfd::wire {

// The messages between a coordinator and its generic workers (docs/protocol.md, "Coordinator"):
// every one is a call from the worker, answered by the coordinator. Decode returns Corruption on any
// short, oversize or trailing field.

inline constexpr std::size_t kMaxJobBytes = 1u << 20;  // a job spec's JSON text
inline constexpr std::uint32_t kMaxTrialMetrics = 16;
inline constexpr std::size_t kMaxMetricName = 64;
inline constexpr std::uint32_t kNoTrial = 0xffffffffu;

struct TrialRequest {  // worker -> coordinator: the worker is idle; answered by TRIAL_ASSIGN
  std::uint32_t worker = 0;
};

struct TrialAssign {  // coordinator -> worker: a trial to train, or kNoTrial (the sweep is over: exit)
  std::uint32_t trial = kNoTrial;
  std::uint32_t attempt = 0;  // 0 first; each re-placement after a lost worker adds 1
  std::string job;            // the job spec's JSON text
  // An ensemble member: send TRIAL_PREDICTIONS after each epoch. Optional on the wire: absent
  // (false) when the payload ends after the job.
  bool predictions = false;
  // A re-placed trial: the checkpoint (docs/checkpoints.md's file bytes) the trial's last worker
  // sent after `resume_epoch`, its last epoch reported; train from epoch resume_epoch + 1. Empty
  // (and resume_epoch 0) for a fresh start. Optional on the wire: absent when the payload ends
  // after the predictions flag.
  std::uint32_t resume_epoch = 0;
  std::vector<std::byte> checkpoint;
};

// A trial's checkpoint, as a checkpoint file's bytes (TRIAL_CHECKPOINT and TRIAL_ASSIGN).
inline constexpr std::size_t kMaxTrialCheckpointBytes = 128u << 20;

struct TrialCheckpoint {  // worker -> coordinator: the trial's state after `epoch`, sent before that
                          // epoch's TRIAL_EPOCH; answered by TRIAL_CONTROL (stop false)
  std::uint32_t trial = 0;
  std::uint32_t epoch = 0;
  std::vector<std::byte> bytes;  // at most kMaxTrialCheckpointBytes
};

inline constexpr std::uint32_t kMaxPredictionClasses = 1024;
inline constexpr std::uint32_t kMaxPredictionRows = 1u << 20;
// Past this many classes a label takes 2 bytes on the wire, not 1 (kMaxPredictionClasses fits 2).
inline constexpr std::uint32_t kMaxByteLabelClasses = 256;

struct TrialPredictions {  // worker -> coordinator: an ensemble member's test-set outputs after an epoch
  std::uint32_t trial = 0;
  std::uint32_t epoch = 0;
  std::uint32_t classes = 0;         // a regression: the model's outputs (one per target)
  std::vector<ClassId> labels;       // one per row, < classes (0 in a regression, which has no classes)
  std::vector<float> probabilities;  // rows x classes, row-major: the softmax, or a regression's outputs
  // A regression member's test targets, rows x classes like `probabilities`; empty for classification.
  std::vector<float> targets;
};

struct TrialEpoch {  // worker -> coordinator: a trial's epoch line; answered by TRIAL_CONTROL
  std::uint32_t trial = 0;
  std::uint32_t epoch = 0;
  std::vector<std::pair<std::string, double>> metrics;  // "loss", "test_accuracy", ...
};

struct TrialControl {  // coordinator -> worker
  bool stop = false;  // stop the trial now (pruned, or the sweep is stopping)
};

struct TrialEnd {  // worker -> coordinator: the trial ended; answered by TRIAL_CONTROL
  std::uint32_t trial = 0;
  bool ok = false;
  bool stopped = false;  // ended early because the coordinator said stop
  std::string reason;    // why it failed
  std::vector<std::pair<std::string, double>> metrics;  // the done event's
};

OutFrame Encode(const TrialRequest& m);
OutFrame Encode(const TrialAssign& m);
OutFrame Encode(const TrialEpoch& m);
OutFrame Encode(const TrialControl& m);
OutFrame Encode(const TrialEnd& m);
OutFrame Encode(const TrialPredictions& m);  // copies the vectors into the frame
OutFrame Encode(const TrialCheckpoint& m);
Status Decode(std::span<const std::byte> payload, TrialRequest* m);
Status Decode(std::span<const std::byte> payload, TrialAssign* m);
Status Decode(std::span<const std::byte> payload, TrialEpoch* m);
Status Decode(std::span<const std::byte> payload, TrialControl* m);
Status Decode(std::span<const std::byte> payload, TrialEnd* m);
Status Decode(std::span<const std::byte> payload, TrialPredictions* m);
Status Decode(std::span<const std::byte> payload, TrialCheckpoint* m);

}  // namespace tfd::wire
