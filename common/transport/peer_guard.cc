#include "common/transport/peer_guard.h"

#include <chrono>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

namespace tfd::transport {

std::string RefusalCounts::ToString() const {
  std::vector<std::string> parts;
  for (auto [n, what] : {std::pair{malformed, "malformed"}, {authentication, "authentication"}, {handshake_timeout, "handshake timeout"},
                         {busy, "busy (too many handshakes from one address)"}, {mismatch, "another cluster or task"}})
    if (n > 0) parts.push_back(fmt::format("{} {}", n, what));
  return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, ", "));
}

bool PeerGuard::TakeHandshakeSlot(const std::string& address) {
  bool log = false;
  {
    MutexLock lock(&mu_);
    int& n = handshakes_[address];
    if (n < max_handshakes_per_address_) {
      ++n;
      return true;
    }
    CountLocked(Refusal::kBusy);
    const std::int64_t now_s =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
    log = std::exchange(last_busy_log_s_, now_s) != now_s;
  }
  if (log) {
    spdlog::warn("refused connections from {}: {} handshakes from it are in progress already", address,
                 max_handshakes_per_address_);
  }
  return false;
}

void PeerGuard::ReleaseHandshakeSlot(const std::string& address) {
  MutexLock lock(&mu_);
  auto it = handshakes_.find(address);
  if (it != handshakes_.end() && --it->second <= 0) handshakes_.erase(it);
}

void PeerGuard::Count(Refusal why) {
  MutexLock lock(&mu_);
  CountLocked(why);
}

void PeerGuard::CountLocked(Refusal why) {
  switch (why) {
    case Refusal::kMalformed: ++counts_.malformed; break;
    case Refusal::kAuthentication: ++counts_.authentication; break;
    case Refusal::kHandshakeTimeout: ++counts_.handshake_timeout; break;
    case Refusal::kBusy: ++counts_.busy; break;
    case Refusal::kMismatch: ++counts_.mismatch; break;
  }
}

RefusalCounts PeerGuard::counts() const {
  MutexLock lock(&mu_);
  return counts_;
}

}  // namespace tfd::transport
