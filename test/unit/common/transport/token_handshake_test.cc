// The token handshake's state machine on its own: frames in, frames out, with fixed nonces and no
// socket. Every path: the same token on both sides, another token, a frame replayed or out of
// order, no token on one side, an ERROR from the peer.
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "common/transport/token_handshake.h"

namespace tfd::transport {
namespace {

using State = TokenHandshake::State;

// What the peer reads of `f`: its header and payload in one piece.
wire::InFrame Received(wire::OutFrame f) {
  REQUIRE(f.Seal().ok());
  wire::InFrame in;
  in.header = f.header;
  in.payload.assign(f.head.begin(), f.head.end());
  for (const auto& t : f.tail) in.payload.insert(in.payload.end(), t.begin(), t.end());
  return in;
}

wire::Nonce NonceOf(int seed) {
  wire::Nonce n;
  for (std::size_t i = 0; i < n.size(); ++i) n[i] = static_cast<std::byte>(seed + static_cast<int>(i));
  return n;
}

std::shared_ptr<const ClusterToken> NewToken() { return std::make_shared<const ClusterToken>(ClusterToken::Generate()); }

struct Pair {
  TokenHandshake client, server;
};
Pair PairOf(std::shared_ptr<const ClusterToken> client_token, std::shared_ptr<const ClusterToken> server_token) {
  return {TokenHandshake::Client(std::move(client_token), NonceOf(1)), TokenHandshake::Server(std::move(server_token), NonceOf(100))};
}

TEST_CASE("token handshake: the same token on both sides authenticates both, with mirrored session keys", "[unit][auth]") {
  const auto token = NewToken();
  Pair p = PairOf(token, token);
  CHECK_FALSE(p.client.frames_flow());
  CHECK(p.server.server_waiting());
  TokenHandshake::Step challenge = p.server.Receive(Received(p.client.Hello()), "client");
  REQUIRE(challenge.send);
  CHECK(challenge.send->header.type == wire::MessageType::kAuthChallenge);
  CHECK(p.server.state() == State::kServerAwaitProof);
  TokenHandshake::Step proof = p.client.Receive(Received(std::move(*challenge.send)), "server");
  REQUIRE(proof.send);
  CHECK(proof.authenticated);
  CHECK_FALSE(proof.refuse);
  CHECK(p.client.authenticated());
  TokenHandshake::Step done = p.server.Receive(Received(std::move(*proof.send)), "client");
  CHECK(done.authenticated);
  CHECK_FALSE(done.send);
  CHECK_FALSE(done.refuse);
  CHECK(p.server.authenticated());
  CHECK_FALSE(p.server.server_waiting());
  CHECK(p.client.send_key() == p.server.recv_key());
  CHECK(p.client.recv_key() == p.server.send_key());
  CHECK(p.client.send_key() != p.client.recv_key());  // one key per direction: nothing reflects
  // Application frames now go to the handler.
  TokenHandshake::Step app = p.server.Receive(Received(wire::EncodeHeartbeat()), "client");
  CHECK(app.for_handler);
  CHECK_FALSE(p.server.Takes(wire::MessageType::kHeartbeat));
}

TEST_CASE("token handshake: a server with another token is refused by the client", "[unit][auth]") {
  Pair p = PairOf(NewToken(), NewToken());
  TokenHandshake::Step challenge = p.server.Receive(Received(p.client.Hello()), "client");
  REQUIRE(challenge.send);
  TokenHandshake::Step r = p.client.Receive(Received(std::move(*challenge.send)), "ps:0");
  REQUIRE(r.refuse);
  CHECK(r.refuse->code() == Code::kPermissionDenied);
  CHECK(r.refuse->message() == "ps:0 holds a different cluster token (its --token-file differs from this task's)");
  CHECK_FALSE(r.send);  // no proof for a server that proved nothing
  CHECK_FALSE(p.client.authenticated());
}

TEST_CASE("token handshake: a client with another token is refused by the server", "[unit][auth]") {
  const auto server_token = NewToken();
  Pair p = PairOf(NewToken(), server_token);
  // A client that skips checking the server's proof still cannot make a proof of its own.
  TokenHandshake::Step challenge = p.server.Receive(Received(p.client.Hello()), "client");
  REQUIRE(challenge.send);
  wire::AuthChallenge c;
  const wire::InFrame in = Received(std::move(*challenge.send));
  REQUIRE(wire::Decode(in.payload, &c).ok());
  wire::AuthProof forged;
  forged.proof = ClusterToken::Generate().Derive(kClientProofLabel, NonceOf(1), c.nonce);
  TokenHandshake::Step r = p.server.Receive(Received(wire::Encode(forged)), "worker:1");
  REQUIRE(r.refuse);
  CHECK(r.refuse->message() == "worker:1 holds a different cluster token (its --token-file differs from this task's)");
  CHECK_FALSE(p.server.authenticated());
}

TEST_CASE("token handshake: a proof replayed from another connection does not fit this one's nonces", "[unit][auth]") {
  const auto token = NewToken();
  Pair first = PairOf(token, token);
  TokenHandshake::Step challenge = first.server.Receive(Received(first.client.Hello()), "client");
  TokenHandshake::Step proof = first.client.Receive(Received(std::move(*challenge.send)), "server");
  const wire::InFrame recorded = Received(std::move(*proof.send));
  // A second server, with its own nonce, sees the same AUTH_HELLO and then the recorded proof.
  TokenHandshake second = TokenHandshake::Server(token, NonceOf(200));
  REQUIRE(second.Receive(Received(first.client.Hello()), "replayer").send);
  TokenHandshake::Step r = second.Receive(recorded, "replayer");
  REQUIRE(r.refuse);
  CHECK(r.refuse->message().find("different cluster token") != std::string::npos);
  CHECK_FALSE(second.authenticated());
}

TEST_CASE("token handshake: frames out of order or replayed are refused naming what came", "[unit][auth]") {
  const auto token = NewToken();
  SECTION("a server's AUTH_HELLO sent again where the proof was expected") {
    Pair p = PairOf(token, token);
    REQUIRE(p.server.Receive(Received(p.client.Hello()), "worker:1").send);
    TokenHandshake::Step r = p.server.Receive(Received(p.client.Hello()), "worker:1");
    REQUIRE(r.refuse);
    CHECK(r.refuse->message() == "worker:1 sent AUTH_HELLO where AUTH_PROOF was expected");
  }
  SECTION("a client answered with a proof instead of a challenge") {
    Pair p = PairOf(token, token);
    TokenHandshake::Step r = p.client.Receive(Received(wire::Encode(wire::AuthProof{})), "ps:0");
    REQUIRE(r.refuse);
    CHECK(r.refuse->message() == "ps:0 answered the token handshake with AUTH_PROOF");
  }
  SECTION("a server's first frame is a proof") {
    Pair p = PairOf(token, token);
    TokenHandshake::Step r = p.server.Receive(Received(wire::Encode(wire::AuthProof{})), "worker:1");
    REQUIRE(r.refuse);
    CHECK(r.refuse->message().starts_with("worker:1 sent AUTH_PROOF without authenticating"));
  }
  SECTION("a handshake frame after authentication") {
    Pair p = PairOf(token, token);
    TokenHandshake::Step challenge = p.server.Receive(Received(p.client.Hello()), "client");
    const wire::InFrame recorded = Received(std::move(*challenge.send));
    REQUIRE(p.client.Receive(recorded, "ps:0").authenticated);
    CHECK(p.client.Takes(wire::MessageType::kAuthChallenge));
    TokenHandshake::Step r = p.client.Receive(recorded, "ps:0");
    REQUIRE(r.refuse);
    CHECK(r.refuse->message() == "ps:0 sent AUTH_CHALLENGE after authenticating");
  }
}

TEST_CASE("token handshake: a token on one side only is refused with a reason naming the fix", "[unit][auth]") {
  SECTION("the server has a token, the client none: its first frame is a plain HELLO") {
    TokenHandshake server = TokenHandshake::Server(NewToken(), NonceOf(100));
    TokenHandshake::Step r = server.Receive(Received(wire::Encode(wire::Hello{})), "10.0.0.5");
    REQUIRE(r.refuse);
    CHECK(r.refuse->message() ==
          "10.0.0.5 sent HELLO without authenticating, but this task requires the cluster token (start the peer with the "
          "cluster's --token-file)");
  }
  SECTION("the client has a token, the server none: the server refuses the AUTH_HELLO") {
    TokenHandshake server;  // no token
    CHECK(server.frames_flow());
    TokenHandshake::Step r = server.Receive(Received(TokenHandshake::Client(NewToken(), NonceOf(1)).Hello()), "worker:1");
    REQUIRE(r.refuse);
    CHECK(r.refuse->message() ==
          "worker:1 authenticates with a cluster token, but this task has none (start it with the cluster's --token-file)");
  }
  SECTION("the client has a token, the server none: the client hears something else than a challenge") {
    TokenHandshake client = TokenHandshake::Client(NewToken(), NonceOf(1));
    TokenHandshake::Step r = client.Receive(Received(wire::EncodeHeartbeat()), "ps:0");
    REQUIRE(r.refuse);
    CHECK(r.refuse->message() == "ps:0 answered the token handshake with HEARTBEAT (it has no cluster token: start it with --token-file)");
  }
}

TEST_CASE("token handshake: an ERROR from the peer goes to the dialer's handler, and closes a server's handshake", "[unit][auth]") {
  const auto token = NewToken();
  const wire::InFrame error = Received(wire::Encode(wire::ErrorMessage{7, "not today"}));
  TokenHandshake client = TokenHandshake::Client(token, NonceOf(1));
  TokenHandshake::Step c = client.Receive(error, "ps:0");
  CHECK(c.for_handler);
  CHECK_FALSE(c.refuse);
  TokenHandshake server = TokenHandshake::Server(token, NonceOf(100));
  TokenHandshake::Step s = server.Receive(error, "worker:1");
  REQUIRE(s.closed);
  CHECK(s.closed->message() == "worker:1 refused to authenticate: not today");
  CHECK_FALSE(s.refuse);  // nothing is sent back to a peer that refused us
}

}  // namespace
}  // namespace tfd::transport
