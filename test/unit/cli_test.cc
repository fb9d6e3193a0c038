// tfctl's command lines: the strict numbers, and what a CommandLine takes and refuses.
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "launcher/cli.h"

namespace tfd::launcher {
namespace {

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

}  // namespace
}  // namespace tfd::launcher
