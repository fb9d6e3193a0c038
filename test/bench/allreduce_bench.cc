// All-reduce bandwidth: tfd's ring (2 members as threads, each with its own io_context thread, as
// two workers would be; through shared slots, over the Unix socket alone, then over loopback TCP)
// beside OpenMPI's
// MPI_Allreduce over TCP and over
// shared memory and PyTorch's gloo all_reduce, measured in the same run, for float buffers of
// 318 KB (the mlp's gradient), 1 MB and 16 MB. Prints the median time per call, the algorithm
// bandwidth (bytes / time) and the bus bandwidth busbw = algbw * 2(n-1)/n.
//
//   build/test/bench/tfd_bench_allreduce [--seconds S] [--chunk-kb K] [--spin-us U] [--shm-slots N] [--token] [--no-peer]
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/base/memory.h"
#include "test/ring_harness.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRanks = 2;
const std::vector<long> kSizes = {318040, 1 << 20, 16 << 20};

double BusBw(double bytes, double us) { return us > 0 ? bytes / (us * 1e-6) * 2.0 * (kRanks - 1) / kRanks / 1e9 : 0; }

// Median microseconds per AllReduce, each call started together on every member.
double TimeRing(tfd::testing::LocalRing& ring, long bytes, double seconds) {
  std::vector<std::vector<float>> data(kRanks, std::vector<float>(static_cast<std::size_t>(bytes / 4), 1.0f));
  for (int i = 0; i < 3; ++i)
    for (const auto& s : ring.OnEach([&](int r) { return ring.ring(r).AllReduce(data[static_cast<std::size_t>(r)]); }))
      if (!s.ok()) {
        std::fprintf(stderr, "tfd_bench_allreduce: %s\n", s.message().c_str());
        std::exit(1);
      }
  std::vector<double> times;
  bool go = true;
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  std::barrier sync(kRanks, [&]() noexcept { go = times.size() < 10 || Clock::now() < deadline; });
  auto statuses = ring.OnEach([&](int r) {
    for (;;) {
      sync.arrive_and_wait();
      if (!go) return tfd::Status::Ok();
      const auto t = Clock::now();
      tfd::Status s = ring.ring(r).AllReduce(data[static_cast<std::size_t>(r)]);
      if (!s.ok()) return s;
      if (r == 0) times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
      sync.arrive_and_wait();
    }
  });
  for (const auto& s : statuses)
    if (!s.ok()) {
      std::fprintf(stderr, "tfd_bench_allreduce: %s\n", s.message().c_str());
      std::exit(1);
    }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

nlohmann::json RunPeer(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return nullptr;
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  pclose(p);
  const auto nl = out.find_last_of('{');
  if (nl == std::string::npos) return nullptr;
  auto j = nlohmann::json::parse(out.substr(out.rfind('\n', nl) == std::string::npos ? 0 : out.rfind('\n', nl) + 1), nullptr, false);
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

double PeerUs(const nlohmann::json& j, long bytes) {
  if (!j.is_object() || !j.contains("results")) return 0;
  for (const auto& r : j["results"])
    if (r["bytes"].get<long>() == bytes) return r["us"].get<double>();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.0;
  std::size_t chunk_kb = 256;
  bool peer = true;
  long spin_us = -1;  // -1: RingOptions' default
  std::uint32_t shm_slots = 0;  // 0: RingOptions' default
  bool token = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--chunk-kb" && i + 1 < argc) chunk_kb = static_cast<std::size_t>(std::atol(argv[++i]));
    else if (a == "--spin-us" && i + 1 < argc) spin_us = std::atol(argv[++i]);
    else if (a == "--shm-slots" && i + 1 < argc) shm_slots = static_cast<std::uint32_t>(std::atol(argv[++i]));
    else if (a == "--no-peer") peer = false;
    else if (a == "--token") token = true;
    else {
      std::fprintf(stderr, "usage: %s [--seconds S] [--chunk-kb K] [--spin-us U] [--shm-slots N] [--token] [--no-peer]\n", argv[0]);
      return 2;
    }
  }
  tfd::KeepLargeAllocationsInHeap();  // as tfd's main() does
  std::string sizes;
  for (long b : kSizes) sizes += " " + std::to_string(b);

  tfd::collective::RingOptions o;
  o.chunk_floats = chunk_kb * 1024 / 4;
  if (spin_us >= 0) o.spin = std::chrono::microseconds(spin_us);
  if (shm_slots >= 1 && shm_slots <= 1024) o.shm_slots = shm_slots;
  // With a cluster token (what tfctl always sets up), every frame carries a GMAC instead of a CRC.
  if (token) o.connection.token = std::make_shared<tfd::transport::ClusterToken>(tfd::transport::ClusterToken::Generate());
  // The ring as tfd runs it on one host (Unix sockets, chunks through shared slots), over the Unix
  // sockets alone (TFD_RING_SHM=off), then over loopback TCP (TFD_LOCAL_LINK=tcp), in the same run.
  std::vector<double> ours, ours_unix, ours_tcp;
  for (int link = 0; link < 3; ++link) {
    tfd::collective::RingOptions lo = o;
    lo.shared_slots = link == 0;
    if (link == 2) setenv("TFD_LOCAL_LINK", "tcp", 1);
    tfd::testing::LocalRing ring(kRanks, lo);
    for (const auto& s : ring.Connect())
      if (!s.ok()) {
        std::fprintf(stderr, "tfd_bench_allreduce: %s\n", s.message().c_str());
        return 1;
      }
    for (long b : kSizes) (link == 0 ? ours : link == 1 ? ours_unix : ours_tcp).push_back(TimeRing(ring, b, seconds));
    unsetenv("TFD_LOCAL_LINK");
  }

  nlohmann::json mpi_tcp, mpi_shm, gloo;
  std::string mpi_note;
#ifdef TFD_MPI_PEER
  if (peer) {
    const std::string base = "mpirun --allow-run-as-root --oversubscribe -np 2 ";
    const std::string args = std::string(" ") + TFD_MPI_PEER + " " + std::to_string(seconds) + sizes + " 2>/dev/null";
    mpi_tcp = RunPeer(base + "--mca btl tcp,self" + args);
    mpi_shm = RunPeer(base + args);
    if (!mpi_tcp.is_object()) mpi_note = "OpenMPI peer failed to run (is mpirun on PATH?)";
  }
#else
  mpi_note = "OpenMPI not installed (scripts/setup --bench installs openmpi-bin libopenmpi-dev; then re-run cmake)";
#endif
  if (peer) {
    if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0)
      gloo = RunPeer("/usr/bin/python3 " TFD_SOURCE_DIR "/test/bench/torch_allreduce_peer.py --seconds " + std::to_string(seconds) + sizes +
                     " 2>/dev/null");
    else
      std::printf("PyTorch not found (scripts/setup --bench installs python3-torch): no gloo column\n");
    if (!gloo.is_object()) std::printf("the gloo peer gave no result this time (test/bench/torch_allreduce_peer.py)\n");
  }
  if (!mpi_note.empty()) std::printf("%s\n", mpi_note.c_str());

  std::printf("all-reduce (sum, float32), %d ranks on one host, chunk %zu KB, spin %lld us, frames checked by %s; median per call; busbw = "
              "algbw * 2(n-1)/n; tfd as it runs on one host (shared slots), over its Unix sockets alone (TFD_RING_SHM=off), and over loopback "
              "TCP (TFD_LOCAL_LINK=tcp)\n",
              kRanks, chunk_kb, static_cast<long long>(o.spin.count()), token ? "GMAC (cluster token)" : "CRC-32C");
  std::printf("%10s %12s %12s %12s %12s %12s %12s %10s %10s %10s\n", "bytes", "tfd GB/s", "tfd unix", "tfd tcp-lo", "MPI tcp", "MPI shm",
              "gloo", "tfd/tcp", "tfd/shm", "tfd/gloo");
  for (std::size_t i = 0; i < kSizes.size(); ++i) {
    const double b = static_cast<double>(kSizes[i]);
    const double t = BusBw(b, ours[i]);
    const double t_unix = BusBw(b, ours_unix[i]);
    const double t_tcp = BusBw(b, ours_tcp[i]);
    auto col = [&](const nlohmann::json& j) { return BusBw(b, PeerUs(j, kSizes[i])); };
    const double tcp = col(mpi_tcp), shm = col(mpi_shm), g = col(gloo);
    auto ratio = [&](double x) { return x > 0 ? fmt::format("{:.2f}x", t / x) : std::string("-"); };
    auto bw = [&](double x) { return x > 0 ? fmt::format("{:.2f}", x) : std::string("-"); };
    std::printf("%10ld %12s %12s %12s %12s %12s %12s %10s %10s %10s\n", kSizes[i], bw(t).c_str(), bw(t_unix).c_str(), bw(t_tcp).c_str(), bw(tcp).c_str(),
                bw(shm).c_str(), bw(g).c_str(), ratio(tcp).c_str(), ratio(shm).c_str(), ratio(g).c_str());
  }
  std::printf("318 KB latency: tfd %.0f us", ours[0]);
  if (PeerUs(gloo, kSizes[0]) > 0) std::printf(", gloo %.0f us (tfd %.1fx faster; target >= 5x)", PeerUs(gloo, kSizes[0]), PeerUs(gloo, kSizes[0]) / ours[0]);
  std::printf("\n");
  return 0;
}
