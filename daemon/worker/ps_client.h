#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "common/base/logging.h"
#include "common/config/cluster.h"
#include "common/config/job.h"
#include "common/metrics/task_metrics.h"
#include "common/transport/rpc.h"
#include "common/wire/compressed_messages.h"
#include "common/wire/messages.h"
#include "daemon/worker/placement.h"

namespace tfd::worker {

struct PsClientOptions {
  transport::ConnectionOptions connection;
  std::chrono::milliseconds startup_timeout{120000};  // to reach every ps and see it initialised
  std::chrono::milliseconds step_timeout{300000};     // one push/pull (sync waits for the others)
  // A lost ps (its connection closed: it died, restarted, or was silent for the peer timeout) is
  // dialed again, and the step retried, for this long before the worker gives up naming it.
  std::chrono::milliseconds reconnect_timeout{60000};
  const std::atomic<bool>* stop = nullptr;
  // Bytes pushed and pulled, push and pull times, connected ps tasks, reconnects (after
  // AddPsClientMetrics); null: none.
  tfd::metrics::TaskMetrics* metrics = nullptr;
  // The job's elastic settings, sent in the chief's INIT (docs/operations.md, "Elastic runs").
  config::ElasticSpec elastic;
  // Where the `peer_done` event goes (another worker finished, as a ps said); null: nowhere.
  EventWriter* events = nullptr;
  // update.compression: pushes go as PUSH_COMPRESSED with this encoding (sparse: the gradient's
  // nonzero values, which top-k chose); nullopt: PUSH with float32.
  std::optional<wire::GradEncoding> encoding;
};

// A worker's connections to every ps task, and the calls it makes on them. The parameters and
// gradients live in the model's flat buffers; each ps gets and returns its slices of them
// (scatter/gather, no staging copy on the way out).
//
// Threads: not thread-safe and holds no lock: one thread (the worker's training thread) calls
// every method. The connections' strands, on the io_context's thread, only complete the futures of
// its calls (and write ack_times_ before they do); it reads what they wrote once they are ready.
class PsClient {
 public:
  // Connects to every ps (any start order: retries until startup_timeout, logging which ps it waits
  // for) and exchanges HELLO/WELCOME. `ioc` must be running on another thread.
  static Result<std::unique_ptr<PsClient>> Connect(transport::asio::io_context& ioc, const config::TfConfig& config,
                                                   std::uint64_t incarnation, const Placement& placement,
                                                   const PsClientOptions& options);
  ~PsClient();

  // The chief sends INIT (settings, and its initial `params`) to every ps that is not yet
  // initialised; then every worker waits until each ps is ready with this placement's layout.
  // InvalidArgument for an update mode that has no ps (allreduce).
  Status Initialize(bool chief, const config::OptimizerSpec& optimizer, const config::UpdateSpec& update,
                    std::span<const float> params);
  // What one exchange of PushPull (or CompletePushPull) brought back.
  struct StepResult {
    std::uint64_t global_step = 0;  // ps:0's
    int stale = 0;  // ps tasks that dropped this gradient as stale
  };
  // Pushes `grads` to every ps, tagged with `tag` and with the global step of the parameters this
  // worker last pulled from that ps (each ps counts its own steps), and pulls back parameters into
  // `params`: sync waits for each ps's next step, async takes what is there. Both requests go out
  // back to back: one round trip.
  Result<StepResult> PushPull(const wire::Push& tag, std::span<const float> grads, std::span<float> params, bool sync);
  // PushPull in two halves, so a step can compute while its predecessor's exchange is in flight:
  // Start sends (`grads` must stay unchanged until Complete returns; `keepalive`, when given, owns
  // their memory until the frames are written, even if this client goes away first), Complete
  // waits for the replies and writes the parameters into `params`. `computed_on`, when given, is
  // steps() as it was when the gradient's parameters were pulled: with an exchange completed since
  // (overlap), the parameters are newer than the gradient, and the ps must scale it by its true
  // staleness, not by the newer step's.
  void StartPushPull(const wire::Push& tag, std::span<const float> grads, bool sync, std::shared_ptr<const void> keepalive,
                     std::vector<std::uint64_t> computed_on = {});
  Result<StepResult> CompletePushPull(std::span<float> params);
  // Per ps: the global step of the parameters last pulled from it.
  const std::vector<std::uint64_t>& steps() const { return steps_; }

  // update.compression topk's error feedback for the chief's saves (docs/checkpoints.md, "Error
  // feedback"). The chief: AnnounceSave(id) before an exchange makes its pushes announce save `id`
  // after that step. Every other worker: FeedbackAsked() says a ps's PARAMS asked for its feedback
  // for a save it has not deposited for; Deposit(residual) then sends each such ps its slices of
  // `residual` (the whole model's, as of now) with the next exchange's push.
  void AnnounceSave(std::uint64_t id) { announce_ = id; }
  bool FeedbackAsked() const;
  void Deposit(std::shared_ptr<const std::vector<float>> residual);
  bool in_flight() const { return !pulls_.empty(); }
  // Where this worker resumes (its local steps already applied, async; the global step, sync): 0
  // unless it was here before and restarted.
  std::uint64_t resume_step() const { return resume_step_; }
  // Pulls every ps's parameters into `params` (sync: at least the step last seen from each ps);
  // returns ps:0's step.
  Result<std::uint64_t> Pull(std::span<float> params, bool sync);
  // The chief, before Initialize: INIT each uninitialised ps from this saved state instead of
  // `params` (values[ps] and slots[ps] in the ps's slice order, as ckpt::Reshard gives them), at
  // `global_step`, with `updates` and each worker rank's resume step. Also kept for Reconnect.
  struct Restore {
    std::uint64_t global_step = 0;
    std::uint64_t updates = 0;
    std::vector<std::uint64_t> resume_steps;  // per worker rank
    std::vector<std::vector<float>> values, slots;  // per ps
  };
  void SetRestore(Restore restore);
  // How many ps tasks the last Initialize initialised from the Restore (0 without one).
  int restored() const { return restored_; }
  // The chief: the optimizer slots (per ps, in its slice order) and update count of the latest
  // checkpoint. A ps that restarts empty is initialised again with them and the chief's latest
  // parameters; without them, with fresh slots.
  void SetRestartSlots(std::vector<std::vector<float>> slots, std::uint64_t updates);

  // One ps's whole state at one moment (STATE_PULL), for a checkpoint.
  struct PsState {
    std::uint64_t global_step = 0;
    std::uint64_t updates = 0;
    std::vector<std::uint64_t> resume_steps;  // per worker rank: ParameterStore::ResumeStep
    std::vector<float> values, slots;         // in the ps's slice order; slots as OptimizerState keeps them
    // The other workers' error feedback deposited for FetchState's `feedback_request`: (rank, the
    // shard's floats in its slice order).
    std::vector<std::pair<std::uint32_t, std::vector<float>>> feedback;
    wire::Progress progress;  // with feedback_request: the workers that finished, as this ps knows
    std::vector<std::uint32_t> absent;  // ... and those it has lost and not seen back
  };
  // Every ps's state, asked of all at once (with the deposits for save `feedback_request`, if not
  // 0). A lost ps is reconnected as in a step (a restarted one is initialised again from `params`,
  // the chief's); the error when it cannot be.
  Result<std::vector<PsState>> FetchState(std::span<const float> params, std::uint64_t feedback_request = 0);
  // The shard of ps `ps` scattered into a whole model's flat buffer (`out`, as params are laid out).
  void ScatterShard(std::size_t ps, std::span<const float> shard, std::span<float> out) const;

  // Tells every ps this worker is done. A ps lost on the way is reconnected once (the chief
  // initialises a restarted one from `params`, its final parameters) and told again. `stop`: the
  // chief stopped the run early, and each ps tells the other workers (stop_requested()).
  Status Done(std::uint32_t rank, std::span<const float> params, bool stop = false);
  // A PUSH_ACK has said that the chief stopped the run early.
  bool stop_requested() const { return stop_requested_; }
  // An elastic job: the membership ps:0 last reported (in READY or a PUSH_ACK); nullopt otherwise.
  const std::optional<wire::Membership>& membership() const { return membership_; }
  // The run's progress as the ps tasks last reported it (READY, PUSH_ACK), merged: a rank is done
  // if any ps counted its DONE, given up on if any ps gave up on it and none counted its DONE. It
  // travels in the INIT of a restarted ps (docs/reliability.md).
  wire::Progress progress() const;
  void Close();

 private:
  PsClient(transport::asio::io_context& ioc, const config::TfConfig& config, std::uint64_t incarnation,
           const Placement& placement, const PsClientOptions& options)
      : ioc_(ioc), config_(config), incarnation_(incarnation), placement_(placement), options_(options) {}
  // Dials ps `i` and exchanges HELLO/WELCOME (ps_[i] is the new connection); FailedPrecondition
  // when another task than ps `i` answers.
  Result<wire::Welcome> ConnectOne(std::size_t i, transport::Clock::time_point deadline);
  // ConnectOne, again with backoff while the ps is unreachable, resets the connection or does not
  // answer, until `deadline`.
  Result<wire::Welcome> ConnectUntil(std::size_t i, transport::Clock::time_point deadline);
  // What a worker waits for in WAIT_READY, for a deadline's message: the chief, named.
  std::string WaitReadyWhat() const;
  // After ps `i` was lost (`why`): dials it again until the reconnect timeout; if it restarted
  // empty, the chief initialises it from `params` at the step last seen from it, with the run's
  // progress, and the others wait until it has; once the chief has finished, this worker does.
  Status Reconnect(std::size_t i, const Status& why, std::span<const float> params);
  bool Lost(std::size_t i) const;
  // Ps `i` reported `progress` (READY or PUSH_ACK): kept as its latest; a worker newly known to be
  // done is logged and emitted (`peer_done`).
  void Heard(std::size_t i, wire::Progress progress);
  // This worker initialises a ps that is not: the chief, or any worker once the chief has finished.
  bool MayInit() const;
  // INIT for an uninitialised ps when MayInit(); otherwise WAIT_READY. The reply is READY.
  std::future<Result<wire::InFrame>> InitOne(std::size_t i, std::span<const float> params);
  // The chief: INIT for ps `i` with these values and optimizer state.
  std::future<Result<wire::InFrame>> InitFromState(std::size_t i, std::span<const float> values, std::span<const float> slots,
                                                   std::uint64_t updates, const std::vector<std::uint64_t>& resume_steps,
                                                   std::uint64_t global_step);
  void SendPushPull(std::size_t i);
  // Waits for ps `i`'s ack and parameters of the exchange in flight; true when the push was stale.
  Result<bool> AwaitPushPull(std::size_t i, std::span<float> params, std::uint64_t* step);
  Result<wire::InFrame> Await(transport::RpcClient& ps, std::future<Result<wire::InFrame>>& reply,
                              std::chrono::milliseconds timeout, std::string_view what);
  Result<std::uint64_t> TakeParams(std::size_t ps, const wire::InFrame& frame, std::span<float> params);
  std::vector<std::span<const float>> Slices(std::size_t ps, std::span<const float> flat) const;

  transport::asio::io_context& ioc_;
  config::TfConfig config_;
  std::uint64_t incarnation_;
  const Placement& placement_;
  PsClientOptions options_;
  bool chief_ = false;
  wire::OptimizerParams optimizer_;  // as Initialize was given them, in their INIT form
  wire::UpdateParams update_;
  std::uint64_t layout_ = 0;
  // The exchange in flight, kept so it can be sent again to a reconnected ps.
  wire::Push tag_;
  std::span<const float> grads_;
  std::vector<std::uint64_t> computed_on_;  // per ps: the step the gradient in flight was computed on; empty: steps_
  bool sync_ = false;
  std::shared_ptr<const void> keepalive_;
  std::vector<std::shared_ptr<transport::RpcClient>> ps_;
  std::vector<bool> initialized_;
  std::vector<std::uint64_t> steps_;  // per ps: the global step of the parameters last pulled from it
  std::uint64_t announce_ = 0;        // AnnounceSave's, for the next exchange
  std::uint64_t announcing_ = 0;      // ... the exchange in flight's
  struct Feedback {
    std::uint64_t asked = 0, deposited = 0;  // the last save a PARAMS asked for; the last deposited for
    std::uint64_t sending = 0;               // the save the exchange in flight deposits for (0: none)
    std::shared_ptr<const std::vector<float>> residual;  // what it deposits
    bool Owed() const;  // asked for a save not yet deposited for, nor being
  };
  std::vector<Feedback> feedback_;  // per ps
  std::uint64_t resume_step_ = 0;     // the largest WELCOME/READY resume_step: where a restarted worker goes on
  Restore restore_;                   // values empty: none
  int restored_ = 0;
  std::vector<std::vector<float>> restart_slots_;  // per ps; empty: none
  std::uint64_t restart_updates_ = 0;
  std::vector<std::future<Result<wire::InFrame>>> acks_, pulls_;  // of the exchange in flight
  // With metrics: when the exchange in flight was sent, and when each ps's ack (and the last of
  // them) arrived. ack_times_ is written by the connections' strands before the acks' futures are
  // ready; its size (one per ps) never changes while a call may write to it.
  transport::Clock::time_point exchange_start_, last_ack_;
  std::vector<transport::Clock::time_point> ack_times_;
  bool stop_requested_ = false;
  std::optional<wire::Membership> membership_;
  std::vector<wire::Progress> heard_;  // per ps: the progress its last READY or PUSH_ACK carried
  std::set<std::uint32_t> known_done_;  // the ranks announced as done (peer_done)
};

}  // namespace tfd::worker
