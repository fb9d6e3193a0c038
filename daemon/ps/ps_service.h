#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/base/logging.h"
#include "common/base/mutex.h"
#include "common/config/cluster.h"
#include "common/transport/connection.h"
#include "common/transport/handshake.h"
#include "daemon/ps/parameter_store.h"

namespace tfd::ps {

// Serves one ps task's store to the workers: the handshake (HELLO -> WELCOME, refusing another
// cluster or protocol version with a reason), INIT, WAIT_READY, PULL (held back until the step it
// asks for), PUSH, STATE_PULL and DONE, one handler per message. Calls `on_all_done` once every
// worker has sent DONE. PsService is the ps's only translator between frames and the store
// (through wire_convert.h): the store takes and returns its own types.
//
// Threads: OnFrame and OnClosed run on the strand of the connection concerned, one frame of that
// connection at a time; the handlers run inside them. RunPs runs its io_context on one thread, so
// two handlers never overlap there, but with several threads running the io_context the strands
// of different connections run at once. mu_ serialises the service's own bookkeeping (which
// connection is which worker, the requests waiting for INIT or a step, who is done or lost); the
// store has its own lock, taken after mu_ when both are held and never the other way round.
// Replies may be sent under mu_ (Connection::Send only queues); `on_all_done` is called without it.
class PsService : public transport::FrameHandler {
 public:
  // `config`, `store` and `events` must outlive the service.
  PsService(const config::TfConfig& config, std::uint64_t incarnation, ParameterStore& store, EventWriter& events,
            std::function<void()> on_all_done);

  void OnFrame(const std::shared_ptr<transport::Connection>& from, wire::InFrame frame) override TFD_EXCLUDES(mu_);
  void OnClosed(const std::shared_ptr<transport::Connection>& from, const Status& why) override TFD_EXCLUDES(mu_);

 private:
  struct Waiter {
    std::weak_ptr<transport::Connection> conn;
    std::uint64_t request_id = 0;
    std::uint64_t min_step = 0;  // PULL: the step it waits for; WAIT_READY: the layout hash it expects
  };
  using ConnectionPtr = std::shared_ptr<transport::Connection>;

  // One per message type; `rank` is the sender's worker rank (it has shaken hands).
  void HandleHello(const ConnectionPtr& from, const wire::InFrame& frame) TFD_EXCLUDES(mu_);
  void HandleInit(const ConnectionPtr& from, const wire::InFrame& frame, int rank) TFD_EXCLUDES(mu_);
  void HandleWaitReady(const ConnectionPtr& from, const wire::InFrame& frame, int rank) TFD_EXCLUDES(mu_);
  void HandlePull(const ConnectionPtr& from, const wire::InFrame& frame) TFD_EXCLUDES(mu_);
  void HandlePush(const ConnectionPtr& from, const wire::InFrame& frame, int rank) TFD_EXCLUDES(mu_);
  void HandleStatePull(const ConnectionPtr& from, const wire::InFrame& frame);
  void HandleDone(const ConnectionPtr& from, const wire::InFrame& frame, int rank) TFD_EXCLUDES(mu_);
  void HandleError(const ConnectionPtr& from, const wire::InFrame& frame);

  // A worker rejoined after it was lost: forget the loss, and (on_worker_loss shrink) grow the quorum back.
  void RejoinedLocked(int rank, const std::string& peer_name, std::uint64_t incarnation) TFD_REQUIRES(mu_);
  void ReplyParams(transport::Connection& to, std::uint64_t request_id);
  void ReleaseWaiters() TFD_EXCLUDES(mu_);
  // sync: when the current step can no longer complete (too few workers left that have not
  // finished or already sent this step's gradient), fails the waiting pulls naming the lost
  // workers, or, when the missing ones have only finished, answers them with the final parameters.
  void FailPullsIfStepStuck() TFD_EXCLUDES(mu_);
  int RankOf(const transport::Connection* c) TFD_EXCLUDES(mu_);
  int RankOfLocked(const transport::Connection* c) const TFD_REQUIRES(mu_);
  Status LayoutMismatch(const transport::Connection& worker) const;

  const config::TfConfig& config_;
  ParameterStore& store_;
  EventWriter& events_;
  std::function<void()> on_all_done_;
  const std::string self_;
  const transport::HandshakeIdentity identity_;

  Mutex mu_;
  std::map<const transport::Connection*, int> ranks_ TFD_GUARDED_BY(mu_);  // handshaken workers -> rank
  std::vector<Waiter> ready_waiters_ TFD_GUARDED_BY(mu_);                  // WAIT_READY before INIT
  std::vector<Waiter> pull_waiters_ TFD_GUARDED_BY(mu_);                   // PULLs ahead of the global step
  std::map<int, std::string> gone_ TFD_GUARDED_BY(mu_);                    // ranks lost before DONE -> their names
  std::string waiting_note_ TFD_GUARDED_BY(mu_);                           // on_worker_loss wait: what was last logged
  std::set<int> done_ TFD_GUARDED_BY(mu_);
  bool all_done_ TFD_GUARDED_BY(mu_) = false;
  bool stopped_early_ TFD_GUARDED_BY(mu_) = false;  // the chief's DONE said it stopped the run early
};

}  // namespace tfd::ps
