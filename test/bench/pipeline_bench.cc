// Model parallelism on this machine, for the dnn on MNIST (batch 200 unless --batch says, the
// seed's momentum optimizer): samples/s and epoch time of one process, of data parallel with 2 workers
// (allreduce), of a `layers` split over 2 stages (GPipe and 1F1B, M in {1, 4, 8}) and of a `units`
// split over 2 tasks, all in one run, with each stage's measured bubble beside the theory
// (S-1)/(M+S-1), its peak activation memory and the final test accuracy. Then PyTorch's own
// pipeline (torch_pipe_peer.py: Pipe, one process, the same cut) with 1 and 2 threads, the
// faster kept, each row's ratio against its own one-process run and against tfd's.
//
// On a machine loaded by other work the ratios flatter the multi-process rows (two processes get
// two shares of an oversubscribed CPU): the load average is printed at the start for that reason.
//
//   build/test/bench/tfd_bench_pipeline [--data DIR] [--epochs N] [--batch B] [--no-peer]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test/test_util.h"

namespace {

using namespace std::chrono_literals;
using tfd::testing::Process;

int batch_size = 200;

struct Run {
  bool ok = false;
  double samples_per_sec = 0, epoch_s = 0, test_accuracy = 0;
  std::vector<std::string> stage_notes;  // per worker: bubble, theory, peak activation
  std::string error;
};

std::string Job(const std::string& data, int epochs, const std::string& extra) {
  return R"({"model": "dnn", "data": ")" + data + R"(", "epochs": )" + std::to_string(epochs) +
         R"(, "batch_size": )" + std::to_string(batch_size) + R"(, "optimizer": {"type": "momentum", "learning_rate": 0.01, "momentum": 0.95}, "seed": 1,
         "log_every_steps": 0, "evaluation": "none")" + extra + "}";
}

// Reads the epoch events of `out` (mean samples/s over epochs) and the done event.
void ReadEvents(const std::string& out, Run* r, bool add) {
  std::istringstream in(out);
  double sum = 0, secs = 0;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_discarded() || !e.contains("event")) continue;
    if (e["event"] == "epoch") sum += e["samples_per_sec"].get<double>(), ++n;
    if (e["event"] == "done") r->test_accuracy = e["test_accuracy"].get<double>();
  }
  (void)secs;
  if (n > 0) r->samples_per_sec = add ? r->samples_per_sec + sum / n : sum / n;
}

std::string StageNote(const std::string& err) {
  static const std::regex note(R"((stage=\d+/\d+).*?(bubble|waiting)=([0-9.]+)(?: theory=([0-9.]+) peak_in_flight=(\d+) peak_activation_kb=(\d+))?)");
  std::smatch m;
  std::string last;
  for (auto it = std::sregex_iterator(err.begin(), err.end(), note); it != std::sregex_iterator(); ++it) {
    const std::smatch& s = *it;
    last = s[1].str() + " " + s[2].str() + "=" + s[3].str();
    if (s[4].matched) last += " theory=" + s[4].str() + " in_flight=" + s[5].str() + " act_kb=" + s[6].str();
  }
  (void)m;
  return last;
}

Run Cluster(const std::string& job, int workers) {
  tfd::testing::TempDir dir;
  tfd::testing::WriteFile(dir / "job.json", job);
  nlohmann::json cluster;
  for (int i = 0; i < workers; ++i) cluster["worker"].push_back("127.0.0.1:" + std::to_string(tfd::testing::FreePort()));
  std::vector<std::unique_ptr<Process>> procs;
  for (int i = 0; i < workers; ++i) {
    const std::string tf = "TF_CONFIG=" + nlohmann::json{{"cluster", cluster}, {"task", {{"type", "worker"}, {"index", i}}}}.dump();
    procs.push_back(std::make_unique<Process>(std::vector<std::string>{TFD_BINARY, "--log-format", "json", "--job", dir / "job.json"},
                                              std::vector<std::string>{tf}, dir / ("w" + std::to_string(i) + ".out"),
                                              dir / ("w" + std::to_string(i) + ".err")));
  }
  Run r;
  const bool data_parallel = job.find("model_parallel") == std::string::npos;
  for (int i = 0; i < workers; ++i) {
    auto code = procs[i]->Wait(1200s);
    if (!code || *code != 0) {
      r.error = "worker " + std::to_string(i) + " failed: " + procs[i]->err().substr(0, 400);
      return r;
    }
    // Data parallel: the workers' rates add up; a model-parallel replica's stages all report its rate.
    if (data_parallel || i == 0) ReadEvents(procs[i]->out(), &r, data_parallel);
    r.stage_notes.push_back(StageNote(procs[i]->err()));
  }
  r.ok = true;
  return r;
}

Run Standalone(const std::string& job) {
  tfd::testing::TempDir dir;
  tfd::testing::WriteFile(dir / "job.json", job);
  Process p({TFD_BINARY, "--standalone", "--log-format", "json", "--job", dir / "job.json"}, {}, dir / "out", dir / "err");
  Run r;
  auto code = p.Wait(1200s);
  if (!code || *code != 0) {
    r.error = "standalone failed: " + p.err().substr(0, 400);
    return r;
  }
  ReadEvents(p.out(), &r, false);
  r.ok = true;
  return r;
}

void Print(const std::string& name, const Run& r, double base) {
  if (!r.ok) {
    std::printf("%-34s FAILED: %s\n", name.c_str(), r.error.c_str());
    return;
  }
  std::printf("%-34s %9.0f %8.1f %6.2fx %8.4f", name.c_str(), r.samples_per_sec, 60000 / r.samples_per_sec,
              base > 0 ? r.samples_per_sec / base : 1.0, r.test_accuracy);
  for (const std::string& n : r.stage_notes) std::printf("  [%s]", n.c_str());
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = std::string(TFD_SOURCE_DIR) + "/data/mnist";
  int epochs = 1;
  bool peer = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--data" && i + 1 < argc) data = argv[++i];
    else if (a == "--epochs" && i + 1 < argc) epochs = std::atoi(argv[++i]);
    else if (a == "--batch" && i + 1 < argc) batch_size = std::atoi(argv[++i]);
    else if (a == "--no-peer") peer = false;
    else {
      std::fprintf(stderr, "usage: %s [--data DIR] [--epochs N] [--batch B] [--no-peer]\n", argv[0]);
      return 2;
    }
  }
  if (batch_size < 8 || batch_size % 8 != 0) {
    std::fprintf(stderr, "%s: --batch %d: expected a multiple of 8 (the largest micro-batch count)\n", argv[0], batch_size);
    return 2;
  }
  std::printf("dnn (784-160x5-10, elu), batch %d, momentum 0.01/0.95, %d epoch(s), on this machine (nproc and load below)\n", batch_size,
              epochs);
  std::fflush(stdout);
  (void)std::system("nproc; uptime");
  std::printf("%-34s %9s %8s %7s %8s  per stage\n", "configuration", "samples/s", "epoch_s", "ratio", "test_acc");
  const Run one = Standalone(Job(data, epochs, ""));
  Print("one process", one, 0);
  const double base = one.ok ? one.samples_per_sec : 0;
  // The same micro-batches in one process (gradient accumulation): what the smaller GEMMs alone do.
  Print("one process, 8 micro-batches", Standalone(Job(data, epochs, R"(, "model_parallel": {"split": "layers", "stages": 2, "microbatches": 8})")), base);
  Print("data parallel, 2 workers (allreduce)", Cluster(Job(data, epochs, R"(, "update": {"mode": "allreduce"})"), 2), base);
  for (const char* schedule : {"gpipe", "1f1b"})
    for (int m : {1, 4, 8}) {
      const std::string mp = std::string(R"(, "model_parallel": {"split": "layers", "stages": 2, "schedule": ")") + schedule +
                             R"(", "microbatches": )" + std::to_string(m) + "}";
      Print(std::string("layers S=2 ") + schedule + " M=" + std::to_string(m), Cluster(Job(data, epochs, mp), 2), base);
    }
  Print("units S=2", Cluster(Job(data, epochs, R"(, "model_parallel": {"split": "units", "stages": 2})"), 2), base);
  if (!peer) return 0;
  if (std::system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0) {
    std::printf("PyTorch Pipe: not measured: /usr/bin/python3 has no torch here (scripts/setup --bench installs python3-torch)\n");
    return 0;
  }
  // Pipe's rows: for each configuration, the faster of 1 and 2 threads (printed).
  struct PeerRow {
    double samples_per_sec = 0, ratio = 0;
    std::string threads;
  };
  std::vector<std::pair<std::string, PeerRow>> rows;
  for (int threads : {1, 2}) {
    tfd::testing::TempDir dir;
    const std::string cmd = "/usr/bin/python3 " + std::string(TFD_SOURCE_DIR) + "/test/bench/torch_pipe_peer.py --data " + data +
                            " --threads " + std::to_string(threads) + " --batch " + std::to_string(batch_size);
    tfd::testing::CommandResult r = tfd::testing::RunCommand(cmd, dir);
    if (r.exit_code != 0) {
      std::printf("PyTorch Pipe, %d threads: FAILED: %s\n", threads, r.err.substr(0, 300).c_str());
      continue;
    }
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      auto e = nlohmann::json::parse(line, nullptr, false);
      if (e.is_discarded() || !e.contains("config")) continue;
      const std::string config = e["config"].get<std::string>();
      auto it = std::find_if(rows.begin(), rows.end(), [&](const auto& row) { return row.first == config; });
      if (it == rows.end()) it = rows.insert(rows.end(), {config, PeerRow{}});
      const double sps = e["samples_per_sec"].get<double>();
      if (sps > it->second.samples_per_sec)
        it->second = {sps, e.value("ratio", 1.0), e["openblas_num_threads"].get<std::string>()};
    }
  }
  for (const auto& [config, row] : rows)
    std::printf("PyTorch %-44s %9.0f  %5.2fx its one process  %5.2fx tfd's one process  (threads %s)\n", config.c_str(),
                row.samples_per_sec, row.ratio, base > 0 ? row.samples_per_sec / base : 0.0, row.threads.c_str());
  return 0;
}
