#include "common/wire/trial_messages.h"

#include <cstring>

#include <fmt/format.h>

#include "common/wire/bytes.h"
#include "common/wire/payload.h"

namespace tfd::wire {
namespace {

using payload::ReadBool;
using payload::Start;
using payload::Trailing;

Status Bad(const char* what) { return Status::Corruption(fmt::format("{}: payload too short, oversize or malformed", what)); }

void PutMetrics(ByteWriter& w, const std::vector<std::pair<std::string, double>>& metrics) {
  const std::size_t n = std::min<std::size_t>(metrics.size(), kMaxTrialMetrics);
  w.U8(static_cast<std::uint8_t>(n));
  for (std::size_t i = 0; i < n; ++i) {
    w.Str(metrics[i].first.substr(0, kMaxMetricName));
    w.F64(metrics[i].second);
  }
}

bool ReadMetrics(ByteReader& r, std::vector<std::pair<std::string, double>>* out) {
  std::uint8_t n = 0;
  if (!r.U8(&n) || n > kMaxTrialMetrics) return false;
  out->resize(n);
  for (auto& [name, value] : *out)
    if (!r.Str(&name, kMaxMetricName) || !r.F64(&value)) return false;
  return true;
}

}  // namespace

OutFrame Encode(const TrialRequest& m) {
  OutFrame f = Start(MessageType::kTrialRequest);
  ByteWriter(&f.head).U32(m.worker);
  return f;
}

Status Decode(std::span<const std::byte> p, TrialRequest* m) {
  ByteReader r(p);
  if (!r.U32(&m->worker)) return Bad("TRIAL_REQUEST");
  return Trailing("TRIAL_REQUEST", r);
}

// trial u32 | attempt u32 | job_len u32 (<= kMaxJobBytes) | job bytes
// [ | predictions u8 [ | resume_epoch u32 | checkpoint_len u32 (<= kMaxTrialCheckpointBytes) | checkpoint bytes ] ]
OutFrame Encode(const TrialAssign& m) {
  OutFrame f = Start(MessageType::kTrialAssign);
  ByteWriter w(&f.head);
  w.U32(m.trial);
  w.U32(m.attempt);
  const std::size_t n = std::min(m.job.size(), kMaxJobBytes);
  w.U32(static_cast<std::uint32_t>(n));
  w.Raw(m.job.data(), n);
  const bool resume = !m.checkpoint.empty() && m.checkpoint.size() <= kMaxTrialCheckpointBytes;
  if (m.predictions || resume) w.U8(m.predictions ? 1 : 0);
  if (resume) {
    w.U32(m.resume_epoch);
    w.U32(static_cast<std::uint32_t>(m.checkpoint.size()));
    w.Raw(m.checkpoint.data(), m.checkpoint.size());
  }
  return f;
}

Status Decode(std::span<const std::byte> p, TrialAssign* m) {
  ByteReader r(p);
  std::uint32_t n = 0;
  if (!r.U32(&m->trial) || !r.U32(&m->attempt) || !r.U32(&n) || n > kMaxJobBytes || n > r.remaining()) return Bad("TRIAL_ASSIGN");
  m->job.resize(n);
  if (!r.Bytes(std::as_writable_bytes(std::span<char>(m->job.data(), n)))) return Bad("TRIAL_ASSIGN");
  m->predictions = false;
  m->resume_epoch = 0;
  m->checkpoint.clear();
  if (r.remaining() > 0 && !ReadBool(r, &m->predictions)) return Bad("TRIAL_ASSIGN");
  if (r.remaining() > 0) {
    std::uint32_t c = 0;
    if (!r.U32(&m->resume_epoch) || !r.U32(&c) || c == 0 || c > kMaxTrialCheckpointBytes || c > r.remaining()) return Bad("TRIAL_ASSIGN");
    m->checkpoint.resize(c);
    if (!r.Bytes(m->checkpoint)) return Bad("TRIAL_ASSIGN");
  }
  return Trailing("TRIAL_ASSIGN", r);
}

// trial u32 | epoch u32 | len u32 (1 .. kMaxTrialCheckpointBytes) | bytes
OutFrame Encode(const TrialCheckpoint& m) {
  OutFrame f = Start(MessageType::kTrialCheckpoint);
  ByteWriter w(&f.head);
  w.U32(m.trial);
  w.U32(m.epoch);
  const std::size_t n = std::min(m.bytes.size(), kMaxTrialCheckpointBytes);
  w.U32(static_cast<std::uint32_t>(n));
  w.Raw(m.bytes.data(), n);
  return f;
}

Status Decode(std::span<const std::byte> p, TrialCheckpoint* m) {
  ByteReader r(p);
  std::uint32_t n = 0;
  if (!r.U32(&m->trial) || !r.U32(&m->epoch) || !r.U32(&n) || n == 0 || n > kMaxTrialCheckpointBytes || n > r.remaining())
    return Bad("TRIAL_CHECKPOINT");
  m->bytes.resize(n);
  if (!r.Bytes(m->bytes)) return Bad("TRIAL_CHECKPOINT");
  return Trailing("TRIAL_CHECKPOINT", r);
}

OutFrame Encode(const TrialEpoch& m) {
  OutFrame f = Start(MessageType::kTrialEpoch);
  ByteWriter w(&f.head);
  w.U32(m.trial);
  w.U32(m.epoch);
  PutMetrics(w, m.metrics);
  return f;
}

Status Decode(std::span<const std::byte> p, TrialEpoch* m) {
  ByteReader r(p);
  if (!r.U32(&m->trial) || !r.U32(&m->epoch) || !ReadMetrics(r, &m->metrics)) return Bad("TRIAL_EPOCH");
  return Trailing("TRIAL_EPOCH", r);
}

OutFrame Encode(const TrialControl& m) {
  OutFrame f = Start(MessageType::kTrialControl);
  ByteWriter(&f.head).U8(m.stop ? 1 : 0);
  return f;
}

Status Decode(std::span<const std::byte> p, TrialControl* m) {
  ByteReader r(p);
  if (!ReadBool(r, &m->stop)) return Bad("TRIAL_CONTROL");
  return Trailing("TRIAL_CONTROL", r);
}

OutFrame Encode(const TrialEnd& m) {
  OutFrame f = Start(MessageType::kTrialEnd);
  ByteWriter w(&f.head);
  w.U32(m.trial);
  w.U8(m.ok ? 1 : 0);
  w.U8(m.stopped ? 1 : 0);
  w.Str(m.reason.substr(0, 4096));
  PutMetrics(w, m.metrics);
  return f;
}

Status Decode(std::span<const std::byte> p, TrialEnd* m) {
  ByteReader r(p);
  if (!r.U32(&m->trial) || !ReadBool(r, &m->ok) || !ReadBool(r, &m->stopped) || !r.Str(&m->reason, 4096) || !ReadMetrics(r, &m->metrics))
    return Bad("TRIAL_END");
  return Trailing("TRIAL_END", r);
}

namespace {
// Labels are u8 for at most kMaxByteLabelClasses classes (byte for byte the frame from before more
// classes were allowed), else u16: the width follows from `classes`, which comes first.
std::size_t LabelBytes(std::uint32_t classes) { return classes <= kMaxByteLabelClasses ? 1 : 2; }

bool ReadLabels(ByteReader& r, std::uint32_t classes, std::uint32_t rows, std::vector<ClassId>* labels) {
  labels->resize(rows);
  for (ClassId& y : *labels) {
    std::uint8_t b = 0;
    std::uint16_t w = 0;
    if (LabelBytes(classes) == 1 ? !r.U8(&b) : !r.U16(&w)) return false;
    y = LabelBytes(classes) == 1 ? b : w;
    if (static_cast<std::uint32_t>(y) >= classes) return false;
  }
  return true;
}
}  // namespace

// trial u32 | epoch u32 | classes u32 | rows u32 | labels (u8, or u16 past 256 classes)[rows] |
// probabilities f32[rows x classes] [| regression u8 (= 1) | targets f32[rows x classes]]: the
// trailer was appended for regression, so a classification frame is byte for byte what it was.
OutFrame Encode(const TrialPredictions& m) {
  OutFrame f = Start(MessageType::kTrialPredictions);
  ByteWriter w(&f.head);
  w.U32(m.trial);
  w.U32(m.epoch);
  w.U32(m.classes);
  w.U32(static_cast<std::uint32_t>(m.labels.size()));
  for (ClassId y : m.labels) {
    if (LabelBytes(m.classes) == 1) w.U8(static_cast<std::uint8_t>(y));
    else w.U16(static_cast<std::uint16_t>(y));
  }
  w.Floats(m.probabilities);
  if (!m.targets.empty()) {
    w.U8(1);
    w.Floats(m.targets);
  }
  return f;
}

Status Decode(std::span<const std::byte> p, TrialPredictions* m) {
  ByteReader r(p);
  std::uint32_t rows = 0;
  if (!r.U32(&m->trial) || !r.U32(&m->epoch) || !r.U32(&m->classes) || !r.U32(&rows) || m->classes == 0 ||
      m->classes > kMaxPredictionClasses || rows > kMaxPredictionRows || rows * LabelBytes(m->classes) > r.remaining())
    return Bad("TRIAL_PREDICTIONS");
  if (!ReadLabels(r, m->classes, rows, &m->labels)) return Bad("TRIAL_PREDICTIONS");
  const std::uint64_t count = std::uint64_t{rows} * m->classes;
  std::span<const std::byte> floats;
  if (!r.FloatBytes(count, &floats)) return Bad("TRIAL_PREDICTIONS");
  m->probabilities.resize(static_cast<std::size_t>(count));
  if (count > 0) std::memcpy(m->probabilities.data(), floats.data(), floats.size());
  m->targets.clear();
  if (r.remaining() == 0) return Status::Ok();
  std::uint8_t regression = 0;
  if (!r.U8(&regression) || regression != 1 || !r.FloatBytes(count, &floats)) return Bad("TRIAL_PREDICTIONS");
  m->targets.resize(static_cast<std::size_t>(count));
  if (count > 0) std::memcpy(m->targets.data(), floats.data(), floats.size());
  return Trailing("TRIAL_PREDICTIONS", r);
}

}  // namespace tfd::wire
