// tfctl: starts a whole tfd cluster from one cluster file, shows every worker's progress and keeps a
// run folder. main() parses the command line and wires the pieces; exit codes: 0 every task done,
// 1 a task failed, 2 a bad file or usage, 130 after Ctrl-C.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include <boost/asio/ip/address.hpp>
#include <fmt/format.h>

#include "common/config/cluster_file.h"
#include "common/transport/auth.h"
#include "launcher/plan.h"
#include "launcher/runner.h"

namespace {

namespace fs = std::filesystem;
using tfd::Status;

std::atomic<int> g_signal{0};
extern "C" void OnSignal(int sig) { g_signal.store(sig); }

constexpr const char* kUsage = R"(tfctl: start a tfd cluster and watch it train.

Usage:
  tfctl up CLUSTER.json [--run-dir DIR] [--grace SECS] [--accept-new-hostkeys]
        start every task (a child for this machine, ssh for other hosts), stream their logs,
        show a table of the workers, write a run folder
  tfctl up CLUSTER.json --detach ...
        the same, returning once every worker is ready; the run goes on in the background
  tfctl validate CLUSTER.json [--accept-new-hostkeys]
        check the file and every host (ssh, tfd, data, ports); start nothing
  tfctl status [RUN]            each task's last event (RUN: a run folder; default the newest in ./runs)
  tfctl logs [RUN] [TASK] [-f]  the tasks' log lines (-f: follow while the run goes on)
  tfctl down [RUN]              stop a run: TERM every task, KILL after the grace period
  tfctl gen-token FILE          write a new cluster token (mode 0600) for tfd --token-file

A cluster file has "cluster" (as TF_CONFIG's), "train" (the job spec) and "launch" (where tfd is,
the working folder, environment, run folder, ssh settings). See docs/operations.md. Remote hosts
are reached with ssh -o BatchMode=yes; host keys are always checked (--accept-new-hostkeys accepts
keys of hosts not yet in known_hosts). Every run gets a new cluster token: local tasks read it from
the run folder's token file (mode 0600), remote ones from their ssh's stdin, never a command line.

Exit codes: 0 every task finished, 1 a task failed, 2 a bad file or usage, 130 after Ctrl-C.
)";

int Usage(const std::string& message) {
  std::fprintf(stderr, "tfctl: %s (see tfctl --help)\n", message.c_str());
  return 2;
}

// Is host:port free on this machine? Binds it for a moment.
bool PortFree(const std::string& host, std::uint16_t port) {
  boost::system::error_code ec;
  auto addr = boost::asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) return true;  // not an address we can test
  int fd = socket(addr.is_v6() ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int r;
  if (addr.is_v6()) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(port);
    auto bytes = addr.to_v6().to_bytes();
    std::memcpy(&a.sin6_addr, bytes.data(), 16);
    r = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(addr.to_v4().to_uint());
    r = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  close(fd);
  return r == 0;
}

// Checks one remote host over ssh: reachable with these settings, the working folder there, tfd
// executable there, and (for hosts with workers) the data folder.
Status CheckRemoteHost(const tfd::config::ClusterFile& f, const std::string& host, bool has_workers,
                       const tfd::launcher::PlanOptions& popts) {
  const tfd::config::HostLaunch& h = f.launch.For(host);
  using tfd::launcher::ShellQuote;
  std::string check = fmt::format("cd {} 2>/dev/null || {{ echo no-workdir; exit 3; }}; test -x {} || {{ echo no-tfd; exit 3; }}",
                                  ShellQuote(h.workdir), ShellQuote(h.tfd));
  if (has_workers) check += fmt::format("; test -d {} || {{ echo no-data; exit 3; }}", ShellQuote(f.train.data));
  check += "; echo tfd-ok";
  const auto r = tfd::launcher::RunAndCapture(tfd::launcher::SshArgv(h, host, popts, check), popts.connect_timeout_secs + 20);
  if (r.exit_code == 0 && r.out.find("tfd-ok") != std::string::npos) return Status::Ok();
  if (r.out.find("no-workdir") != std::string::npos)
    return Status::InvalidArgument(fmt::format("{}: launch.workdir: \"{}\" is not a folder on {}", f.source, h.workdir, host));
  if (r.out.find("no-tfd") != std::string::npos)
    return Status::InvalidArgument(fmt::format("{}: launch.tfd: \"{}\" is not an executable file on {}", f.source, h.tfd, host));
  if (r.out.find("no-data") != std::string::npos)
    return Status::InvalidArgument(fmt::format("{}: train.data: \"{}\" is not a folder on {}", f.source, f.train.data, host));
  std::string err = r.err;
  while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) err.pop_back();
  if (auto nl = err.find_last_of('\n'); nl != std::string::npos) err = err.substr(nl + 1);
  return Status::Unavailable(fmt::format("{}: cannot reach {} with ssh (exit {}): {}", f.source, host, r.exit_code,
                                         err.empty() ? "no message" : err));
}

// The checks `up` makes before starting anything; each failure is one line naming the field or host.
Status Validate(const tfd::config::ClusterFile& f, const std::vector<tfd::launcher::TaskPlan>& plan,
                const tfd::launcher::PlanOptions& popts) {
  std::map<std::string, bool> remote;  // host -> runs a worker
  for (const auto& p : plan) {
    if (!p.local) {
      remote[p.host] = remote[p.host] || p.task.type != tfd::config::TaskType::kPs;
      continue;
    }
    const tfd::config::HostLaunch& h = f.launch.For(p.host);
    const fs::path workdir = h.workdir;
    if (!fs::is_directory(workdir))
      return Status::InvalidArgument(fmt::format("{}: launch.workdir: \"{}\" is not a folder", f.source, h.workdir));
    const fs::path tfd = fs::path(h.tfd).is_absolute() ? fs::path(h.tfd) : workdir / h.tfd;
    if (access(tfd.c_str(), X_OK) != 0)
      return Status::InvalidArgument(fmt::format("{}: launch.tfd: \"{}\" is not an executable file (run scripts/build)", f.source, tfd.string()));
    const fs::path data = fs::path(f.train.data).is_absolute() ? fs::path(f.train.data) : workdir / f.train.data;
    if (p.task.type != tfd::config::TaskType::kPs && !fs::is_directory(data))
      return Status::InvalidArgument(fmt::format("{}: train.data: \"{}\" is not a folder (fetch MNIST with scripts/fetch_mnist.sh {})",
                                                 f.source, data.string(), f.train.data));
    if (p.task.type == tfd::config::TaskType::kPs) {  // only ps tasks listen in this version
      const tfd::config::Endpoint& ep = f.cluster.EndpointOf(p.task);
      if (!PortFree(ep.host, ep.port))
        return Status::InvalidArgument(fmt::format("{}: cluster.ps[{}]: {} is already in use on this machine", f.source, p.task.index,
                                                   ep.ToString()));
    }
  }
  for (const auto& [host, has_workers] : remote) TFD_RETURN_IF_ERROR(CheckRemoteHost(f, host, has_workers, popts));
  return Status::Ok();
}

std::string Describe(const tfd::config::ClusterFile& f) {
  const char* mode = f.train.update.mode == tfd::config::UpdateSpec::Mode::kSync ? "sync" : "async";
  return fmt::format("{}: {} ps + {} workers; {} on {}, {} epochs, batch {} per worker, {} updates", f.source, f.cluster.ps.size(),
                     f.cluster.num_workers(), f.train.model.name, f.train.data, f.train.epochs, f.train.batch_size, mode);
}

void WriteFile(const fs::path& path, const std::string& text) { std::ofstream(path) << text << "\n"; }

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Counts the workers whose `ready` event is in the run's metrics.
int ReadyWorkers(const fs::path& run_dir) {
  int ready = 0;
  std::istringstream in(ReadFile(run_dir / "metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    auto e = tfd::config::ParseEvent(line);
    if (e.ok() && e->event == "ready" && e->task.rfind("ps:", 0) != 0) ++ready;
  }
  return ready;
}

// up --detach: the collector (this same program, in a new session, its output in the run folder's
// tfctl.log) keeps running the cluster; this process returns once every worker is ready.
int Detach(const std::vector<tfd::launcher::TaskPlan>& plan, tfd::launcher::RunOptions ropts, int num_workers, double timeout_secs) {
  const fs::path run_dir = ropts.run_dir;
  const pid_t pid = fork();
  if (pid < 0) {
    std::fprintf(stderr, "tfctl: fork: %s\n", std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    setsid();
    const int log = open((run_dir / "tfctl.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    dup2(log, 1);
    dup2(log, 2);
    std::signal(SIGINT, OnSignal);
    std::signal(SIGTERM, OnSignal);
    std::signal(SIGPIPE, SIG_IGN);
    std::signal(SIGHUP, SIG_IGN);
    WriteFile(run_dir / "tfctl.pid", std::to_string(getpid()));
    std::exit(tfd::launcher::Run(plan, ropts));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_secs * 1000));
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      std::fprintf(stderr, "tfctl: the run ended before every worker was ready; see %s/tfctl.log\n", run_dir.c_str());
      return 1;
    }
    if (ReadyWorkers(run_dir) >= num_workers) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::fprintf(stderr, "tfctl: not every worker was ready within %.0f s (launch.start_timeout); the run goes on: %s\n", timeout_secs,
                   run_dir.c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::printf("tfctl: every task is up; the run goes on in the background\n  tfctl status %s\n  tfctl logs %s -f\n  tfctl down %s\n",
              run_dir.c_str(), run_dir.c_str(), run_dir.c_str());
  return 0;
}

// The run folder named on the command line, or the newest under ./runs.
std::string FindRun(const std::vector<std::string>& args, std::size_t* used) {
  *used = 0;
  if (!args.empty() && args[0][0] != '-' && fs::is_directory(args[0]) && fs::exists(fs::path(args[0]) / "cluster.json")) {
    *used = 1;
    return args[0];
  }
  std::string newest;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("runs", ec))
    if (e.is_directory() && e.path().string() > newest) newest = e.path().string();
  return newest;
}

bool Alive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

// status, logs and down act on a run folder.
int RunCommandOnRun(const std::string& command, std::vector<std::string> args) {
  std::size_t used = 0;
  const std::string run = FindRun(args, &used);
  args.erase(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(used));
  if (run.empty()) return Usage(fmt::format("{}: no run folder given and none under ./runs", command));
  const fs::path run_dir = run;
  const std::string pid_text = ReadFile(run_dir / "tfctl.pid");
  const pid_t collector = pid_text.empty() ? -1 : static_cast<pid_t>(std::atol(pid_text.c_str()));
  const bool running = Alive(collector);
  if (command == "down") {
    if (!running) {
      std::printf("tfctl: %s is not running\n", run.c_str());
      return 0;
    }
    kill(collector, SIGTERM);  // the collector stops every task (TERM, then KILL after its grace) and writes the summary
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (Alive(collector) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (Alive(collector)) {
      std::fprintf(stderr, "tfctl: the run's tfctl (pid %d) did not stop within 60 s\n", collector);
      return 1;
    }
    std::printf("tfctl: stopped %s\n", run.c_str());
    return 0;
  }
  if (command == "logs") {
    bool follow = false;
    std::string task;
    for (const std::string& a : args) {
      if (a == "-f" || a == "--follow") follow = true;
      else if (a[0] == '-') return Usage(fmt::format("logs: unknown option {}", a));
      else task = a;
    }
    std::vector<fs::path> files;
    if (!task.empty()) {
      files.push_back(run_dir / (task + ".log"));
      if (!fs::exists(files[0])) return Usage(fmt::format("logs: no task {} in {}", task, run));
    } else {
      for (const auto& e : fs::directory_iterator(run_dir))
        if (e.path().extension() == ".log" && e.path().filename() != "tfctl.log") files.push_back(e.path());
      std::sort(files.begin(), files.end());
    }
    std::vector<std::uintmax_t> offsets(files.size(), 0);
    for (;;) {
      for (std::size_t i = 0; i < files.size(); ++i) {
        std::ifstream in(files[i]);
        in.seekg(static_cast<std::streamoff>(offsets[i]));
        const std::string name = files[i].stem().string();
        for (std::string line; std::getline(in, line);) {
          if (in.eof()) break;  // a partial last line: take it next time
          std::printf("[%s] %s\n", name.c_str(), line.c_str());
          offsets[i] += line.size() + 1;
        }
      }
      std::fflush(stdout);
      if (!follow || !Alive(collector)) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  // status: each task's state and last epoch, from the run folder.
  std::map<std::string, tfd::config::Event> last;
  std::istringstream in(ReadFile(run_dir / "metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    auto e = tfd::config::ParseEvent(line);
    if (e.ok() && (e->event == "epoch" || e->event == "done" || e->event == "ready" || e->event == "start" || e->event == "error"))
      last[e->task] = *e;
  }
  std::printf("%s: %s\n", run.c_str(), running ? "running" : "finished");
  std::printf("%-10s %-9s %5s %11s %8s %8s\n", "task", "last", "epoch", "global_step", "loss", "accuracy");
  for (const auto& [task, e] : last) {
    auto num = [&](const char* key, const char* f) {
      const double v = e.Number(key);
      return v < 0 ? std::string("-") : fmt::format(fmt::runtime(f), v);
    };
    std::printf("%-10s %-9s %5s %11s %8s %8s\n", task.c_str(), e.event.c_str(), num("epoch", "{:.0f}").c_str(),
                num("global_step", "{:.0f}").c_str(), num("loss", "{:.4f}").c_str(), num("accuracy", "{:.4f}").c_str());
  }
  if (!running && fs::exists(run_dir / "summary.json")) std::printf("summary: %s/summary.json\n", run.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  if (command == "gen-token") {
    if (args.size() != 2 || args[1].empty() || args[1][0] == '-') return Usage("gen-token needs one FILE to write");
    if (Status s = tfd::transport::ClusterToken::Generate().WriteFile(args[1]); !s.ok()) {
      std::fprintf(stderr, "tfctl: %s\n", s.message().c_str());
      return 1;
    }
    std::printf("tfctl: wrote a new cluster token to %s (mode 0600). Copy it to every host of the cluster (scp -p keeps the "
                "mode) and start each tfd with --token-file %s\n",
                args[1].c_str(), args[1].c_str());
    return 0;
  }
  if (command == "status" || command == "logs" || command == "down") return RunCommandOnRun(command, {args.begin() + 1, args.end()});
  if (command != "up" && command != "validate")
    return Usage(fmt::format("unknown command \"{}\" (expected up, validate, status, logs, down or gen-token)", command));
  std::string file, run_dir_override;
  double grace = 10;
  bool accept_new_hostkeys = false, detach = false;
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--run-dir" && i + 1 < args.size()) {
      run_dir_override = args[++i];
    } else if (args[i] == "--grace" && i + 1 < args.size()) {
      try {
        grace = std::stod(args[++i]);
      } catch (...) {
        grace = -1;
      }
      if (!(grace >= 0 && grace < 3600)) return Usage("--grace: expected a number of seconds");
    } else if (args[i] == "--accept-new-hostkeys") {
      accept_new_hostkeys = true;
    } else if (args[i] == "--detach" && command == "up") {
      detach = true;
    } else if (!args[i].empty() && args[i][0] == '-') {
      return Usage(fmt::format("unknown option {}", args[i]));
    } else if (file.empty()) {
      file = args[i];
    } else {
      return Usage(fmt::format("one cluster file, not \"{}\" too", args[i]));
    }
  }
  if (file.empty()) return Usage(command + " needs a cluster file");

  tfd::Result<tfd::config::ClusterFile> f = tfd::config::LoadClusterFile(file);
  if (!f.ok()) {
    std::fprintf(stderr, "tfctl: %s\n", f.status().message().c_str());
    return 2;
  }
  const std::string run_root = run_dir_override.empty() ? f->launch.run_dir : run_dir_override;
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  const fs::path run_dir = fs::absolute(fs::path(run_root) / fmt::format("{}-{}", stamp, f->name));
  tfd::launcher::PlanOptions popts;
  popts.job_path = (run_dir / "job.json").string();
  popts.job_json = f->train_json;
  popts.accept_new_hostkeys = accept_new_hostkeys;
  const tfd::transport::ClusterToken token = tfd::transport::ClusterToken::Generate();
  if (command == "up") {
    popts.token_path = (run_dir / "token").string();
    popts.token_hex = token.Hex();
  }
  popts.remote_run_dir = (fs::path(f->launch.run_dir).is_relative() ? fs::path(f->launch.run_dir) : fs::path("runs")) / run_dir.filename();
  const std::vector<tfd::launcher::TaskPlan> plan = tfd::launcher::MakePlan(*f, popts);
  if (Status s = Validate(*f, plan, popts); !s.ok()) {
    std::fprintf(stderr, "tfctl: %s\n", s.message().c_str());
    return tfd::ExitCodeFor(s) == 2 ? 2 : 1;
  }
  if (command == "validate") {
    std::printf("%s\nok: the file is valid; on every host tfd is there and the data folder exists; every local ps port is free\n",
                Describe(*f).c_str());
    return 0;
  }

  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) {
    std::fprintf(stderr, "tfctl: cannot create the run folder %s: %s\n", run_dir.c_str(), ec.message().c_str());
    return 1;
  }
  if (Status s = token.WriteFile(popts.token_path); !s.ok()) {
    std::fprintf(stderr, "tfctl: %s\n", s.message().c_str());
    return 1;
  }
  fs::copy_file(file, run_dir / "cluster.json", fs::copy_options::overwrite_existing, ec);
  std::ofstream(run_dir / "job.json") << f->train_json << "\n";
  std::printf("tfctl: %s\n", Describe(*f).c_str());
  std::fflush(stdout);
  tfd::launcher::RunOptions ropts;
  ropts.run_dir = run_dir.string();
  ropts.grace_secs = grace;
  ropts.signal = &g_signal;
  if (detach) return Detach(plan, ropts, f->cluster.num_workers(), f->launch.start_timeout_secs);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);
  WriteFile(run_dir / "tfctl.pid", std::to_string(getpid()));
  return tfd::launcher::Run(plan, ropts);
}
