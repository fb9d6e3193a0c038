// The seed's dnn trained on MNIST as each format tfd reads (issue 27: "within 5% of the IDX path's
// samples/s, the same accuracy ±0.1 pt"): the IDX files are written as a CSV, a .npy pair, PNG class
// folders and TFRecords of tf.train.Example in a temp folder (each conversion timed, not compared),
// then `tfd --standalone --log-format json` trains on each and on the IDX folder itself, the formats
// interleaved, --repeat rounds, medians kept. Prints a table; asserts nothing.
//
//   build/test/bench/tfd_bench_formats [--data MNIST_DIR] [--epochs 2] [--repeat 3] [--seeds 3] [--only csv,npy,...]
//
// Start-up is from the spawn of the process to its `start` event (the data read, split and
// normalised, the model built: what comes before the first step). samples/s is the mean of the
// epoch events' samples_per_sec. --seeds N more IDX runs with seeds 2.. give the accuracy's spread
// over seeds, the yardstick for a format that lists the examples in another order. What each format holds:
//   csv       train.csv, test.csv: a header, a "label" column, then 784 pixel columns written as
//             float32(pixel) * float32(1/255) (shortest round-trip text), normalize "none": the
//             model sees the same floats as from IDX, but each batch converts 4x the bytes
//   npy       x_train.npy (N, 28, 28) uint8 and y_train.npy (N,) uint8, the same for test
//   png       train/<digit>/<index>.png, test/<digit>/<index>.png (70,000 files)
//   tfrecord  train.tfrecord, test.tfrecord: "image" a bytes_list of the 784 raw pixels
//             (image_size [28, 28], docs/data.md), "label" an int64_list
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/data/dataset.h"
#include "common/data/proto/example.pb.h"
#include "common/summary/record.h"
#include "test/image_files.h"
#include "test/npy_files.h"
#include "test/test_util.h"

namespace {

using namespace std::chrono_literals;
using tfd::data::Dataset;
using tfd::testing::TempDir;
using Json = nlohmann::json;

// One format: its name, its key (--only, its folder), how to write MNIST as it, and the job's
// "data" for what was written.
struct Format {
  std::string name, key;
  std::function<void(const Dataset& train, const Dataset& test, const std::string& dir)> write;
  std::function<Json(const std::string& dir)> data;
};

void WriteCsv(const Dataset& d, const std::string& path) {
  std::string out = "label";
  for (std::int64_t j = 0; j < d.pixels(); ++j) out += fmt::format(",p{}", j);
  out += '\n';
  const float scale = 1.0f / 255.0f;  // the factor FillBatch applies to IDX bytes
  for (std::int64_t i = 0; i < d.size; ++i) {
    fmt::format_to(std::back_inserter(out), "{}", d.labels[static_cast<std::size_t>(i)]);
    const std::uint8_t* px = d.features.data() + i * d.pixels();
    for (std::int64_t j = 0; j < d.pixels(); ++j) fmt::format_to(std::back_inserter(out), ",{}", static_cast<float>(px[j]) * scale);
    out += '\n';
  }
  tfd::testing::WriteFile(path, out);
}

void WriteNpy(const Dataset& d, const std::string& x_path, const std::string& y_path) {
  const auto bytes = reinterpret_cast<const char*>(d.features.data());
  tfd::testing::WriteFile(x_path, tfd::testing::NpyHeader("|u1", fmt::format("({}, {}, {})", d.size, d.height, d.width)) +
                                      std::string(bytes, d.features.size()));
  tfd::testing::WriteFile(y_path, tfd::testing::NpyHeader("|u1", fmt::format("({},)", d.size)) +
                                      std::string(reinterpret_cast<const char*>(d.labels.data()), d.labels.size()));
}

void WriteTfrecord(const Dataset& d, const std::string& path) {
  std::string framed;
  tensorflow::Example ex;
  auto& features = *ex.mutable_features()->mutable_feature();
  for (std::int64_t i = 0; i < d.size; ++i) {
    const auto* px = reinterpret_cast<const char*>(d.features.data() + i * d.pixels());
    features.clear();
    features["image"].mutable_bytes_list()->add_value(std::string(px, static_cast<std::size_t>(d.pixels())));
    features["label"].mutable_int64_list()->add_value(d.labels[static_cast<std::size_t>(i)]);
    tfd::summary::AppendRecord(ex.SerializeAsString(), &framed);
  }
  tfd::testing::WriteFile(path, framed);
}

std::vector<Format> Formats(const std::string& mnist) {
  return {
      {"IDX", "idx", nullptr, [mnist](const std::string&) { return Json(mnist); }},
      {"CSV", "csv", [](const Dataset& tr, const Dataset& te, const std::string& dir) { WriteCsv(tr, dir + "/train.csv"), WriteCsv(te, dir + "/test.csv"); },
       [](const std::string& dir) { return Json{{"train", dir + "/train.csv"}, {"test", dir + "/test.csv"}, {"label", "label"}, {"normalize", "none"}}; }},
      {".npy", "npy",
       [](const Dataset& tr, const Dataset& te, const std::string& dir) {
         WriteNpy(tr, dir + "/x_train.npy", dir + "/y_train.npy"), WriteNpy(te, dir + "/x_test.npy", dir + "/y_test.npy");
       },
       [](const std::string& dir) {
         return Json{{"train", {{"x", dir + "/x_train.npy"}, {"y", dir + "/y_train.npy"}}}, {"test", {{"x", dir + "/x_test.npy"}, {"y", dir + "/y_test.npy"}}}};
       }},
      {"PNG folder", "png",
       [](const Dataset& tr, const Dataset& te, const std::string& dir) {
         tfd::testing::WriteDatasetPngs(tr, tr.size, dir + "/train"), tfd::testing::WriteDatasetPngs(te, te.size, dir + "/test");
       },
       [](const std::string& dir) { return Json{{"format", "images"}, {"train", dir + "/train"}, {"test", dir + "/test"}, {"color", "grayscale"}}; }},
      {"TFRecord", "tfrecord",
       [](const Dataset& tr, const Dataset& te, const std::string& dir) { WriteTfrecord(tr, dir + "/train.tfrecord"), WriteTfrecord(te, dir + "/test.tfrecord"); },
       [](const std::string& dir) {
         return Json{{"train", dir + "/train.tfrecord"}, {"test", dir + "/test.tfrecord"}, {"image_size", {28, 28}}, {"color", "grayscale"}};
       }},
  };
}

std::uintmax_t FolderBytes(const std::string& dir) {
  std::uintmax_t n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) n += e.file_size();
  return n;
}

// What one training run reported.
struct Run {
  bool ok = false;
  std::string error;
  double startup_s = 0, samples_per_sec = 0, epoch_s = 0, input_s = 0, test_accuracy = 0;  // rate, epoch, input: means over epochs
  std::string params_sha256;
};

double UnixSeconds() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// Reads the run's JSON events: `start` (its ts), each `epoch`'s samples_per_sec and input_s (the
// batches' conversion to floats, the only part of a step that depends on the format), `done`.
Run Parse(const std::string& out, double spawned) {
  Run r;
  double rate = 0, epoch = 0, input = 0;
  int epochs = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    const Json e = Json::parse(line, nullptr, false);
    if (e.is_discarded() || !e.is_object() || !e.contains("event")) continue;
    if (e["event"] == "start") r.startup_s = e["ts"].get<double>() - spawned;
    else if (e["event"] == "epoch")
      rate += e["samples_per_sec"].get<double>(), epoch += e.value("epoch_s", 0.0), input += e.value("input_s", 0.0), ++epochs;
    else if (e["event"] == "done") r.test_accuracy = e["test_accuracy"].get<double>(), r.params_sha256 = e.value("params_sha256", ""), r.ok = true;
    else if (e["event"] == "error") r.error = e.value("message", line);
  }
  if (epochs > 0) r.samples_per_sec = rate / epochs, r.epoch_s = epoch / epochs, r.input_s = input / epochs;
  return r;
}

Run Train(const Json& data, int epochs, int seed, const TempDir& dir) {
  const Json job = {{"model", "dnn"},      {"data", data}, {"epochs", epochs}, {"batch_size", 100},
                    {"optimizer", {{"type", "momentum"}, {"learning_rate", 0.01}, {"momentum", 0.95}}},
                    {"seed", seed}};
  tfd::testing::WriteFile(dir / "job.json", job.dump());
  const double spawned = UnixSeconds();
  tfd::testing::Process p({TFD_BINARY, "--standalone", "--log-format", "json", "--job", dir / "job.json"}, {}, dir / "out", dir / "err");
  const auto code = p.Wait(600s);
  Run r = Parse(p.out(), spawned);
  if (!code || *code != 0) {
    r.ok = false;
    if (r.error.empty()) r.error = fmt::format("exit {}: {}", code ? *code : -1, p.err().substr(0, 300));
  }
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// Prints the table of medians, each format beside IDX (the first). The steps' compute is the same
// for every format (the same model on the same batch shapes); only the batches' conversion
// (input_s) depends on it, so "ratio from input" = IDX's epoch / (IDX's epoch + this format's extra
// input time) is the ratio with the machine's noise in the compute taken out.
void PrintTable(const std::vector<Format>& formats, const std::vector<std::vector<Run>>& runs) {
  std::printf("\n| format | start-up s | samples/s | ratio to IDX | input s/epoch | ratio from input | test accuracy | vs IDX (points) | weights as IDX's |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
  double idx_rate = 0, idx_epoch = 0, idx_input = 0, idx_acc = 0;
  for (std::size_t f = 0; f < formats.size(); ++f) {
    std::vector<double> startup, rate, epoch, input, acc;
    bool same = true;
    for (const Run& r : runs[f]) {
      startup.push_back(r.startup_s), rate.push_back(r.samples_per_sec), epoch.push_back(r.epoch_s), input.push_back(r.input_s);
      acc.push_back(r.test_accuracy);
      same = same && r.params_sha256 == runs[0].front().params_sha256;
    }
    if (f == 0) idx_rate = Median(rate), idx_epoch = Median(epoch), idx_input = Median(input), idx_acc = Median(acc);
    std::printf("| %s | %.2f | %.0f | %.3f | %.3f | %.3f | %.2f%% | %+.2f | %s |\n", formats[f].name.c_str(), Median(startup), Median(rate),
                Median(rate) / idx_rate, Median(input), idx_epoch / (idx_epoch + Median(input) - idx_input), 100 * Median(acc),
                100 * (Median(acc) - idx_acc), f == 0 ? "-" : same ? "identical" : "differ");
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string mnist = std::getenv("TFD_MNIST_DIR") ? std::getenv("TFD_MNIST_DIR") : "data/mnist", only;
  int epochs = 2, repeat = 3, seeds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--data") mnist = argv[i + 1];
    else if (a == "--epochs") epochs = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--only") only = argv[i + 1];
    else if (a == "--seeds") seeds = std::max(0, std::atoi(argv[i + 1]));
    else return std::fprintf(stderr, "usage: %s [--data MNIST_DIR] [--epochs N] [--repeat N] [--seeds N] [--only csv,npy,png,tfrecord]\n", argv[0]), 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it comes, also into a file (removing 70k PNGs at exit is slow)
  mnist = std::filesystem::absolute(mnist).string();
  auto splits = tfd::data::LoadMnist(mnist);
  if (!splits.ok()) return std::fprintf(stderr, "%s (scripts/fetch_mnist.sh fetches MNIST)\n", splits.status().message().c_str()), 2;
  std::vector<Format> formats;
  for (Format& f : Formats(mnist))
    if (f.key == "idx" || only.empty() || only.find(f.key) != std::string::npos) formats.push_back(std::move(f));
  TempDir dir;
  std::printf("MNIST (%s) written as each format in %s (not part of the comparison):\n", mnist.c_str(), dir.path().c_str());
  for (const Format& f : formats) {
    if (!f.write) continue;
    const std::string sub = dir / f.key;
    std::filesystem::create_directories(sub);
    const auto t0 = std::chrono::steady_clock::now();
    f.write(splits->train, splits->test, sub);
    std::printf("  %-10s %6.1f s  %7.1f MB\n", f.name.c_str(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                static_cast<double>(FolderBytes(sub)) / 1e6);
  }
  std::printf("dnn (configs/jobs/mnist-dnn-seed.json's model and optimizer), batch 100, %d epochs, seed 1; %d rounds, formats interleaved\n",
              epochs, repeat);
  std::printf("load average before: %s\n", LoadAverage().c_str());
  std::vector<std::vector<Run>> runs(formats.size());
  for (int round = 0; round < repeat; ++round)
    for (std::size_t f = 0; f < formats.size(); ++f) {
      Run r = Train(formats[f].data(dir / formats[f].key), epochs, 1, dir);
      if (!r.ok) return std::fprintf(stderr, "%s: training failed: %s\n", formats[f].name.c_str(), r.error.c_str()), 1;
      std::printf("  round %d %-10s start-up %.2f s  %.0f samples/s  input %.3f s/epoch  test accuracy %.4f\n", round + 1, formats[f].name.c_str(),
                  r.startup_s, r.samples_per_sec, r.input_s, r.test_accuracy);
      runs[f].push_back(std::move(r));
    }
  std::printf("load average after: %s\n", LoadAverage().c_str());
  PrintTable(formats, runs);
  // The same examples in another order (a PNG folder lists them class by class) train like another
  // seed: the IDX run's spread over seeds says how far apart such accuracies may be.
  if (seeds == 0) return 0;
  std::string line;
  double lo = runs[0].front().test_accuracy, hi = lo;
  for (int seed = 2; seed < 2 + seeds; ++seed) {
    const Run r = Train(formats[0].data(""), epochs, seed, dir);
    if (!r.ok) return std::fprintf(stderr, "IDX, seed %d: training failed: %s\n", seed, r.error.c_str()), 1;
    line += fmt::format(" {:.2f}%", 100 * r.test_accuracy);
    lo = std::min(lo, r.test_accuracy), hi = std::max(hi, r.test_accuracy);
  }
  std::printf("\nIDX with seeds 2..%d: test accuracy%s; with seed 1 a spread of %.2f points\n", 1 + seeds, line.c_str(), 100 * (hi - lo));
  return 0;
}
