// Read speed of the TFRecord reader (common/data/tfrecord.h) on MNIST-like tf.train.Examples:
// writes a file of about --mb MB (one record per example: a 784-value "image" and an int64
// "label"), then times, best of --repeat:
//   fread      the file's bytes read in 1 MiB blocks (the page cache's ceiling)
//   framing    RecordReader alone: lengths and both masked CRC-32Cs checked, no parse
//   read       ReadTfrecords: framing, protobuf parse, layout checks, features and labels copied
// for "image" as a float_list (784 floats, 3.1 KB a record) and as raw bytes (784 bytes with
// data.image_size). There is no TensorFlow on this machine, so there is no peer to compare with.
//   tfd_bench_tfrecord [--mb N] [--repeat N] [--dir DIR]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/data/proto/example.pb.h"
#include "common/data/readers.h"
#include "common/data/tfrecord.h"
#include "common/summary/record.h"

namespace {

using namespace tfd;
using config::DataSpec;

constexpr int kPixels = 784;

// Writes about `mb` MB of records; returns how many.
std::int64_t WriteFile(const std::string& path, double mb, bool floats) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    std::fprintf(stderr, "tfrecord_bench: cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::mt19937 rng(1);
  std::string framed;
  std::int64_t n = 0;
  std::uint64_t written = 0;
  tensorflow::Example ex;
  auto& features = *ex.mutable_features()->mutable_feature();
  while (written < static_cast<std::uint64_t>(mb * 1e6)) {
    std::string pixels(kPixels, '\0');
    for (char& p : pixels) p = static_cast<char>(rng() % 4 == 0 ? rng() & 0xff : 0);  // MNIST-like: mostly zeros
    features.clear();
    if (floats) {
      auto* v = features["image"].mutable_float_list()->mutable_value();
      for (char p : pixels) v->Add(static_cast<float>(static_cast<unsigned char>(p)) / 255.0f);
    } else {
      features["image"].mutable_bytes_list()->add_value(pixels);
    }
    features["label"].mutable_int64_list()->add_value(static_cast<std::int64_t>(rng() % 10));
    framed.clear();
    summary::AppendRecord(ex.SerializeAsString(), &framed);
    std::fwrite(framed.data(), 1, framed.size(), f);
    written += framed.size();
    ++n;
  }
  std::fclose(f);
  return n;
}

template <typename F>
double BestSeconds(int repeat, F&& run) {
  double best = 1e30;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

void Report(const char* what, double seconds, std::int64_t records, std::uint64_t bytes) {
  std::printf("  %-8s %7.3f s  %10.0f records/s  %7.0f MB/s\n", what, seconds, static_cast<double>(records) / seconds,
              static_cast<double>(bytes) / 1e6 / seconds);
}

void Bench(const std::string& dir, double mb, int repeat, bool floats) {
  const std::string path = dir + (floats ? "/mnist-floats.tfrecord" : "/mnist-bytes.tfrecord");
  const std::int64_t n = WriteFile(path, mb, floats);
  const std::uint64_t size = std::filesystem::file_size(path);
  std::printf("%s: %lld records, %.1f MB (image as %s)\n", path.c_str(), static_cast<long long>(n), static_cast<double>(size) / 1e6,
              floats ? "784 floats" : "784 raw bytes");
  Report("fread", BestSeconds(repeat, [&] {
           std::FILE* f = std::fopen(path.c_str(), "rb");
           std::vector<char> buf(1 << 20);
           while (std::fread(buf.data(), 1, buf.size(), f) > 0) {
           }
           std::fclose(f);
         }),
         n, size);
  Report("framing", BestSeconds(repeat, [&] {
           Result<std::unique_ptr<data::tfrecord::Input>> in = data::tfrecord::OpenFile(path);
           data::tfrecord::RecordReader reader(path, std::move(*in));
           std::string_view record;
           std::int64_t count = 0;
           while (*reader.Next(&record)) ++count;
           if (count != n) std::abort();
         }),
         n, size);
  DataSpec spec;
  spec.format = DataSpec::Format::kTfrecord;
  if (!floats) spec.image_height = spec.image_width = 28, spec.channels = 1;
  Report("read", BestSeconds(repeat, [&] {
           Result<data::Examples> e = data::ReadTfrecords(spec, {path});
           if (!e.ok() || e->size != n) {
             std::fprintf(stderr, "tfrecord_bench: %s\n", e.ok() ? "wrong count" : e.status().message().c_str());
             std::exit(1);
           }
         }),
         n, size);
  std::filesystem::remove(path);
}

}  // namespace

int main(int argc, char** argv) {
  double mb = 200;
  int repeat = 3;
  std::string dir = std::filesystem::temp_directory_path().string();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mb") mb = std::atof(argv[i + 1]);
    else if (flag == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--dir") dir = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: tfd_bench_tfrecord [--mb N] [--repeat N] [--dir DIR]\n");
      return 2;
    }
  }
  std::printf("TFRecord read speed, best of %d (no TensorFlow here to compare with)\n", repeat);
  Bench(dir, mb, repeat, true);
  Bench(dir, mb, repeat, false);
  return 0;
}
