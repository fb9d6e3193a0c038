// tfd under a real Slurm: the test writes a slurm.conf for one node (this machine, 127.0.0.1) with
// its own state folders under the build tree, starts munged, slurmctld and slurmd, submits a 1 ps +
// 2 worker job with tfctl slurm --submit (sbatch), waits for it, and checks that every task trained
// to the end in the job's log. Every daemon is stopped at the end, also when a check fails. Exits 77
// (skipped) when not root or when slurm-wlm or munge is not installed (scripts/setup installs them).
#include <netdb.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <regex>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "test/catch/subjects.h"
#include "test/test_util.h"

namespace tfd::testing::slurm_test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kTfctl = TFCTL_BINARY;
const std::string kTfd = TFD_BINARY;
const fs::path kState = TFD_SLURM_STATE_DIR;  // wiped at the start, kept after a run for its logs

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// Whether `port` can be bound on every interface now (tfd listens there).
bool PortFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

// A port base with `n` consecutive free ports above it (the tasks' --slurm-port-base).
int FreePortRun(int n) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int base = FreePort();
    bool ok = base + n <= 65535;
    for (int i = 0; ok && i < n; ++i) ok = PortFree(base + i);
    if (ok) return base;
  }
  FAIL("no run of free ports");
  return 0;
}

// munged, slurmctld and slurmd in the foreground as children of the test; the destructor cancels
// the job (if it still runs) and stops all three.
class LocalSlurm {
 public:
  explicit LocalSlurm(const std::string& node) {
    for (const char* d : {"munge", "state", "spool"}) fs::create_directories(kState / d);
    fs::permissions(kState / "munge", fs::perms::owner_all);
    std::ifstream random("/dev/urandom", std::ios::binary);
    std::string key(1024, '\0');
    random.read(key.data(), static_cast<std::streamsize>(key.size()));
    WriteFile(kState / "munge" / "munge.key", key);
    fs::permissions(kState / "munge" / "munge.key", fs::perms::owner_read | fs::perms::owner_write);
    const std::vector<int> ports = FreePorts(2);
    const std::string s = kState.string();
    WriteFile(kState / "slurm.conf",
              "ClusterName=tfdtest\nSlurmctldHost=" + node + "(127.0.0.1)\nSlurmUser=root\nSlurmdUser=root\n" +
                  "SlurmctldPort=" + std::to_string(ports[0]) + "\nSlurmdPort=" + std::to_string(ports[1]) + "\n" +
                  "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" + s + "/munge/munge.sock\n" +
                  "StateSaveLocation=" + s + "/state\nSlurmdSpoolDir=" + s + "/spool\n" +
                  "SlurmctldPidFile=" + s + "/slurmctld.pid\nSlurmdPidFile=" + s + "/slurmd.pid\n" +
                  "SlurmctldLogFile=" + s + "/slurmctld.log\nSlurmdLogFile=" + s + "/slurmd.log\n" +
                  "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
                  "AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\nSchedulerType=sched/builtin\n"
                  "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nMpiDefault=none\nSwitchType=switch/none\n"
                  // 4 CPUs whatever this machine has: the job's 3 tasks fit on a 2-core machine.
                  "SlurmdParameters=config_overrides\nReturnToService=2\nMinJobAge=600\n"
                  "NodeName=" + node + " NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN\n"
                  "PartitionName=tfd Nodes=" + node + " Default=YES MaxTime=INFINITE State=UP\n");
    setenv("SLURM_CONF", (kState / "slurm.conf").c_str(), 1);
    munged_ = Start({"/usr/sbin/munged", "-F", "-f", "--socket=" + s + "/munge/munge.sock", "--key-file=" + s + "/munge/munge.key",
                     "--log-file=" + s + "/munge/munged.log", "--pid-file=" + s + "/munge/munged.pid", "--seed-file=" + s + "/munge/seed"},
                    "munged");
    const auto until = std::chrono::steady_clock::now() + 30s;
    while (!fs::exists(kState / "munge" / "munge.sock") && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(50ms);
    INFO("munged: " << munged_->err());
    REQUIRE(fs::exists(kState / "munge" / "munge.sock"));
    slurmctld_ = Start({"/usr/sbin/slurmctld", "-D", "-f", s + "/slurm.conf"}, "slurmctld");
    slurmd_ = Start({"/usr/sbin/slurmd", "-D", "-f", s + "/slurm.conf"}, "slurmd");
  }
  ~LocalSlurm() {
    if (!job_.empty()) std::system(("scancel " + job_ + " >/dev/null 2>&1").c_str());
    for (Process* p : {slurmd_.get(), slurmctld_.get(), munged_.get()}) {
      if (p == nullptr) continue;
      p->Signal(SIGTERM);
      if (!p->Wait(20s)) p->Signal(SIGKILL);
      p->Wait(10s);
    }
  }
  // Waits (generously) until the node is idle: slurmd has registered with slurmctld.
  void WaitForNode(const TempDir& dir) {
    const auto until = std::chrono::steady_clock::now() + 120s;
    CommandResult r;
    while (std::chrono::steady_clock::now() < until) {
      r = RunCommand("sinfo -h -o %t", dir);
      if (r.exit_code == 0 && r.out.find("idle") != std::string::npos) return;
      std::this_thread::sleep_for(500ms);
    }
    FAIL("the node never became idle: sinfo says " << r.out << r.err << "\nslurmctld: " << ReadAll(kState / "slurmctld.err")
                                                   << "\nslurmd: " << ReadAll(kState / "slurmd.err"));
  }
  void set_job(const std::string& id) { job_ = id; }

 private:
  std::unique_ptr<Process> Start(const std::vector<std::string>& argv, const std::string& name) {
    auto p = std::make_unique<Process>(argv, std::vector<std::string>{}, kState / (name + ".out"), kState / (name + ".err"));
    REQUIRE(p->started());
    return p;
  }
  std::unique_ptr<Process> munged_, slurmctld_, slurmd_;
  std::string job_;
};

TEST_CASE("a 1 ps + 2 worker job submitted with sbatch to a real Slurm trains to completion", "[system][slurm]") {
  TempDir scratch;
  const std::string node = HostName();
  LocalSlurm slurm(node);
  const fs::path data = kState / "data";
  fs::create_directories(data);
  WriteSyntheticMnist(data.string(), 800, 100);
  const int epochs = 2;
  nlohmann::json f = {
      {"name", "slurmjob"},
      // Slurm picks the hosts and tfd the ports: these only say 1 ps and 2 workers.
      {"cluster", {{"ps", {"ps0:2222"}}, {"worker", {"w0:2222", "w1:2222"}}}},
      {"train",
       {{"model", {{"name", "mlp"}, {"init", "glorot_uniform"}}},
        {"data", data.string()},
        {"epochs", epochs},
        {"batch_size", 20},
        {"optimizer", {{"type", "adam"}, {"learning_rate", 0.01}}}}},
      {"launch", {{"tfd", kTfd}, {"workdir", kState.string()}, {"run_dir", "runs"}, {"timeouts", {{"startup", 240}}}}}};
  WriteFile(kState / "cluster.json", f.dump(2));
  slurm.WaitForNode(scratch);

  const int port_base = FreePortRun(3);
  const CommandResult submit = RunCommand(kTfctl + " slurm " + (kState / "cluster.json").string() + " --submit --port-base " +
                                              std::to_string(port_base),
                                          scratch);
  INFO("tfctl slurm --submit: " << submit.out << submit.err);
  REQUIRE(submit.exit_code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(submit.out, m, std::regex("Submitted batch job ([0-9]+)")));
  const std::string job = m[1];
  slurm.set_job(job);
  const fs::path log = kState / "runs" / ("slurmjob-" + job + ".log");

  // Done when Slurm says so; 5 minutes is far more than 2 epochs of 800 examples take.
  const auto until = std::chrono::steady_clock::now() + 300s;
  std::string state;
  while (std::chrono::steady_clock::now() < until) {
    const CommandResult r = RunCommand("scontrol -o show job " + job, scratch);
    std::smatch s;
    if (std::regex_search(r.out, s, std::regex("JobState=([A-Z_]+)"))) state = s[1];
    if (!state.empty() && state != "PENDING" && state != "RUNNING" && state != "CONFIGURING" && state != "COMPLETING") break;
    std::this_thread::sleep_for(1s);
  }
  const std::string text = ReadAll(log.string());
  INFO("job " << job << " state " << state << "; its log:\n" << text << "\nslurmd: " << ReadAll(kState / "slurmd.log"));
  REQUIRE(state == "COMPLETED");
  const CommandResult shown = RunCommand("scontrol -o show job " + job, scratch);
  CHECK(shown.out.find("ExitCode=0:0") != std::string::npos);
  // srun --label: "RANK: <time> [TASK] info ...". Rank 0 is the ps, ranks 1 and 2 the workers.
  CHECK(std::regex_search(text, std::regex("(^|\n)0: .*\\[ps:0\\] ")));
  for (int w = 0; w < 2; ++w) {
    const std::string prefix = "(^|\n)" + std::to_string(w + 1) + ": .*\\[worker:" + std::to_string(w) + "\\] info worker=" + std::to_string(w) + " ";
    for (int e = 1; e <= epochs; ++e) {
      INFO("worker " << w << " epoch " << e);
      CHECK(std::regex_search(text, std::regex(prefix + "epoch=" + std::to_string(e) + " ")));
    }
    CHECK(std::regex_search(text, std::regex(prefix + "done: ")));
  }
  // Each task listened on this node at the port base + its slot.
  const fs::path run = kState / "runs" / ("slurmjob-" + job);
  CHECK(fs::exists(run / "job.json"));
  CHECK((fs::status(run / "token").permissions() & (fs::perms::group_all | fs::perms::others_all)) == fs::perms::none);
}

// Why this subject cannot run here ("" when it can): tfd_process_tests then skips it (exit 77).
std::string CannotRunHere(const std::string&) {
  if (geteuid() != 0) return fmt::format("slurmctld, slurmd and munged need root here, and this test runs as uid {}", geteuid());
  for (const char* tool : {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch"})
    if (!std::filesystem::exists(tool)) return std::string(tool) + " is not installed (scripts/setup installs slurm-wlm and munge)";
  addrinfo* found = nullptr;
  const std::string node = HostName();
  if (getaddrinfo(node.c_str(), nullptr, nullptr, &found) != 0) return "this machine's name " + node + " does not resolve (Slurm's node list names it)";
  freeaddrinfo(found);
  std::error_code ec;
  std::filesystem::remove_all(kState, ec);  // a fresh state folder for this run's cluster
  std::filesystem::create_directories(kState);
  return "";
}
const SubjectNeeds kNeeds(__FILE__, &CannotRunHere);

}  // namespace
}  // namespace tfd::testing::slurm_test
