// Prediction speed of an exported model, tfd beside ONNX Runtime in one run: for the mlp, dnn and
// cnn, each exported with exporting::WriteVersion and read back with LoadVersion, rows/s of tfd's
// forward as `tfd predict` runs it (a batch of MNIST test rows normalised by data::FillBatch, then
// Model::Forward, one thread) and of onnxruntime-node on the same model.onnx over the same raw
// rows (test/tools/ort_run.js bench: one intra-op and one inter-op thread, graph optimization
// 'all', each execution mode and memory-arena setting, the fastest kept and named), at batch 1 and
// 256. Prints rows/s and the ratio tfd/onnxruntime. Asserts nothing about speed.
//
//   build/test/bench/tfd_bench_predict [--seconds S] [--rows N] [--models mlp,dnn,cnn] [--batches 1,256] [--block N] [--no-peer]
//
// --block: images per block in the cnn's conv -> pool run (Model::SetInferenceBlock: 0 the whole
// batch, default sized from the L2 cache).
//
// MNIST from TFD_MNIST_DIR (default data/mnist; synthetic bytes of its shape otherwise);
// onnxruntime-node from scripts/fetch_onnxruntime.sh (the peer is skipped, said so, without it).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/config/spec_json.h"
#include "common/export/model_dir.h"
#include "test/export_models.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using tfd::data::Dataset;

struct Options {
  double seconds = 1.5;
  int rows = 2560;
  std::vector<std::string> models = {"mlp", "dnn", "cnn"};
  std::vector<int> batches = {1, 256};
  int block = tfd::model::Model::kAutoBlock;
  bool peer = true;
};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

// The first `rows` MNIST test images (their labels alongside), or random bytes of that shape.
Dataset Rows(int rows, std::string* source) {
  const char* env = std::getenv("TFD_MNIST_DIR");
  const std::string dir = env != nullptr ? env : "data/mnist";
  tfd::Result<Dataset> test = tfd::data::LoadIdxPair(dir + "/" + tfd::data::kTestImages, dir + "/" + tfd::data::kTestLabels);
  Dataset d;
  if (test.ok() && test->size >= rows) {
    *source = "MNIST test images from " + dir;
    d = test->Shell();
    d.size = rows;
    d.features = std::vector<std::uint8_t>(test->features.begin(), test->features.begin() + static_cast<std::ptrdiff_t>(rows) * 784);
    d.labels.assign(test->labels.begin(), test->labels.begin() + rows);
    return d;
  }
  *source = "random bytes of MNIST's shape (no MNIST in " + dir + ")";
  std::mt19937 rng(7);
  d.size = rows, d.height = 28, d.width = 28, d.channels = 1, d.dtype = tfd::data::DType::kU8, d.num_classes = 10;
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(rows) * 784);
  for (auto& b : bytes) b = static_cast<std::uint8_t>(rng() & 0xff);
  d.features = std::move(bytes);
  d.labels.assign(static_cast<std::size_t>(rows), 0);
  return d;
}

// Exports model `name` (initialised from seed 1) for `data` under `base`; the version folder.
std::string Export(const std::string& name, const Dataset& data, const std::string& base) {
  tfd::testing::ExportCase c{.name = name, .job = {}, .data = data};
  c.job.model = *tfd::config::ParseModelSpec(name, "bench");
  c.job.data.folder = "data/mnist";
  std::unique_ptr<tfd::model::Model> m = tfd::testing::TrainedModel(c, 256, 0, 1);
  tfd::Result<std::string> dir = tfd::exporting::WriteVersion(base, tfd::exporting::CardFor(c.job, c.data), *m, {});
  if (!dir.ok()) std::fprintf(stderr, "tfd_bench_predict: %s\n", dir.status().ToString().c_str()), std::exit(1);
  return *dir;
}

// tfd's rows/s on the version folder `dir`: batches of `batch` rows taken in turn from `data`'s
// raw rows, normalised by FillBatch and run forward, as `tfd predict` does; best of 3 runs.
double TfdRowsPerSecond(const std::string& dir, const Dataset& data, int batch, int block, double seconds) {
  tfd::Result<tfd::exporting::LoadedModel> loaded = tfd::exporting::LoadVersion(dir, batch);
  if (!loaded.ok()) std::fprintf(stderr, "tfd_bench_predict: %s\n", loaded.status().ToString().c_str()), std::exit(1);
  Dataset rows = loaded->card.Shell();
  rows.size = data.size, rows.features = data.features, rows.labels = data.labels;
  tfd::model::Model& m = *loaded->model;
  m.SetInferenceBlock(block);
  std::vector<float> x(static_cast<std::size_t>(batch) * m.input_size());
  std::vector<tfd::ClassId> y(static_cast<std::size_t>(batch));
  std::vector<std::uint32_t> idx(static_cast<std::size_t>(batch));
  const std::int64_t batches = data.size / batch;
  std::int64_t next = 0;
  float sink = 0;
  auto step = [&] {
    std::iota(idx.begin(), idx.end(), static_cast<std::uint32_t>((next++ % batches) * batch));
    tfd::data::FillBatch(rows, idx, x.data(), y.data());
    sink += m.Forward(x.data(), batch)[0];
  };
  for (int i = 0; i < 20; ++i) step();
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::int64_t done = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    while (elapsed < seconds / 3) {
      step();
      ++done;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    }
    best = std::max(best, static_cast<double>(done * batch) / elapsed);
  }
  if (sink == 12345.f) std::printf(" ");  // keeps the forward passes from being optimised away
  return best;
}

struct PeerResult {
  double rows_per_sec = 0;
  std::string setting = "-";
};

PeerResult OrtRowsPerSecond(const std::string& dir, const std::string& input, int rows, int batch, double seconds) {
  // ort_run.js times each of its 4 settings for `seconds`: the same total as tfd's 3 runs, per setting.
  const std::string cmd = fmt::format("node {}/test/tools/ort_run.js bench {}/model.onnx {} {} 784 {} {}", TFD_SOURCE_DIR, dir, input, rows,
                                      batch, seconds);
  PeerResult r;
  std::FILE* p = popen(cmd.c_str(), "r");
  char line[256], setting[64];
  double rate = 0;
  while (p != nullptr && std::fgets(line, sizeof line, p) != nullptr)
    if (std::sscanf(line, "best %lf %63s", &rate, setting) == 2) r = {rate, setting};
  const int status = p != nullptr ? pclose(p) : -1;
  if (status != 0 || r.rows_per_sec == 0) std::fprintf(stderr, "tfd_bench_predict: the onnxruntime-node peer failed: %s\n", cmd.c_str());
  return r;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--seconds" && has_value) o.seconds = std::strtod(argv[++i], nullptr);
    else if (a == "--rows" && has_value) o.rows = std::max(256, std::atoi(argv[++i]));
    else if (a == "--models" && has_value) o.models = Split(argv[++i]);
    else if (a == "--batches" && has_value) {
      o.batches.clear();
      for (const std::string& b : Split(argv[++i])) o.batches.push_back(std::max(1, std::atoi(b.c_str())));
    } else if (a == "--block" && has_value) o.block = std::max(tfd::model::Model::kAutoBlock, std::atoi(argv[++i]));
    else if (a == "--no-peer") o.peer = false;
    else {
      std::fprintf(stderr, "usage: tfd_bench_predict [--seconds S] [--rows N] [--models mlp,dnn,cnn] [--batches 1,256] [--block N] [--no-peer]\n");
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  std::string source;
  const Dataset data = Rows(o.rows, &source);
  const fs::path tmp = fs::temp_directory_path() / fmt::format("tfd_bench_predict.{}", getpid());
  fs::create_directories(tmp);
  const std::string input = (tmp / "rows.f32").string();
  {
    const std::vector<float> raw = tfd::testing::RawRows(data);
    std::ofstream(input, std::ios::binary).write(reinterpret_cast<const char*>(raw.data()), static_cast<std::streamsize>(raw.size() * 4));
  }
  // ort_run.js without arguments: 77 when onnxruntime-node is missing, else 2 (its usage).
  const bool peer = o.peer && std::system(fmt::format("node {}/test/tools/ort_run.js >/dev/null 2>&1", TFD_SOURCE_DIR).c_str()) == 2 << 8;
  if (o.peer && !peer) std::printf("onnxruntime-node not found (scripts/fetch_onnxruntime.sh): tfd alone\n");
  std::printf("predict: %d rows (%s), one thread, %.1f s per side\n", o.rows, source.c_str(), o.seconds);
  std::printf("%-5s %6s %14s %14s %8s  %s\n", "model", "batch", "tfd rows/s", "ort rows/s", "ratio", "ort setting");
  for (const std::string& name : o.models) {
    const std::string dir = Export(name, data, (tmp / name).string());
    for (int batch : o.batches) {
      const double tfd = TfdRowsPerSecond(dir, data, batch, o.block, o.seconds);
      const PeerResult ort = peer ? OrtRowsPerSecond(dir, input, o.rows, batch, o.seconds / 3) : PeerResult{};
      std::printf("%-5s %6d %14.0f %14.0f %7.2fx  %s\n", name.c_str(), batch, tfd, ort.rows_per_sec,
                  ort.rows_per_sec > 0 ? tfd / ort.rows_per_sec : 0.0, ort.setting.c_str());
      std::fflush(stdout);
    }
  }
  std::error_code ec;
  fs::remove_all(tmp, ec);
  return 0;
}
