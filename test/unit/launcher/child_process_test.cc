// launcher/child_process.h: the pieces built before fork (environment, program paths), the exit
// status decoder, and real children: an exit code, a death by signal, a missing program or folder.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "launcher/child_process.h"
#include "test/test_util.h"

namespace tfd::launcher {
namespace {

using testing::ReadAll;
using testing::TempDir;

// Everything `c`'s stdout pipe gives until the child closes it.
std::string ReadPipe(int fd) {
  std::string out;
  char chunk[256];
  for (ssize_t n; (n = read(fd, chunk, sizeof chunk)) > 0;) out.append(chunk, static_cast<std::size_t>(n));
  close(fd);
  return out;
}

TEST_CASE("ChildEnvironment sets, adds and removes names over the base, in the base's order", "[unit][launcher][child]") {
  const char* base[] = {"A=1", "PATH=/bin", "AB=2", nullptr};
  CHECK(ChildEnvironment(base, {}) == std::vector<std::string>{"A=1", "PATH=/bin", "AB=2"});
  CHECK(ChildEnvironment(base, {"A=9", "C=3"}) == std::vector<std::string>{"PATH=/bin", "AB=2", "A=9", "C=3"});
  CHECK(ChildEnvironment(base, {"A"}) == std::vector<std::string>{"PATH=/bin", "AB=2"});  // AB is not A
  CHECK(ChildEnvironment(nullptr, {"X=y=z"}) == std::vector<std::string>{"X=y=z"});
}

TEST_CASE("ProgramPaths looks a bare name up on the child's PATH, as execvp would", "[unit][launcher][child]") {
  CHECK(ProgramPaths("./tfd", {"PATH=/usr/bin"}) == std::vector<std::string>{"./tfd"});
  CHECK(ProgramPaths("tfd", {"PATH=/opt/x::/usr/bin"}) == std::vector<std::string>{"/opt/x/tfd", "./tfd", "/usr/bin/tfd"});
  CHECK(ProgramPaths("ssh", {"HOME=/root"}) == std::vector<std::string>{"/bin/ssh", "/usr/bin/ssh"});
  CHECK(ProgramPaths("", {"PATH=/bin"}).empty());
}

TEST_CASE("ExitCode gives the exit code, or 128 + N after signal N; SignalName names the common ones", "[unit][launcher][child]") {
  Result<Child> exits = StartChild({.argv = {"sh", "-c", "exit 3"}});
  REQUIRE(exits.ok());
  CHECK(WaitExitCode(exits->pid) == 3);
  Result<Child> killed = StartChild({.argv = {"sh", "-c", "kill -KILL $$"}});
  REQUIRE(killed.ok());
  CHECK(WaitExitCode(killed->pid) == 128 + SIGKILL);
  CHECK(WaitExitCode(killed->pid) == -1);  // reaped already
  CHECK(SignalName(SIGKILL) == "KILL");
  CHECK(SignalName(SIGSTOP) == "STOP");
  CHECK(SignalName(SIGSEGV) == "SEGV");
  CHECK(SignalName(SIGUSR1) == std::to_string(SIGUSR1));
}

TEST_CASE("StartChild hands the child its environment, folder and pipes", "[unit][launcher][child]") {
  TempDir dir;
  Result<Child> c = StartChild({.argv = {"sh", "-c", "echo \"$TFD_CHILD_TEST\" \"$(pwd)\"; echo oops >&2"},
                                .env = {"TFD_CHILD_TEST=hello"},
                                .workdir = dir.path(),
                                .out = ChildStream::kPipe,
                                .err = ChildStream::kPipe,
                                .group = ChildGroup::kOwn});
  REQUIRE(c.ok());
  CHECK(c->in == -1);
  CHECK(getpgid(c->pid) == c->pid);
  CHECK(ReadPipe(c->out) == "hello " + std::filesystem::canonical(dir.path()).string() + "\n");
  CHECK(ReadPipe(c->err) == "oops\n");
  CHECK(WaitExitCode(c->pid) == 0);
}

TEST_CASE("StartChild names a missing program or folder, and the child is gone", "[unit][launcher][child]") {
  Result<Child> missing = StartChild({.argv = {"/nonexistent/tfd-child-test"}});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == Code::kNotFound);
  CHECK(missing.status().message() == "cannot run /nonexistent/tfd-child-test: No such file or directory");
  Result<Child> not_on_path = StartChild({.argv = {"tfd-child-test-no-such-program"}, .env = {"PATH=/nonexistent:/bin"}});
  REQUIRE_FALSE(not_on_path.ok());
  CHECK(not_on_path.status().message() == "cannot run tfd-child-test-no-such-program: No such file or directory");
  Result<Child> no_folder = StartChild({.argv = {"true"}, .workdir = "/nonexistent/folder"});
  REQUIRE_FALSE(no_folder.ok());
  CHECK(no_folder.status().message() == "cannot enter /nonexistent/folder: No such file or directory");
  int code = 0;
  CHECK_FALSE(Reaped(-1, &code));  // never "any child"
  CHECK(WaitExitCode(-1) == -1);
  TempDir dir;
  const std::string script = dir / "not-executable";
  std::ofstream(script) << "#!/bin/sh\n";
  Result<Child> denied = StartChild({.argv = {script}});
  REQUIRE_FALSE(denied.ok());
  CHECK(denied.status().code() == Code::kPermissionDenied);
}

TEST_CASE("RunAndCapture captures both streams and says why a program could not start", "[unit][launcher][child]") {
  const CommandOutput ok = RunAndCapture({"sh", "-c", "echo out; echo err >&2; exit 4"}, 20);
  CHECK(ok.exit_code == 4);
  CHECK(ok.out == "out\n");
  CHECK(ok.err == "err\n");
  const CommandOutput slow = RunAndCapture({"sleep", "30"}, 0.2);
  CHECK(slow.exit_code == 128 + SIGKILL);
  const CommandOutput missing = RunAndCapture({"/nonexistent/sbatch"}, 20);
  CHECK(missing.exit_code == -1);
  CHECK(missing.err == "cannot run /nonexistent/sbatch: No such file or directory");
}

TEST_CASE("StartLogged appends both streams to its log, in a group of its own", "[unit][launcher][child]") {
  TempDir dir;
  const std::string log = dir / "child.log";
  std::ofstream(log) << "before\n";
  Result<pid_t> pid = StartLogged({"sh", "-c", "echo out; echo err >&2"}, log);
  REQUIRE(pid.ok());
  CHECK(getpgid(*pid) == *pid);
  int code = -1;
  for (int i = 0; i < 200 && !Reaped(*pid, &code); ++i) usleep(10'000);
  CHECK(code == 0);
  CHECK(ReadAll(log) == "before\nout\nerr\n");
}

}  // namespace
}  // namespace tfd::launcher
