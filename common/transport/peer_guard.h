#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/base/mutex.h"

namespace tfd::transport {

// Why a server refused a peer.
enum class Refusal { kMalformed, kAuthentication, kHandshakeTimeout, kBusy, kMismatch };

struct RefusalCounts {
  std::uint64_t malformed = 0;          // bad magic, version, type, flags, length or CRC
  std::uint64_t authentication = 0;     // no, another or a wrong token; a frame whose MAC does not verify
  std::uint64_t handshake_timeout = 0;  // a handshake not done within the deadline (slow or idle peers)
  std::uint64_t busy = 0;               // too many handshakes in progress from one address
  std::uint64_t mismatch = 0;           // another cluster id, or a task that is not a worker of this cluster
  std::uint64_t total() const { return malformed + authentication + handshake_timeout + busy + mismatch; }
  std::string ToString() const;         // "3 malformed, 1 busy" (only the non-zero ones); "none"
};

// One server's admission control over the connections it accepts: a cap on handshakes in
// progress per remote address, so a flood of idle or slow connections from one host cannot use
// up the process's file descriptors, and the counts of the peers it refused, by reason (a ps logs
// them when it ends). The server (RunPs, the allreduce worker for its ring) creates one and hands
// it to every connection through ConnectionOptions::guard; two servers in one process, each with
// its own guard, neither share the cap nor count each other's refusals.
//
// Thread-safe: connections call it from their strands, on whatever threads run their io_context,
// and the owner reads counts() from any thread. mu_ is never held while logging or calling out.
class PeerGuard {
 public:
  explicit PeerGuard(int max_handshakes_per_address = 64) : max_handshakes_per_address_(max_handshakes_per_address) {}
  PeerGuard(const PeerGuard&) = delete;
  PeerGuard& operator=(const PeerGuard&) = delete;

  // For a connection accepted from `address` that has not finished its handshake: takes one of the
  // address's slots, to be given back with ReleaseHandshakeSlot. False, with the slots unchanged,
  // when all are taken; that counts a kBusy refusal and is logged (one line a second at most: a
  // flood must not become a flood of log lines).
  bool TakeHandshakeSlot(const std::string& address) TFD_EXCLUDES(mu_);
  void ReleaseHandshakeSlot(const std::string& address) TFD_EXCLUDES(mu_);
  void Count(Refusal why) TFD_EXCLUDES(mu_);
  // Every refusal counted since the guard was made.
  RefusalCounts counts() const TFD_EXCLUDES(mu_);
  int max_handshakes_per_address() const { return max_handshakes_per_address_; }

 private:
  void CountLocked(Refusal why) TFD_REQUIRES(mu_);

  const int max_handshakes_per_address_;
  mutable Mutex mu_;
  std::map<std::string, int> handshakes_ TFD_GUARDED_BY(mu_);  // address -> handshakes in progress (> 0)
  RefusalCounts counts_ TFD_GUARDED_BY(mu_);
  std::int64_t last_busy_log_s_ TFD_GUARDED_BY(mu_) = 0;  // steady clock, whole seconds
};

}  // namespace tfd::transport
