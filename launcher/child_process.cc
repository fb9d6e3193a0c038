#include "launcher/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include <fmt/format.h>

extern char** environ;

namespace tfd::launcher {
namespace {

// What a child that could not get as far as its program writes back to the parent.
struct ChildFailure {
  enum Stage : int { kChdir = 1, kExec = 2 } stage;
  int error;  // errno
};

// Closes the descriptors it holds when it goes out of scope, unless released.
class Fds {
 public:
  Fds() = default;
  Fds(const Fds&) = delete;
  Fds& operator=(const Fds&) = delete;
  ~Fds() {
    for (int fd : fds_)
      if (fd >= 0) close(fd);
  }
  int Add(int fd) {
    fds_.push_back(fd);
    return fd;
  }
  // Stops owning `fd` (handed to the caller).
  int Release(int fd) {
    for (int& f : fds_)
      if (f == fd) f = -1;
    return fd;
  }

 private:
  std::vector<int> fds_;
};

// Everything the child touches, built before fork: after it the child only reads this.
struct Prepared {
  std::vector<std::string> argv_text, env_text, paths_text;
  std::vector<char*> argv, envp;
  std::vector<const char*> paths;
  const char* workdir = nullptr;
  int stdio[3] = {-1, -1, -1};  // what becomes the child's 0, 1, 2; -1 leaves tfctl's
  ChildGroup group = ChildGroup::kInherit;
  bool die_with_parent = false;
  pid_t parent = -1;
  int report = -1;  // the write end of the failure pipe
};

std::vector<char*> CStrings(std::vector<std::string>& texts) {
  std::vector<char*> out;
  out.reserve(texts.size() + 1);
  for (std::string& t : texts) out.push_back(t.data());
  out.push_back(nullptr);
  return out;
}

[[noreturn]] void FailInChild(const Prepared& p, ChildFailure::Stage stage, int error) {
  const ChildFailure f{stage, error};
  // A short write leaves the parent an incomplete report, which it takes as a failed exec too.
  [[maybe_unused]] const ssize_t n = write(p.report, &f, sizeof f);
  _exit(127);
}

// The child's side between fork and exec (or `body`): async-signal-safe calls only, on what
// Prepare built (see the header).
[[noreturn]] void InChild(const Prepared& p, const std::function<int()>* body) {
  if (p.group == ChildGroup::kOwn) setpgid(0, 0);
  if (p.group == ChildGroup::kNewSession) setsid();
  if (p.die_with_parent) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != p.parent) _exit(127);  // tfctl died before the line above
  }
  for (int i = 0; i < 3; ++i) {
    if (p.stdio[i] < 0) continue;
    if (p.stdio[i] == i) fcntl(i, F_SETFD, 0);  // dup2 onto itself would keep close-on-exec
    else dup2(p.stdio[i], i);
  }
  if (p.workdir != nullptr && chdir(p.workdir) != 0) FailInChild(p, ChildFailure::kChdir, errno);
  if (body != nullptr) {
    close(p.report);  // set up: the parent goes on
    const int code = (*body)();
    std::fflush(nullptr);  // as exit() would; _exit leaves the parent's atexit handlers to the parent
    _exit(code);
  }
  int error = ENOENT;
  bool denied = false;
  for (const char* path : p.paths) {
    execve(path, p.argv.data(), p.envp.data());
    if (errno == EACCES) denied = true;  // as execvp: a file found but not executable is the error to give
    else if (errno != ENOENT && errno != ENOTDIR) {
      error = errno;
      break;
    }
  }
  FailInChild(p, ChildFailure::kExec, denied && error == ENOENT ? EACCES : error);
}

// One stream's descriptor for the child; for a pipe, tfctl's end goes to *parent_end.
Status StreamFd(ChildStream stream, bool child_reads, int null_fd, Fds& fds, int* child_fd, int* parent_end) {
  switch (stream) {
    case ChildStream::kInherit: *child_fd = -1; return Status::Ok();
    case ChildStream::kNull: *child_fd = null_fd; return Status::Ok();
    case ChildStream::kPipe: break;
  }
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) != 0) return Status::Internal(fmt::format("pipe: {}", std::strerror(errno)));
  fds.Add(ends[0]);
  fds.Add(ends[1]);
  *child_fd = child_reads ? ends[0] : ends[1];
  *parent_end = child_reads ? ends[1] : ends[0];
  return Status::Ok();
}

Status Prepare(const ChildSpec& spec, bool exec, Prepared& p, Child& c, Fds& fds) {
  if (exec) {
    if (spec.argv.empty() || spec.argv[0].empty()) return Status::InvalidArgument("cannot run a program without a name");
    p.argv_text = spec.argv;
    p.argv = CStrings(p.argv_text);
    p.env_text = ChildEnvironment(environ, spec.env);
    p.envp = CStrings(p.env_text);
    p.paths_text = ProgramPaths(spec.argv[0], p.env_text);
    for (const std::string& s : p.paths_text) p.paths.push_back(s.c_str());
  }
  if (!spec.workdir.empty()) p.workdir = spec.workdir.c_str();
  const int null_fd = fds.Add(open("/dev/null", O_RDWR | O_CLOEXEC));
  if (null_fd < 0) return Status::Internal(fmt::format("/dev/null: {}", std::strerror(errno)));
  TFD_RETURN_IF_ERROR(StreamFd(spec.in, true, null_fd, fds, &p.stdio[0], &c.in));
  if (spec.log_path.empty()) {
    TFD_RETURN_IF_ERROR(StreamFd(spec.out, false, null_fd, fds, &p.stdio[1], &c.out));
    TFD_RETURN_IF_ERROR(StreamFd(spec.err, false, null_fd, fds, &p.stdio[2], &c.err));
  } else {
    const int mode = O_WRONLY | O_CREAT | O_CLOEXEC | (spec.log_truncate ? O_TRUNC : O_APPEND);
    const int log = fds.Add(open(spec.log_path.c_str(), mode, 0644));
    if (log < 0) return Status::Internal(fmt::format("{}: cannot open: {}", spec.log_path, std::strerror(errno)));
    p.stdio[1] = p.stdio[2] = log;
  }
  p.group = spec.group;
  p.die_with_parent = spec.die_with_parent;
  p.parent = getpid();
  return Status::Ok();
}

Status FailureStatus(const ChildFailure& f, const ChildSpec& spec) {
  const std::string what = f.stage == ChildFailure::kChdir ? fmt::format("cannot enter {}", spec.workdir)
                                                            : fmt::format("cannot run {}", spec.argv.empty() ? "" : spec.argv[0]);
  const std::string message = fmt::format("{}: {}", what, std::strerror(f.error));
  if (f.error == ENOENT) return Status::NotFound(message);
  if (f.error == EACCES) return Status::PermissionDenied(message);
  return Status::Internal(message);
}

// The one fork: `body` null runs spec.argv, else `body`.
Result<Child> Launch(const ChildSpec& spec, const std::function<int()>* body) {
  Fds fds;
  Prepared p;
  Child c;
  TFD_RETURN_IF_ERROR(Prepare(spec, body == nullptr, p, c, fds));
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return Status::Internal(fmt::format("pipe: {}", std::strerror(errno)));
  fds.Add(report[0]);
  p.report = fds.Add(report[1]);
  if (body != nullptr) std::fflush(nullptr);
  c.pid = fork();
  if (c.pid < 0) return Status::Internal(fmt::format("fork: {}", std::strerror(errno)));
  if (c.pid == 0) InChild(p, body);
  if (spec.group == ChildGroup::kOwn) setpgid(c.pid, c.pid);  // either side may run first: both set it
  close(fds.Release(report[1]));
  ChildFailure failure{};
  ssize_t n;
  do n = read(report[0], &failure, sizeof failure);
  while (n < 0 && errno == EINTR);
  if (n != 0) {  // not the end of the pipe (its exec closed it): the child reported, and has ended
    WaitExitCode(c.pid);
    if (n != static_cast<ssize_t>(sizeof failure)) failure = {ChildFailure::kExec, EIO};
    return FailureStatus(failure, spec);
  }
  for (int end : {c.in, c.out, c.err})
    if (end >= 0) fds.Release(end);
  return c;  // `fds` closes the child's ends, /dev/null and the log
}

}  // namespace

Result<Child> StartChild(const ChildSpec& spec) { return Launch(spec, nullptr); }

Result<pid_t> StartBody(const ChildSpec& spec, const std::function<int()>& body) {
  Result<Child> c = Launch(spec, &body);
  if (!c.ok()) return c.status();
  return c->pid;
}

Result<pid_t> StartLogged(const std::vector<std::string>& argv, const std::string& log_path) {
  Result<Child> c = StartChild({.argv = argv, .log_path = log_path, .group = ChildGroup::kOwn, .die_with_parent = true});
  if (!c.ok()) return c.status();
  return c->pid;
}

Status RunInBackground(const std::function<int()>& body, const std::function<bool()>& ready, const BackgroundOptions& options) {
  const ChildSpec spec{.log_path = options.log_path, .log_truncate = true, .group = ChildGroup::kNewSession};
  Result<pid_t> pid = StartBody(spec, [&] {  // in the background process, the calling thread only
    if (options.on_signal != nullptr) {
      std::signal(SIGINT, options.on_signal);
      std::signal(SIGTERM, options.on_signal);
    }
    std::signal(SIGPIPE, SIG_IGN);
    std::signal(SIGHUP, SIG_IGN);
    std::ofstream(options.pid_path) << getpid() << "\n";
    // What follows the call in the caller (main's foreground work, a test runner) belongs to the
    // parent, and so do the atexit handlers and static objects it registered: StartBody _exits.
    return body();
  });
  if (!pid.ok()) return pid.status();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(options.ready_timeout_secs * 1000));
  for (;;) {
    int code = 0;
    if (Reaped(*pid, &code)) return Status::Unavailable("the background process ended before it was ready");
    if (ready()) return Status::Ok();
    if (std::chrono::steady_clock::now() >= deadline)
      return Status::DeadlineExceeded(fmt::format("not ready within {:.0f} s; it goes on", options.ready_timeout_secs));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

CommandOutput RunAndCapture(const std::vector<std::string>& argv, double timeout_secs, const std::string& stdin_data,
                            const std::string& workdir) {
  CommandOutput r;
  Result<Child> c = StartChild({.argv = argv,
                                .workdir = workdir,
                                .in = stdin_data.empty() ? ChildStream::kNull : ChildStream::kPipe,
                                .out = ChildStream::kPipe,
                                .err = ChildStream::kPipe});
  if (!c.ok()) {
    r.err = c.status().message();
    return r;
  }
  if (c->in >= 0) {
    std::signal(SIGPIPE, SIG_IGN);  // a child that closes its stdin early fails the write, not tfctl
    for (std::size_t at = 0; at < stdin_data.size();) {
      const ssize_t n = write(c->in, stdin_data.data() + at, stdin_data.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // the child closed its stdin: it reports what it missed
      at += static_cast<std::size_t>(n);
    }
    close(c->in);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(timeout_secs * 1000));
  int fds[2] = {c->out, c->err};
  std::string* bufs[2] = {&r.out, &r.err};
  while (fds[0] >= 0 || fds[1] >= 0) {
    pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(c->pid, SIGKILL);
      break;
    }
    poll(p, 2, 100);
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0 || p[i].revents == 0) continue;
      char chunk[4096];
      const ssize_t n = read(fds[i], chunk, sizeof chunk);
      if (n <= 0) {
        close(fds[i]);
        fds[i] = -1;
      } else {
        bufs[i]->append(chunk, static_cast<std::size_t>(n));
      }
    }
  }
  for (int fd : fds)
    if (fd >= 0) close(fd);
  r.exit_code = WaitExitCode(c->pid);
  return r;
}

bool ProcessAlive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

bool TerminateAndWait(pid_t pid, double timeout_secs) {
  kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(timeout_secs * 1000));
  while (ProcessAlive(pid) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return !ProcessAlive(pid);
}

int ExitCode(int wait_status) { return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status); }

bool Reaped(pid_t pid, int* exit_code) {
  int status = 0;
  if (pid <= 0) return false;  // waitpid would take any child, or any of the group
  if (waitpid(pid, &status, WNOHANG) != pid) return false;
  *exit_code = ExitCode(status);
  return true;
}

int WaitExitCode(pid_t pid) {
  if (pid <= 0) return -1;  // waitpid would wait for any child, or any of the group
  int status = 0;
  pid_t got;
  do got = waitpid(pid, &status, 0);
  while (got < 0 && errno == EINTR);
  return got == pid ? ExitCode(status) : -1;
}

std::string SignalName(int sig) {
  switch (sig) {
    case SIGKILL: return "KILL";
    case SIGTERM: return "TERM";
    case SIGSTOP: return "STOP";
    case SIGCONT: return "CONT";
    case SIGINT: return "INT";
    case SIGHUP: return "HUP";
    case SIGQUIT: return "QUIT";
    case SIGABRT: return "ABRT";
    case SIGSEGV: return "SEGV";
    case SIGPIPE: return "PIPE";
    default: return std::to_string(sig);
  }
}

std::vector<std::string> ChildEnvironment(const char* const* base, const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (const char* const* e = base; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  for (const std::string& o : overrides) {
    const std::string name = o.substr(0, o.find('='));
    std::erase_if(env, [&](const std::string& e) { return e.size() > name.size() && e.compare(0, name.size(), name) == 0 && e[name.size()] == '='; });
    if (o.find('=') != std::string::npos) env.push_back(o);
  }
  return env;
}

std::vector<std::string> ProgramPaths(const std::string& program, const std::vector<std::string>& env) {
  if (program.empty()) return {};
  if (program.find('/') != std::string::npos) return {program};
  std::string path = "/bin:/usr/bin";  // glibc's default, as execvp's
  for (const std::string& e : env)
    if (e.starts_with("PATH=")) path = e.substr(5);
  std::vector<std::string> out;
  for (std::size_t start = 0;;) {
    const std::size_t colon = path.find(':', start);
    const std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    out.push_back((dir.empty() ? "." : dir) + "/" + program);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return out;
}

}  // namespace tfd::launcher
