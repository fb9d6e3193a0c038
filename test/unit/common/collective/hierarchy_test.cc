// The hierarchical all-reduce: the pure grouping (hosts from addresses, leaders, order, the choice
// of topology) and, over loopback TCP between threads, its sums against the order hier_ring.h
// documents, bit for bit (127.0.0.x addresses stand for hosts).
#include <functional>
#include <future>
#include <random>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "common/collective/hier_ring.h"
#include "common/collective/hierarchy.h"
#include "common/collective/ring_schedule.h"
#include "common/transport/listener.h"

namespace tfd::collective {
namespace {

using namespace std::chrono_literals;

RingOptions Flat(const std::vector<std::string>& hosts, int rank) {
  RingOptions o;
  o.rank = rank;
  for (std::size_t i = 0; i < hosts.size(); ++i)
    o.members.push_back({fmt::format("worker:{}", i), hosts[i], static_cast<std::uint16_t>(2000 + i), wire::TaskKind::kWorker,
                         static_cast<std::uint32_t>(i)});
  return o;
}

TEST_CASE("hosts are grouped by address as written, in the order of their lowest rank; the lowest rank leads", "[unit][hierarchy]") {
  const std::vector<HostGroup> g = GroupByHost(Flat({"b", "a", "b", "c", "a", "a"}, 0).members);
  REQUIRE(g.size() == 3);
  CHECK(g[0].host == "b");
  CHECK(g[0].ranks == std::vector<int>{0, 2});
  CHECK(g[1].host == "a");
  CHECK(g[1].ranks == std::vector<int>{1, 4, 5});
  CHECK(g[2].host == "c");
  CHECK(g[2].ranks == std::vector<int>{3});
  CHECK(GroupByHost(Flat({"pc-01", "10.0.0.1"}, 0).members).size() == 2);  // names are not resolved
}

TEST_CASE("each member's plan: its host's ring in rank order, and the leaders' ring in host order", "[unit][hierarchy]") {
  const std::vector<std::string> hosts = {"b", "a", "b", "c", "a", "a"};
  const HierarchyPlan p4 = PlanHierarchy(Flat(hosts, 4));
  CHECK(p4.host == 1);
  CHECK_FALSE(p4.leader);
  REQUIRE(p4.local.members.size() == 3);
  CHECK(p4.local.rank == 1);
  CHECK(p4.local.members[0].task == "worker:1");
  CHECK(p4.local.members[2].task == "worker:5");
  const HierarchyPlan p3 = PlanHierarchy(Flat(hosts, 3));
  CHECK(p3.leader);
  CHECK(p3.local.members.size() == 1);
  REQUIRE(p3.leaders.members.size() == 3);
  CHECK(p3.leaders.rank == 2);
  CHECK(p3.leaders.members[0].task == "worker:0");
  CHECK(p3.leaders.members[1].task == "worker:1");
  CHECK(p3.leaders.members[2].task == "worker:3");
  // Only the flat ring's rank 0 keeps the elastic door, in its host's ring (rank 0 there too).
  RingOptions flat = Flat(hosts, 0);
  flat.on_stranger = [](auto&&...) { return false; };
  const HierarchyPlan p0 = PlanHierarchy(flat);
  CHECK(p0.local.rank == 0);
  CHECK(p0.leaders.rank == 0);
  CHECK(p0.local.on_stranger != nullptr);
  CHECK(p0.leaders.on_stranger == nullptr);
  flat.rank = 1;
  CHECK(PlanHierarchy(flat).local.on_stranger == nullptr);
}

TEST_CASE("hosts with as many workers each split the crossing: each local rank's ring across hosts, in host order", "[unit][hierarchy]") {
  // Hosts a = {0, 3, 4}, b = {1, 2, 5}: local rank 1 of a is worker 3, of b worker 2.
  const std::vector<std::string> hosts = {"a", "b", "b", "a", "a", "b"};
  const HierarchyPlan p2 = PlanHierarchy(Flat(hosts, 2));
  CHECK(p2.split);
  CHECK_FALSE(p2.leader);
  CHECK(p2.host == 1);
  CHECK(p2.local.rank == 1);
  REQUIRE(p2.leaders.members.size() == 2);
  CHECK(p2.leaders.rank == 1);
  CHECK(p2.leaders.members[0].task == "worker:3");
  CHECK(p2.leaders.members[1].task == "worker:2");
  const HierarchyPlan p0 = PlanHierarchy(Flat(hosts, 0));
  REQUIRE(p0.leaders.members.size() == 2);
  CHECK(p0.leaders.members[1].task == "worker:1");  // local rank 0's ring is the leaders'
  // Unequal hosts, one host, or one worker per host: the leaders' ring alone.
  CHECK_FALSE(PlanHierarchy(Flat({"a", "b", "a"}, 0)).split);
  CHECK_FALSE(PlanHierarchy(Flat({"a", "a"}, 0)).split);
  CHECK_FALSE(PlanHierarchy(Flat({"a", "b"}, 0)).split);
  // TFD_HIER_SPLIT=off: the leaders' ring on even hosts too.
  const HierarchyPlan off = PlanHierarchy(Flat(hosts, 2), /*split_even_hosts=*/false);
  CHECK_FALSE(off.split);
  REQUIRE(off.leaders.members.size() == 2);
  CHECK(off.leaders.members[1].task == "worker:1");
}

TEST_CASE("auto is hierarchical with two hosts or more and two workers on some host; true and false force it", "[unit][hierarchy]") {
  auto choose = [](HierarchyMode m, const std::vector<std::string>& hosts) { return ChooseTopology(m, GroupByHost(Flat(hosts, 0).members)); };
  CHECK(choose(HierarchyMode::kAuto, {"a", "a", "b", "b"}).hierarchical);
  CHECK(choose(HierarchyMode::kAuto, {"a", "a", "b", "b"}).why == "2 hosts, at most 2 workers on one: update.hierarchical auto");
  CHECK(choose(HierarchyMode::kAuto, {"a", "b", "b"}).hierarchical);
  CHECK_FALSE(choose(HierarchyMode::kAuto, {"a", "a", "a"}).hierarchical);
  CHECK(choose(HierarchyMode::kAuto, {"a", "a", "a"}).why == "1 host, at most 3 workers on one: update.hierarchical auto needs two hosts or more");
  CHECK_FALSE(choose(HierarchyMode::kAuto, {"a", "b", "c"}).hierarchical);
  CHECK_FALSE(choose(HierarchyMode::kOff, {"a", "a", "b", "b"}).hierarchical);
  CHECK(choose(HierarchyMode::kOn, {"a", "b"}).hierarchical);
}

// `v` summed as a ring of v.size() members sums element i of segment c: from member c on, each
// partial sum being received + own.
float RingOrderSum(const std::vector<float>& v, std::size_t i, std::size_t len) {
  const int m = static_cast<int>(v.size());
  int c = 0;
  while (SegmentBegin(len, c + 1, m) <= i) ++c;
  float acc = v[static_cast<std::size_t>(c)];
  for (int k = 1; k < m; ++k) acc = acc + v[static_cast<std::size_t>((c + k) % m)];
  return acc;
}

// Members as threads, each with its io_context, a listener on every address (port 0) and a
// HierarchicalRing over the flat options of `hosts`.
class LocalHierarchy {
 public:
  explicit LocalHierarchy(const std::vector<std::string>& hosts) : n_(static_cast<int>(hosts.size())) {
    for (int i = 0; i < n_; ++i) {
      auto& m = members_.emplace_back(std::make_unique<Member>());
      m->thread = std::thread([io = &m->ioc] { io->run(); });
      auto slot = &m->ring;
      auto listener = transport::Listener::Bind(m->ioc, "", 0, [slot](transport::tcp::socket s) { (*slot)->Accept(std::move(s)); });
      TFD_CHECK(listener.ok());
      m->listener = std::move(listener).value();
    }
    RingOptions base;
    base.chunk_floats = 700;
    base.startup_timeout = 30s;
    base.step_timeout = 30s;
    base.cluster_id = 42;
    for (int i = 0; i < n_; ++i)
      base.members.push_back({fmt::format("worker:{}", i), hosts[static_cast<std::size_t>(i)], member(i).listener->port(),
                              wire::TaskKind::kWorker, static_cast<std::uint32_t>(i)});
    for (int i = 0; i < n_; ++i) {
      base.rank = i;
      member(i).ring = HierarchicalRing::Create(member(i).ioc, base);
      member(i).listener->Start();
    }
  }
  ~LocalHierarchy() {
    for (auto& m : members_) {
      m->ring->Close(Status::Ok());
      m->listener->Stop();
    }
    for (auto& m : members_) {
      m->guard.reset();
      m->thread.join();
    }
  }
  std::vector<Status> OnEach(const std::function<Status(int)>& fn) {
    std::vector<std::future<Status>> f;
    for (int i = 0; i < n_; ++i) f.push_back(std::async(std::launch::async, fn, i));
    std::vector<Status> out;
    for (auto& x : f) out.push_back(x.get());
    return out;
  }
  HierarchicalRing& ring(int r) { return *member(r).ring; }

 private:
  struct Member {
    transport::asio::io_context ioc{1};
    transport::asio::executor_work_guard<transport::asio::io_context::executor_type> guard = transport::asio::make_work_guard(ioc);
    std::thread thread;
    std::unique_ptr<transport::Listener> listener;
    std::shared_ptr<HierarchicalRing> ring;
  };
  Member& member(int i) { return *members_[static_cast<std::size_t>(i)]; }
  int n_;
  std::vector<std::unique_ptr<Member>> members_;
};

void RequireOk(const std::vector<Status>& all) {
  for (const Status& s : all) {
    INFO(s.ToString());
    REQUIRE(s.ok());
  }
}

using Buckets = std::vector<std::vector<std::vector<float>>>;  // [rank][bucket][float]

Buckets RandomBuckets(int n, const std::vector<std::size_t>& lens, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  Buckets data(static_cast<std::size_t>(n));
  for (auto& per_rank : data)
    for (std::size_t len : lens) {
      auto& v = per_rank.emplace_back(len);
      for (float& x : v) x = dist(gen);
    }
  return data;
}

// Every member all-reduces its buckets, started one after another (some members late, as an
// unequal backprop), and waits for the last; or (`each`) for one bucket after another, as
// AllreduceUpdater does, `data` then holding each bucket as it was when its own Wait returned (the
// later ones still in flight).
void AllReduceBuckets(LocalHierarchy& h, Buckets& data, std::chrono::milliseconds late, bool each = false) {
  RequireOk(h.OnEach([&](int r) -> Status {
    std::vector<std::uint64_t> ids;
    std::vector<std::vector<float>>& mine = data[static_cast<std::size_t>(r)];
    for (std::size_t b = 0; b < mine.size(); ++b) {
      if ((r + static_cast<int>(b)) % 3 == 0) std::this_thread::sleep_for(late);
      TFD_ASSIGN_OR_RETURN(std::uint64_t id, h.ring(r).StartAllReduce(mine[b]));
      ids.push_back(id);
      TFD_RETURN_IF_ERROR(h.ring(r).Progress());
    }
    if (!each) return h.ring(r).Wait(ids.back());
    std::vector<std::vector<float>> seen;
    for (std::size_t b = 0; b < mine.size(); ++b) {
      TFD_RETURN_IF_ERROR(h.ring(r).Wait(ids[b]));
      seen.push_back(mine[b]);
    }
    mine = std::move(seen);
    return Status::Ok();
  }));
}

// Each host's sum of float i of bucket b over `groups`, in its ring order (the reduce-scatter's,
// the all-reduce's first half).
std::vector<float> HostSums(const Buckets& before, const std::vector<std::vector<int>>& groups, std::size_t b, std::size_t i) {
  std::vector<float> sums;
  for (const auto& g : groups) {
    std::vector<float> v;
    for (int r : g) v.push_back(before[static_cast<std::size_t>(r)][b][i]);
    sums.push_back(RingOrderSum(v, i, before[0][b].size()));
  }
  return sums;
}

// Every member's every float against want(b, i), bit for bit.
void CheckSums(const Buckets& data, const std::function<float(std::size_t, std::size_t)>& want) {
  for (std::size_t b = 0; b < data[0].size(); ++b) {
    std::size_t bad = 0, differ = 0;
    for (std::size_t i = 0; i < data[0][b].size(); ++i) {
      const float w = want(b, i);
      for (const auto& per_rank : data) {
        if (per_rank[b][i] != w) ++bad;
        if (per_rank[b][i] != data[0][b][i]) ++differ;
      }
    }
    INFO("bucket " << b);
    CHECK(bad == 0);
    CHECK(differ == 0);
  }
}

// Rank 0's values reach every member (through the ring across hosts, then each host's), and the
// rings finish.
void CheckBroadcastThenFinish(LocalHierarchy& h, int n) {
  std::vector<std::vector<float>> bc(static_cast<std::size_t>(n), std::vector<float>(999));
  for (std::size_t i = 0; i < 999; ++i) bc[0][i] = static_cast<float>(i) * 0.5f;
  RequireOk(h.OnEach([&](int r) { return h.ring(r).Broadcast(bc[static_cast<std::size_t>(r)]); }));
  for (int r = 1; r < n; ++r) CHECK(bc[static_cast<std::size_t>(r)] == bc[0]);
  RequireOk(h.OnEach([&](int r) { return h.ring(r).Finish(); }));
}

TEST_CASE("hierarchical all-reduce: host sums in each host's ring order, then across hosts in the leaders' order, bit for bit",
          "[unit][hierarchy]") {
  // Hosts a = {0, 2}, b = {1}, c = {3, 4, 5}; leaders 0, 1, 3.
  const std::vector<std::string> hosts = {"127.0.0.1", "127.0.0.2", "127.0.0.1", "127.0.0.3", "127.0.0.3", "127.0.0.3"};
  const int n = static_cast<int>(hosts.size());
  LocalHierarchy h(hosts);
  REQUIRE_FALSE(h.ring(0).plan().split);
  RequireOk(h.OnEach([&](int r) { return h.ring(r).Connect(); }));
  const Buckets before = RandomBuckets(n, {5000, 3, 1, 12345}, 7);  // buckets, overlapped
  const std::vector<std::vector<int>> groups = {{0, 2}, {1}, {3, 4, 5}};
  for (int round = 0; round < 2; ++round) {  // waiting for the last bucket, then for each in turn
    INFO("round " << round);
    Buckets data = before;
    AllReduceBuckets(h, data, 10ms, /*each=*/round == 1);
    CheckSums(data, [&](std::size_t b, std::size_t i) { return RingOrderSum(HostSums(before, groups, b, i), i, before[0][b].size()); });
  }
  CheckBroadcastThenFinish(h, n);
}

TEST_CASE("split hierarchical all-reduce: a host's reduce-scatter, each segment across hosts in its own ring, then the host's all-gather, "
          "bit for bit",
          "[unit][hierarchy]") {
  // Two hosts of three: a = {0, 2, 4}, b = {1, 3, 5}.
  const std::vector<std::string> hosts = {"127.0.0.1", "127.0.0.2", "127.0.0.1", "127.0.0.2", "127.0.0.1", "127.0.0.2"};
  const int n = static_cast<int>(hosts.size()), w = 3;
  LocalHierarchy h(hosts);
  REQUIRE(h.ring(0).plan().split);
  RequireOk(h.OnEach([&](int r) { return h.ring(r).Connect(); }));
  const Buckets before = RandomBuckets(n, {5000, 2, 1, 4, 12345}, 11);  // segments empty on some members too
  const std::vector<std::vector<int>> groups = {{0, 2, 4}, {1, 3, 5}};
  for (int round = 0; round < 2; ++round) {  // a second step on the same rings, waiting for each bucket in turn
    INFO("round " << round);
    Buckets data = before;
    AllReduceBuckets(h, data, 5ms, /*each=*/round == 1);
    // Across hosts, segment c of the bucket is the buffer of its ring.
    CheckSums(data, [&](std::size_t b, std::size_t i) {
      const std::size_t len = before[0][b].size();
      int c = 0;
      while (SegmentBegin(len, c + 1, w) <= i) ++c;
      const std::uint64_t begin = SegmentBegin(len, c, w), end = SegmentBegin(len, c + 1, w);
      return RingOrderSum(HostSums(before, groups, b, i), i - begin, end - begin);
    });
  }
  CheckBroadcastThenFinish(h, n);
}

TEST_CASE("hierarchical: a lost member's error reaches every worker, blaming it through the leaders' reports", "[unit][hierarchy]") {
  const std::vector<std::string> hosts = {"127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2"};
  LocalHierarchy h(hosts);
  RequireOk(h.OnEach([&](int r) { return h.ring(r).Connect(); }));
  std::vector<std::vector<float>> data(4, std::vector<float>(4000, 1.0f));
  const std::vector<Status> got = h.OnEach([&](int r) -> Status {
    if (r == 3) {
      h.ring(r).Close(Status::Ok());  // quietly, as a killed process: its sockets just close
      return Status::Ok();
    }
    return h.ring(r).AllReduce(data[static_cast<std::size_t>(r)]);
  });
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << got[static_cast<std::size_t>(r)].ToString());
    CHECK_FALSE(got[static_cast<std::size_t>(r)].ok());
    CHECK(h.ring(r).Blamed(got[static_cast<std::size_t>(r)]) == 3);
  }
}

}  // namespace
}  // namespace tfd::collective
