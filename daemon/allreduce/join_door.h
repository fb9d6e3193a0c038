#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp forgets it

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/base/mutex.h"
#include "common/base/status.h"
#include "common/collective/link.h"
#include "common/collective/ring.h"
#include "common/config/cluster.h"
#include "common/config/job.h"
#include "common/model/model.h"
#include "common/transport/connection.h"
#include "common/wire/ring_join_messages.h"

namespace tfd::allreduce {

// What a joiner and the ring must agree on for their steps to be the same bits: the model, the
// optimizer, the batch, the seed, the epochs and the commit interval (a SHA-256 prefix).
std::uint64_t JobFingerprint(const config::JobSpec& job, const model::Model& model);

// The ring's rank 0's door for workers joining a running elastic allreduce ring (docs/protocol.md,
// "Joining a ring"). Every member's ring offers it the HELLOs of strangers (RingOptions::on_stranger);
// only rank 0 takes them: it answers WELCOME, takes the socket over (a Link, frames bounded to
// kMaxJoinFrameBytes) and keeps it until the joiner's RING_JOIN is in and checked, then until the
// ring grows at a commit (RING_JOIN_ACCEPT) or the joiner goes away.
//
// Threads: Offer runs on the io_context thread; Poll, TakeReady and Answer on the training thread.
// mu_ guards the joiners and their links (a Link is driven by one thread at a time).
// Refusals go to the joiner as an ERROR naming why, and to this task's log, one line each: another
// cluster (the HELLO's id), another job (JobFingerprint), a rank past max_workers or already in the
// ring, more than kMaxPending joiners waiting; a token mismatch never gets this far (the transport
// refuses it).
class JoinDoor : public std::enable_shared_from_this<JoinDoor> {
 public:
  static constexpr std::uint32_t kMaxJoinFrameBytes = 64 << 10;
  static constexpr std::size_t kMaxPending = 16;
  // `base_cluster_id`: the id of the cluster the run started with (a joiner's HELLO carries it);
  // `chiefs`: 1 when the cluster has a chief task (worker index i is then rank i + 1).
  JoinDoor(std::uint64_t base_cluster_id, std::uint64_t job_fingerprint, int max_workers, int chiefs);

  bool Offer(const std::shared_ptr<transport::Connection>& from, const wire::Hello& hello, std::uint64_t request_id,
             const transport::HandshakeIdentity& self,
             int rank) TFD_EXCLUDES(mu_);
  // Reads what the joiners sent, without blocking, and refuses the ones that cannot join a ring of
  // `members`. True when at least one is ready to come in.
  bool Poll(const std::vector<collective::RingMember>& members) TFD_EXCLUDES(mu_);
  // The joiners ready to come in, in worker index order (at most max_workers minus the ring's size).
  std::vector<wire::RingJoinMember> TakeReady(const std::vector<collective::RingMember>& members) TFD_EXCLUDES(mu_);
  // Sends every joiner `accept` lists its RING_JOIN_ACCEPT (with its own rank); a joiner that is gone
  // is logged, and the ring then re-forms without it.
  void Answer(wire::RingJoinAccept accept) TFD_EXCLUDES(mu_);

 private:
  struct Joiner {
    std::unique_ptr<collective::Link> link;
    std::string name;  // "worker:2 (127.0.0.1:40012)"
    std::uint32_t index = 0;
    std::uint64_t request_id = 0;  // its RING_JOIN's: the answer carries it
    bool ready = false, taken = false, answered = false;
    wire::RingJoinMember member;
    std::chrono::steady_clock::time_point since;
  };
  // Reads `j`'s frames; an error when it must go (gone, or refused: then told why).
  Status Read(Joiner& j, const std::vector<collective::RingMember>& members) TFD_REQUIRES(mu_);
  static void Flush(collective::Link& link);  // writes what is queued, for up to a second

  const std::uint64_t base_cluster_id_, job_;
  const int max_workers_, chiefs_;
  Mutex mu_;
  std::vector<Joiner> joiners_ TFD_GUARDED_BY(mu_);
  std::size_t arriving_ TFD_GUARDED_BY(mu_) = 0;  // WELCOMEs sent, sockets not yet handed over
};

// A joiner's side: finds the ring's rank 0 among the first `base` workers of `config`'s cluster
// (a member that is not rank 0 says so, and the next is asked), sends RING_JOIN and waits, until
// `deadline`, for the commit the ring takes it in at. FailedPrecondition naming the member that
// refused it and why; DeadlineExceeded when none answered in time.
Result<wire::RingJoinAccept> AskToJoin(transport::asio::io_context& ioc, const config::TfConfig& config, std::uint64_t job_fingerprint,
                                       std::uint64_t incarnation, const transport::ConnectionOptions& connection,
                                       std::chrono::steady_clock::time_point deadline, const std::atomic<bool>* stop);

}  // namespace tfd::allreduce
