// tfctl's command lines: the strict numbers, and what every subcommand prints (one line, exit 2)
// for a bad number, a number with a unit, an unknown flag, a flag without its value, and a flag of
// another subcommand, before it reads or starts anything.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/chaos.h"
#include "launcher/cli.h"
#include "launcher/commands.h"
#include "test/test_util.h"

namespace tfd::launcher {
namespace {

using testing::ReadAll;
using testing::TempDir;

struct Outcome {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Tfctl(args) with its stdout and stderr caught in files (the parse errors never get further).
Outcome RunTfctl(const std::vector<std::string>& args) {
  TempDir dir;
  std::fflush(stdout);
  std::fflush(stderr);
  const int saved_out = dup(1), saved_err = dup(2);
  const int out = open((dir / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const int err = open((dir / "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE((saved_out >= 0 && saved_err >= 0 && out >= 0 && err >= 0));
  dup2(out, 1);
  dup2(err, 2);
  Outcome o;
  o.exit_code = Tfctl(args, Interrupts{});
  std::fflush(stdout);
  std::fflush(stderr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  for (int fd : {saved_out, saved_err, out, err}) close(fd);
  o.out = ReadAll(dir / "out");
  o.err = ReadAll(dir / "err");
  return o;
}

// What tfctl `args` prints on stderr, checked to be exit 2, one line, nothing on stdout.
std::string Refused(const std::vector<std::string>& args) {
  const Outcome o = RunTfctl(args);
  INFO("tfctl " << fmt::format("{}", fmt::join(args, " ")) << "\nstdout: " << o.out << "\nstderr: " << o.err);
  CHECK(o.exit_code == 2);
  CHECK(o.out.empty());
  CHECK(std::count(o.err.begin(), o.err.end(), '\n') == 1);
  return o.err;
}

TEST_CASE("ParseInteger takes the whole string as a base-10 integer, nothing else", "[unit][cli]") {
  CHECK(ParseInteger("12") == 12);
  CHECK(ParseInteger("0") == 0);
  CHECK(ParseInteger("-3") == -3);
  CHECK(ParseInteger("9223372036854775807") == INT64_MAX);
  for (const char* bad : {"", " 12", "12 ", "+12", "12s", "1e3", "0x10", "2.0", "two", "9223372036854775808", "-"}) {
    INFO(bad);
    CHECK_FALSE(ParseInteger(bad).has_value());
  }
}

TEST_CASE("ParseNumber takes the whole string as a finite decimal number, nothing else", "[unit][cli]") {
  CHECK(ParseNumber("2.5") == 2.5);
  CHECK(ParseNumber("10") == 10);
  CHECK(ParseNumber(".5") == 0.5);
  CHECK(ParseNumber("1e3") == 1000);
  CHECK(ParseNumber("-1") == -1);
  for (const char* bad : {"", " 2", "2 ", "+2", "5s", "5 s", "2.5.1", "0x10", "inf", "-inf", "nan", "1e999", "ten", "."}) {
    INFO(bad);
    CHECK_FALSE(ParseNumber(bad).has_value());
  }
}

TEST_CASE("a CommandLine takes flags in either spelling, in any order, and its words in order", "[unit][cli]") {
  std::string file, run_dir = "runs", log_format = "text";
  double grace = 10;
  bool detach = false;
  int workers = 0;
  std::vector<std::string> sbatch;
  CommandLine line("test");
  line.Positional(&file, "file");
  line.Text("run-dir", &run_dir);
  line.Seconds("grace", &grace, 0, 60);
  line.Switch("detach", &detach);
  line.Integer("workers", &workers, 1, 8, "a number of workers");
  line.Choice("log-format", &log_format, {"text", "json"});
  line.Texts("sbatch", &sbatch);
  REQUIRE(line.Parse({"--grace=2.5", "--sbatch", "--partition=cpu", "c.json", "--detach", "--workers", "8", "--sbatch", "-N2",
                      "--log-format", "json"})
              .ok());
  CHECK(file == "c.json");
  CHECK(run_dir == "runs");  // not given: left as it was
  CHECK(grace == 2.5);
  CHECK(detach);
  CHECK(workers == 8);
  CHECK(log_format == "json");
  CHECK(sbatch == std::vector<std::string>{"--partition=cpu", "-N2"});  // a value may look like a flag this command does not know
  CHECK(line.Given("grace"));
  CHECK_FALSE(line.Given("run-dir"));

  std::string after;
  CommandLine ended("test");
  ended.Positional(&after, "file");
  REQUIRE(ended.Parse({"--", "--odd-name.json"}).ok());
  CHECK(after == "--odd-name.json");
}

TEST_CASE("a CommandLine refuses in one line naming the flag", "[unit][cli]") {
  auto refused = [](std::vector<std::string> args) {
    std::string file, run_dir;
    double grace = 10;
    bool detach = false;
    int workers = 0;
    CommandLine line("test");
    line.Positional(&file, "file");
    line.Text("run-dir", &run_dir);
    line.Seconds("grace", &grace, 0, 60);
    line.Switch("detach", &detach);
    line.Integer("workers", &workers, 1, 8, "a number of workers");
    const Status s = line.Parse(args);
    REQUIRE_FALSE(s.ok());
    CHECK(s.code() == Code::kInvalidArgument);
    return s.message();
  };
  CHECK(refused({"--grace", "5s"}) == "--grace: expected a number of seconds in [0, 60], got \"5s\"");
  CHECK(refused({"--grace", "61"}) == "--grace: expected a number of seconds in [0, 60], got \"61\"");
  CHECK(refused({"--grace", ""}) == "--grace: expected a number of seconds in [0, 60], got \"\"");
  CHECK(refused({"--workers", "2.0"}) == "--workers: expected a number of workers in [1, 8], got \"2.0\"");
  CHECK(refused({"--workers", "0"}) == "--workers: expected a number of workers in [1, 8], got \"0\"");
  CHECK(refused({"--workers", "-1"}) == "--workers: expected a number of workers in [1, 8], got \"-1\"");
  CHECK(refused({"--grace"}) == "--grace needs a value");
  CHECK(refused({"--grace="}) == "--grace needs a value");
  CHECK(refused({"--run-dir", "--detach"}) == "--run-dir needs a value");  // a flag of this command is not a value
  CHECK(refused({"--detach=yes"}) == "--detach takes no value");
  CHECK(refused({"--grace", "1", "--grace", "2"}) == "--grace given more than once");
  CHECK(refused({"--bogus"}) == "test: unknown option --bogus");
  CHECK(refused({"--gra", "5"}) == "test: unknown option --gra");  // no abbreviations
  CHECK(refused({"-x"}) == "test: unknown option -x");
  CHECK(refused({"--word", "a"}) == "test: unknown option --word");  // the words' own option is not a flag
  CHECK(refused({"a", "b"}) == "test: one file, not \"b\" too");
  CHECK(refused({"--workers", "3", "--grace", "x", "--workers", "y"}) == "--workers given more than once");
}

TEST_CASE("tfctl refuses a bad number, in one line naming the flag, exit 2", "[unit][cli]") {
  CHECK(Refused({"sweep", "s.json", "--workers", "two"}) ==
        "tfctl: --workers: expected a number of workers in [1, 4096], got \"two\" (see tfctl --help)\n");
  CHECK(Refused({"ensemble", "j.json", "--workers", "2.0"}) ==
        "tfctl: --workers: expected a number of workers in [1, 4096], got \"2.0\" (see tfctl --help)\n");
  CHECK(Refused({"scale", "runs/x", "--workers", "0"}) ==
        "tfctl: --workers: expected a number of workers in [1, 65536], got \"0\" (see tfctl --help)\n");
  CHECK(Refused({"slurm", "c.json", "--port-base", "70000"}) ==
        "tfctl: --port-base: expected a port in [1, 65535], got \"70000\" (see tfctl --help)\n");
  CHECK(Refused({"up", "c.json", "--grace", "-1"}) == "tfctl: --grace: expected a number of seconds in [0, 3600], got \"-1\" (see tfctl --help)\n");
  CHECK(Refused({"up", "c.json", "--log-format", "xml"}) == "tfctl: --log-format: expected text or json, got \"xml\" (see tfctl --help)\n");
}

TEST_CASE("tfctl refuses a number with a unit: durations are plain seconds", "[unit][cli]") {
  for (const char* command : {"up", "validate"})
    CHECK(Refused({command, "c.json", "--grace", "5s"}) ==
          "tfctl: --grace: expected a number of seconds in [0, 3600], got \"5s\" (see tfctl --help)\n");
  CHECK(Refused({"sweep", "s.json", "--grace", "5s"}) ==
        "tfctl: --grace: expected a number of seconds in [0, 3600], got \"5s\" (see tfctl --help)\n");
  CHECK(Refused({"chaos", "c.json", "--kill", "ps", "--at", "step", "--grace", "5s"}) ==
        "tfctl: --grace: expected a number of seconds in [0, 3600], got \"5s\" (see tfctl --help)\n");
  CHECK(Refused({"chaos", "c.json", "--kill", "ps", "--at", "step", "--stop", "5s"}) ==
        "tfctl: --stop 5s: expected seconds above 0 (see tfctl --help)\n");
  CHECK(Refused({"chaos", "c.json", "--kill", "ps", "--at", "step", "--deadline", "1m"}) ==
        "tfctl: --deadline 1m: expected seconds above 0 (see tfctl --help)\n");
  CHECK(Refused({"chaos", "c.json", "--kill", "ps", "--at", "step:3rd"}) == "tfctl: --at step:3rd: N must be a whole number >= 1 (see tfctl --help)\n");
  CHECK(Refused({"scale", "runs/x", "--workers", "3x"}) ==
        "tfctl: --workers: expected a number of workers in [1, 65536], got \"3x\" (see tfctl --help)\n");
  CHECK(Refused({"slurm", "c.json", "--port-base", "8888/tcp"}) ==
        "tfctl: --port-base: expected a port in [1, 65535], got \"8888/tcp\" (see tfctl --help)\n");
}

TEST_CASE("tfctl refuses an unknown flag, naming the command that does not take it", "[unit][cli]") {
  // up's line has never named the command (test/system/dashboard_test.cc reads its JSON message).
  CHECK(Refused({"up", "c.json", "--bogus"}) == "tfctl: unknown option --bogus (see tfctl --help)\n");
  CHECK(Refused({"validate", "c.json", "--bogus"}) == "tfctl: validate: unknown option --bogus (see tfctl --help)\n");
  CHECK(Refused({"dashboard", "runs/x", "--bogus"}) == "tfctl: dashboard: unknown option --bogus (see tfctl --help)\n");
  const std::vector<std::vector<std::string>> commands = {
      {"up", "c.json"}, {"validate", "c.json"}, {"sweep", "s.json"}, {"ensemble", "j.json"}, {"status"}, {"logs"}, {"down"},
      {"scale", "runs/x", "--workers", "2"}, {"report", "runs/x"}, {"dashboard", "runs/x"}, {"slurm", "c.json"},
      {"gen-token", "token"}, {"chaos", "c.json", "--kill", "ps", "--at", "step"}};
  for (std::vector<std::string> args : commands) {
    const std::string command = args[0];
    args.push_back("--bogus");
    const std::string prefix = command == "up" ? "" : command + ": ";
    CHECK(Refused(args) == "tfctl: " + prefix + "unknown option --bogus (see tfctl --help)\n");
  }
}

TEST_CASE("tfctl refuses a flag without its value, --dashboard too", "[unit][cli]") {
  CHECK(Refused({"up", "c.json", "--dashboard"}) == "tfctl: --dashboard needs a value (see tfctl --help)\n");
  CHECK(Refused({"up", "c.json", "--dashboard", "--detach"}) == "tfctl: --dashboard needs a value (see tfctl --help)\n");
  CHECK(Refused({"up", "c.json", "--grace"}) == "tfctl: --grace needs a value (see tfctl --help)\n");
  CHECK(Refused({"dashboard", "runs/x", "--port"}) == "tfctl: --port needs a value (see tfctl --help)\n");
  CHECK(Refused({"scale", "runs/x", "--workers"}) == "tfctl: --workers needs a value (see tfctl --help)\n");
  CHECK(Refused({"slurm", "c.json", "--sbatch"}) == "tfctl: --sbatch needs a value (see tfctl --help)\n");
  CHECK(Refused({"sweep", "s.json", "--tfd"}) == "tfctl: --tfd needs a value (see tfctl --help)\n");
  CHECK(Refused({"chaos", "c.json", "--kill", "ps", "--at"}) == "tfctl: --at needs a value (see tfctl --help)\n");
}

TEST_CASE("tfctl refuses a flag of another subcommand", "[unit][cli]") {
  CHECK(Refused({"validate", "c.json", "--detach"}) == "tfctl: validate: unknown option --detach (see tfctl --help)\n");
  CHECK(Refused({"validate", "c.json", "--dashboard", "0"}) == "tfctl: validate: unknown option --dashboard (see tfctl --help)\n");
  CHECK(Refused({"scale", "runs/x", "--workers", "3", "--grace", "5"}) == "tfctl: scale: unknown option --grace (see tfctl --help)\n");
  CHECK(Refused({"sweep", "s.json", "--detach"}) == "tfctl: sweep: unknown option --detach (see tfctl --help)\n");
  CHECK(Refused({"dashboard", "runs/x", "--dashboard", "0"}) == "tfctl: dashboard: unknown option --dashboard (see tfctl --help)\n");
  CHECK(Refused({"up", "c.json", "--port", "8080"}) == "tfctl: unknown option --port (see tfctl --help)\n");
  CHECK(Refused({"slurm", "c.json", "--workers", "2"}) == "tfctl: slurm: unknown option --workers (see tfctl --help)\n");
  CHECK(Refused({"chaos", "c.json", "--kill", "ps", "--at", "step", "--detach"}) == "tfctl: chaos: unknown option --detach (see tfctl --help)\n");
}

TEST_CASE("tfctl refuses a word too many and a RUN that is not a run folder", "[unit][cli]") {
  CHECK(Refused({"up", "a.json", "b.json"}) == "tfctl: one cluster file, not \"b.json\" too (see tfctl --help)\n");
  CHECK(Refused({"report", "runs/a", "runs/b"}) == "tfctl: report: one run folder, not \"runs/b\" too (see tfctl --help)\n");
  TempDir dir;
  // down and status once took any word that was not a run folder for none, and acted on the newest run.
  CHECK(Refused({"down", dir / "typo"}) == "tfctl: down: " + (dir / "typo") + " is not a run folder (no cluster.json) (see tfctl --help)\n");
  CHECK(Refused({"status", dir.path()}) == "tfctl: status: " + dir.path() + " is not a run folder (no cluster.json) (see tfctl --help)\n");
  CHECK(Refused({"logs", dir.path(), "worker:0"}) ==
        "tfctl: logs: " + dir.path() + " is not a run folder (no cluster.json) (see tfctl --help)\n");
}

TEST_CASE("up --log-format json refuses its command line in a JSON line", "[unit][cli]") {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"up", "c.json", "--log-format", "json", "--grace", "5s"},
                                               std::vector<std::string>{"up", "c.json", "--grace", "5s", "--log-format=json"}}) {
    const std::string err = Refused(args);
    const nlohmann::json line = nlohmann::json::parse(err, nullptr, /*allow_exceptions=*/false);
    INFO(err);
    REQUIRE(line.is_object());
    CHECK(line["event"] == "usage_error");
    CHECK(line["message"] == "--grace: expected a number of seconds in [0, 3600], got \"5s\" (see tfctl --help)");
  }
}

TEST_CASE("ParseClusterArgs: up's flags, their defaults, and validate's fewer flags", "[unit][cli]") {
  Result<ClusterArgs> a = ParseClusterArgs("up", {"c.json"});
  REQUIRE(a.ok());
  CHECK(a->file == "c.json");
  CHECK(a->grace_secs == 10);
  CHECK(a->run_dir_override.empty());
  CHECK_FALSE(a->detach);
  CHECK(a->dashboard.empty());
  CHECK_FALSE(a->json_output);
  a = ParseClusterArgs("up", {"--grace", "2.5", "c.json", "--run-dir", "/tmp/r", "--detach", "--dashboard", "127.0.0.1:0",
                              "--accept-new-hostkeys", "--log-format", "json"});
  REQUIRE(a.ok());
  CHECK(a->grace_secs == 2.5);
  CHECK(a->run_dir_override == "/tmp/r");
  CHECK(a->detach);
  CHECK(a->dashboard == "127.0.0.1:0");
  CHECK(a->accept_new_hostkeys);
  CHECK(a->json_output);
  a = ParseClusterArgs("validate", {"c.json", "--grace", "0", "--run-dir", "r", "--accept-new-hostkeys"});
  REQUIRE(a.ok());
  CHECK(a->grace_secs == 0);
  a = ParseClusterArgs("validate", {"--accept-new-hostkeys"});
  REQUIRE_FALSE(a.ok());
  CHECK(a.status().message() == "validate needs a cluster file");
}

TEST_CASE("ParseSweepArgs and ParseSlurmArgs: values and defaults", "[unit][cli]") {
  Result<SweepArgs> s = ParseSweepArgs(false, {"s.json"});
  REQUIRE(s.ok());
  CHECK(s->workers == 0);  // the file's
  CHECK(s->run_root == "runs");
  CHECK(s->grace_secs == 10);
  s = ParseSweepArgs(true, {"j.json", "--workers", "4096", "--tfd", "/bin/tfd", "--run-dir", "out", "--grace", "1"});
  REQUIRE(s.ok());
  CHECK(s->ensemble);
  CHECK(s->workers == 4096);
  CHECK(s->tfd == "/bin/tfd");
  CHECK(s->run_root == "out");
  CHECK(s->grace_secs == 1);
  CHECK(ParseSweepArgs(false, {}).status().message() == "sweep needs a sweep file (docs/sweeps.md)");

  Result<SlurmArgs> slurm = ParseSlurmArgs({"c.json"});
  REQUIRE(slurm.ok());
  CHECK(slurm->port_base == 8888);
  CHECK_FALSE(slurm->submit);
  slurm = ParseSlurmArgs({"c.json", "--submit", "--port-base", "9000", "--sbatch", "--partition=cpu", "--sbatch", "--time=10"});
  REQUIRE(slurm.ok());
  CHECK(slurm->submit);
  CHECK(slurm->port_base == 9000);
  CHECK(slurm->sbatch_options == std::vector<std::string>{"--partition=cpu", "--time=10"});
}

TEST_CASE("chaos takes --grace as up does and refuses a number with a unit in its own flags", "[unit][cli][chaos]") {
  Result<ChaosArgs> a = ParseChaosArgs({"c.json", "--kill", "ps", "--at", "step", "--grace", "0"});
  REQUIRE(a.ok());
  CHECK(a->grace_secs == 0);
  a = ParseChaosArgs({"c.json", "--kill", "ps", "--at", "step", "--stop", "3s"});
  REQUIRE_FALSE(a.ok());
  CHECK(a.status().message() == "--stop 3s: expected seconds above 0");
  a = ParseChaosArgs({"c.json", "--kill", "ps", "--at", "step", "--deadline", "200000"});
  REQUIRE_FALSE(a.ok());
  CHECK(a.status().message() == "--deadline 200000: expected seconds above 0, at most 100000");
  a = ParseChaosArgs({"c.json", "--kill", "ps", "--at", "step", "--signal", ""});
  REQUIRE_FALSE(a.ok());
  CHECK(a.status().message() == "--signal : expected kill or term");
}

TEST_CASE("tfctl with an unknown command or none", "[unit][cli]") {
  CHECK(Refused({"upp", "c.json"}).starts_with("tfctl: unknown command \"upp\" (expected up, validate,"));
  const Outcome none = RunTfctl({});
  CHECK(none.exit_code == 2);
  CHECK(none.err.starts_with("tfctl: start a tfd cluster"));
  const Outcome help = RunTfctl({"help"});
  CHECK(help.exit_code == 0);
  CHECK(help.out.starts_with("tfctl: start a tfd cluster"));
}

TEST_CASE("tfctl COMMAND --help prints that command's usage and exits 0, for every command", "[unit][cli]") {
  for (const std::string command : {"up", "validate", "status", "logs", "down", "scale", "report", "dashboard", "slurm", "gen-token", "chaos",
                                    "sweep", "ensemble"}) {
    for (const std::string flag : {"--help", "-h"}) {
      const Outcome o = RunTfctl({command, "c.json", flag});
      INFO("tfctl " << command << " " << flag << "\nstdout: " << o.out << "\nstderr: " << o.err);
      CHECK(o.exit_code == 0);
      CHECK(o.err.empty());
      CHECK(o.out.starts_with("Usage:\n  tfctl " + command + " "));
    }
  }
  const Outcome up = RunTfctl({"up", "--help"});
  CHECK(up.out.find("--detach") != std::string::npos);
  CHECK(up.out.find("tfctl validate") == std::string::npos);  // up's entries only
  const Outcome asked = RunTfctl({"help", "scale"});
  CHECK(asked.exit_code == 0);
  CHECK(asked.out.starts_with("Usage:\n  tfctl scale RUN --workers N"));
  // An unknown command stays unknown.
  CHECK(Refused({"upp", "--help"}).starts_with("tfctl: unknown command \"upp\""));
}

}  // namespace
}  // namespace tfd::launcher
