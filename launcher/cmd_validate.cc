// validate, and the setup and checks that up shares with it.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <set>

#include <boost/asio/ip/address.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/config/job_cluster.h"
#include "launcher/child_process.h"
#include "launcher/commands.h"
#include "launcher/runner.h"

namespace tfd::launcher {
namespace {

namespace fs = std::filesystem;

// Checks one remote host over ssh: reachable with these settings, the working folder there, tfd
// executable there, and (for hosts with workers) the data folder.
Status CheckRemoteHost(const config::ClusterFile& f, const std::string& host, bool has_workers, const PlanOptions& popts) {
  const config::HostLaunch& h = f.launch.For(host);
  std::string check = fmt::format("cd {} 2>/dev/null || {{ echo no-workdir; exit 3; }}; test -x {} || {{ echo no-tfd; exit 3; }}",
                                  ShellQuote(h.workdir), ShellQuote(h.tfd));
  if (has_workers)
    for (const auto& [field, path] : f.train.data.NamedPaths())
      check += fmt::format("; test -e {} || {{ echo no-data {}; exit 3; }}", ShellQuote(path), field);
  check += "; echo tfd-ok";
  const CommandOutput r = RunAndCapture(SshArgv(h, host, popts, check), popts.connect_timeout_secs + 20);
  if (r.exit_code == 0 && r.out.find("tfd-ok") != std::string::npos) return Status::Ok();
  if (r.out.find("no-workdir") != std::string::npos)
    return Status::InvalidArgument(fmt::format("{}: launch.workdir: \"{}\" is not a folder on {}", f.source, h.workdir, host));
  if (r.out.find("no-tfd") != std::string::npos)
    return Status::InvalidArgument(fmt::format("{}: launch.tfd: \"{}\" is not an executable file on {}", f.source, h.tfd, host));
  for (const auto& [field, path] : f.train.data.NamedPaths())
    if (r.out.find("no-data " + field + "\n") != std::string::npos)
      return Status::InvalidArgument(fmt::format("{}: train.{}: \"{}\" does not exist on {}", f.source, field, path, host));
  std::string err = r.err;
  while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) err.pop_back();
  if (auto nl = err.find_last_of('\n'); nl != std::string::npos) err = err.substr(nl + 1);
  return Status::Unavailable(fmt::format("{}: cannot reach {} with ssh (exit {}): {}", f.source, host, r.exit_code,
                                         err.empty() ? "no message" : err));
}

// The data's files and folders exist under the task's working folder (the MNIST folder is a folder).
Status CheckLocalData(const config::ClusterFile& f, const fs::path& workdir) {
  const config::DataSpec& d = f.train.data;
  for (const auto& [field, path] : d.NamedPaths()) {
    const fs::path at = fs::path(path).is_absolute() ? fs::path(path) : workdir / path;
    if (d.is_mnist_folder() && !fs::is_directory(at))
      return Status::InvalidArgument(fmt::format("{}: train.data: \"{}\" is not a folder (fetch MNIST with scripts/fetch_mnist.sh {})",
                                                 f.source, at.string(), path));
    if (!fs::exists(at)) return Status::InvalidArgument(fmt::format("{}: train.{}: \"{}\" does not exist", f.source, field, at.string()));
  }
  return Status::Ok();
}

// `tfd data inspect --json` of the job's data as one line: rows, shape, classes or targets, warnings.
std::string DataLine(const std::string& host, const nlohmann::json& j) {
  const nlohmann::json train = j.value("train", nlohmann::json::object());
  const nlohmann::json shape = train.value("shape", nlohmann::json::array());
  std::string line = fmt::format("data on {}: {} training", host, train.value("rows", 0));
  if (j.contains("test")) line += fmt::format(" + {} test", j["test"].value("rows", 0));
  line += fmt::format(" examples of {} {}", shape.size() == 3 ? fmt::format("{}x{}x{}", shape[0].get<int>(), shape[1].get<int>(),
                                                                            shape[2].get<int>())
                                                               : std::string("?"),
                      train.value("dtype", "?"));
  const nlohmann::json classes = train.value("classes", nlohmann::json::array());
  if (!classes.empty()) line += fmt::format(", {} classes", classes.size());
  const nlohmann::json warnings = train.value("warnings", nlohmann::json::array());
  if (!warnings.empty() && warnings[0].is_string())
    line += fmt::format("; {} warning{}: {}", warnings.size(), warnings.size() == 1 ? "" : "s", warnings[0].get<std::string>());
  return line;
}

// Runs the job's data check (`tfd data inspect JOB --json`, which reads the data as training will)
// where the workers run: here for local tasks, over ssh (the job on its stdin) on each remote host.
// Returns one line per host; InvalidArgument with tfd's own line when the data does not load.
Result<std::vector<std::string>> CheckDataOnHosts(const RunSetup& run) {
  const config::ClusterFile& f = run.file;
  std::set<std::string> hosts;
  bool local = false;
  for (const TaskPlan& p : run.plan) {
    if (p.task.type == config::TaskType::kPs) continue;
    if (p.local) local = true;
    else hosts.insert(p.host);
  }
  std::vector<std::string> lines;
  auto judge = [&](const std::string& host, const CommandOutput& r) -> Status {
    if (r.exit_code != 0) {
      std::string err = r.err;
      while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) err.pop_back();
      if (auto nl = err.find('\n'); nl != std::string::npos) err = err.substr(0, nl);
      return Status::InvalidArgument(fmt::format("{}: train.data on {}: {}", f.source, host, err.empty() ? "the data check failed" : err));
    }
    const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return Status::InvalidArgument(fmt::format("{}: train.data on {}: tfd data inspect gave no JSON", f.source, host));
    lines.push_back(DataLine(host, j));
    return Status::Ok();
  };
  const std::string remote_check = "f=$(mktemp --suffix=.json) && cat > \"$f\" && {} data inspect \"$f\" --json; rc=$?; rm -f \"$f\"; exit $rc";
  if (local) {
    const config::HostLaunch& h = f.launch.For("127.0.0.1");
    char path[] = "/tmp/tfctl-validate-XXXXXX.json";  // tfd data inspect takes a .json as a job file
    const int fd = mkstemps(path, 5);
    if (fd < 0) return Status::Internal(fmt::format("cannot create a temporary job file: {}", std::strerror(errno)));
    close(fd);
    std::ofstream(path) << f.train_json << "\n";
    const std::string tfd = fs::path(h.tfd).is_absolute() ? h.tfd : (fs::path(h.workdir) / h.tfd).string();
    const CommandOutput r = RunAndCapture({tfd, "data", "inspect", path, "--json"}, 120, "", h.workdir);
    fs::remove(path);
    TFD_RETURN_IF_ERROR(judge("this machine", r));
  }
  for (const std::string& host : hosts) {
    const config::HostLaunch& h = f.launch.For(host);
    const std::string check = fmt::format("cd {} && {}", ShellQuote(h.workdir), fmt::format(fmt::runtime(remote_check), ShellQuote(h.tfd)));
    TFD_RETURN_IF_ERROR(judge(host, RunAndCapture(SshArgv(h, host, run.options, check), run.options.connect_timeout_secs + 120, f.train_json + "\n")));
  }
  return lines;
}

}  // namespace

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

std::vector<int> FreeLoopbackPorts(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      if (fd >= 0) close(fd);
      ports.push_back(0);  // none to be had: that task goes without metrics
      continue;
    }
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds) close(fd);
  return ports;
}

Result<RunSetup> SetUpRun(const ClusterArgs& args, const std::string& token_hex) {
  Result<config::ClusterFile> f = config::LoadClusterFile(args.file);
  if (!f.ok()) return f.status();
  RunSetup run;
  run.file = std::move(*f);
  const std::string run_root = args.run_dir_override.empty() ? run.file.launch.run_dir : args.run_dir_override;
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  run.run_dir = fs::absolute(fs::path(run_root) / fmt::format("{}-{}", stamp, run.file.name));
  // Two runs started within one second get folders of their own.
  for (int n = 2; fs::exists(run.run_dir); ++n) run.run_dir = fs::absolute(fs::path(run_root) / fmt::format("{}-{}-{}", stamp, run.file.name, n));
  PlanOptions& popts = run.options;
  popts.job_path = (run.run_dir / "job.json").string();
  popts.run_dir = run.run_dir.string();
  popts.job_json = run.file.train_json;
  popts.accept_new_hostkeys = args.accept_new_hostkeys;
  if (!token_hex.empty()) {
    popts.token_path = (run.run_dir / "token").string();
    popts.token_hex = token_hex;
  }
  popts.remote_run_dir =
      (fs::path(run.file.launch.run_dir).is_relative() ? fs::path(run.file.launch.run_dir) : fs::path("runs")) / run.run_dir.filename();
  popts.run_name = run.run_dir.filename().string();
  if (run.file.launch.metrics.enabled && run.file.launch.metrics.port_base == 0)
    popts.metrics_ports = FreeLoopbackPorts(static_cast<int>(run.file.cluster.ps.size()) + run.file.cluster.num_workers());
  run.plan = MakePlan(run.file, popts);
  return run;
}

Status CheckCluster(const RunSetup& run) {
  const config::ClusterFile& f = run.file;
  // The checks between the cluster and its job that tfd makes at start, made here before any task starts.
  if (Status s = config::CheckJobOnCluster(f.cluster, f.train, "train."); !s.ok())
    return Status::InvalidArgument(fmt::format("{}: {}", f.source, s.message()));
  std::map<std::string, bool> remote;  // host -> runs a worker
  for (const TaskPlan& p : run.plan) {
    if (!p.local) {
      remote[p.host] = remote[p.host] || p.task.type != config::TaskType::kPs;
      continue;
    }
    const config::HostLaunch& h = f.launch.For(p.host);
    const fs::path workdir = h.workdir;
    if (!fs::is_directory(workdir))
      return Status::InvalidArgument(fmt::format("{}: launch.workdir: \"{}\" is not a folder", f.source, h.workdir));
    const fs::path tfd = fs::path(h.tfd).is_absolute() ? fs::path(h.tfd) : workdir / h.tfd;
    if (access(tfd.c_str(), X_OK) != 0)
      return Status::InvalidArgument(fmt::format("{}: launch.tfd: \"{}\" is not an executable file (run scripts/build)", f.source, tfd.string()));
    if (p.task.type != config::TaskType::kPs) TFD_RETURN_IF_ERROR(CheckLocalData(f, workdir));
    if (f.launch.metrics.port_base > 0 && !p.metrics_target.empty()) {
      // The plan wrote the target as HOST:PORT itself.
      int port = 0;
      const std::string_view digits = std::string_view(p.metrics_target).substr(p.metrics_target.rfind(':') + 1);
      std::from_chars(digits.data(), digits.data() + digits.size(), port);
      if (!PortFree("127.0.0.1", static_cast<std::uint16_t>(port)))
        return Status::InvalidArgument(fmt::format("{}: launch.metrics.port_base: port {} (for {}) is already in use on this machine",
                                                   f.source, port, p.task.ToString()));
    }
    if (p.task.type == config::TaskType::kPs) {  // only ps tasks listen in this version
      const config::Endpoint& ep = f.cluster.EndpointOf(p.task);
      if (!PortFree(ep.host, ep.port))
        return Status::InvalidArgument(fmt::format("{}: cluster.ps[{}]: {} is already in use on this machine", f.source, p.task.index,
                                                   ep.ToString()));
    }
  }
  for (const auto& [host, has_workers] : remote) TFD_RETURN_IF_ERROR(CheckRemoteHost(f, host, has_workers, run.options));
  return Status::Ok();
}

std::string Describe(const config::ClusterFile& f) {
  const config::ModelParallelSpec& mp = f.train.model_parallel;
  std::string how;
  if (mp.enabled()) {
    how = fmt::format("model parallel: split by {}, {} replica(s) of {} stages, {} micro-batches ({})", config::SplitName(mp.split),
                      f.cluster.num_workers() / mp.stages, mp.stages, mp.microbatches, config::ScheduleName(mp.schedule));
  } else {
    switch (f.train.update.mode) {
      case config::UpdateSpec::Mode::kSync: how = "sync updates"; break;
      case config::UpdateSpec::Mode::kAllreduce: how = "allreduce updates"; break;
      case config::UpdateSpec::Mode::kAsync: how = "async updates"; break;
    }
  }
  return fmt::format("{}: {} ps + {} workers{}; {} on {}, {} epochs, batch {} per worker, {}", f.source, f.cluster.ps.size(),
                     f.cluster.num_workers(), f.cluster.evaluator.empty() ? "" : " + 1 evaluator", f.train.model.name, f.train.data.Describe(),
                     f.train.epochs, f.train.batch_size, how);
}

std::string SharedFolderNote(const RunSetup& run) {
  const TaskPlan* chief = nullptr;
  const TaskPlan* evaluator = nullptr;
  for (const TaskPlan& p : run.plan) {
    if (p.task == run.file.cluster.WorkerTask(0)) chief = &p;
    if (p.task.type == config::TaskType::kEvaluator) evaluator = &p;
  }
  if (chief == nullptr || evaluator == nullptr || evaluator->host == chief->host || (chief->local && evaluator->local)) return "";
  return fmt::format("note: the evaluator runs on {} and the chief on {}: train.checkpoint.dir (\"{}\") must be one shared folder "
                     "(a network filesystem) on both hosts, or the evaluator sees no checkpoint",
                     evaluator->host, chief->host, run.file.train.checkpoint.dir);
}

int Validate(const ClusterArgs& args) {
  Result<RunSetup> run = SetUpRun(args, /*token_hex=*/"");
  if (!run.ok()) return ReportFailure(run.status());
  if (Status s = CheckCluster(*run); !s.ok()) return ReportFailure(s);
  if (const std::string note = SharedFolderNote(*run); !note.empty()) std::printf("%s\n", note.c_str());
  Result<std::vector<std::string>> data = CheckDataOnHosts(*run);
  if (!data.ok()) return ReportFailure(data.status());
  std::printf("%s\n", Describe(run->file).c_str());
  for (const std::string& line : *data) std::printf("%s\n", line.c_str());
  std::printf("ok: the file is valid; on every host tfd is there and the data loads; every local ps port is free\n");
  return 0;
}

}  // namespace tfd::launcher
