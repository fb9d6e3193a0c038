// The .npy reader against numpy.load on one large float32 file (warm page cache, medians of 5, one
// process each), then the memory of 4 processes holding the same file as 4 local workers would.
//   tfd_bench_npy [--mb 1024] [--dir /tmp] [--workers 4]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/config/data_spec.h"
#include "common/data/readers.h"
#include "test/npy_files.h"

namespace {

constexpr int kFeatures = 784;

void WriteFiles(const std::string& dir, std::int64_t n) {
  std::ofstream x(dir + "/x.npy", std::ios::binary), y(dir + "/y.npy", std::ios::binary);
  x << tfd::testing::NpyHeader("<f4", fmt::format("({}, {})", n, kFeatures));
  y << tfd::testing::NpyHeader("|u1", fmt::format("({},)", n));
  std::vector<float> row(kFeatures);
  for (std::int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < kFeatures; ++j) row[static_cast<std::size_t>(j)] = static_cast<float>((i * 31 + j) % 255) / 255.0f;
    x.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(row.size() * sizeof(float)));
    y.put(static_cast<char>(i % 10));
  }
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// This process's smaps_rollup fields that say what it shares and what it alone holds.
std::string Memory() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string line, out;
  while (std::getline(in, line))
    for (const char* key : {"Rss:", "Pss:", "Shared_Clean:", "Private_Clean:", "Private_Dirty:", "Anonymous:"})
      if (line.rfind(key, 0) == 0) {
        long kb = 0;
        std::sscanf(line.c_str() + std::strlen(key), "%ld", &kb);
        out += fmt::format(" {} {:.1f} MiB", key, static_cast<double>(kb) / 1024);
      }
  return out;
}

// Each child reads the pair and touches every feature (as an epoch does); all measure while all
// hold the mapping, and none exits before all have measured.
void MemoryCheck(const std::string& dir, int workers) {
  int ready[2], go[2], done[2], leave[2];
  if (pipe(ready) != 0 || pipe(go) != 0 || pipe(done) != 0 || pipe(leave) != 0) return;
  std::fflush(stdout);
  for (int w = 0; w < workers; ++w) {
    if (fork() != 0) continue;
    auto e = tfd::data::ReadNpyPair(tfd::config::DataSpec{}, dir + "/x.npy", dir + "/y.npy");
    double sum = 0;
    if (e.ok()) {
      const auto* f = reinterpret_cast<const float*>(e->features.data());
      for (std::size_t i = 0; i < e->features.size() / sizeof(float); i += 1024) sum += f[i];
    }
    char c = 1;
    (void)!write(ready[1], &c, 1);
    (void)!read(go[0], &c, 1);
    const std::string memory = Memory();
    (void)!write(done[1], &c, 1);
    (void)!read(leave[0], &c, 1);
    std::printf("worker %d (%s, mapped %d, checksum %.0f):%s\n", w, e.ok() ? "read" : e.status().message().c_str(),
                e.ok() && e->features.mapped(), sum, memory.c_str());
    std::fflush(stdout);
    _exit(0);
  }
  char c = 0;
  for (auto [from, to] : {std::pair{ready[0], go[1]}, std::pair{done[0], leave[1]}}) {
    for (int w = 0; w < workers; ++w) (void)!read(from, &c, 1);
    for (int w = 0; w < workers; ++w) (void)!write(to, &c, 1);
  }
  for (int w = 0; w < workers; ++w) wait(nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t mb = 1024;
  std::string dir = std::filesystem::temp_directory_path().string();
  int workers = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--mb") == 0) mb = std::atoll(argv[i + 1]);
    else if (std::strcmp(argv[i], "--dir") == 0) dir = argv[i + 1];
    else if (std::strcmp(argv[i], "--workers") == 0) workers = std::atoi(argv[i + 1]);
  }
  dir += "/tfd-npy-bench";
  std::filesystem::create_directories(dir);
  const std::int64_t n = mb * (1 << 20) / (kFeatures * 4);
  WriteFiles(dir, n);
  std::printf("x.npy: (%lld, %d) float32, %.0f MiB (page cache warm: each file read once first)\n", static_cast<long long>(n), kFeatures,
              static_cast<double>(std::filesystem::file_size(dir + "/x.npy")) / (1 << 20));
  (void)!std::system(fmt::format("cat {0}/x.npy {0}/y.npy >/dev/null", dir).c_str());
  std::vector<double> ours;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto e = tfd::data::ReadNpyPair(tfd::config::DataSpec{}, dir + "/x.npy", dir + "/y.npy");
    ours.push_back(Seconds(t0));
    if (!e.ok()) return std::printf("%s\n", e.status().message().c_str()), 1;
  }
  std::printf("tfd ReadNpyPair (mapped; header, NaN/Inf check of every value, labels): %.3f s\n", Median(ours));
  const std::string peer = fmt::format(
      "/usr/bin/python3 -c \"import numpy as np, time, statistics as st\n"
      "def t(f):\n  r=[]\n  for _ in range(5):\n    t0=time.perf_counter(); f(); r.append(time.perf_counter()-t0)\n  return st.median(r)\n"
      "d='{0}'\n"
      "print('numpy.load mmap_mode=r: %.3f s' % t(lambda: (np.load(d+'/x.npy', mmap_mode='r'), np.load(d+'/y.npy'))))\n"
      "print('numpy.load mmap_mode=r + isfinite(x).all(): %.3f s' % t(lambda: (np.isfinite(np.load(d+'/x.npy', mmap_mode='r')).all(), np.load(d+'/y.npy'))))\n"
      "print('numpy.load (full read): %.3f s' % t(lambda: (np.load(d+'/x.npy'), np.load(d+'/y.npy'))))\n\"",
      dir);
  std::fflush(stdout);
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0) (void)!std::system(peer.c_str());
  else std::printf("numpy not found (/usr/bin/python3): ours only\n");
  if (workers > 0) MemoryCheck(dir, workers);
  std::filesystem::remove_all(dir);
  return 0;
}
