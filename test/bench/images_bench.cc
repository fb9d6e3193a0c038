// PNG decoding of an image folder: the MNIST training images written as 28x28 grayscale PNGs
// (one class folder per digit, stb_image_write), read by tfd's image folder reader on one thread
// beside Pillow (test/bench/pil_peer.py, Debian's python3-pil) decoding the same files, both
// pinned to the same one CPU, best of three passes each. Prints the ratio; asserts nothing.
//
//   build/test/bench/tfd_bench_images [--data MNIST_DIR] [--count N] [--no-peer] [--keep DIR]
//
// --keep DIR writes the whole of MNIST as PNG folders (DIR/train/<digit>/, DIR/test/<digit>/) and
// keeps them: what configs/jobs/mnist-png-dnn.json reads from data/mnist-png.
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/data/dataset.h"
#include "common/data/images.h"
#include "test/image_files.h"
#include "test/test_util.h"

namespace {

using Clock = std::chrono::steady_clock;

// Pins this process (and the peer it starts) to the one CPU it is on now.
void PinToOneCpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(sched_getcpu(), &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) std::perror("sched_setaffinity");
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = std::getenv("TFD_MNIST_DIR") ? std::getenv("TFD_MNIST_DIR") : "data/mnist", keep;
  std::int64_t count = 60000;
  bool peer = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--data" && i + 1 < argc) data = argv[++i];
    else if (a == "--count" && i + 1 < argc) count = std::atoll(argv[++i]);
    else if (a == "--keep" && i + 1 < argc) keep = argv[++i];
    else if (a == "--no-peer") peer = false;
    else {
      std::fprintf(stderr, "usage: %s [--data MNIST_DIR] [--count N] [--no-peer] [--keep DIR]\n", argv[0]);
      return 2;
    }
  }
  auto mnist = tfd::data::LoadMnist(data);
  if (!mnist.ok()) {
    std::fprintf(stderr, "%s (scripts/fetch_mnist.sh fetches MNIST)\n", mnist.status().message().c_str());
    return 2;
  }
  if (!keep.empty()) {
    tfd::testing::WriteDatasetPngs(mnist->train, mnist->train.size, keep + "/train");
    tfd::testing::WriteDatasetPngs(mnist->test, mnist->test.size, keep + "/test");
    std::printf("wrote MNIST as PNG folders in %s/train and %s/test\n", keep.c_str(), keep.c_str());
    return 0;
  }
  count = std::clamp<std::int64_t>(count, 1, mnist->train.size);
  tfd::testing::TempDir dir;
  tfd::testing::WriteDatasetPngs(mnist->train, count, dir / "train");
  PinToOneCpu();

  tfd::config::DataSpec spec;
  spec.format = tfd::config::DataSpec::Format::kImages;
  double best = 1e30;
  for (int pass = 0; pass < 3; ++pass) {
    const auto start = Clock::now();
    auto e = tfd::data::ReadImageFolders(spec, {dir / "train"}, 1);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (!e.ok() || e->size != count) {
      std::fprintf(stderr, "read failed: %s\n", e.ok() ? "wrong count" : e.status().message().c_str());
      return 1;
    }
    best = std::min(best, s);
  }
  std::printf("tfd (stb_image, 1 thread, listing included): %lld PNGs 28x28 gray in %.3f s: %.0f images/s\n", static_cast<long long>(count), best,
              static_cast<double>(count) / best);
  if (!peer) return 0;
  auto r = tfd::testing::RunCommand("/usr/bin/python3 " TFD_SOURCE_DIR "/test/bench/pil_peer.py " + dir / "train", dir);
  if (r.exit_code != 0) {
    std::printf("Pillow: not measured (exit %d: %s); scripts/setup --bench installs python3-pil\n", r.exit_code, r.err.c_str());
    return 0;
  }
  const auto j = nlohmann::json::parse(r.out);
  const double peer_s = j["seconds"].get<double>();
  std::printf("Pillow %s (Image.open + load, 1 thread): %lld PNGs in %.3f s: %.0f images/s\n", j["pillow"].get<std::string>().c_str(),
              static_cast<long long>(j["images"].get<std::int64_t>()), peer_s, static_cast<double>(count) / peer_s);
  std::printf("ratio tfd/Pillow (images/s): %.2fx\n", peer_s / best);
  return 0;
}
