#pragma once
// Helpers shared by the tests: temporary folders, small IDX files, and running a binary.

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

extern char** environ;

namespace tfd::testing {

// A fresh folder under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("tfd-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string BigEndian32(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

// The bytes of a ubyte IDX file with the given dims and data.
inline std::string IdxBytes(const std::vector<std::uint32_t>& dims, const std::vector<std::uint8_t>& data) {
  std::string s = BigEndian32(0x0800u | static_cast<std::uint32_t>(dims.size()));
  for (std::uint32_t d : dims) s += BigEndian32(d);
  s.append(reinterpret_cast<const char*>(data.data()), data.size());
  return s;
}

// Writes a synthetic, well-separated classification set as the four MNIST file names in `dir`:
// class c lights a distinct band of pixels, plus noise.
inline void WriteSyntheticMnist(const std::string& dir, int train, int test, int side = 8, int classes = 4,
                                std::uint32_t seed = 7) {
  std::mt19937 gen(seed);
  auto make = [&](int n, const std::string& images, const std::string& labels) {
    std::vector<std::uint8_t> x(static_cast<std::size_t>(n) * side * side), y(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      int c = static_cast<int>(gen() % classes);
      y[i] = static_cast<std::uint8_t>(c);
      for (int p = 0; p < side * side; ++p) {
        bool lit = (p / side) * classes / side == c;  // rows of band c
        int v = (lit ? 180 : 20) + static_cast<int>(gen() % 60);
        x[static_cast<std::size_t>(i) * side * side + p] = static_cast<std::uint8_t>(v);
      }
    }
    WriteFile(dir + "/" + images, IdxBytes({static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(side),
                                             static_cast<std::uint32_t>(side)}, x));
    WriteFile(dir + "/" + labels, IdxBytes({static_cast<std::uint32_t>(n)}, y));
  };
  make(train, "train-images-idx3-ubyte", "train-labels-idx1-ubyte");
  make(test, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte");
}

// Writes DIR/linear.csv, a regression set with a known answer: `rows` rows under the header x0,x1,y
// with y = 3 x0 - 2 x1 + 0.5 + noise, x uniform in [-1, 1], noise uniform in [-0.05, 0.05] (its
// MAE floor is 0.025), from a fixed seed. Returns the file's path.
inline std::string WriteLinearCsv(const TempDir& dir, int rows) {
  std::mt19937 gen(2024);
  auto uniform = [&] { return static_cast<double>(gen()) / 4294967296.0 * 2 - 1; };
  std::string csv = "x0,x1,y\n";
  char line[96];
  for (int i = 0; i < rows; ++i) {
    const double x0 = uniform(), x1 = uniform(), noise = 0.05 * uniform();
    std::snprintf(line, sizeof line, "%.6f,%.6f,%.6f\n", x0, x1, 3 * x0 - 2 * x1 + 0.5 + noise);
    csv += line;
  }
  const std::string path = dir / "linear.csv";
  WriteFile(path, csv);
  return path;
}

// Sets (or, with nullptr, unsets) an environment variable for the scope, then restores what was
// there, even when a REQUIRE ends the test early. Tasks started meanwhile inherit it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_.c_str(), old_->c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

#ifdef TFD_BINARY
// The tfd binary under test (a process test's CMake target defines TFD_BINARY).
inline const std::string kTfd = TFD_BINARY;
#endif

// The exit code that CMake's SKIP_RETURN_CODE reports as "Skipped" (Catch2 2.13 has no SKIP).
inline constexpr int kSkipExitCode = 77;

// Sets *dir to TFD_MNIST_DIR as an absolute path and returns "" when that folder holds MNIST;
// otherwise returns why not (a subject whose every test needs MNIST then skips, exit kSkipExitCode).
inline std::string MissingMnist(std::string* dir) {
  const char* env = std::getenv("TFD_MNIST_DIR");
  if (env == nullptr || !std::filesystem::exists(std::filesystem::path(env) / "train-images-idx3-ubyte"))
    return std::string("no MNIST in TFD_MNIST_DIR (") + (env ? env : "unset") + "); run scripts/fetch_mnist.sh";
  *dir = std::filesystem::absolute(env).string();
  return "";
}

// MissingMnist, saying why not on stderr.
inline bool FindMnist(std::string* dir) {
  const std::string why = MissingMnist(dir);
  if (!why.empty()) std::fprintf(stderr, "skipped: %s\n", why.c_str());
  return why.empty();
}

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `command` through /bin/sh with stdout and stderr captured to files in `dir`.
inline CommandResult RunCommand(const std::string& command, const TempDir& dir) {
  const std::string out = dir / "cmd.stdout", err = dir / "cmd.stderr";
  int status = std::system((command + " >" + out + " 2>" + err + " </dev/null").c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  auto slurp = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A file of little-endian float32 values (an ensemble's predictions/*.f32), as floats.
inline std::vector<float> ReadFloats(const std::string& path) {
  const std::string bytes = ReadAll(path);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// The JSON objects of a JSON-lines file (trials.jsonl, metrics.jsonl), blank lines skipped; a line
// that is not JSON throws, failing the test that reads it.
inline std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// The JSON event lines among `out` (a task's stdout under --log-format json, or a run folder's
// metrics.jsonl), in order; lines that are not JSON are passed over. Only the events named
// `event`, unless it is empty.
inline std::vector<nlohmann::json> ParseEvents(const std::string& out, std::string_view event = {}) {
  std::vector<nlohmann::json> events;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_discarded() || !e.is_object() || (!event.empty() && e["event"] != event)) continue;
    events.push_back(std::move(e));
  }
  return events;
}

// Whether `e` has every field of `fields` with the same value (numbers compare by value, so 300
// matches 300.0).
inline bool HasFields(const nlohmann::json& e, const nlohmann::json& fields) {
  for (const auto& [key, value] : fields.items())
    if (!e.contains(key) || e[key] != value) return false;
  return true;
}

// Whether one of the events named `event` among `out` (as ParseEvents reads it) has every field
// of `fields` with that value, and satisfies `also` where one is given.
inline bool HasEvent(const std::string& out, std::string_view event, const nlohmann::json& fields = nlohmann::json::object(),
                     const std::function<bool(const nlohmann::json&)>& also = {}) {
  for (const nlohmann::json& e : ParseEvents(out, event))
    if (HasFields(e, fields) && (!also || also(e))) return true;
  return false;
}

// Whether the string field `key` of event `e` holds `fragment` (false where it is absent or no string).
inline bool FieldHas(const nlohmann::json& e, const std::string& key, const std::string& fragment) {
  return e.contains(key) && e[key].is_string() && e[key].get<std::string>().find(fragment) != std::string::npos;
}

// 127.0.0.1:port as a socket address.
inline sockaddr_in LoopbackAddress(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  return addr;
}

// The first port of the kernel's ephemeral range (net.ipv4.ip_local_port_range; 32768 if unreadable).
inline int EphemeralPortsStart() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int first = 0;
  return (in >> first) && first > 0 ? first : 32768;
}

// Claims `port` for this process against every other test process on the machine (ctest runs
// several at once, each drawing ports at random): a write lock on byte `port` of one shared file,
// which the kernel drops when the process ends. False when another process holds it. Without the
// file (unwritable /tmp) or locks on it, every claim succeeds, as before the file existed.
inline bool ClaimPortAcrossProcesses(int port) {
  // Never closed: closing any descriptor of the file would drop all of this process's locks.
  static const int fd = [] {
    const char* tmp = std::getenv("TMPDIR");
    const std::string path = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tfd-test-ports.lock";
    return open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  }();
  if (fd < 0) return true;
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = port;
  lock.l_len = 1;
  if (fcntl(fd, F_SETLK, &lock) == 0) return true;
  return errno != EACCES && errno != EAGAIN;  // a file system without locks (ENOLCK, ENOSYS...): as without the file
}

// `n` distinct ports on 127.0.0.1 that were free a moment ago, none handed out before by this
// process or held by another test process. They are drawn below the kernel's ephemeral range: a
// port from it (what binding port 0 gives) can be taken, between its release and the task's bind,
// as the source port of any outgoing connection on the machine, and a test cluster's processes
// make many. Each is checked by binding it, and every socket stays bound until all are chosen. The
// claim across processes matters when a port stays unbound for seconds (a test that starts its
// ps after its workers): a concurrent test drawing the same port would otherwise bind it first.
inline std::vector<int> FreePorts(int n) {
  static std::mutex mutex;
  static std::set<int> handed_out;
  static std::mt19937 gen(static_cast<std::uint32_t>(getpid()) * 2654435761u ^
                          static_cast<std::uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::lock_guard lock(mutex);
  const int hi = EphemeralPortsStart() - 1, lo = std::max(1024, hi - 20000);
  std::uniform_int_distribution<int> pick(lo, std::max(lo, hi));
  std::vector<int> fds, ports;
  for (int tries = 0; static_cast<int>(ports.size()) < n; ++tries) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    // Past many tries (a range nearly used up): whatever port 0 gives, as before.
    const int want = tries < 1000 ? pick(gen) : 0;
    sockaddr_in addr = LoopbackAddress(want);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close(fd);
      continue;
    }
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    fds.push_back(fd);  // stays bound, so no later pick is the same port
    const int port = ntohs(addr.sin_port);
    if (!handed_out.contains(port) && ClaimPortAcrossProcesses(port)) {
      handed_out.insert(port);
      ports.push_back(port);
    }
  }
  for (int fd : fds) close(fd);
  return ports;
}
inline int FreePort() { return FreePorts(1)[0]; }

// A child process with its stdout and stderr in files. The destructor kills it if it still runs.
class Process {
 public:
  // Starts `argv` with the current environment plus `env` ("NAME=value" entries).
  Process(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& out_path,
          const std::string& err_path)
      : out_path_(out_path), err_path_(err_path) {
    std::vector<std::string> args = argv, envs;
    for (char** e = environ; *e != nullptr; ++e) envs.emplace_back(*e);
    envs.insert(envs.end(), env.begin(), env.end());
    std::vector<char*> a, e;
    for (auto& s : args) a.push_back(s.data());
    a.push_back(nullptr);
    for (auto& s : envs) e.push_back(s.data());
    e.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (posix_spawn(&pid_, a[0], &actions, nullptr, a.data(), e.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Process() {
    if (pid_ > 0 && !exit_code_) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  bool started() const { return pid_ > 0; }
  void Signal(int sig) const {
    if (pid_ > 0 && !exit_code_) kill(pid_, sig);
  }
  // The exit code (128 + signal when killed), or nothing if it is still running at the deadline.
  std::optional<int> Wait(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!exit_code_) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return exit_code_;
  }
  std::string out() const { return ReadAll(out_path_); }
  std::string err() const { return ReadAll(err_path_); }

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::string out_path_, err_path_;
};

}  // namespace tfd::testing
