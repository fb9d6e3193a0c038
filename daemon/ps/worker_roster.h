#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/job.h"

namespace tfd::ps {

// What the ps has recorded of one worker rank. kNone: it never shook hands; kConnected while a
// connection of its that shook hands is open; kLost once that connection closed before its DONE,
// until it shakes hands again or is given up on; kGivenUp; kDone once its DONE was counted
// (whatever its connection does after).
enum class WorkerState { kNone, kConnected, kLost, kGivenUp, kDone };

// The ps's worker roster: which rank each handshaken connection carries, who is done, lost or given
// up on, and the rules that decide when to give up and when the run is over. Pure bookkeeping: the
// clock is an argument (never read here), nothing is logged or sent, so every rule is unit-tested
// with a fake clock (test/unit/daemon/ps/worker_roster_test.cc).
//
// The rules:
// - a worker lost before its DONE is given up on once it has been away `return_timeout`;
// - one that never connected, `startup_timeout` after the first worker's HELLO (or, while none has
//   come, after the ps's start);
// - the chief given up on ends the run (ChiefGivenUp: the caller ends it as failed);
// - the run is over once the chief is done and every other worker is done or given up on (or,
//   with write_off_lost, lost: sync under on_worker_loss shrink).
//
// Threads: not thread-safe; PsService holds its mu_ around every call.
class WorkerRoster {
 public:
  using Clock = std::chrono::steady_clock;
  using Link = const void*;  // a connection, compared and never followed
  struct Limits {
    std::chrono::milliseconds return_timeout{60000};   // a worker lost this long is given up on
    std::chrono::milliseconds startup_timeout{120000};  // ... and one that never connects, this long
  };
  // A rank away from the run (lost before DONE, or never connected): since when, and its name.
  struct Absence {
    std::string name;
    std::uint64_t global_step = 0;  // when it was lost
    Clock::time_point since;
    bool never_connected = false;
    bool before_restart = false;  // given up on by the ps incarnation this one replaced (Seed)
  };
  // What a later incarnation of this ps needs to end the run as this one would: the ranks done and
  // given up on, in increasing order.
  struct Progress {
    std::vector<int> done, given_up;
  };

  // Ranks 0 .. cluster_workers - 1 are the cluster's; `name_of` names a rank that never connected
  // ("worker:2") and a finished one; `started` is the ps's start.
  WorkerRoster(int cluster_workers, Limits limits, Clock::time_point started, std::function<std::string(int)> name_of);

  // A connection of `rank` shook hands; `beyond_cluster`: an elastic rank that joined.
  struct Arrival {
    bool rejoined = false;      // it had been lost (or given up on): the loss is forgotten
    bool was_given_up = false;
    bool newly_joined = false;  // beyond_cluster, for the first time
  };
  Arrival Connected(Link link, int rank, bool beyond_cluster, Clock::time_point now);
  // A connection closed. Its rank (-1: it never shook hands) is recorded lost at `global_step`
  // unless it was done.
  struct Departure {
    int rank = -1;
    bool done = false;
  };
  Departure Closed(Link link, const std::string& name, std::uint64_t global_step, Clock::time_point now);
  // Counts `rank`'s DONE; true the first time.
  bool MarkDone(int rank);
  Progress progress() const;
  // A restarted ps, at its INIT: starts from the progress its previous incarnation had recorded
  // (passed on by the worker that initialises it), so a rank done before the restart is not waited
  // for. Ranks at or beyond `rank_limit` (the cluster's, or elastic max_workers) are ignored; a rank
  // given up on comes back as any given up on does, by shaking hands.
  void Seed(const Progress& p, int rank_limit, std::uint64_t global_step, Clock::time_point now);

  // Gives up on every rank away past its limit at `now` and returns them (never-connected ones are
  // recorded at `global_step`).
  std::vector<Absence> GiveUpOverdue(Clock::time_point now, std::uint64_t global_step);
  // The chief (rank 0) given up on: the run is over. Null otherwise.
  const Absence* ChiefGivenUp() const;
  // Once the chief is done and nobody else is awaited: the names of the lost ones written off
  // (with `write_off_lost`), maybe none. Nullopt while the run goes on.
  std::optional<std::vector<std::string>> Finished(bool write_off_lost) const;
  // "; gave up on worker:1 (...) (lost at ...)" and "; also lost ..." for the away ranks whose
  // name `named` does not mention already, or "".
  std::string AwayNote(std::string_view named = {}) const;
  // "worker:1 never connected within 120 s", "worker:1 was lost at global_step 5 and did not come
  // back within 60 s".
  std::string GaveUpBecause(const Absence& a) const;
  double LimitSeconds(const Absence& a) const;

  int RankOf(Link link) const;
  WorkerState StateOf(int rank) const;
  // Every rank of the run: the cluster's, then those that joined.
  std::vector<int> Ranks() const;
  // The ranks with a handshaken connection open now. The one place this set is built.
  std::set<int> Live() const;
  bool done(int rank) const { return done_.contains(rank); }
  std::size_t done_count() const { return done_.size(); }
  bool given_up(int rank) const { return given_up_.contains(rank); }
  // Away and not connected now (given up on or not).
  bool lost(int rank) const;
  const Absence* absence(int rank) const;
  std::size_t connections() const { return links_.size(); }
  // The members of an elastic run (neither given up on nor done) in rank order: `rank`'s place
  // among them (nullopt when it is not one) and their count.
  struct Place {
    std::optional<int> index;
    int count = 0;
  };
  Place MemberPlace(int rank) const;
  int members() const { return MemberPlace(-1).count; }
  const Limits& limits() const { return limits_; }
  std::string TaskName(int rank) const { return name_of_(rank); }  // "worker:2"

 private:
  const int cluster_workers_;
  const Limits limits_;
  const Clock::time_point started_;
  const std::function<std::string(int)> name_of_;
  std::map<Link, int> links_;                   // handshaken connections -> rank
  std::map<int, Absence> gone_;                 // ranks lost before DONE (and those given up on)
  std::set<int> given_up_;                      // away past their limit
  std::set<int> done_;                          // DONE counted
  std::set<int> joined_;                        // elastic: ranks beyond the cluster's that joined
  std::optional<Clock::time_point> first_contact_;  // the first worker's HELLO
};

// sync: whether the current step can still complete, with `received[r]` telling whether rank r's
// gradient for it is in. Pure: PsService::FailPullsIfStepStuck acts on the verdict.
struct StepVerdict {
  enum class Action {
    kWait,          // enough workers can still send their gradient
    kWaitForLost,   // on_worker_loss wait: a lost worker may come back and resume this step
    kFinalParams,   // only finished workers are missing (or the chief is done): answer with what there is
    kFailPulls,     // fail the waiting pulls; the step still waits for the lost ones
    kEndRun,        // a worker given up on never sends its gradient: the run is over
    kShrink,        // on_worker_loss shrink: aggregate held + can_send from now on
  };
  Action action = Action::kWait;
  int held = 0;      // gradients in
  int can_send = 0;  // connected (or not yet connected) workers that have not sent theirs
  bool lost = false, for_good = false;
  std::vector<std::string> missing;  // why each missing gradient is missing
};
StepVerdict JudgeSyncStep(const WorkerRoster& roster, const std::vector<bool>& received, int to_aggregate,
                          config::UpdateSpec::OnWorkerLoss on_worker_loss, std::uint32_t min_replicas);

}  // namespace tfd::ps
