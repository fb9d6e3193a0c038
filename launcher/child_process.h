#pragma once

// Every child process tfctl starts goes through here: this is the launcher's one fork.
//
// StartChild builds all that the child needs before it forks: argv and envp as char* arrays, the
// paths to try for the program (PATH looked up in the parent), the descriptors that become the
// child's 0, 1 and 2. Between fork and exec the child calls only async-signal-safe functions
// (setpgid, setsid, prctl, dup2, fcntl, chdir, execve, write, _exit): tfctl has other threads (the
// dashboard's server, a sweep's coordinator), and one of them may hold the allocator's or stdio's
// lock at the moment of the fork, which a child that allocated or printed would wait for forever.
// A failed chdir or exec is written back to the parent through a close-on-exec pipe, so StartChild
// returns once the program runs, or an error naming it.
//
// Every function here may be called from any thread. Nothing here reaps a child the caller started
// except Reaped and WaitExitCode, which the caller calls.

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "common/base/status.h"

namespace tfd::launcher {

// Where one of the child's standard streams goes.
enum class ChildStream {
  kNull,     // /dev/null
  kInherit,  // tfctl's own
  kPipe,     // a pipe whose other end the caller gets in Child
};

enum class ChildGroup {
  kInherit,     // tfctl's process group
  kOwn,         // a group of its own (its pid), so one kill(-pid) reaches whatever it starts
  kNewSession,  // a new session: no terminal, not in tfctl's group (up --detach's background tfctl)
};

struct ChildSpec {
  std::vector<std::string> argv;  // no shell; argv[0] without a '/' is looked for on the child's PATH
  std::vector<std::string> env;   // "NAME=value" set over tfctl's environment ("NAME" alone: removed)
  std::string workdir;            // empty: tfctl's
  ChildStream in = ChildStream::kNull;
  ChildStream out = ChildStream::kInherit;
  ChildStream err = ChildStream::kInherit;
  // Non-empty: stdout and stderr both go to this file (created 0644), in place of `out` and `err`.
  std::string log_path;
  bool log_truncate = false;  // else appended to
  ChildGroup group = ChildGroup::kInherit;
  bool die_with_parent = false;  // SIGTERM when tfctl dies (PR_SET_PDEATHSIG)
};

struct Child {
  pid_t pid = -1;
  // tfctl's ends of the pipes asked for (close-on-exec), -1 for the others; the caller closes them.
  int in = -1, out = -1, err = -1;
};

// Starts `spec.argv` and returns once the program runs (its exec succeeded). The caller reaps it.
// Errors, naming the program or the folder: NotFound "cannot run tfd: No such file or directory"
// (PermissionDenied for EACCES), the same for "cannot enter DIR: ..." (workdir), Internal when a
// pipe, the log file or fork fails. A child that failed to exec has been reaped.
Result<Child> StartChild(const ChildSpec& spec);

// Forks a child set up as `spec` says (argv unused) that runs `body` and _exits with its return
// value after flushing stdio; it never returns into the caller's code. `body` is arbitrary code, so
// the calling process must have one thread (no lock can be held by a thread that does not exist in
// the child). Flushes stdio before the fork, else the child would write the parent's pending output
// too. The child's pid, or an error as StartChild's.
Result<pid_t> StartBody(const ChildSpec& spec, const std::function<int()>& body);

// Starts `argv` (no shell) in its own process group, stdin /dev/null, stdout and stderr appended to
// `log_path`; it gets SIGTERM if tfctl dies. Its pid, or StartChild's error.
Result<pid_t> StartLogged(const std::vector<std::string>& argv, const std::string& log_path);

struct BackgroundOptions {
  std::string log_path;  // the background process's stdout and stderr (truncated)
  std::string pid_path;  // where the background process writes its pid
  void (*on_signal)(int) = nullptr;  // its SIGINT and SIGTERM handler (SIGPIPE and SIGHUP are ignored)
  double ready_timeout_secs = 30;
};
// Flushes stdio, then forks a background process in a new session (stdin /dev/null), which runs
// `body` and ends with its return value; it never returns into the caller's code there (StartBody:
// the caller has one thread). The calling process polls `ready` every 50 ms and returns Ok once it
// is true, Unavailable when the background process ended first (reaped), DeadlineExceeded after
// ready_timeout_secs (it goes on), Internal when fork fails.
Status RunInBackground(const std::function<int()>& body, const std::function<bool()>& ready, const BackgroundOptions& options);

struct CommandOutput {
  int exit_code = -1;  // 128 + signal when killed; -1 when it could not start (then `err` says why)
  std::string out, err;
};
// Runs `argv` (no shell) in `workdir` (empty: tfctl's) with `stdin_data` on its stdin (empty:
// /dev/null; it must fit a pipe's buffer, 64 KiB, as it is written before the output is read),
// capturing its output; kills it after `timeout_secs`.
CommandOutput RunAndCapture(const std::vector<std::string>& argv, double timeout_secs, const std::string& stdin_data = "",
                            const std::string& workdir = "");

// waitpid's status as tfctl reports it everywhere: the exit code, or 128 + N after signal N.
int ExitCode(int wait_status);
// Whether the child `pid` has ended (then reaped), with its exit code (ExitCode); false for pid <= 0.
bool Reaped(pid_t pid, int* exit_code);
// Waits for the child `pid` to end and reaps it: its exit code (ExitCode), or -1 when `pid` is no
// child of the caller (pid <= 0 included: never "any child").
int WaitExitCode(pid_t pid);
// Whether a process `pid` exists (kill(pid, 0)); false for pid <= 0. A child of the caller that ended
// but is not reaped yet still exists.
bool ProcessAlive(pid_t pid);
// Sends SIGTERM to `pid` (any process, not only a child) and waits up to `timeout_secs` for it to
// end; false when it is still alive then.
bool TerminateAndWait(pid_t pid, double timeout_secs);
// "KILL", "TERM", "STOP", "CONT", "INT", "HUP", "QUIT", "ABRT", "SEGV", "PIPE" for those signals,
// else the number.
std::string SignalName(int sig);

// The pieces StartChild builds before the fork, for tests.
//
// `base` (a null-terminated "NAME=value" array such as environ; null: empty) with `overrides` set
// over it, in base's order, new names after.
std::vector<std::string> ChildEnvironment(const char* const* base, const std::vector<std::string>& overrides);
// The paths StartChild tries for `program`, as execvp would: `program` itself when it has a '/',
// else DIR/program for each DIR of the PATH in `env` ("." for an empty one; "/bin:/usr/bin" when
// there is no PATH). Empty for an empty program.
std::vector<std::string> ProgramPaths(const std::string& program, const std::vector<std::string>& env);

}  // namespace tfd::launcher
