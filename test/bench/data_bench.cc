// Reading the user's data beside its peers, in one run: a numeric CSV of about 100 MB (200,000 rows
// of 49 features and a label, written here with a fixed seed) through tfd's CSV reader and through
// pandas.read_csv (Debian's python3-pandas, C engine, each of its settings, the fastest kept). Best
// of 3 each; prints MB/s and the ratio. Asserts nothing about speed.
//
//   build/test/bench/tfd_bench_data [--rows N] [--no-peer]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <fmt/format.h>

#include "common/config/data_spec.h"
#include "common/data/readers.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string WriteCsv(const std::filesystem::path& dir, long rows) {
  const std::string path = (dir / "bench.csv").string();
  std::ofstream out(path);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 10);
  for (int c = 0; c < 49; ++c) out << "f" << c << ",";
  out << "label\n";
  std::string line;
  for (long r = 0; r < rows; ++r) {
    line.clear();
    for (int c = 0; c < 49; ++c) line += fmt::format("{:.6g},", normal(rng));
    line += std::to_string(r % 10) + "\n";
    out << line;
  }
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  long rows = 200000;
  bool peer = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rows" && i + 1 < argc) rows = std::strtol(argv[++i], nullptr, 10);
    else if (a == "--no-peer") peer = false;
    else return std::fprintf(stderr, "usage: tfd_bench_data [--rows N] [--no-peer]\n"), 2;
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / fmt::format("tfd_bench_data.{}", getpid());
  std::filesystem::create_directories(dir);
  const std::string path = WriteCsv(dir, rows);
  const double mb = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
  tfd::config::DataSpec spec;
  spec.format = tfd::config::DataSpec::Format::kCsv;
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    auto e = tfd::data::ReadCsv(spec, {path});
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (!e.ok()) return std::fprintf(stderr, "tfd_bench_data: %s\n", e.status().ToString().c_str()), 1;
    best = std::min(best, s);
  }
  std::printf("csv: %.1f MB, %ld rows x 50 columns\n", mb, rows);
  std::printf("  tfd ReadCsv          %7.3f s  %7.1f MB/s\n", best, mb / best);
  if (peer) {
    const std::string cmd = fmt::format("/usr/bin/python3 {}/test/bench/csv_peer.py {}", TFD_SOURCE_DIR, path);
    std::FILE* p = popen(cmd.c_str(), "r");
    char line[256];
    double peer_s = 0;
    char setting[64] = "-";
    while (p != nullptr && std::fgets(line, sizeof line, p) != nullptr)
      if (std::sscanf(line, "best %lf %63s", &peer_s, setting) == 2) break;
    if (p != nullptr) pclose(p);
    if (peer_s > 0)
      std::printf("  pandas.read_csv      %7.3f s  %7.1f MB/s  (best setting: %s)\n  ratio tfd/pandas: %.2fx\n", peer_s, mb / peer_s, setting,
                  peer_s / best);
    else
      std::printf("  pandas: not run (install python3-pandas: scripts/setup --bench)\n");
  }
  std::filesystem::remove_all(dir);
  return 0;
}
