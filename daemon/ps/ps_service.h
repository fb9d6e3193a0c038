#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "common/base/logging.h"
#include "common/config/cluster.h"
#include "common/transport/connection.h"
#include "daemon/ps/parameter_store.h"

namespace tfd::ps {

// Serves one ps task's store to the workers: the handshake (HELLO -> WELCOME, refusing another
// cluster or protocol version with a reason), INIT, WAIT_READY, PULL (held back until the step it
// asks for), PUSH and DONE. Calls `on_all_done` once every worker has sent DONE.
class PsService : public transport::FrameHandler {
 public:
  PsService(const config::TfConfig& config, std::uint64_t incarnation, ParameterStore& store, EventWriter& events,
            std::function<void()> on_all_done);

  void OnFrame(const std::shared_ptr<transport::Connection>& from, wire::InFrame frame) override;
  void OnClosed(const std::shared_ptr<transport::Connection>& from, const Status& why) override;

 private:
  struct Waiter {
    std::weak_ptr<transport::Connection> conn;
    std::uint64_t request_id = 0;
    std::uint64_t min_step = 0;
  };

  void HandleHello(const std::shared_ptr<transport::Connection>& from, const wire::InFrame& frame);
  void ReplyParams(transport::Connection& to, std::uint64_t request_id);
  void ReleaseWaiters();
  // sync: when the current step can no longer complete (too few workers left that have not
  // finished or already sent this step's gradient), fails the waiting pulls naming the lost
  // workers, or, when the missing ones have only finished, answers them with the final parameters.
  void FailPullsIfStepStuck();
  int RankOf(const transport::Connection* c) const;
  Status LayoutMismatch(const transport::Connection& worker) const;

  const config::TfConfig& config_;
  std::uint64_t incarnation_;
  ParameterStore& store_;
  EventWriter& events_;
  std::function<void()> on_all_done_;
  std::string self_;

  std::mutex mu_;
  std::map<const transport::Connection*, int> ranks_;  // handshaken workers -> rank; guarded by mu_
  std::vector<Waiter> ready_waiters_;                  // WAIT_READY before INIT; guarded by mu_
  std::vector<Waiter> pull_waiters_;                   // PULLs ahead of the global step; guarded by mu_
  std::map<int, std::string> gone_;                    // ranks lost before DONE -> their names; guarded by mu_
  std::string waiting_note_;                           // on_worker_loss wait: what was last logged; guarded by mu_
  std::set<int> done_;                                 // guarded by mu_
  bool all_done_ = false;                              // guarded by mu_
};

}  // namespace tfd::ps
