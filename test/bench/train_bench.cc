// Steady-state single-process training throughput of each seed configuration, beside PyTorch on the
// same model, batch and optimizer in the same run (when Debian's python3-torch is installed), plus
// the peak RSS of a standalone mlp run. tfd runs once on each GEMM backend the build has (and on
// oneDNN once more with its convolutions as im2col + GEMM, the '+im2col' column); the ratio is the
// default's (the first column's) against the peer at its best. Prints ratios; asserts nothing about speed.
//
//   build/test/bench/tfd_bench_train [--data DIR] [--seconds S] [--threads N] [--no-peer] [--only MODEL]
//                                    [--pin CPU] [--device cuda:N]
//
// --pin CPU runs tfd and every PyTorch setting on that one CPU (one core each side: PyTorch's
// 2-thread settings share it); without it PyTorch's 2 threads have both of the machine's cores.
//
// With --device cuda:N (a build with the CUDA backend): tfd's standalone GPU step (CudaModel's
// TrainStep: forward, backward and update as one CUDA graph, the batch copied in from pinned
// memory, the loss read back every step) beside PyTorch on the same GPU, eager and with the whole
// step captured as a CUDA graph (torch_peer.py --device --cuda-graph). tfd-cuda/s gathers the next
// batch on model::BatchInput's prefetch thread during the step, as tfd does on a GPU; no-prefetch/s
// gathers it in the step; same-batch/s trains on one batch gathered once (the step without the gather).
#include <sys/resource.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/model/model.h"
#include "common/optim/optimizer.h"
#include "common/tensor/gemm.h"
#include "test/bench/peer_best.h"
#ifdef TFD_HAVE_CUDA
#include "common/model/batch_input.h"
#include "common/tensor/cuda/cuda_model.h"
#include "common/tensor/cuda/runtime.h"
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  std::string model, optimizer;
  double lr;
  int batch;
};

// The model of `c` with its GEMMs on `gemm`, initialised from seed 1, and its optimizer's spec.
tfd::Result<std::unique_ptr<tfd::model::Model>> BuildModel(const Config& c, const tfd::tensor::GemmConfig& gemm) {
  tfd::config::ModelSpec spec;
  spec.name = c.model;
  // The job files' layer lists: strided same-padded convolutions and global average pooling; the
  // residual convnet with batch norm.
  if (c.model == "strided" || c.model == "resnet") {
    auto job = tfd::config::LoadJobSpec(TFD_SOURCE_DIR "/configs/jobs/" +
                                        std::string(c.model == "strided" ? "mnist-convnet-strided.json" : "mnist-resnet.json"));
    if (!job.ok()) return job.status();
    spec = job->model;
  }
  auto model = tfd::model::Model::Build(spec, {28, 28, 1}, 10, c.batch, gemm);
  if (model.ok()) (*model)->Initialize(1);
  return model;
}

tfd::config::OptimizerSpec OptimizerOf(const Config& c) {
  tfd::config::OptimizerSpec o;
  o.type = c.optimizer == "sgd" ? tfd::config::OptimizerSpec::Type::kSgd
           : c.optimizer == "momentum" ? tfd::config::OptimizerSpec::Type::kMomentum
                                       : tfd::config::OptimizerSpec::Type::kAdam;
  o.learning_rate = c.lr;
  o.momentum = 0.95;
  return o;
}

// Samples/s of `step` (one batch of `batch` examples a call): 20 warm-up steps, as the peer
// takes, then at least 50 steps and `seconds`.
double SamplesPerSec(const std::function<void()>& step, int batch, double seconds) {
  for (int i = 0; i < 20; ++i) step();
  std::int64_t n = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (n < 50 || elapsed < seconds) {
    step();
    ++n;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return static_cast<double>(n * batch) / elapsed;
}

double MeasureOurs(const tfd::data::DataSplits& data, const Config& c, double seconds, const tfd::tensor::GemmConfig& gemm) {
  auto model = BuildModel(c, gemm);
  if (!model.ok()) return 0;
  auto opt = tfd::optim::MakeOptimizer(OptimizerOf(c));
  tfd::optim::OptimizerState state(*opt, (*model)->params().size());
  auto shard = tfd::data::EpochShard(data.train.size, 1, 1, 0, 1, true);
  std::vector<float> x(static_cast<std::size_t>(c.batch * (*model)->input_size()));
  std::vector<tfd::ClassId> y(static_cast<std::size_t>(c.batch));
  const std::size_t steps_per_epoch = shard.size() / c.batch;
  std::size_t s = 0;
  auto step = [&] {
    tfd::data::FillBatch(data.train, std::span(shard).subspan((s++ % steps_per_epoch) * c.batch, c.batch), x.data(), y.data());
    (*model)->ComputeGradients(x.data(), y);
    state.Apply((*model)->params(), (*model)->grads());
  };
  return SamplesPerSec(step, c.batch, seconds);
}

#ifdef TFD_HAVE_CUDA
// The same steps as MeasureOurs on GPU `device`, the whole step on the device.
// How each step gets its batch: gathered by BatchInput with its prefetch thread (tfd's default on a
// GPU), gathered in the step (prefetch off), or gathered once and trained on every step (what the
// step costs without the host's gather).
enum class Feed { kPrefetch, kGather, kSameBatch };

double MeasureOursCuda(const tfd::data::DataSplits& data, const Config& c, double seconds, int device, Feed feed) {
  auto model = BuildModel(c, tfd::tensor::GemmConfig{});
  if (!model.ok()) return 0;
  auto opt = tfd::optim::MakeOptimizer(OptimizerOf(c));
  auto gpu = tfd::cuda::CudaModel::Create(**model, device, 0.5, opt.get());
  if (!gpu.ok() || !(*gpu)->UploadParams((*model)->params()).ok()) {
    std::fprintf(stderr, "tfd_bench_train: %s\n", gpu.ok() ? "upload failed" : gpu.status().message().c_str());
    return 0;
  }
  auto shard = tfd::data::EpochShard(data.train.size, 1, 1, 0, 1, true);
  const std::int64_t steps_per_epoch = static_cast<std::int64_t>(shard.size()) / c.batch;
  tfd::model::BatchInput input(data.train, (*model)->input_size(), c.batch, feed == Feed::kPrefetch);
  input.StartEpoch(shard);
  std::int64_t s = 0;
  tfd::model::BatchInput::Batch b = input.Take(0, false);
  bool ok = true;
  auto step = [&] {
    const std::int64_t at = s++ % steps_per_epoch;
    if (feed != Feed::kSameBatch) b = input.Take(at, at + 1 < steps_per_epoch);
    ok = ok && (*gpu)->TrainStep(b.x, b.y->View(static_cast<std::size_t>(c.batch)).ids, static_cast<std::uint64_t>(s)).ok();
  };
  const double rate = SamplesPerSec(step, c.batch, seconds);
  return ok ? rate : 0;
}
#endif

double MeasurePeer(const std::string& script, const std::string& data, const Config& c, double seconds, int threads,
                   bool flush_denormal, bool unpin_core, int pin_cpu) {
  std::string out = tfd::bench::RunCapture(tfd::bench::PeerCommand(
      fmt::format("{} --model {} --optimizer {} --lr {} --batch {} --data {} --seconds {}", script, c.model, c.optimizer, c.lr, c.batch, data,
                  seconds),
      threads, flush_denormal, unpin_core, pin_cpu));
  auto pos = out.find("\"samples_per_sec\":");
  return pos == std::string::npos ? 0 : std::atof(out.c_str() + pos + 18);
}

// Peak RSS (MiB) of `tfd --standalone` on a one-epoch mlp job, from wait4's rusage.
double PeakRssMiB(const std::string& tfd, const std::string& data) {
  auto dir = std::filesystem::temp_directory_path() / fmt::format("tfd-bench-{}", getpid());
  std::filesystem::create_directories(dir);
  std::string job = (dir / "job.json").string();
  FILE* f = std::fopen(job.c_str(), "w");
  if (f == nullptr) return 0;
  std::fprintf(f, R"({"model": "mlp", "data": "%s", "epochs": 1, "batch_size": 100, "optimizer": {"type": "adam"}})",
               data.c_str());
  std::fclose(f);
  pid_t pid = fork();
  if (pid == 0) {
    std::freopen("/dev/null", "w", stderr);
    execl(tfd.c_str(), tfd.c_str(), "--standalone", "--job", job.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  std::filesystem::remove_all(dir);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 0;
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = std::getenv("TFD_MNIST_DIR") ? std::getenv("TFD_MNIST_DIR") : "data/mnist";
  std::string only;
  double seconds = 3.0;
  int threads = 1;
  bool peer = true;
  int device = -1, pin = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--data" && i + 1 < argc) data = argv[++i];
    else if (a == "--pin" && i + 1 < argc) pin = std::atoi(argv[++i]);
    else if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--no-peer") peer = false;
    else if (a == "--device" && i + 1 < argc && std::string_view(argv[i + 1]).starts_with("cuda:")) device = std::atoi(argv[++i] + 5);
    else {
      std::fprintf(stderr, "usage: %s [--data DIR] [--seconds S] [--threads N] [--only MODEL] [--no-peer] [--pin CPU] [--device cuda:N]\n", argv[0]);
      return 2;
    }
  }
  if (pin >= 0 && !tfd::bench::PinToCpu(pin)) {
    std::fprintf(stderr, "tfd_bench_train: --pin %d: this process may not run on CPU %d\n", pin, pin);
    return 2;
  }
  auto mnist = tfd::data::LoadMnist(data);
  if (!mnist.ok()) {
    std::fprintf(stderr, "tfd_bench_train: %s\n", mnist.status().message().c_str());
    return 2;
  }
  const std::string script = TFD_SOURCE_DIR "/test/bench/torch_peer.py";
  if (peer && std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    std::printf("PyTorch not found (/usr/bin/python3 with python3-torch; scripts/setup --bench installs it): ours only\n");
    peer = false;
  }
  if (device >= 0) {
#ifdef TFD_HAVE_CUDA
    if (tfd::Status s = tfd::cuda::CheckDevice(device); !s.ok()) {
      std::fprintf(stderr, "tfd_bench_train: --device cuda:%d: %s\n", device, s.message().c_str());
      return 2;
    }
    std::printf("training throughput on %s, one process, %.1f s per measurement\n", tfd::cuda::DeviceDescription(device).c_str(),
                seconds);
    std::printf("%-8s %-9s %5s %12s %12s %12s %12s %12s %7s %7s\n", "model", "optimizer", "batch", "tfd-cuda/s", "no-prefetch/s",
                "same-batch/s", "torch/s", "torch-graph/s", "eager", "graph");
    const std::vector<Config> gpu_configs = {{"softmax", "sgd", 0.01, 100}, {"mlp", "sgd", 0.001, 100}, {"mlp", "adam", 0.001, 100},
                                             {"dnn", "momentum", 0.01, 50}, {"cnn", "sgd", 0.001, 64},   {"cnn", "adam", 0.001, 64},
                                             {"resnet", "adam", 0.001, 64}};
    for (const Config& c : gpu_configs) {
      if (!only.empty() && c.model != only) continue;
      const double ours = MeasureOursCuda(*mnist, c, seconds, device, Feed::kPrefetch);
      const double no_prefetch = MeasureOursCuda(*mnist, c, seconds, device, Feed::kGather);
      const double same_batch = MeasureOursCuda(*mnist, c, seconds, device, Feed::kSameBatch);
      double eager = 0, graph = 0;
      if (peer) {
        const std::string base = fmt::format("timeout 120 /usr/bin/python3 {} --model {} --optimizer {} --lr {} --batch {} --data {} --seconds {} "
                                             "--device cuda:{}",
                                             script, c.model, c.optimizer, c.lr, c.batch, data, seconds, device);
        auto rate = [](const std::string& out) {
          auto pos = out.find("\"samples_per_sec\":");
          return pos == std::string::npos ? 0.0 : std::atof(out.c_str() + pos + 18);
        };
        eager = rate(tfd::bench::RunCapture(base));
        graph = rate(tfd::bench::RunCapture(base + " --cuda-graph"));
      }
      auto cell = [](double v) { return v > 0 ? fmt::format("{:.0f}", v) : std::string("-"); };
      auto ratio = [ours](double v) { return v > 0 ? fmt::format("{:.2f}x", ours / v) : std::string("-"); };
      std::printf("%-8s %-9s %5d %12s %12s %12s %12s %12s %7s %7s\n", c.model.c_str(), c.optimizer.c_str(), c.batch, cell(ours).c_str(),
                  cell(no_prefetch).c_str(), cell(same_batch).c_str(), cell(eager).c_str(), cell(graph).c_str(), ratio(eager).c_str(),
                  ratio(graph).c_str());
      std::fflush(stdout);
    }
    return 0;
#else
    std::fprintf(stderr, "tfd_bench_train: --device cuda:%d: this build has no CUDA backend\n", device);
    return 2;
#endif
  }
  // tfd on each GEMM backend this build has, the default first: the default is what users get, the
  // others show what the default's choice is worth, measured beside it. On oneDNN a second column
  // runs its convolutions as im2col + GEMM (GemmConfig::im2col_convolutions), as the others do.
  const std::vector<std::string_view> backends = tfd::tensor::GemmBackends();
  std::vector<tfd::tensor::GemmConfig> gemms;
  std::vector<std::string> columns;
  for (std::string_view b : backends) {
    tfd::tensor::GemmConfig gemm{.threads = threads};
    if (!tfd::tensor::SetGemmBackend(b, &gemm).ok()) return 1;
    gemms.push_back(gemm);
    columns.push_back(fmt::format("tfd-{}/s", b.substr(0, 6)));
    if (gemm.backend != tfd::tensor::GemmBackend::kOneDnn) continue;
    gemm.im2col_convolutions = true;
    gemms.push_back(gemm);
    columns.push_back("+im2col/s");
  }
  std::printf("training throughput, one process, %d thread(s), %.1f s per measurement\n", threads, seconds);
  std::printf("pytorch: the fastest of 1 and 2 threads (OPENBLAS/OMP/MKL_NUM_THREADS set before torch loads), with and\n"
              "without torch.set_flush_denormal%s; its column 'kept' says which (2t+ftz: 2 threads, denormals flushed%s)\n",
              std::getenv("OPENBLAS_CORETYPE") ? ", with OPENBLAS_CORETYPE as set here and unset" : "",
              std::getenv("OPENBLAS_CORETYPE") ? "; +cpu: OpenBLAS detected the CPU itself" : "");
  if (const char* coretype = std::getenv("OPENBLAS_CORETYPE"))
    std::printf("OPENBLAS_CORETYPE=%s here: tfd's openblas column runs with it\n", coretype);
  if (pin >= 0) std::printf("--pin %d: tfd and every PyTorch run on CPU %d alone (one core each; PyTorch's 2 threads share it)\n", pin, pin);
  std::printf("%-8s %-9s %5s", "model", "optimizer", "batch");
  for (const std::string& column : columns) std::printf(" %12s", column.c_str());
  std::printf(" %12s %10s %7s\n", "pytorch/s", "kept", "ratio");
  const std::vector<Config> configs = {{"softmax", "sgd", 0.01, 100}, {"mlp", "sgd", 0.001, 100},
                                       {"mlp", "adam", 0.001, 100},   {"dnn", "momentum", 0.01, 50},
                                       {"cnn", "sgd", 0.001, 64},     {"cnn", "adam", 0.001, 64},
                                       {"strided", "adam", 0.002, 64}, {"resnet", "adam", 0.001, 64}};
  for (const Config& c : configs) {
    if (!only.empty() && c.model != only) continue;
    std::vector<double> ours;
    for (const tfd::tensor::GemmConfig& gemm : gemms) ours.push_back(MeasureOurs(*mnist, c, seconds, gemm));
    const tfd::bench::PeerBest best =
        peer ? tfd::bench::BestPeer([&](int threads, bool flush, bool unpin) { return MeasurePeer(script, data, c, seconds, threads, flush, unpin, pin); })
             : tfd::bench::PeerBest{};
    const double theirs = best.samples_per_sec;
    std::printf("%-8s %-9s %5d", c.model.c_str(), c.optimizer.c_str(), c.batch);
    for (double v : ours) std::printf(" %12.0f", v);
    std::printf(" %12s %10s %7s\n", theirs > 0 ? fmt::format("{:.0f}", theirs).c_str() : "-", best.setting.c_str(),
                theirs > 0 ? fmt::format("{:.2f}x", ours.front() / theirs).c_str() : "-");
    std::fflush(stdout);
  }
  const double rss = PeakRssMiB(TFD_BINARY, data);
  std::printf("peak RSS of tfd --standalone, mlp, one epoch: %.1f MiB (target <= 128)\n", rss);
  return 0;
}
