// tfctl: starts a whole tfd cluster from one cluster file, shows every worker's progress and keeps a
// run folder. main() parses the command line and wires the pieces; exit codes: 0 every task done,
// 1 a task failed, 2 a bad file or usage, 130 after Ctrl-C.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <boost/asio/ip/address.hpp>
#include <fmt/format.h>

#include "common/config/cluster_file.h"
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
  tfctl validate CLUSTER.json [--accept-new-hostkeys]
        check the file and every host (ssh, tfd, data, ports); start nothing

A cluster file has "cluster" (as TF_CONFIG's), "train" (the job spec) and "launch" (where tfd is,
the working folder, environment, run folder, ssh settings). See docs/operations.md. Remote hosts
are reached with ssh -o BatchMode=yes; host keys are always checked (--accept-new-hostkeys accepts
keys of hosts not yet in known_hosts).

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

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  if (command != "up" && command != "validate") return Usage(fmt::format("unknown command \"{}\" (expected up or validate)", command));
  std::string file, run_dir_override;
  double grace = 10;
  bool accept_new_hostkeys = false;
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
  fs::copy_file(file, run_dir / "cluster.json", fs::copy_options::overwrite_existing, ec);
  std::ofstream(run_dir / "job.json") << f->train_json << "\n";
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);
  std::printf("tfctl: %s\n", Describe(*f).c_str());
  std::fflush(stdout);
  tfd::launcher::RunOptions ropts;
  ropts.run_dir = run_dir.string();
  ropts.grace_secs = grace;
  ropts.signal = &g_signal;
  return tfd::launcher::Run(plan, ropts);
}
