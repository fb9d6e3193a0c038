#pragma once

// tfctl's command lines. Each subcommand declares its flags and words on one CommandLine, which
// parses the words after the subcommand with Boost.Program_options; every number a flag takes goes
// through ParseInteger or ParseNumber, so "5s", " 5", "+5", "0x10", "nan" and "2.0" workers are
// refused the same way everywhere. A duration is a plain number of seconds ("2.5"), never "5s".
//
// Messages, one line, without the "tfctl: " that UsageError (commands.h) puts in front:
//   a flag's value       --grace: expected a number of seconds in [0, 3600], got "5s"
//   a flag with no value --dashboard needs a value        (also when the next word is one of this command's flags)
//   a switch given one   --detach takes no value
//   a flag given twice   --grace given more than once
//   an unknown flag      scale: unknown option --grace    (the command named, when it has a name)
//   a word too many      dashboard: one run folder, not "x" too
// The caller prints them with UsageError and exits 2. No exception leaves this file.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace tfd::launcher {

// The whole of `text` as a base-10 integer ("12", "-3"); nullopt for "", " 12", "+12", "12s",
// "1e3", "0x10", "2.0" or a number outside int64.
std::optional<std::int64_t> ParseInteger(std::string_view text);

// The whole of `text` as a finite decimal number ("2.5", "10", ".5", "1e3", "-1"); nullopt for "",
// " 2", "+2", "5s", "0x10", "inf", "nan" or one outside double.
std::optional<double> ParseNumber(std::string_view text);

// "<flag>: expected <expected>, got "<got>"": the shape of every refused value.
std::string FlagError(std::string_view flag, std::string_view expected, std::string_view got);

// One subcommand's flags and words. Declare them, then Parse once; the pointers given must outlive
// Parse, which writes through them (on an error some may be written: discard them). Flags are
// spelled whole (--grace, never --gra) and may take their value as the next word or after '='
// (--grace=5); "--" ends the flags. Not thread-safe; a new CommandLine for each parse.
class CommandLine {
 public:
  // `command` names the subcommand in messages about words it does not take; empty: not named.
  explicit CommandLine(std::string command);

  // --NAME, or --NAME/-S when `short_name` is given.
  void Switch(std::string name, bool* out, char short_name = 0);
  // --NAME VALUE: any text, "" too.
  void Text(std::string name, std::string* out);
  // --NAME VALUE, as many times as given, in order.
  void Texts(std::string name, std::vector<std::string>* out);
  // --NAME VALUE, VALUE one of `choices` ("--log-format: expected text or json, got "xml"").
  void Choice(std::string name, std::string* out, std::vector<std::string> choices);
  // --NAME N, a whole number in [min, max]; `what` says what N counts: "a number of workers" gives
  // "--workers: expected a number of workers in [1, 4096], got "2.5"".
  void Integer(std::string name, int* out, int min, int max, std::string what);
  // --NAME SECS, a plain number of seconds in [min, max]: "--grace: expected a number of seconds in
  // [0, 3600], got "5s"".
  void Seconds(std::string name, double* out, double min, double max);
  // The next word that is not a flag; `noun` ("cluster file") names it when there is one too many.
  // Words fill the slots in the order these are declared; a slot not filled is left as it was.
  void Positional(std::string* out, std::string noun);

  // `args`: the words after the subcommand. InvalidArgument with one of the messages above.
  Status Parse(const std::vector<std::string>& args);
  // After Parse: whether --NAME was on the command line (for a Text whose "" means something).
  bool Given(std::string_view name) const;

 private:
  enum class Kind { kSwitch, kValue, kValues };
  struct Flag {
    std::string name;
    char short_name = 0;
    Kind kind = Kind::kValue;
    std::function<Status(const std::string& value)> take;  // for kSwitch, called with ""
  };
  struct Slot {
    std::string* out;
    std::string noun;
  };
  // Whether `word` is --NAME, --NAME=..., or -S of one of this command's flags.
  bool NamesFlag(std::string_view word) const;
  std::string Unknown(std::string_view what) const;

  std::string command_;
  std::vector<Flag> flags_;
  std::vector<Slot> slots_;
  std::vector<std::string> given_;
};

}  // namespace tfd::launcher
