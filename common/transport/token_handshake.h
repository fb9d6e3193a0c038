#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "common/base/status.h"
#include "common/transport/auth.h"
#include "common/wire/frame.h"
#include "common/wire/messages.h"

namespace tfd::transport {

// The cluster token's handshake (docs/protocol.md, "Authentication") as a pure state machine: it
// takes the frames a connection receives before and after authentication and says what to do:
// send a frame, hand the frame to the handler, refuse the peer with a reason, or close because the
// peer refused us. It opens no socket, reads no clock and draws no random bytes (its own nonce is
// given), so every path is unit-tested (test/unit/common/transport/token_handshake_test.cc). Connection drives it.
//
//   client (dialed)                          server (accepted)
//   AUTH_HELLO(client nonce)          ->
//                                     <-     AUTH_CHALLENGE(server nonce, server proof)
//   checks the server proof
//   AUTH_PROOF(client proof)          ->     checks the client proof
//   authenticated                            authenticated
//
// A proof is HMAC(token, label || client nonce || server nonce), so a proof recorded from another
// connection does not fit this one's nonces. Without a token (Off) frames flow at once and any
// AUTH_* frame is refused, as is one after authentication.
//
// Threads: not thread-safe; a Connection calls it on its strand only.
class TokenHandshake {
 public:
  enum class State { kOff, kClientAwaitChallenge, kServerAwaitHello, kServerAwaitProof, kOn };

  // No token: frames flow at once.
  TokenHandshake() = default;
  // The dialing side (it sends Hello() first).
  static TokenHandshake Client(std::shared_ptr<const ClusterToken> token, const wire::Nonce& client_nonce);
  // The accepting side; `server_nonce` goes into its challenge.
  static TokenHandshake Server(std::shared_ptr<const ClusterToken> token, const wire::Nonce& server_nonce);

  // The client's opening AUTH_HELLO.
  wire::OutFrame Hello() const;

  struct Step {
    std::optional<wire::OutFrame> send;  // a handshake frame to send (CRC, no MAC), before any other
    bool authenticated = false;          // the handshake just completed: send_key/recv_key are set
    bool for_handler = false;            // not the handshake's: the handler takes the frame
    std::optional<Status> refuse;        // refuse the peer: an ERROR with this reason, then close
    std::optional<Status> closed;        // the peer refused us: close with this, sending nothing
  };
  // Whether Receive has something to say about a frame of this type (false: it is the handler's,
  // and the read loop need not ask).
  bool Takes(wire::MessageType type) const;
  // One frame received (its header and CRC checked). `peer` names the peer in the reasons.
  Step Receive(const wire::InFrame& frame, std::string_view peer);

  State state() const { return state_; }
  // Application frames may flow: no token, or authenticated.
  bool frames_flow() const { return state_ == State::kOff || state_ == State::kOn; }
  bool authenticated() const { return state_ == State::kOn; }
  // An accepting side that has not seen the client's proof: frames are kept tiny.
  bool server_waiting() const { return state_ == State::kServerAwaitHello || state_ == State::kServerAwaitProof; }
  // The session keys of this side's sending and receiving direction, once authenticated.
  const SessionKey& send_key() const { return send_key_; }
  const SessionKey& recv_key() const { return recv_key_; }

 private:
  TokenHandshake(State state, std::shared_ptr<const ClusterToken> token, const wire::Nonce& client_nonce, const wire::Nonce& server_nonce);
  Step OnServerHello(const wire::InFrame& frame, std::string_view peer);
  Step OnServerProof(const wire::InFrame& frame, std::string_view peer);
  Step OnClientChallenge(const wire::InFrame& frame, std::string_view peer);
  Step OnFlowing(const wire::InFrame& frame, std::string_view peer) const;
  // Both directions' keys from the nonces; the client sends on the client-to-server one.
  void Authenticated(bool client);

  State state_ = State::kOff;
  std::shared_ptr<const ClusterToken> token_;
  wire::Nonce client_nonce_{}, server_nonce_{};
  SessionKey send_key_{}, recv_key_{};
};

}  // namespace tfd::transport
