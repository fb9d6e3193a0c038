// Ring all-reduce and broadcast between threads over loopback TCP: exact sums for several ring
// sizes, lengths and chunk sizes, identical bits on every member, and the errors of a broken ring.
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include <catch2/catch.hpp>

#include "test/ring_harness.h"
#include "test/test_util.h"

namespace tfd::testing {
namespace {

using namespace std::chrono_literals;

collective::RingOptions Options(std::size_t chunk_floats) {
  collective::RingOptions o;
  o.chunk_floats = chunk_floats;
  o.startup_timeout = 30s;
  o.step_timeout = 30s;
  return o;
}

bool AllOk(const std::vector<Status>& s) {
  for (const auto& x : s) {
    if (!x.ok()) {
      UNSCOPED_INFO(x.message());
      return false;
    }
  }
  return true;
}

// Member r holds (i % 13) + r + 1 at index i: small integers, so every float sum is exact.
void CheckSums(int n, std::size_t len, std::size_t chunk_floats, int repeats = 1) {
  LocalRing ring(n, Options(chunk_floats));
  REQUIRE(AllOk(ring.Connect()));
  std::vector<std::vector<float>> data(static_cast<std::size_t>(n), std::vector<float>(len));
  for (int rep = 0; rep < repeats; ++rep) {
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < len; ++i) data[static_cast<std::size_t>(r)][i] = static_cast<float>(i % 13 + static_cast<std::size_t>(r) + 1 + static_cast<std::size_t>(rep));
    REQUIRE(AllOk(ring.OnEach([&](int r) { return ring.ring(r).AllReduce(data[static_cast<std::size_t>(r)]); })));
    const float base = static_cast<float>(n * (n + 1) / 2 + n * rep);
    for (int r = 0; r < n; ++r) {
      std::size_t bad = 0;
      for (std::size_t i = 0; i < len; ++i)
        if (data[static_cast<std::size_t>(r)][i] != static_cast<float>(n) * static_cast<float>(i % 13) + base) ++bad;
      INFO("n=" << n << " len=" << len << " chunk=" << chunk_floats << " rank=" << r << " repeat=" << rep);
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("ring all-reduce sums exactly at every index for 2 to 5 members and odd lengths", "[unit][ring]") {
  for (int n : {2, 3, 4, 5})
    for (std::size_t len : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{1000003}}) CheckSums(n, len, 1 << 15);
}

TEST_CASE("ring all-reduce chunking: one-float chunks, chunks that do not divide segments, empty segments", "[unit][ring]") {
  CheckSums(3, 7, 1);         // every float its own frame
  CheckSums(4, 1000, 7);      // 250-float segments in chunks of 7 and a short last chunk
  CheckSums(5, 3, 2);         // fewer floats than members: two segments are empty
  CheckSums(2, 0, 16);        // nothing to reduce
  CheckSums(3, 100000, 1000, /*repeats=*/3);  // several collectives in a row on one ring
}

TEST_CASE("ring all-reduce leaves the same bits on every member, run after run", "[unit][ring]") {
  const int n = 3;
  const std::size_t len = 10007;
  auto run = [&] {
    LocalRing ring(n, Options(1000));
    REQUIRE(AllOk(ring.Connect()));
    std::vector<std::vector<float>> data(n, std::vector<float>(len));
    for (int r = 0; r < n; ++r) {
      std::mt19937 gen(static_cast<unsigned>(r + 1));
      std::normal_distribution<float> d(0.0f, 1.0f);
      for (auto& v : data[static_cast<std::size_t>(r)]) v = d(gen) * 1e-3f;
    }
    REQUIRE(AllOk(ring.OnEach([&](int r) { return ring.ring(r).AllReduce(data[static_cast<std::size_t>(r)]); })));
    return data;
  };
  auto a = run(), b = run();
  for (int r = 0; r < n; ++r) {
    CHECK(std::memcmp(a[0].data(), a[static_cast<std::size_t>(r)].data(), len * 4) == 0);
    CHECK(std::memcmp(a[static_cast<std::size_t>(r)].data(), b[static_cast<std::size_t>(r)].data(), len * 4) == 0);
  }
}

TEST_CASE("shared slots carry a same-host ring's chunks and give the socket's bits, with as few as one slot", "[unit][ring]") {
  const int n = 3;
  const std::size_t len = 300007;
  const ScopedEnv local("TFD_LOCAL_LINK", nullptr), slots_on("TFD_RING_SHM", nullptr);  // whatever the test's environment
  auto run = [&](bool shared, std::uint32_t slots, std::uint64_t* shm_chunks) {
    collective::RingOptions o = Options(4096);
    o.shared_slots = shared;
    o.shm_slots = slots;
    LocalRing ring(n, o);
    REQUIRE(AllOk(ring.Connect()));
    // Three buffers in flight at once (one slot makes most chunks wait for it), then a broadcast.
    std::vector<std::vector<std::vector<float>>> data(3, std::vector<std::vector<float>>(n, std::vector<float>(len)));
    for (std::size_t b = 0; b < data.size(); ++b)
      for (int r = 0; r < n; ++r) {
        std::mt19937 gen(static_cast<unsigned>(100 * b + static_cast<std::size_t>(r)));
        std::normal_distribution<float> d(0.0f, 1.0f);
        for (auto& v : data[b][static_cast<std::size_t>(r)]) v = d(gen);
      }
    REQUIRE(AllOk(ring.OnEach([&](int r) -> Status {
      std::vector<std::uint64_t> ids;
      for (auto& buffers : data) {
        TFD_ASSIGN_OR_RETURN(std::uint64_t id, ring.ring(r).StartAllReduce(buffers[static_cast<std::size_t>(r)]));
        ids.push_back(id);
      }
      TFD_RETURN_IF_ERROR(ring.ring(r).Wait(ids.back()));
      return ring.ring(r).Broadcast(data[0][static_cast<std::size_t>(r)]);
    })));
    *shm_chunks = 0;
    for (int r = 0; r < n; ++r) *shm_chunks += ring.ring(r).shm_chunks();
    for (auto& buffers : data)
      for (int r = 1; r < n; ++r) CHECK(buffers[static_cast<std::size_t>(r)] == buffers[0]);
    return data;
  };
  std::uint64_t over_socket = 0, in_slots = 0, in_one_slot = 0;
  const auto expected = run(false, 8, &over_socket);
  CHECK(over_socket == 0);
  CHECK(run(true, 8, &in_slots) == expected);
  CHECK(run(true, 1, &in_one_slot) == expected);
  // Every chunk after the first collective's own first ones (sent before the offer is accepted).
  CHECK(in_slots > 100);
  CHECK(in_one_slot > 100);
}

TEST_CASE("members finish in good order right after a broadcast, shared slots offered or not", "[unit][ring]") {
  // In a broadcast rank 0 reads nothing from its previous member, whose offer of shared slots then
  // waits unread until Finish: answering it there, after DONE, would write to a member that left.
  for (int n : {2, 3})
    for (int round = 0; round < 15; ++round) {
      LocalRing ring(n, Options(1000));
      REQUIRE(AllOk(ring.Connect()));
      std::vector<std::vector<float>> data(static_cast<std::size_t>(n), std::vector<float>(5000, 0.0f));
      for (float& v : data[0]) v = 1.5f;
      INFO("n=" << n << " round " << round);
      REQUIRE(AllOk(ring.OnEach([&](int r) -> Status {
        TFD_RETURN_IF_ERROR(ring.ring(r).Broadcast(data[static_cast<std::size_t>(r)]));
        return ring.ring(r).Finish();
      })));
      for (int r = 1; r < n; ++r) CHECK(data[static_cast<std::size_t>(r)] == data[0]);
    }
}

TEST_CASE("ring broadcast copies rank 0's values to every member", "[unit][ring]") {
  for (int n : {2, 4}) {
    LocalRing ring(n, Options(100));
    REQUIRE(AllOk(ring.Connect()));
    std::vector<std::vector<float>> data(static_cast<std::size_t>(n), std::vector<float>(1001, -1.0f));
    for (std::size_t i = 0; i < 1001; ++i) data[0][i] = static_cast<float>(i) * 0.37f;
    REQUIRE(AllOk(ring.OnEach([&](int r) { return ring.ring(r).Broadcast(data[static_cast<std::size_t>(r)]); })));
    for (int r = 1; r < n; ++r) CHECK(data[static_cast<std::size_t>(r)] == data[0]);
  }
}

TEST_CASE("a member that leaves the ring fails the collective on every other member, naming it", "[unit][ring]") {
  LocalRing ring(4, Options(100));
  REQUIRE(AllOk(ring.Connect()));
  std::vector<std::vector<float>> data(4, std::vector<float>(5000, 1.0f));
  auto got = ring.OnEach([&](int r) {
    if (r == 2) {
      ring.ring(r).Close(Status::Ok());  // as if the process died: the sockets close
      return Status::Ok();
    }
    return ring.ring(r).AllReduce(data[static_cast<std::size_t>(r)]);
  });
  for (int r : {0, 1, 3}) {
    INFO("rank " << r << ": " << got[static_cast<std::size_t>(r)].message());
    CHECK_FALSE(got[static_cast<std::size_t>(r)].ok());
    CHECK(got[static_cast<std::size_t>(r)].message().find("worker:2 (127.0.0.1:") != std::string::npos);
    // Neighbours or not, every member blames worker:2 (an elastic ring re-forms without it).
    CHECK(ring.ring(r).Blamed(got[static_cast<std::size_t>(r)]) == 2);
  }
  CHECK(ring.ring(0).Blamed(Status::FailedPrecondition("stopped by a signal during a collective")) == -1);
}

TEST_CASE("BlamedMember: a member named as a ring names it or as a dial that failed names it, and report chains", "[unit][ring]") {
  using collective::BlamedMember;
  const std::vector<collective::RingMember> m = {
      {"worker:0", "127.0.0.1", 4000, {}, 0}, {"worker:1", "127.0.0.1", 4001, {}, 1}, {"worker:2", "127.0.0.1", 4002, {}, 2}};
  CHECK(BlamedMember(m, 1, Status::Unavailable("worker:2 (127.0.0.1:4002) closed the connection")) == 2);
  // A member lost while the ring re-forms refuses the dial: the dialler's words name it.
  CHECK(BlamedMember(m, 1, Status::Unavailable("worker:2 at 127.0.0.1:4002 did not accept a connection in time (last error: "
                                                "Connection refused)")) == 2);
  CHECK(BlamedMember(m, 2, Status::Unavailable("worker:0 (127.0.0.1:4000) reports: worker:1 at 127.0.0.1:4001 did not accept")) == 1);
  CHECK(BlamedMember(m, 0, Status::Unavailable("worker:2 at 127.0.0.1:4009 did not accept")) == -1);  // another address: not that member
  CHECK(BlamedMember(m, 2, Status::Unavailable("worker:2 at 127.0.0.1:4002 did not accept")) == -1);   // never itself
}

TEST_CASE("members leave the ring in good order after their last collective, whatever their pace", "[unit][ring]") {
  for (int rep = 0; rep < 5; ++rep) {
    LocalRing ring(3, Options(100));
    REQUIRE(AllOk(ring.Connect()));
    std::vector<std::vector<float>> data(3, std::vector<float>(1000, 1.0f));
    auto got = ring.OnEach([&](int r) {
      TFD_RETURN_IF_ERROR(ring.ring(r).AllReduce(data[static_cast<std::size_t>(r)]));
      if (r == rep % 3) std::this_thread::sleep_for(50ms);  // one member is slow to leave
      return ring.ring(r).Finish();
    });
    REQUIRE(AllOk(got));
    for (int r = 0; r < 3; ++r) CHECK(data[static_cast<std::size_t>(r)][999] == 3.0f);
  }
}

TEST_CASE("a silent neighbour ends the collective at the step deadline, named", "[unit][ring]") {
  collective::RingOptions o = Options(100);
  o.step_timeout = 500ms;
  LocalRing ring(2, o);
  REQUIRE(AllOk(ring.Connect()));
  std::vector<float> data(10, 1.0f);
  Status s = ring.ring(0).AllReduce(data);  // worker:1 never joins
  CHECK(s.code() == Code::kDeadlineExceeded);
  CHECK(s.message().find("worker:1 (127.0.0.1:") != std::string::npos);
}

TEST_CASE("overlapped all-reduces: several started at different paces, then one wait, all exact", "[unit][ring]") {
  const int n = 3;
  LocalRing ring(n, Options(500));
  REQUIRE(AllOk(ring.Connect()));
  const std::vector<std::size_t> lens = {33333, 7, 1000, 1, 250000};
  // data[r][b]: member r's bucket b; member r holds (i % 11) + r + b at index i.
  std::vector<std::vector<std::vector<float>>> data(n);
  for (int r = 0; r < n; ++r)
    for (std::size_t b = 0; b < lens.size(); ++b) {
      auto& v = data[static_cast<std::size_t>(r)].emplace_back(lens[b]);
      for (std::size_t i = 0; i < lens[b]; ++i) v[i] = static_cast<float>(i % 11 + static_cast<std::size_t>(r) + b);
    }
  for (int round = 0; round < 3; ++round) {
    auto got = ring.OnEach([&](int r) -> Status {
      std::uint64_t last = 0;
      for (std::size_t b = 0; b < lens.size(); ++b) {
        // Members reach each start at different times (backprop of unequal speed): whoever is ahead
        // sends chunks of a collective its neighbour has not started yet.
        if ((r + round + static_cast<int>(b)) % n == 0) std::this_thread::sleep_for(20ms);
        TFD_ASSIGN_OR_RETURN(last, ring.ring(r).StartAllReduce(data[static_cast<std::size_t>(r)][b]));
        TFD_RETURN_IF_ERROR(ring.ring(r).Progress());
      }
      return ring.ring(r).Wait(last);
    });
    REQUIRE(AllOk(got));
    for (int r = 0; r < n; ++r)
      for (std::size_t b = 0; b < lens.size(); ++b) {
        std::size_t bad = 0;
        auto& v = data[static_cast<std::size_t>(r)][b];
        for (std::size_t i = 0; i < lens[b]; ++i) {
          // Round k sums values that are themselves the sums of round k - 1: n^round * (initial sum).
          const float initial = static_cast<float>(n * (i % 11 + b) + n * (n - 1) / 2);
          if (v[i] != initial * std::pow(static_cast<float>(n), static_cast<float>(round))) ++bad;
        }
        INFO("round " << round << " rank " << r << " bucket " << b);
        CHECK(bad == 0);
      }
  }
  REQUIRE(AllOk(ring.OnEach([&](int r) { return ring.ring(r).Finish(); })));
}

// Heartbeats every 50 ms, and a neighbour silent for `peer_timeout` is lost.
collective::RingOptions FastHeartbeats(std::chrono::milliseconds peer_timeout) {
  collective::RingOptions o = Options(100);
  o.connection.heartbeat_interval = 50ms;
  o.connection.peer_timeout = peer_timeout;
  return o;
}

TEST_CASE("a neighbour that computes longer than the peer timeout is alive: its heartbeats say so", "[unit][ring]") {
  LocalRing ring(3, FastHeartbeats(400ms));
  REQUIRE(AllOk(ring.Connect()));
  std::vector<std::vector<float>> data(3, std::vector<float>(1000, 1.0f));
  auto got = ring.OnEach([&](int r) {
    if (r == 1) std::this_thread::sleep_for(1500ms);  // a long backprop, say: the others wait for it
    return ring.ring(r).AllReduce(data[static_cast<std::size_t>(r)]);
  });
  REQUIRE(AllOk(got));
  for (int r = 0; r < 3; ++r) CHECK(data[static_cast<std::size_t>(r)][999] == 3.0f);
}

TEST_CASE("a stopped neighbour (no heartbeats) fails the collective at the peer timeout, named", "[unit][ring]") {
  LocalRing ring(2, FastHeartbeats(500ms));
  REQUIRE(AllOk(ring.Connect()));
  // worker:1's I/O thread stops (as under SIGSTOP) and it never joins the collective.
  transport::asio::post(ring.ioc(1), [] { std::this_thread::sleep_for(3s); });
  std::vector<float> data(10, 1.0f);
  Status s = ring.ring(0).AllReduce(data);
  INFO(s.message());
  CHECK(s.code() == Code::kDeadlineExceeded);
  CHECK(s.message().find("worker:1 (127.0.0.1:") != std::string::npos);
  CHECK(s.message().find("not even a heartbeat") != std::string::npos);  // the peer timeout, not the 30 s step deadline
}

TEST_CASE("ring collectives with a cluster token: the MAC'd stream goes on after the handshake", "[unit][ring][auth]") {
  collective::RingOptions o = Options(1000);
  o.connection.token = std::make_shared<transport::ClusterToken>(transport::ClusterToken::Generate());
  LocalRing ring(3, o);
  REQUIRE(AllOk(ring.Connect()));
  std::vector<std::vector<float>> data(3, std::vector<float>(100003));
  for (int rep = 0; rep < 2; ++rep) {
    for (int r = 0; r < 3; ++r)
      for (std::size_t i = 0; i < data[0].size(); ++i) data[static_cast<std::size_t>(r)][i] = static_cast<float>(i % 7 + static_cast<std::size_t>(r));
    REQUIRE(AllOk(ring.OnEach([&](int r) { return ring.ring(r).AllReduce(data[static_cast<std::size_t>(r)]); })));
    for (int r = 0; r < 3; ++r) {
      std::size_t bad = 0;
      for (std::size_t i = 0; i < data[0].size(); ++i)
        if (data[static_cast<std::size_t>(r)][i] != static_cast<float>(3 * (i % 7) + 3)) ++bad;
      CHECK(bad == 0);
    }
  }
  REQUIRE(AllOk(ring.OnEach([&](int r) { return ring.ring(r).Finish(); })));
}

TEST_CASE("members that disagree on the buffer length fail with a Corruption naming the sender", "[unit][ring]") {
  LocalRing ring(2, Options(100));
  REQUIRE(AllOk(ring.Connect()));
  std::vector<float> a(1000, 1.0f), b(999, 1.0f);
  auto got = ring.OnEach([&](int r) { return ring.ring(r).AllReduce(r == 0 ? std::span<float>(a) : std::span<float>(b)); });
  CHECK_FALSE(got[0].ok());
  CHECK_FALSE(got[1].ok());
  const bool named = got[0].message().find("RING_CHUNK") != std::string::npos || got[1].message().find("RING_CHUNK") != std::string::npos;
  CHECK(named);
}

TEST_CASE("a ring member of another cluster is refused with the cluster ids named", "[unit][ring]") {
  collective::RingOptions o = Options(100);
  o.startup_timeout = 10s;
  LocalRing ring(2, o, /*stranger_id=*/7);
  auto got = ring.Connect();
  for (const Status& s : got) {
    INFO(s.message());
    CHECK_FALSE(s.ok());
  }
  const std::string all = got[0].message() + " | " + got[1].message();
  INFO(all);
  CHECK(all.find("cluster id mismatch") != std::string::npos);
  CHECK(all.find("0000000000000007") != std::string::npos);
}

}  // namespace
}  // namespace tfd::testing
