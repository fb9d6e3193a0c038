// One layer's training forward + backward (the input's gradient included), tfd's beside PyTorch's
// (torch_layer_peer.py) on the same shapes: batch norm at the residual convnet's shapes at batch 64
// (NHWC) and on a dense layer's rows. Each side's time is the fastest of five blocks' mean time
// per step; PyTorch's is the best of the settings in peer_best.h (1 and 2 threads, denormals
// flushed or not) and of its memory formats (NCHW, channels_last), and the row says which; beside
// it, PyTorch's best on one thread (one core, as tfd runs). --pin CPU runs both sides on that one CPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/tensor/aligned.h"
#include "common/tensor/batch_norm_passes.h"
#include "common/tensor/layers.h"
#include "test/bench/peer_best.h"

namespace {

struct Case {
  std::string name;  // NxHxWxC, or NxC for rows, as the peer takes it
  int batch;
  tfd::tensor::ActShape shape;
};

const std::vector<Case> kBatchNormCases = {
    {"64x28x28x16", 64, {28, 28, 16}},
    {"64x14x14x32", 64, {14, 14, 32}},
    {"64x7x7x64", 64, {7, 7, 64}},
    {"256x512", 256, {1, 1, 512}},
};

// The fastest of `blocks` blocks' mean µs per call of `step`, each block about seconds / blocks.
template <typename Step>
double BestBlockMicros(Step step, double seconds, int blocks = 5) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < 5; ++i) step();
  double best = 1e300;
  for (int b = 0; b < blocks; ++b) {
    int n = 0;
    const Clock::time_point start = Clock::now();
    double elapsed = 0;
    do {
      step();
      ++n;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (n < 3 || elapsed < seconds / blocks);
    best = std::min(best, elapsed / n * 1e6);
  }
  return best;
}

// tfd's batch norm bound to its own variables, training: Forward, then Backward with din.
double MeasureBatchNorm(const Case& c, double seconds) {
  std::unique_ptr<tfd::tensor::Layer> layer = tfd::tensor::MakeBatchNorm(c.shape, {});
  std::vector<std::vector<float>> params, grads;
  for (const tfd::tensor::ParamSpec& p : layer->Params()) {
    const auto n = static_cast<std::size_t>(tfd::tensor::NumElements(p.shape));
    params.emplace_back(n, p.name == "moving_variance" || p.name == "gamma" ? 1.0f : 0.0f);
    grads.emplace_back(n);
  }
  std::vector<std::span<float>> ps(params.begin(), params.end()), gs(grads.begin(), grads.end());
  layer->Bind(ps, gs);
  layer->SetTraining(true, 0);
  layer->Reserve(c.batch);
  const auto size = static_cast<std::size_t>(c.shape.size() * c.batch);
  std::mt19937 gen(1);
  std::normal_distribution<float> normal;
  tfd::tensor::AlignedFloats x(size), y(size), dy(size), dx(size);  // on cache lines, as PyTorch's
  for (float& v : x) v = normal(gen);
  for (float& v : dy) v = normal(gen);
  // Backward may use dout as scratch; batch norm's leaves it as it is, so it is not refilled.
  return BestBlockMicros(
      [&] {
        layer->Forward(x.data(), y.data(), c.batch);
        layer->Backward(x.data(), y.data(), dy.data(), dx.data(), c.batch);
      },
      seconds);
}

// The layer's four passes alone (one replica's: statistics in one pass), in its order, on `level`'s
// code (the layer runs the widest level): what each instruction-set level is worth.
double MeasurePasses(const Case& c, double seconds, tfd::tensor::CpuLevel level) {
  const tfd::tensor::BatchNormPasses& p = tfd::tensor::BatchNormPassesFor(level);
  const std::int64_t rows = std::int64_t{c.batch} * c.shape.h * c.shape.w;
  const int ch = c.shape.c;
  const auto size = static_cast<std::size_t>(rows * ch);
  std::mt19937 gen(1);
  std::normal_distribution<float> normal;
  tfd::tensor::AlignedFloats x(size), y(size), dy(size), dx(size);  // on cache lines, as PyTorch's
  for (float& v : x) v = normal(gen);
  for (float& v : dy) v = normal(gen);
  std::vector<float> mean(ch, 0.0f), inv_std(ch, 1.0f), scale(ch, 1.0f), shift(ch, 0.0f), mean_g(ch, 0.0f), mean_gx(ch, 0.0f);
  std::vector<double> a(ch), b(ch);
  return BestBlockMicros(
      [&] {
        p.shifted_sums(x.data(), rows, ch, mean.data(), a.data(), b.data());
        p.scale_shift(x.data(), rows, ch, scale.data(), shift.data(), y.data(), tfd::tensor::BatchNormKeepFloats(rows * ch));
        p.grad_sums(x.data(), dy.data(), rows, ch, mean.data(), inv_std.data(), a.data(), b.data());
        p.input_grad(x.data(), dy.data(), rows, ch, mean.data(), inv_std.data(), scale.data(), mean_g.data(), mean_gx.data(), dx.data(),
                     tfd::tensor::BatchNormKeepFloats(rows * ch));
      },
      seconds);
}

struct PeerShape {
  double us = 0;
  std::string format;
};

// One peer run over every case: shape name -> its time in the faster memory format.
std::map<std::string, PeerShape> RunPeer(const std::string& args, double seconds, int threads, bool flush, bool unpin, int pin_cpu) {
  std::map<std::string, PeerShape> got;
  const std::string command = tfd::bench::PeerCommand(fmt::format("{} --seconds {}", args, seconds), threads, flush, unpin, pin_cpu);
  const std::string out = tfd::bench::RunCapture("timeout 300 " + command);
  std::size_t begin = 0;
  while (begin < out.size()) {
    std::size_t end = out.find('\n', begin);
    if (end == std::string::npos) end = out.size();
    auto line = nlohmann::json::parse(out.substr(begin, end - begin), nullptr, /*allow_exceptions=*/false);
    begin = end + 1;
    if (!line.is_object() || !line.contains("shape") || !line.contains("us") || !line.contains("format")) continue;
    got[line["shape"].get<std::string>()] = {line["us"].get<double>(), line["format"].get<std::string>()};
  }
  return got;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.0;
  bool peer = true, levels = false;
  std::string only;
  int pin = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--pin" && i + 1 < argc) pin = std::atoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--no-peer") peer = false;
    else if (a == "--levels") levels = true;
    else {
      std::fprintf(stderr, "usage: %s [--seconds S] [--only batch_norm] [--no-peer] [--levels] [--pin CPU]\n", argv[0]);
      return 2;
    }
  }
  if (!only.empty() && only != "batch_norm") {
    std::fprintf(stderr, "tfd_bench_layers: --only %s: the layers are batch_norm\n", only.c_str());
    return 2;
  }
  if (!(seconds > 0)) {
    std::fprintf(stderr, "tfd_bench_layers: --seconds must be > 0\n");
    return 2;
  }
  if (pin >= 0 && !tfd::bench::PinToCpu(pin)) {
    std::fprintf(stderr, "tfd_bench_layers: --pin %d: this process may not run on CPU %d\n", pin, pin);
    return 2;
  }
  if (peer && std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    std::printf("PyTorch not found (/usr/bin/python3 with python3-torch; scripts/setup --bench installs it): ours only\n");
    peer = false;
  }

  std::string shapes;
  for (const Case& c : kBatchNormCases) shapes += (shapes.empty() ? "" : ",") + c.name;
  std::printf("batch_norm training forward + backward (din included), one thread, best of 5 blocks of %.2f s\n", seconds / 5);
  std::printf("pytorch: nn.BatchNorm2d (BatchNorm1d on rows), the fastest of 1 and 2 threads (OPENBLAS/OMP/MKL_NUM_THREADS set\n"
              "before torch loads), with and without torch.set_flush_denormal, in NCHW and channels_last; 'kept' says which\n");
  if (pin >= 0) std::printf("--pin %d: tfd and every PyTorch run on CPU %d alone (one core each; PyTorch's 2 threads share it)\n", pin, pin);
  // Every setting's run covers every shape; each shape keeps its own fastest setting.
  std::map<std::string, std::map<std::string, PeerShape>> runs;  // setting -> shape -> time
  if (peer) {
    const std::string args = fmt::format(TFD_SOURCE_DIR "/test/bench/torch_layer_peer.py --layer batch_norm --shapes {}", shapes);
    tfd::bench::ForEachPeerSetting([&](int threads, bool flush, bool unpin, const std::string& setting) {
      runs[setting] = RunPeer(args, seconds, threads, flush, unpin, pin);
    });
  }
  // PyTorch's best over every setting, and over the 1-thread ones alone (one core each).
  struct Kept {
    double us = 0;
    std::string setting = "-";
  };
  auto best_of = [&](const std::string& shape, bool one_thread) {
    Kept best;
    for (const auto& [setting, shapes_run] : runs) {
      auto it = shapes_run.find(shape);
      if (it == shapes_run.end() || it->second.us <= 0 || (one_thread && !setting.starts_with("1t"))) continue;
      if (best.us == 0 || it->second.us < best.us) best = {it->second.us, setting + " " + it->second.format};
    }
    return best;
  };
  auto cell = [](double v) { return v > 0 ? fmt::format("{:.1f}", v) : std::string("-"); };
  auto ratio = [](double theirs, double ours) { return theirs > 0 ? fmt::format("{:.2f}x", theirs / ours) : std::string("-"); };
  std::printf("tfd's passes: %s\n", tfd::tensor::CpuLevelName(tfd::tensor::WidestCpuLevel()));
  std::printf("%-12s %9s %11s %22s %7s %11s %22s %7s\n", "shape", "tfd us", "pytorch us", "kept", "ratio", "1 thread us", "kept", "ratio");
  for (const Case& c : kBatchNormCases) {
    const double ours = MeasureBatchNorm(c, seconds);
    const Kept best = best_of(c.name, false), one = best_of(c.name, true);
    std::printf("%-12s %9.1f %11s %22s %7s %11s %22s %7s\n", c.name.c_str(), ours, cell(best.us).c_str(), best.setting.c_str(),
                ratio(best.us, ours).c_str(), cell(one.us).c_str(), one.setting.c_str(), ratio(one.us, ours).c_str());
    std::fflush(stdout);
  }
  if (levels) {
    std::printf("\nthe five passes alone, us, per instruction-set level this CPU has\n%-12s", "shape");
    std::vector<tfd::tensor::CpuLevel> have;
    for (auto level : {tfd::tensor::CpuLevel::kBaseline, tfd::tensor::CpuLevel::kAvx2, tfd::tensor::CpuLevel::kAvx512})
      if (tfd::tensor::CpuHas(level)) have.push_back(level), std::printf(" %10s", tfd::tensor::CpuLevelName(level));
    std::printf("\n");
    for (const Case& c : kBatchNormCases) {
      std::printf("%-12s", c.name.c_str());
      for (auto level : have) std::printf(" %10.1f", MeasurePasses(c, seconds, level));
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  return 0;
}
