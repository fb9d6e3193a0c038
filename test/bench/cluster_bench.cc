// Cluster throughput on this machine, every tfd task a separate process, beside PyTorch DDP (gloo,
// 2 processes) and one PyTorch process on the same model, batch and optimizer, in the same run. Each
// peer runs at its best: every setting its users would try (1 and 2 threads, denormals flushed or
// not, OpenBLAS's CPU detection where OPENBLAS_CORETYPE pins it), the fastest kept and named.
//
// Without --dnn: the mlp (batch 100 per worker, sgd 0.5) on 1 ps + 2 workers (async, and async with
// overlap; or --mode sync|allreduce).
// With --dnn: the dnn seed configuration (batch 50 per worker, momentum 0.01/0.95) in every update
// mode, beside one tfd process on the same job, with each run's time per step split by the workers'
// own clocks (input, compute, update), over the same-host link and (two rows) over loopback TCP;
// then the time for --mode (default async) to reach 98% test accuracy.
//
//   build/test/bench/tfd_bench_cluster [--data DIR] [--epochs N] [--mode async|sync|allreduce] [--no-peer] [--dnn]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "test/bench/peer_best.h"
#include "test/test_util.h"

namespace {

using namespace std::chrono_literals;
using tfd::testing::Process;

struct ClusterRun {
  bool ok = false;
  double samples_per_sec = 0;  // sum over workers of their mean epoch rate after the first epoch
  double seconds_to_target = -1;
  double best_accuracy = 0;
  // Per step, worker 0's mean after the first epoch, from its epoch events.
  double input_ms = 0, compute_ms = 0, update_ms = 0;
  // The ps's own clock, from its done event: per push applied, per parameter reply built (µs).
  double ps_apply_us = -1, ps_reply_us = -1;
  std::string error;
};

// Mean samples/s and per-step times over the epochs after the first, from one task's JSON events.
struct EpochMeans {
  double samples_per_sec = 0, input_ms = 0, compute_ms = 0, update_ms = 0;
  int epochs = 0;
};
EpochMeans MeansOf(const std::string& events) {
  EpochMeans m;
  std::istringstream in(events);
  std::int64_t steps = 0, last_step = 0;
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_discarded() || e["event"] != "epoch") continue;
    const std::int64_t local = e["local_step"].get<std::int64_t>();
    if (e["epoch"].get<int>() > 1) {
      m.samples_per_sec += e["samples_per_sec"].get<double>();
      m.input_ms += e.value("input_s", 0.0) * 1e3;
      m.compute_ms += e.value("compute_s", 0.0) * 1e3;
      m.update_ms += e.value("update_s", 0.0) * 1e3;
      steps += local - last_step;
      ++m.epochs;
    }
    last_step = local;
  }
  if (m.epochs > 0) m.samples_per_sec /= m.epochs;
  if (steps > 0) m.input_ms /= steps, m.compute_ms /= steps, m.update_ms /= steps;
  return m;
}

// The last line a task logged at level error (its reason for exiting), else the end of its output.
std::string LastError(const std::string& output) {
  std::istringstream in(output);
  std::string last;
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (!e.is_discarded() && e.value("event", "") == "error") last = e.value("message", line);
    else if (e.is_discarded() && line.find(" error ") != std::string::npos) last = line;
  }
  return last.empty() ? output.substr(output.size() > 300 ? output.size() - 300 : 0) : last;
}

// `tcp`: every task with TFD_LOCAL_LINK=tcp (loopback TCP instead of the same-host Unix sockets).
ClusterRun RunCluster(const std::string& job, int num_workers, double target_accuracy, bool with_ps = true, bool tcp = false) {
  const std::string link = tcp ? "TFD_LOCAL_LINK=tcp" : "TFD_LOCAL_LINK=unix";
  tfd::testing::TempDir dir;
  tfd::testing::WriteFile(dir / "job.json", job);
  nlohmann::json cluster;
  if (with_ps) cluster["ps"].push_back("127.0.0.1:" + std::to_string(tfd::testing::FreePort()));
  for (int i = 0; i < num_workers; ++i) cluster["worker"].push_back("127.0.0.1:" + std::to_string(tfd::testing::FreePort()));
  auto tf_config = [&](const char* type, int i) {
    return "TF_CONFIG=" + nlohmann::json{{"cluster", cluster}, {"task", {{"type", type}, {"index", i}}}}.dump();
  };
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Process> ps;
  if (with_ps) ps = std::make_unique<Process>(std::vector<std::string>{TFD_BINARY, "--log-format", "json"},
                                              std::vector<std::string>{tf_config("ps", 0), link}, dir / "ps.out", dir / "ps.err");
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < num_workers; ++i)
    workers.push_back(std::make_unique<Process>(std::vector<std::string>{TFD_BINARY, "--log-format", "json", "--job", dir / "job.json"},
                                                std::vector<std::string>{tf_config("worker", i), link}, dir / ("w" + std::to_string(i) + ".out"),
                                                dir / ("w" + std::to_string(i) + ".err")));
  ClusterRun r;
  for (int i = 0; i < num_workers; ++i) {
    auto code = workers[i]->Wait(600s);
    if (!code || *code != 0) {
      r.error = "worker " + std::to_string(i) + " failed: " + LastError(workers[i]->out() + workers[i]->err());
      return r;
    }
    std::istringstream in(workers[i]->out());
    for (std::string line; std::getline(in, line);) {
      auto e = nlohmann::json::parse(line, nullptr, false);
      if (e.is_discarded() || e["event"] != "epoch" || !e.contains("test_accuracy")) continue;
      const double acc = e["test_accuracy"].get<double>();
      r.best_accuracy = std::max(r.best_accuracy, acc);
      if (acc >= target_accuracy && r.seconds_to_target < 0) r.seconds_to_target = e["ts"].get<double>();
    }
    const EpochMeans m = MeansOf(workers[i]->out());
    r.samples_per_sec += m.samples_per_sec;
    if (i == 0) r.input_ms = m.input_ms, r.compute_ms = m.compute_ms, r.update_ms = m.update_ms;
  }
  if (ps != nullptr) {
    ps->Wait(30s);
    std::istringstream in(ps->out());
    for (std::string line; std::getline(in, line);) {
      auto e = nlohmann::json::parse(line, nullptr, false);
      if (e.is_discarded() || e["event"] != "done" || !e.contains("pushes")) continue;
      const double pushes = e["pushes"].get<double>(), replies = e["replies"].get<double>();
      if (pushes > 0) r.ps_apply_us = 1e6 * e["apply_s"].get<double>() / pushes;
      if (replies > 0) r.ps_reply_us = 1e6 * e["reply_s"].get<double>() / replies;
    }
  }
  if (r.seconds_to_target >= 0) {
    // ts is wall-clock seconds since the epoch: measure from this run's start.
    const double now_wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const double since_start = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.seconds_to_target -= now_wall - since_start;
  }
  r.ok = true;
  return r;
}

// One tfd process on the same job: the baseline every cluster row is divided by.
ClusterRun RunStandalone(const std::string& job) {
  tfd::testing::TempDir dir;
  tfd::testing::WriteFile(dir / "job.json", job);
  Process p({TFD_BINARY, "--standalone", "--log-format", "json", "--job", dir / "job.json"}, {}, dir / "out", dir / "err");
  ClusterRun r;
  auto code = p.Wait(600s);
  if (!code || *code != 0) {
    r.error = "one process failed: " + LastError(p.out() + p.err());
    return r;
  }
  const EpochMeans m = MeansOf(p.out());
  r.samples_per_sec = m.samples_per_sec;
  r.input_ms = m.input_ms, r.compute_ms = m.compute_ms, r.update_ms = m.update_ms;
  r.ok = true;
  return r;
}

double Peer(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return 0;
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  pclose(p);
  auto e = nlohmann::json::parse(out, nullptr, false);
  return e.is_object() && e.contains("samples_per_sec") ? e["samples_per_sec"].get<double>() : 0;
}

// The peer at its best (peer_best.h): `script_and_args` run in each setting, the fastest kept.
tfd::bench::PeerBest BestPeerOf(const std::string& script_and_args) {
  return tfd::bench::BestPeer([&](int threads, bool flush, bool unpin) { return Peer(tfd::bench::PeerCommand(script_and_args, threads, flush, unpin)); });
}

std::string PerStep(const ClusterRun& r) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%5.2f %7.2f %6.2f", r.input_ms, r.compute_ms, r.update_ms);
  std::string out = buf;
  if (r.ps_apply_us >= 0) {
    std::snprintf(buf, sizeof buf, "   ps: apply %.0f us, reply %.0f us", r.ps_apply_us, r.ps_reply_us);
    out += buf;
  }
  return out;
}

// The dnn seed configuration in every update mode beside one tfd process and the peers; then the
// time for `mode` to reach 98% test accuracy.
int DnnTable(const std::string& data, int epochs, const std::string& mode, bool peer) {
  auto job = [&](const std::string& update, int job_epochs) {
    return R"({"model": "dnn", "data": ")" + data + R"(", "epochs": )" + std::to_string(job_epochs) +
           R"(, "batch_size": 50, "optimizer": {"type": "momentum", "learning_rate": 0.01, "momentum": 0.95}, "update": )" + update +
           R"(, "log_every_steps": 0})";
  };
  std::printf("dnn (784-160x5-10, elu), batch 50 per worker, momentum 0.01/0.95, %d epochs; samples/s after the first epoch,\n"
              "2 workers' sum; per step: worker 0's own clock (input: reading the batch; compute: forward and backward;\n"
              "update: the exchange and the optimizer), ms; the ps's own clock per push applied and per parameter reply built\n",
              epochs);
  std::printf("%-42s %10s %7s   %5s %7s %6s\n", "configuration", "samples/s", "ratio", "input", "compute", "update");
  const ClusterRun one = RunStandalone(job(R"({"mode": "async"})", epochs));
  if (!one.ok) {
    std::fprintf(stderr, "tfd_bench_cluster: %s\n", one.error.c_str());
    return 1;
  }
  std::printf("%-42s %10.0f %6.2fx   %s\n", "tfd, one process", one.samples_per_sec, 1.0, PerStep(one).c_str());
  std::fflush(stdout);
  struct Variant {
    const char* name;
    const char* update;
    bool ps;
    bool tcp;  // loopback TCP instead of the same-host link, for comparison
  };
  const Variant variants[] = {
      {"tfd 1 ps + 2 workers, async", R"({"mode": "async"})", true, false},
      {"tfd 1 ps + 2 workers, async, loopback TCP", R"({"mode": "async"})", true, true},
      {"tfd 1 ps + 2 workers, async + overlap", R"({"mode": "async", "overlap": true})", true, false},
      {"tfd 1 ps + 2 workers, sync", R"({"mode": "sync"})", true, false},
      {"tfd 2 workers, allreduce (bucket_kb 128)", R"({"mode": "allreduce", "bucket_kb": 128})", false, false},
      {"tfd 2 workers, allreduce (bucket_kb 0)", R"({"mode": "allreduce", "bucket_kb": 0})", false, false},
      {"tfd 2 workers, allreduce (0), loopback TCP", R"({"mode": "allreduce", "bucket_kb": 0})", false, true},
  };
  double best = 0;
  for (const Variant& v : variants) {
    const ClusterRun r = RunCluster(job(v.update, epochs), 2, 2.0, v.ps, v.tcp);
    if (!r.ok) {  // a mode that fails is a finding: say why in its row and go on
      std::printf("%-42s %10s   %s\n", v.name, "failed", r.error.c_str());
      continue;
    }
    best = std::max(best, r.samples_per_sec);
    std::printf("%-42s %10.0f %6.2fx   %s\n", v.name, r.samples_per_sec, r.samples_per_sec / one.samples_per_sec, PerStep(r).c_str());
    std::fflush(stdout);
  }
  std::printf("best cluster / one process: %.2fx (target >= 1.5 in one mode)\n", best / one.samples_per_sec);
  if (peer) {
    const std::string dir = TFD_SOURCE_DIR "/test/bench/";
    const std::string common = " --model dnn --optimizer momentum --lr 0.01 --momentum 0.95 --batch 50 --seconds 3 --data " + data;
    const tfd::bench::PeerBest ddp = BestPeerOf(dir + "torch_ddp_peer.py --ranks 2" + common);
    const tfd::bench::PeerBest single = BestPeerOf(dir + "torch_peer.py" + common);
    std::printf("%-42s %10.0f %6.2fx   best tfd / DDP %.2fx\n", ("PyTorch DDP gloo, 2 processes (" + ddp.setting + ")").c_str(),
                ddp.samples_per_sec, ddp.samples_per_sec / one.samples_per_sec, ddp.samples_per_sec > 0 ? best / ddp.samples_per_sec : 0);
    std::printf("%-42s %10.0f %6.2fx   tfd one process / it %.2fx\n", ("PyTorch, one process (" + single.setting + ")").c_str(),
                single.samples_per_sec, single.samples_per_sec / one.samples_per_sec,
                single.samples_per_sec > 0 ? one.samples_per_sec / single.samples_per_sec : 0);
  }
  std::fflush(stdout);
  const std::string update = R"({"mode": ")" + mode + R"("})";
  ClusterRun d = RunCluster(job(update, 30), 2, 0.98, mode != "allreduce");
  if (!d.ok) {
    std::fprintf(stderr, "tfd_bench_cluster: dnn: %s\n", d.error.c_str());
    return 1;
  }
  if (d.seconds_to_target >= 0)
    std::printf("dnn seed config, 2 workers (%s): 98.0%% test accuracy after %.1f s (PyTorch, one process: 44 s; target < 30 s)\n",
                mode.c_str(), d.seconds_to_target);
  else
    std::printf("dnn seed config, 2 workers (%s): never reached 98.0%% in 30 epochs (best %.4f)\n", mode.c_str(), d.best_accuracy);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = std::getenv("TFD_MNIST_DIR") ? std::getenv("TFD_MNIST_DIR") : "data/mnist";
  std::string mode = "async";
  int epochs = 4;
  bool peer = true, dnn = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--data" && i + 1 < argc) data = argv[++i];
    else if (a == "--epochs" && i + 1 < argc) epochs = std::atoi(argv[++i]);
    else if (a == "--mode" && i + 1 < argc) mode = argv[++i];
    else if (a == "--no-peer") peer = false;
    else if (a == "--dnn") dnn = true;
    else {
      std::fprintf(stderr, "usage: %s [--data DIR] [--epochs N] [--mode async|sync|allreduce] [--no-peer] [--dnn]\n", argv[0]);
      return 2;
    }
  }
  data = std::filesystem::absolute(data).string();
  if (!std::filesystem::exists(std::filesystem::path(data) / "train-images-idx3-ubyte")) {
    std::fprintf(stderr, "tfd_bench_cluster: no MNIST in %s (scripts/fetch_mnist.sh)\n", data.c_str());
    return 2;
  }
  if (peer && std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    std::printf("PyTorch not found (scripts/setup --bench installs python3-torch): tfd only\n");
    peer = false;
  }
  if (dnn) return DnnTable(data, epochs, mode, peer);
  auto mlp_job = [&](const std::string& update) {
    return R"({"model": "mlp", "data": ")" + data + R"(", "epochs": )" + std::to_string(epochs) +
           R"(, "batch_size": 100, "optimizer": {"type": "sgd", "learning_rate": 0.5}, "update": )" + update +
           R"(, "log_every_steps": 0})";
  };
  std::printf("mlp, batch 100 per worker, sgd 0.5, 2 workers on this machine (aggregate samples/s)\n");
  double best = 0;
  const std::vector<std::pair<std::string, std::string>> variants =
      mode == "async" ? std::vector<std::pair<std::string, std::string>>{{"async", R"({"mode": "async"})"},
                                                                         {"async, overlap", R"({"mode": "async", "overlap": true})"}}
                      : std::vector<std::pair<std::string, std::string>>{{mode, R"({"mode": ")" + mode + R"("})"}};
  for (const auto& [name, update] : variants) {
    ClusterRun ours = RunCluster(mlp_job(update), 2, 2.0, mode != "allreduce");
    if (!ours.ok) {
      std::fprintf(stderr, "tfd_bench_cluster: %s\n", ours.error.c_str());
      return 1;
    }
    std::printf("  tfd %s (%s)%*s%10.0f\n", mode == "allreduce" ? "2 workers, ring " : "1 ps + 2 workers", name.c_str(),
                static_cast<int>(16 - name.size()), "", ours.samples_per_sec);
    std::fflush(stdout);
    best = std::max(best, ours.samples_per_sec);
  }
  if (peer) {
    const std::string dir = TFD_SOURCE_DIR "/test/bench/";
    const std::string common = " --model mlp --optimizer sgd --lr 0.5 --batch 100 --seconds 3 --data " + data;
    const tfd::bench::PeerBest ddp = BestPeerOf(dir + "torch_ddp_peer.py --ranks 2" + common);
    const tfd::bench::PeerBest single = BestPeerOf(dir + "torch_peer.py" + common);
    std::printf("  PyTorch DDP gloo, 2 processes (%-8s)  %10.0f   best tfd/ddp    %.2fx (target >= 2.0)\n", ddp.setting.c_str(),
                ddp.samples_per_sec, ddp.samples_per_sec > 0 ? best / ddp.samples_per_sec : 0);
    std::printf("  PyTorch, one process (%-8s)         %10.0f   best tfd/single %.2fx (target >= 1.3)\n", single.setting.c_str(),
                single.samples_per_sec, single.samples_per_sec > 0 ? best / single.samples_per_sec : 0);
  }
  return 0;
}
