#include "common/transport/rpc.h"

#include <fmt/format.h>

#include "common/wire/messages.h"

namespace tfd::transport {

std::shared_ptr<RpcClient> RpcClient::Start(tcp::socket socket, std::string peer, ConnectionOptions options) {
  std::shared_ptr<RpcClient> client(new RpcClient(peer));
  // The connection keeps its client alive until it has reported closing (the client owns the
  // connection too: the cycle ends in OnClosed).
  client->connection_ = std::make_shared<Connection>(std::move(socket), *client, std::move(peer), options, client);
  client->connection_->Start(/*established=*/true);
  return client;
}

std::future<Result<wire::InFrame>> RpcClient::Call(wire::OutFrame request) { return Call(std::move(request), 0, nullptr); }

std::future<Result<wire::InFrame>> RpcClient::Call(wire::OutFrame request, std::uint64_t after, std::uint64_t* id,
                                                Clock::time_point* replied_at) {
  Pending p;
  p.after = after;
  p.replied_at = replied_at;
  auto future = p.promise.get_future();
  {
    MutexLock lock(&mu_);
    if (!closed_.ok()) {
      p.promise.set_value(closed_);
      return future;
    }
    request.header.request_id = next_id_++;
    if (id != nullptr) *id = request.header.request_id;
    pending_.emplace(request.header.request_id, std::move(p));
  }
  connection_->Send(std::move(request));
  return future;
}

void RpcClient::Notify(wire::OutFrame message) { connection_->Send(std::move(message)); }

Result<wire::InFrame> RpcClient::Wait(std::future<Result<wire::InFrame>>& reply, Clock::time_point deadline, const char* what) {
  if (reply.wait_until(deadline) != std::future_status::ready) {
    return Status::DeadlineExceeded(fmt::format("{} did not answer {} in time", peer_, what));
  }
  return reply.get();
}

void RpcClient::Close(const Status& why) { connection_->Close(why); }

Status RpcClient::closed_reason() const {
  MutexLock lock(&mu_);
  return closed_;
}

void RpcClient::OnFrame(const std::shared_ptr<Connection>& from, wire::InFrame frame) {
  if (frame.header.type == wire::MessageType::kError) {
    wire::ErrorMessage err;
    Status decoded = wire::Decode(frame.payload, &err);
    Status why = decoded.ok() ? Status(CodeFromWire(err.code), fmt::format("{} refused: {}", peer_, err.message))
                              : Status::Corruption(fmt::format("{}: malformed ERROR frame", peer_));
    if (frame.header.request_id == 0) {
      refused_.store(true);
      from->Close(why);  // a connection-level refusal: every call fails with it
      return;
    }
    MutexLock lock(&mu_);
    const std::uint64_t refused = frame.header.request_id;
    auto it = pending_.find(refused);
    if (it != pending_.end()) {
      it->second.promise.set_value(why);
      pending_.erase(it);
    }
    for (auto dep = pending_.begin(); dep != pending_.end();) {  // calls queued behind the refused one
      if (dep->second.after == refused) {
        dep->second.promise.set_value(why);
        dep = pending_.erase(dep);
      } else {
        ++dep;
      }
    }
    return;
  }
  {
    MutexLock lock(&mu_);
    auto it = pending_.find(frame.header.request_id);
    if (it != pending_.end()) {
      if (it->second.replied_at != nullptr) *it->second.replied_at = Clock::now();
      it->second.promise.set_value(std::move(frame));
      pending_.erase(it);
      return;
    }
  }
  // Every call waits for its reply (callers give up on the future, never on the id): a reply to
  // no call is a peer bug or a header damaged on the way, and no later reply can be trusted.
  from->Close(Status::Corruption(fmt::format("{} answered {} with request id {}, which no call has", peer_,
                                             wire::MessageTypeName(frame.header.type), frame.header.request_id)));
}

void RpcClient::OnClosed(const std::shared_ptr<Connection>&, const Status& why) {
  MutexLock lock(&mu_);
  closed_ = why.ok() ? Status::Unavailable(fmt::format("{}: connection closed", peer_)) : why;
  for (auto& [id, p] : pending_) p.promise.set_value(closed_);
  pending_.clear();
}

}  // namespace tfd::transport
