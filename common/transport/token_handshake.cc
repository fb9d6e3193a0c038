#include "common/transport/token_handshake.h"

#include <utility>

#include <fmt/format.h>

namespace tfd::transport {
namespace {

bool IsAuthType(wire::MessageType t) {
  return t == wire::MessageType::kAuthHello || t == wire::MessageType::kAuthChallenge || t == wire::MessageType::kAuthProof;
}

TokenHandshake::Step Refuse(std::string message) {
  TokenHandshake::Step s;
  s.refuse = Status::PermissionDenied(std::move(message));
  return s;
}

std::string DifferentToken(std::string_view peer) {
  return fmt::format("{} holds a different cluster token (its --token-file differs from this task's)", peer);
}

}  // namespace

TokenHandshake::TokenHandshake(State state, std::shared_ptr<const ClusterToken> token, const wire::Nonce& client_nonce,
                               const wire::Nonce& server_nonce)
    : state_(state), token_(std::move(token)), client_nonce_(client_nonce), server_nonce_(server_nonce) {}

TokenHandshake TokenHandshake::Client(std::shared_ptr<const ClusterToken> token, const wire::Nonce& client_nonce) {
  return TokenHandshake(State::kClientAwaitChallenge, std::move(token), client_nonce, {});
}

TokenHandshake TokenHandshake::Server(std::shared_ptr<const ClusterToken> token, const wire::Nonce& server_nonce) {
  return TokenHandshake(State::kServerAwaitHello, std::move(token), {}, server_nonce);
}

bool TokenHandshake::Takes(wire::MessageType type) const { return !frames_flow() || IsAuthType(type); }

wire::OutFrame TokenHandshake::Hello() const { return wire::Encode(wire::AuthHello{client_nonce_}); }

TokenHandshake::Step TokenHandshake::Receive(const wire::InFrame& frame, std::string_view peer) {
  if (frames_flow()) return OnFlowing(frame, peer);
  if (frame.header.type == wire::MessageType::kError) {
    Step s;
    if (state_ == State::kClientAwaitChallenge) {  // the server refused us: the handler reports why
      s.for_handler = true;
      return s;
    }
    wire::ErrorMessage err;
    (void)wire::Decode(frame.payload, &err);
    s.closed = Status::PermissionDenied(fmt::format("{} refused to authenticate: {}", peer, err.message));
    return s;
  }
  switch (state_) {
    case State::kServerAwaitHello: return OnServerHello(frame, peer);
    case State::kServerAwaitProof: return OnServerProof(frame, peer);
    case State::kClientAwaitChallenge: return OnClientChallenge(frame, peer);
    case State::kOff:
    case State::kOn: break;
  }
  return OnFlowing(frame, peer);
}

TokenHandshake::Step TokenHandshake::OnFlowing(const wire::InFrame& frame, std::string_view peer) const {
  const wire::MessageType type = frame.header.type;
  if (!IsAuthType(type)) {
    Step s;
    s.for_handler = true;
    return s;
  }
  if (state_ == State::kOff) {
    return Refuse(fmt::format("{} authenticates with a cluster token, but this task has none (start it with the cluster's --token-file)", peer));
  }
  return Refuse(fmt::format("{} sent {} after authenticating", peer, wire::MessageTypeName(type)));
}

TokenHandshake::Step TokenHandshake::OnServerHello(const wire::InFrame& frame, std::string_view peer) {
  const wire::MessageType type = frame.header.type;
  wire::AuthHello hello;
  if (type != wire::MessageType::kAuthHello || !wire::Decode(frame.payload, &hello).ok()) {
    return Refuse(fmt::format(
        "{} sent {} without authenticating, but this task requires the cluster token (start the peer with the cluster's --token-file)",
        peer, wire::MessageTypeName(type)));
  }
  client_nonce_ = hello.nonce;
  wire::AuthChallenge challenge;
  challenge.nonce = server_nonce_;
  challenge.proof = token_->Derive(kServerProofLabel, client_nonce_, server_nonce_);
  state_ = State::kServerAwaitProof;
  Step s;
  s.send = wire::Encode(challenge);
  return s;
}

TokenHandshake::Step TokenHandshake::OnServerProof(const wire::InFrame& frame, std::string_view peer) {
  const wire::MessageType type = frame.header.type;
  wire::AuthProof proof;
  if (type != wire::MessageType::kAuthProof || !wire::Decode(frame.payload, &proof).ok())
    return Refuse(fmt::format("{} sent {} where AUTH_PROOF was expected", peer, wire::MessageTypeName(type)));
  if (!SameBytes(proof.proof, token_->Derive(kClientProofLabel, client_nonce_, server_nonce_))) return Refuse(DifferentToken(peer));
  Authenticated(/*client=*/false);
  Step s;
  s.authenticated = true;
  return s;
}

TokenHandshake::Step TokenHandshake::OnClientChallenge(const wire::InFrame& frame, std::string_view peer) {
  const wire::MessageType type = frame.header.type;
  wire::AuthChallenge challenge;
  if (type != wire::MessageType::kAuthChallenge || !wire::Decode(frame.payload, &challenge).ok()) {
    const std::string what = IsAuthType(type) ? std::string(wire::MessageTypeName(type))
                                              : fmt::format("{} (it has no cluster token: start it with --token-file)", wire::MessageTypeName(type));
    return Refuse(fmt::format("{} answered the token handshake with {}", peer, what));
  }
  server_nonce_ = challenge.nonce;
  if (!SameBytes(challenge.proof, token_->Derive(kServerProofLabel, client_nonce_, server_nonce_))) return Refuse(DifferentToken(peer));
  wire::AuthProof proof;
  proof.proof = token_->Derive(kClientProofLabel, client_nonce_, server_nonce_);
  Authenticated(/*client=*/true);
  Step s;
  s.send = wire::Encode(proof);
  s.authenticated = true;
  return s;
}

void TokenHandshake::Authenticated(bool client) {
  const SessionKey to_client = token_->Derive(kServerToClientLabel, client_nonce_, server_nonce_);
  const SessionKey to_server = token_->Derive(kClientToServerLabel, client_nonce_, server_nonce_);
  send_key_ = client ? to_server : to_client;
  recv_key_ = client ? to_client : to_server;
  state_ = State::kOn;
}

}  // namespace tfd::transport
