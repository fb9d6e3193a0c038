#pragma once

#include <atomic>
#include <future>
#include <memory>
#include <unordered_map>

#include "common/base/mutex.h"
#include "common/transport/connection.h"

namespace tfd::transport {

// The calling side of one connection: each Call gets a fresh request id and a future that the
// reply with that id fulfils. A reply of type ERROR, or the connection closing, fails the call
// with the peer's reason. Thread-safe.
//
// Threads: any thread calls Call/Notify/Wait/Close/closed_reason (a worker's training thread);
// OnFrame and OnClosed run on the connection's strand. mu_ guards the request ids and the pending
// calls they share; promises are fulfilled under it, and the connection is never called with it
// held.
class RpcClient : public FrameHandler, public std::enable_shared_from_this<RpcClient> {
 public:
  // Takes over `socket` (connected) and starts the connection. `peer` names the other side in
  // every error ("ps:0 (10.0.0.5:2222)").
  static std::shared_ptr<RpcClient> Start(tcp::socket socket, std::string peer, ConnectionOptions options);

  // Sends `request` and returns the reply's future. Memory referenced by the request's tail spans
  // must stay valid until the future is ready.
  std::future<Result<wire::InFrame>> Call(wire::OutFrame request) TFD_EXCLUDES(mu_);
  // Call, where an ERROR answer to the call with id `after` (made earlier on this client) fails this
  // call too: a request queued behind a refused one must not wait for an answer that cannot come.
  // `id` receives this call's request id. `replied_at`, when given, receives the time the reply
  // arrived (on the connection's strand, before the future is ready); it must stay valid until the
  // reply comes or the client closes.
  std::future<Result<wire::InFrame>> Call(wire::OutFrame request, std::uint64_t after, std::uint64_t* id,
                                          Clock::time_point* replied_at = nullptr) TFD_EXCLUDES(mu_);
  // Sends without expecting a reply.
  void Notify(wire::OutFrame message);
  // Waits for `reply` until `deadline`; DeadlineExceeded naming the peer and `what` otherwise.
  Result<wire::InFrame> Wait(std::future<Result<wire::InFrame>>& reply, Clock::time_point deadline, const char* what);
  void Close(const Status& why);
  const std::string& peer() const { return peer_; }
  // Why the connection closed; Ok while it is open.
  Status closed_reason() const TFD_EXCLUDES(mu_);
  // The peer refused the whole connection (an ERROR frame without a request id).
  bool refused() const { return refused_.load(); }

  void OnFrame(const std::shared_ptr<Connection>& from, wire::InFrame frame) TFD_EXCLUDES(mu_) override;
  void OnClosed(const std::shared_ptr<Connection>& from, const Status& why) TFD_EXCLUDES(mu_) override;

 private:
  RpcClient(std::string peer) : peer_(std::move(peer)) {}

  struct Pending {
    std::promise<Result<wire::InFrame>> promise;
    std::uint64_t after = 0;  // fail with that call's ERROR
    Clock::time_point* replied_at = nullptr;
  };

  std::string peer_;
  std::shared_ptr<Connection> connection_;  // set once by Start, before any other thread sees the client
  mutable Mutex mu_;
  std::uint64_t next_id_ TFD_GUARDED_BY(mu_) = 1;
  std::unordered_map<std::uint64_t, Pending> pending_ TFD_GUARDED_BY(mu_);
  Status closed_ TFD_GUARDED_BY(mu_);  // Ok while open
  std::atomic<bool> refused_{false};
};

}  // namespace tfd::transport
