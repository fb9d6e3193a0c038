#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"
#include "common/wire/frame.h"

namespace tfd::wire {

// Plain message structs; docs/protocol.md gives each payload's bytes. Encode* build an OutFrame
// (tensor data as tail spans that the caller keeps alive until sent); Decode* parse a payload and
// return Corruption on any short, oversize or inconsistent field. Float data is returned as a view
// of the payload's bytes (little-endian floats, possibly unaligned: copy out with memcpy).

inline constexpr std::size_t kMaxNameBytes = 1024;
inline constexpr std::uint32_t kMaxChunks = 1u << 20;
inline constexpr std::uint32_t kMaxWorkers = 1u << 16;

// The codes below are append-only numbers on the wire (never renumber or reuse one). Decode refuses
// an unknown code as Corruption naming the field, so code past the decoder sees only these values.
enum class TaskKind : std::uint8_t { kChief = 0, kWorker = 1, kPs = 2, kEvaluator = 3, kCoordinator = 4 };
std::string_view TaskKindName(TaskKind k);  // "chief", "worker", "ps", "evaluator", "coordinator"
enum class OptimizerKind : std::uint8_t { kSgd = 0, kMomentum = 1, kAdam = 2 };
enum class UpdateMode : std::uint8_t { kAsync = 0, kSync = 1 };
// sync: what the ps does when a worker is lost for good (docs/config.md, update.on_worker_loss).
enum class WorkerLossPolicy : std::uint8_t { kFail = 0, kWait = 1, kShrink = 2 };

struct Hello {  // client -> server, first frame on a connection
  std::uint16_t version = kProtocolVersion;
  TaskKind kind = TaskKind::kWorker;
  std::uint32_t index = 0;
  std::uint64_t incarnation = 0;
  std::uint64_t cluster_id = 0;
};

struct Welcome {  // server -> client, reply to HELLO
  TaskKind kind = TaskKind::kPs;
  std::uint32_t index = 0;
  std::uint64_t incarnation = 0;
  bool initialized = false;
  std::uint64_t global_step = 0;
  // Where this worker rank resumes after a restart: async, the last local step the ps applied from
  // any incarnation of it; sync, the global step. 0 for a worker new to the ps.
  std::uint64_t resume_step = 0;
};

// The learning-rate schedule (docs/config.md, optimizer.learning_rate).
enum class LrScheduleKind : std::uint8_t { kConstant = 0, kExponentialDecay = 1, kPiecewiseConstant = 2, kCosineDecay = 3 };
inline constexpr std::uint32_t kMaxBoundaries = 4096;

struct OptimizerParams {
  OptimizerKind type = OptimizerKind::kSgd;
  double learning_rate = 0, momentum = 0, beta1 = 0, beta2 = 0, epsilon = 0;
  bool use_nesterov = false;
  // INIT's optional schedule section; absent on the wire when all of these are their defaults.
  double weight_decay = 0;
  LrScheduleKind schedule = LrScheduleKind::kConstant;
  std::uint64_t warmup_steps = 0, decay_steps = 0;
  double decay_rate = 0, alpha = 0;
  bool staircase = false;
  std::vector<std::uint64_t> boundaries;  // piecewise: increasing
  std::vector<double> values;             // piecewise: boundaries.size() + 1
  bool HasScheduleSection() const;
};

struct UpdateParams {
  UpdateMode mode = UpdateMode::kAsync;
  bool scale_stale = false;  // async: scale each gradient by 1 / (1 + staleness)
  std::uint32_t replicas_to_aggregate = 0, total_num_replicas = 0, num_workers = 0;
  WorkerLossPolicy on_worker_loss = WorkerLossPolicy::kFail;  // sync
  std::uint32_t min_replicas = 1;   // sync, shrink: never aggregate fewer gradients than this
  // An elastic job (INIT's optional elastic section, tag 3; absent when max_workers is 0): workers
  // with ranks up to max_workers - 1 may join, and the run goes on while min_workers remain.
  std::uint32_t min_workers = 0, max_workers = 0;
};

struct Chunk {
  std::string name;  // "dense/kernel[0:39200]"
  std::uint64_t length = 0;  // floats
};

// The run's progress as a ps has recorded it (the optional progress section of INIT, READY and
// PUSH_ACK): the worker ranks whose DONE it counted, those it gave up on, and whether the chief
// stopped the run early. A ps hands it to every worker in its replies, so whichever worker
// initialises a restarted ps passes it on. Empty: absent on the wire.
inline constexpr std::uint32_t kMaxProgressRanks = kMaxWorkers;
struct Progress {
  std::vector<std::uint32_t> done;      // increasing, each < kMaxWorkers
  std::vector<std::uint32_t> given_up;  // increasing, none also in done
  bool stop = false;
  bool empty() const { return done.empty() && given_up.empty() && !stop; }
  bool operator==(const Progress&) const = default;
};

struct Init {  // chief -> ps: the ps's chunks, how to update them and their initial values
  std::uint64_t layout_hash = 0;
  OptimizerParams optimizer;
  UpdateParams update;
  std::uint64_t global_step = 0;  // where the ps's step count starts: 0, or a restarted ps's step
  std::vector<Chunk> chunks;
  std::span<const std::byte> values;  // sum of chunk lengths floats
  // Optional (a restore from a checkpoint, or a restarted ps given its slots back): the optimizer's
  // state. Absent when the payload ends after `values`.
  bool has_state = false;
  std::uint64_t updates = 0;                // updates already applied (Adam's t)
  std::vector<std::uint64_t> resume_steps;  // empty, or per worker rank: the local step it resumes after
  std::span<const std::byte> slots;         // the optimizer's slot count x the value count floats
  Progress progress;  // optional, last (tag 4): what the ps this one replaces had recorded
};

// Floats of optimizer state per parameter that an INIT's state section carries for `kind` (sgd 0,
// momentum 1, adam 2).
int SlotsPerValue(OptimizerKind kind);

struct WaitReady {  // worker -> ps: reply (READY) once the ps is initialised with this layout
  std::uint64_t layout_hash = 0;
};

// An elastic job's membership as a ps sees it (the optional section of READY and PUSH_ACK): the
// receiving worker's place among the workers in the run, their count, and the chief's epoch.
struct Membership {
  std::uint32_t index = 0, count = 0, run_epoch = 0;
  bool operator==(const Membership&) const = default;
};

struct Ready {
  std::uint64_t global_step = 0;
  // Where the asking worker resumes (as WELCOME.resume_step, known only once the ps is initialised:
  // after a restore). Optional on the wire: a READY of 8 bytes reads as 0.
  std::uint64_t resume_step = 0;
  std::optional<Membership> membership;  // elastic jobs only; after resume_step, tag 1
  Progress progress;                      // optional, last (tag 2)
};

struct Pull {  // worker -> ps: the ps's values once its global step is >= min_step
  std::uint64_t min_step = 0;
};

struct Params {
  std::uint64_t global_step = 0;
  std::span<const std::byte> values;
  // The save the chief announced that this ps still needs the receiving worker's error feedback
  // for (docs/checkpoints.md, "Error feedback"); 0: none. Optional after the values (tag 1).
  std::uint64_t feedback_request = 0;
};

struct Push {  // worker -> ps: a gradient for the ps's chunks, computed on parameters of based_on_step
  std::uint32_t worker = 0;
  std::uint64_t incarnation = 0;
  std::uint64_t local_step = 0;
  std::uint64_t based_on_step = 0;
  std::span<const std::byte> grads;
  std::uint32_t epoch = 0;  // the sender's epoch; optional after the gradient (tag 1), 0 = absent
};

struct StatePull {  // chief -> ps: a consistent copy of the ps's whole state, for a checkpoint
  // The save whose error feedback to send along (STATE.feedback); 0 (and absent): none.
  std::uint64_t feedback_request = 0;
};

// A worker's error feedback for a ps's shard (as many floats as its values), deposited for a save.
struct Deposit {
  std::uint32_t worker = 0;  // < kMaxWorkers
  std::span<const std::byte> values;
};

struct State {  // ps -> chief: values, slots and counts of one moment
  std::uint64_t global_step = 0;
  std::uint64_t updates = 0;                // updates applied (Adam's t)
  std::vector<std::uint64_t> resume_steps;  // per worker rank: ParameterStore::ResumeStep
  std::span<const std::byte> values;
  std::span<const std::byte> slots;         // a whole multiple (<= kMaxSlotsPerValue) of the values
  // Optional, after the slots (tag 1, present when feedback_request is not 0): the deposits held
  // for STATE_PULL's feedback_request; then (tag 2) the ps's progress, so the chief knows which
  // workers have finished and will deposit no more; then (tag 3) the ranks this ps has lost (their
  // connection closed before their DONE) and not seen back, which cannot deposit with it now.
  std::uint64_t feedback_request = 0;
  std::vector<Deposit> feedback;            // at most kMaxWorkers, each worker once
  Progress progress;
  std::vector<std::uint32_t> absent;        // increasing, each < kMaxWorkers
};
inline constexpr std::uint64_t kMaxSlotsPerValue = 8;

enum class PushOutcome : std::uint8_t { kApplied = 0, kStale = 1, kDuplicate = 2 };

struct PushAck {
  std::uint64_t global_step = 0;
  PushOutcome outcome = PushOutcome::kApplied;
  // The chief has stopped the run early (its DONE said so): finish now. Optional on the wire: a
  // PUSH_ACK of 9 bytes reads as false, and false is sent as 9 bytes.
  bool stop = false;
  std::optional<Membership> membership;  // elastic jobs only; after the stop byte, tag 2
  Progress progress;                      // optional, last (tag 3)
};

struct Done {
  std::uint32_t worker = 0;
  // The chief stopped the run early (early_stopping): the ps tells every worker in its PUSH_ACKs.
  // Optional on the wire: a DONE of 4 bytes reads as false, and false is sent as 4 bytes.
  bool stop = false;
};

// The token handshake (docs/protocol.md, "Authentication"): nonces and HMAC-SHA256 proofs.
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kProofBytes = 32;
using Nonce = std::array<std::byte, kNonceBytes>;
using Proof = std::array<std::byte, kProofBytes>;

struct AuthHello {  // client -> server, first frame when the cluster has a token
  Nonce nonce{};
};

struct AuthChallenge {  // server -> client: its nonce and its proof of the token
  Nonce nonce{};
  Proof proof{};
};

struct AuthProof {  // client -> server: its proof of the token
  Proof proof{};
};

// The phases of a ring collective; a chunk travels from a worker to the next one in the ring.
enum class RingPhase : std::uint8_t { kReduceScatter = 0, kAllGather = 1, kBroadcast = 2 };

// A RING_CHUNK payload is these fixed fields, then the floats (4-byte aligned in the payload).
inline constexpr std::size_t kRingChunkHeadBytes = 32;
struct RingChunk {  // worker -> next worker in the ring: floats [offset, offset + count) of a buffer
  std::uint64_t collective = 0;  // the sequence number of the collective on this ring, from 0
  RingPhase phase = RingPhase::kReduceScatter;
  std::uint16_t hop = 0;      // the step of the phase, from 0
  std::uint32_t segment = 0;  // the ring segment the floats belong to (0 for a broadcast)
  std::uint64_t offset = 0;   // in floats, from the start of the whole buffer
  std::span<const std::byte> values;  // count = values.size() / 4
};

// Shared slots between members on one host (docs/protocol.md, "Shared slots"): the sender of a
// chunk copies its floats into a slot of a memory area it shares with the next member and sends
// only the fields; the next member reads the floats from the slot, checked against `crc`, and
// frees the slot.
struct RingChunkShm {  // RING_CHUNK_SHM: RING_CHUNK's fields, then where its floats are
  RingChunk chunk;          // its fields; no values
  std::uint64_t count = 0;  // floats
  std::uint32_t slot = 0;   // < the offer's slots; slots are used in turn
  std::uint32_t crc = 0;    // CRC-32C of the count * 4 bytes in the slot
};
struct RingShmOffer {  // RING_SHM_OFFER, sender -> receiver: the area is the sender's descriptor `fd`
  std::uint32_t fd = 0;          // opened by the receiver as /proc/PID/fd/FD (PID from the socket)
  std::uint32_t slots = 0;
  std::uint64_t slot_bytes = 0;  // the area is one page (the nonce first), then the slots
  std::uint64_t nonce = 0;
};
struct RingShmAccept {  // RING_SHM_ACCEPT, receiver -> sender: the nonce it read in the area
  std::uint64_t nonce = 0;
};
struct RingSlotFree {  // RING_SLOT_FREE, receiver -> sender: slots read so far, from the first
  std::uint64_t freed = 0;
};

// PIPE_ACTIVATION and PIPE_GRADIENT: one micro-batch's tensor between neighbouring stages of a
// model-parallel replica. 56 bytes of fields, so the floats start 4-byte aligned.
inline constexpr std::size_t kPipeTensorHeadBytes = 56;
inline constexpr std::uint32_t kMaxStages = 1u << 12;
struct PipeTensor {
  std::uint64_t step = 0;        // the local step the micro-batch belongs to, from 1
  std::uint32_t microbatch = 0;  // 0 .. M-1
  std::uint16_t stage = 0;       // the sender's stage, < kMaxStages
  std::uint16_t replica = 0;     // the sender's replica
  std::uint32_t rows = 0;        // examples in the micro-batch; values hold rows x (floats per row)
  std::uint32_t correct = 0;     // PIPE_GRADIENT: the last stage's hits on the micro-batch (0 in an activation)
  double loss = 0;               // PIPE_GRADIENT: the last stage's mean loss on it (0 in an activation)
  // PIPE_GRADIENT of a regression model: the last stage's sums of |output - target| and of its
  // square over the micro-batch (LossResult's), so every stage reports MAE and RMSE; else 0.
  double abs_error = 0, squared_error = 0;
  std::span<const std::byte> values;
};

struct ErrorMessage {
  std::uint16_t code = 0;  // tfd::Code
  std::string message;
};

OutFrame Encode(const Hello& m);
OutFrame Encode(const Welcome& m);
// `values` and `slots` are not copied: they must outlive the frame's sending. With m.has_state the
// frame's keepalive owns the encoded trailer: a caller that sets its own must keep that one too.
// m.values and m.slots are ignored.
OutFrame Encode(const Init& m, std::span<const float> values, std::span<const float> slots = {});
OutFrame Encode(const WaitReady& m);
OutFrame Encode(const Ready& m);
OutFrame Encode(const Pull& m);
OutFrame Encode(const Params& m, std::span<const float> values);
OutFrame Encode(const Push& m, std::span<const std::span<const float>> grads);
OutFrame Encode(const PushAck& m);
OutFrame Encode(const StatePull& m);
// `values` and `slots` are not copied: they must outlive the frame's sending.
OutFrame Encode(const State& m, std::span<const float> values, std::span<const float> slots);
// `type` is kPipeActivation or kPipeGradient; `values` must outlive the frame's sending.
OutFrame Encode(MessageType type, const PipeTensor& m, std::span<const float> values);
OutFrame Encode(const Done& m);
OutFrame EncodeDoneAck();
OutFrame EncodeHeartbeat();
OutFrame Encode(const ErrorMessage& m);
OutFrame Encode(const AuthHello& m);
OutFrame Encode(const AuthChallenge& m);
OutFrame Encode(const AuthProof& m);
// `values` is not copied: it must outlive the frame's sending.
OutFrame Encode(const RingChunk& m, std::span<const float> values);
OutFrame Encode(const RingChunkShm& m);
OutFrame Encode(const RingShmOffer& m);
OutFrame Encode(const RingShmAccept& m);
OutFrame Encode(const RingSlotFree& m);

Status Decode(std::span<const std::byte> payload, Hello* m);
Status Decode(std::span<const std::byte> payload, Welcome* m);
Status Decode(std::span<const std::byte> payload, Init* m);
Status Decode(std::span<const std::byte> payload, WaitReady* m);
Status Decode(std::span<const std::byte> payload, Ready* m);
Status Decode(std::span<const std::byte> payload, Pull* m);
Status Decode(std::span<const std::byte> payload, Params* m);
Status Decode(std::span<const std::byte> payload, Push* m);
Status Decode(std::span<const std::byte> payload, PushAck* m);
Status Decode(std::span<const std::byte> payload, StatePull* m);
Status Decode(std::span<const std::byte> payload, State* m);
Status Decode(std::span<const std::byte> payload, Done* m);
Status Decode(std::span<const std::byte> payload, ErrorMessage* m);
Status Decode(std::span<const std::byte> payload, AuthHello* m);
Status Decode(std::span<const std::byte> payload, AuthChallenge* m);
Status Decode(std::span<const std::byte> payload, AuthProof* m);
Status Decode(std::span<const std::byte> payload, RingChunk* m);
Status Decode(std::span<const std::byte> payload, RingChunkShm* m);
Status Decode(std::span<const std::byte> payload, RingShmOffer* m);
Status Decode(std::span<const std::byte> payload, RingShmAccept* m);
Status Decode(std::span<const std::byte> payload, RingSlotFree* m);
Status Decode(std::span<const std::byte> payload, PipeTensor* m);

// Copies little-endian floats from wire bytes (any alignment) into `out` (out.size() * 4 bytes).
void CopyFloats(std::span<const std::byte> bytes, std::span<float> out);
inline std::span<const std::byte> AsBytes(std::span<const float> f) { return std::as_bytes(f); }

}  // namespace tfd::wire
