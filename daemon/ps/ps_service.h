#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/base/logging.h"
#include "common/base/mutex.h"
#include "common/config/cluster.h"
#include "common/metrics/task_metrics.h"
#include "common/transport/connection.h"
#include "common/transport/handshake.h"
#include "daemon/ps/parameter_store.h"
#include "daemon/ps/worker_roster.h"

namespace tfd::ps {

// Serves one ps task's store to the workers: the handshake (HELLO -> WELCOME, refusing another
// cluster or protocol version with a reason), INIT, WAIT_READY, PULL (held back until the step it
// asks for), PUSH, STATE_PULL and DONE, one handler per message. PsService is the ps's only
// translator between frames and the store (through wire_convert.h): the store takes and returns
// its own types.
//
// No wait is forever. A worker lost before its DONE is given up on when it has been away for
// `worker_return_timeout`, one that never connects after `startup_timeout` (counted from the first
// worker's HELLO, or from the ps's start while none has come):
// - the chief given up on ends the run: every waiting and later request is answered with an error
//   naming it, so the other workers stop and say why;
// - sync: a step that can never complete (a lost worker under on_worker_loss fail, one given up on
//   under wait, too few left under shrink) ends the run the same way;
// - otherwise the run is over once the chief has sent DONE and every other worker has sent DONE or
//   been given up on (or, under shrink, written off).
//
// A DONE is answered once the news is safe from a restart of this ps: once a worker still training
// has received it (the progress in a PUSH_ACK or READY, which that worker passes on in the INIT of
// a restarted ps; received, as its next request but the PULL sent along with the PUSH proves), or
// no such worker is connected, or the run is over, or `done_hold` has passed. A finished worker
// waiting for its ack keeps its connection, so a ps killed in between is one it reconnects to and
// tells again (docs/reliability.md).
// A STATE_PULL that names a save (update.compression topk's error feedback) is held until every
// worker the ps expects a deposit from has sent one (not one done, given up on or lost), or
// `state_hold` has passed: a long poll, so a save moves the state once.
// `on_end` is called once, with how the run ended: ok (exit 0) only when the chief finished; after
// a failed end, once the workers have left or `end_grace` has passed, so they hear the reason.
//
// Who is connected, done, lost or given up on, and the rules that decide it, are the WorkerRoster's
// (worker_roster.h); whether a sync step can still complete is JudgeSyncStep's. This class acts on
// their answers: it logs, emits events and answers the waiting requests.
//
// Threads: OnFrame and OnClosed run on the strand of the connection concerned, one frame of that
// connection at a time; the handlers run inside them. Tick runs on whichever thread polls (RunPs:
// the io thread); time_spent and WorkerStateOf on any thread. RunPs runs its io_context on one thread, so
// two handlers never overlap there, but with several threads running the io_context the strands
// of different connections run at once. mu_ serialises the service's own bookkeeping (which
// connection is which worker, the requests waiting for INIT or a step, who is done or lost); the
// store has its own lock, taken after mu_ when both are held and never the other way round.
// Replies may be sent under mu_ (Connection::Send only queues); `on_end` is called without it.
class PsService : public transport::FrameHandler {
 public:
  using Clock = std::chrono::steady_clock;
  struct Limits {
    std::chrono::milliseconds worker_return_timeout{60000};  // a worker lost this long is given up on
    std::chrono::milliseconds startup_timeout{120000};       // ... and one that never connects, this long
    std::chrono::milliseconds end_grace{8000};               // after a failed end: how long the workers get to hear it
    std::chrono::milliseconds done_hold{20000};              // a DONE's ack waits at most this long for a worker to hear of it
    std::chrono::milliseconds state_hold{1000};              // a save's STATE waits at most this long for the deposits it lacks
  };
  struct Ending {
    bool ok = false;      // the chief finished: exit 0
    std::string message;  // the ps's last line: what ended the run, who was given up on, the global step
    int workers_done = 0;  // ranks whose DONE this ps (or, before a restart, its previous incarnation) counted
  };

  // `config`, `store` and `events` must outlive the service, and so must `metrics` (after
  // AddPsMetrics: pushes by outcome, async staleness, connected workers, global step), when given.
  PsService(const config::TfConfig& config, std::uint64_t incarnation, ParameterStore& store, EventWriter& events, Limits limits,
            std::function<void(const Ending&)> on_end, metrics::TaskMetrics* metrics = nullptr);

  // Gives up on workers away past the return timeout and ends the run when nothing is left to wait
  // for (see above). The caller calls it every few tens of milliseconds, on any thread.
  void Tick(Clock::time_point now) TFD_EXCLUDES(mu_);

  void OnFrame(const std::shared_ptr<transport::Connection>& from, wire::InFrame frame) override TFD_EXCLUDES(mu_);
  void OnClosed(const std::shared_ptr<transport::Connection>& from, const Status& why) override TFD_EXCLUDES(mu_);

  // Where the ps's own time went, by its clock: pushes applied (the optimizer on this ps's
  // variables) and parameter replies built (copied out of the store into a frame). Any thread.
  struct TimeSpent {
    std::uint64_t pushes = 0, replies = 0;
    double apply_s = 0, reply_s = 0;
  };
  TimeSpent time_spent() const;

  // What the service has recorded of worker `rank`, as Tick reads it (see WorkerState). Lets a test
  // move Tick's clock only after the service has seen a worker come or go. Any thread; takes mu_.
  using WorkerState = ps::WorkerState;
  WorkerState WorkerStateOf(int rank) const TFD_EXCLUDES(mu_);

 private:
  struct Waiter {
    std::weak_ptr<transport::Connection> conn;
    std::uint64_t request_id = 0;
    std::uint64_t min_step = 0;  // PULL: the step it waits for; WAIT_READY: the layout hash it expects
  };
  // A counted DONE whose ack waits for a worker still training to hear of it (see above).
  struct HeldDone {
    std::weak_ptr<transport::Connection> conn;
    std::uint64_t request_id = 0;
    int rank = -1;
    Clock::time_point since;
    // The reply that told a worker still training, once one did: its connection and the request it
    // answered. A later request on that connection, past the one sent along, proves it arrived.
    std::weak_ptr<transport::Connection> told;
    std::uint64_t told_request = 0;
  };
  using ConnectionPtr = std::shared_ptr<transport::Connection>;

  // One per message type; `rank` is the sender's worker rank (it has shaken hands).
  void HandleHello(const ConnectionPtr& from, const wire::InFrame& frame) TFD_EXCLUDES(mu_);
  void HandleInit(const ConnectionPtr& from, const wire::InFrame& frame, int rank) TFD_EXCLUDES(mu_);
  void HandleWaitReady(const ConnectionPtr& from, const wire::InFrame& frame, int rank) TFD_EXCLUDES(mu_);
  void HandlePull(const ConnectionPtr& from, const wire::InFrame& frame) TFD_EXCLUDES(mu_);
  void HandlePush(const ConnectionPtr& from, const wire::InFrame& frame, int rank) TFD_EXCLUDES(mu_);  // PUSH or PUSH_COMPRESSED
  void ApplyPush(const ConnectionPtr& from, std::uint64_t request_id, const wire::Push& push, int rank) TFD_EXCLUDES(mu_);
  void HandleStatePull(const ConnectionPtr& from, const wire::InFrame& frame);
  void HandleDone(const ConnectionPtr& from, const wire::InFrame& frame, int rank) TFD_EXCLUDES(mu_);
  void HandleError(const ConnectionPtr& from, const wire::InFrame& frame);
  // A restarted ps's first INIT: the roster starts from the progress it carries.
  void SeedProgress(const wire::Progress& progress, std::uint64_t global_step) TFD_EXCLUDES(mu_);
  // What READY and PUSH_ACK tell the workers of the run's progress.
  wire::Progress ProgressLocked() const TFD_REQUIRES(mu_);
  // With metrics: the push's outcome, its staleness (async) and the global step after it.
  void CountPush(std::uint64_t based_on_step, const ParameterStore::PushResult& r);

  // A worker rejoined after it was lost: (on_worker_loss shrink) grow the quorum back.
  void RejoinedLocked(int rank, const std::string& peer_name, std::uint64_t incarnation) TFD_REQUIRES(mu_);
  // Gives up on the workers away past their limit (logs, events, an elastic membership change).
  void GiveUpOverdueLocked(Clock::time_point now) TFD_REQUIRES(mu_);
  // PARAMS for worker `rank` (-1: unknown), asking for its error feedback when a save announced
  // by the chief still lacks it (docs/checkpoints.md, "Error feedback").
  void ReplyParams(transport::Connection& to, std::uint64_t request_id, int rank) TFD_EXCLUDES(mu_);
  // The chief announced save `request` (its push, or its STATE_PULL after this ps restarted): a
  // later one replaces an earlier one, whose deposits are dropped.
  void AnnouncedSave(std::uint64_t request) TFD_EXCLUDES(mu_);
  // update.compression's error feedback for the chief's saves: the save announced last, and each
  // worker's deposit for it (the shard's floats).
  struct Deposited {
    std::uint64_t request = 0;
    std::shared_ptr<const std::vector<float>> values;
  };
  // A chief's STATE_PULL for save `request` held (a long poll) while deposits it expects are on
  // their way: answered when the last comes, or at `until`.
  struct HeldStatePull {
    std::weak_ptr<transport::Connection> conn;
    std::uint64_t request_id = 0;
    std::uint64_t request = 0;
    Clock::time_point until;
  };
  // Whether every worker rank but the chief's that can deposit for `request` has: none done, given
  // up on or lost (not back) is waited for; one this ps has yet to hear from is.
  bool DepositsInLocked(std::uint64_t request) const TFD_REQUIRES(mu_);
  // STATE for save `request` (0: none) with its deposits, to `to`.
  void ReplyState(transport::Connection& to, std::uint64_t request_id, std::uint64_t request) TFD_EXCLUDES(mu_);
  // Answers the held STATE_PULLs whose deposits are in, or whose time is up at `now`.
  void AnswerHeldStatePulls(Clock::time_point now) TFD_EXCLUDES(mu_);
  void ReleaseWaiters() TFD_EXCLUDES(mu_);
  // sync: when the current step can no longer complete (too few workers left that have not
  // finished or already sent this step's gradient), fails the waiting pulls naming the lost
  // workers, or, when the missing ones have only finished, answers them with the final parameters.
  void FailPullsIfStepStuck() TFD_EXCLUDES(mu_);
  // Ends the run as failed: answers every waiting request with `why` and refuses later ones.
  void EndRunLocked(const Status& why) TFD_REQUIRES(mu_);
  // Once nothing is left to wait for, the successful end (and end_called_ set); nullopt while the run goes on.
  std::optional<Ending> FinishedLocked() TFD_REQUIRES(mu_);
  // An elastic job: `rank`'s place among the ranks not given up on, their count and the chief's
  // epoch; nullopt for a job that is not elastic, or a rank given up on.
  std::optional<wire::Membership> MembershipLocked(int rank) const TFD_REQUIRES(mu_);
  // READY for `rank` on `to`, answering `request_id` (the held DONEs it tells of are marked so).
  wire::Ready ReadyFor(int rank, const ConnectionPtr& to, std::uint64_t request_id) TFD_EXCLUDES(mu_);
  // Whether a worker other than `rank` that has not finished is connected: one that would hear of
  // `rank`'s DONE in its next reply.
  bool AnyoneToTellLocked(int rank) const TFD_REQUIRES(mu_);
  // A reply to `hearer` on `to`, answering `request_id`, carries the progress: marks the held DONEs
  // it tells of (every one but hearer's own, unless a live connection was told already).
  void MarkToldLocked(int hearer, const ConnectionPtr& to, std::uint64_t request_id) TFD_REQUIRES(mu_);
  // Request `request_id` came on `from`: answers the held DONEs a reply on it told of before.
  void AnswerHeardLocked(const transport::Connection* from, std::uint64_t request_id) TFD_REQUIRES(mu_);
  // Answers the held DONEs that need no more holding at `now`: every one when `all` (the run is
  // over), else those with nobody left to tell and those held `done_hold`.
  void AnswerHeldDonesLocked(bool all, Clock::time_point now) TFD_REQUIRES(mu_);
  // An elastic job's membership (the ranks neither given up on nor done) changed (`why`): logs it
  // with the step it takes effect, ends the run when a `loss` leaves fewer than min_workers, and
  // (sync) makes the steps aggregate every member's gradient.
  void MembersChangedLocked(const std::string& why, bool loss) TFD_REQUIRES(mu_);
  int RankOf(const transport::Connection* c) TFD_EXCLUDES(mu_);
  Status LayoutMismatch(const transport::Connection& worker) const;

  const config::TfConfig& config_;
  ParameterStore& store_;
  EventWriter& events_;
  const Limits limits_;
  std::function<void(const Ending&)> on_end_;
  metrics::TaskMetrics* const metrics_;  // null: none
  std::atomic<std::uint64_t> pushes_{0}, replies_{0}, apply_ns_{0}, reply_ns_{0};  // for time_spent()
  const std::string self_;
  const transport::HandshakeIdentity identity_;

  mutable Mutex mu_;
  WorkerRoster roster_ TFD_GUARDED_BY(mu_);
  std::vector<Waiter> ready_waiters_ TFD_GUARDED_BY(mu_);                  // WAIT_READY before INIT
  std::vector<Waiter> pull_waiters_ TFD_GUARDED_BY(mu_);                   // PULLs ahead of the global step
  std::vector<HeldDone> held_dones_ TFD_GUARDED_BY(mu_);                   // DONEs not yet answered
  std::vector<HeldStatePull> held_state_pulls_ TFD_GUARDED_BY(mu_);        // saves' STATE_PULLs awaiting deposits
  std::string waiting_note_ TFD_GUARDED_BY(mu_);                           // on_worker_loss wait: what was last logged
  std::optional<Status> ended_ TFD_GUARDED_BY(mu_);  // the run ended as failed: why
  std::uint64_t feedback_request_ TFD_GUARDED_BY(mu_) = 0;            // the chief's last announced save
  std::map<int, Deposited> deposits_ TFD_GUARDED_BY(mu_);             // per worker rank
  std::optional<Clock::time_point> ended_at_ TFD_GUARDED_BY(mu_);
  bool end_called_ TFD_GUARDED_BY(mu_) = false;  // the end was decided: on_end_ is called, once
  bool stopped_early_ TFD_GUARDED_BY(mu_) = false;  // the chief's DONE said it stopped the run early
  std::uint32_t run_epoch_ TFD_GUARDED_BY(mu_) = 0;  // elastic: the epoch of the chief's last push
  bool members_changed_ TFD_GUARDED_BY(mu_) = false; // sync: a step completed when the membership shrank
};

}  // namespace tfd::ps
