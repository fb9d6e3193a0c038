#include "launcher/cli.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>

#include <boost/program_options.hpp>
#include <fmt/format.h>

namespace tfd::launcher {
namespace {

namespace po = boost::program_options;

// The option that collects the words that are not flags; typed as --word it is an unknown option.
constexpr const char* kWords = "word";

}  // namespace

std::optional<std::int64_t> ParseInteger(std::string_view text) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<double> ParseNumber(std::string_view text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, std::chars_format::general);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string FlagError(std::string_view flag, std::string_view expected, std::string_view got) {
  return fmt::format("{}: expected {}, got \"{}\"", flag, expected, got);
}

CommandLine::CommandLine(std::string command) : command_(std::move(command)) {}

void CommandLine::Switch(std::string name, bool* out, char short_name) {
  flags_.push_back({std::move(name), short_name, Kind::kSwitch, [out](const std::string&) {
                      *out = true;
                      return Status::Ok();
                    }});
}

void CommandLine::Text(std::string name, std::string* out) {
  flags_.push_back({std::move(name), 0, Kind::kValue, [out](const std::string& v) {
                      *out = v;
                      return Status::Ok();
                    }});
}

void CommandLine::Texts(std::string name, std::vector<std::string>* out) {
  flags_.push_back({std::move(name), 0, Kind::kValues, [out](const std::string& v) {
                      out->push_back(v);
                      return Status::Ok();
                    }});
}

void CommandLine::Choice(std::string name, std::string* out, std::vector<std::string> choices) {
  std::string expected;
  for (std::size_t i = 0; i < choices.size(); ++i)
    expected += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  flags_.push_back({name, 0, Kind::kValue, [out, choices = std::move(choices), expected, flag = "--" + name](const std::string& v) {
                      for (const std::string& c : choices)
                        if (v == c) {
                          *out = v;
                          return Status::Ok();
                        }
                      return Status::InvalidArgument(FlagError(flag, expected, v));
                    }});
}

void CommandLine::Integer(std::string name, int* out, int min, int max, std::string what) {
  const std::string expected = fmt::format("{} in [{}, {}]", what, min, max);
  flags_.push_back({name, 0, Kind::kValue, [out, min, max, expected, flag = "--" + name](const std::string& v) {
                      const std::optional<std::int64_t> n = ParseInteger(v);
                      if (!n || *n < min || *n > max) return Status::InvalidArgument(FlagError(flag, expected, v));
                      *out = static_cast<int>(*n);
                      return Status::Ok();
                    }});
}

void CommandLine::Seconds(std::string name, double* out, double min, double max) {
  const std::string expected = fmt::format("a number of seconds in [{}, {}]", min, max);
  flags_.push_back({name, 0, Kind::kValue, [out, min, max, expected, flag = "--" + name](const std::string& v) {
                      const std::optional<double> secs = ParseNumber(v);
                      if (!secs || *secs < min || *secs > max) return Status::InvalidArgument(FlagError(flag, expected, v));
                      *out = *secs;
                      return Status::Ok();
                    }});
}

void CommandLine::Positional(std::string* out, std::string noun) { slots_.push_back({out, std::move(noun)}); }

bool CommandLine::NamesFlag(std::string_view word) const {
  for (const Flag& f : flags_) {
    if (f.short_name != 0 && word.size() == 2 && word[0] == '-' && word[1] == f.short_name) return true;
    if (!word.starts_with("--")) continue;
    const std::string_view name = word.substr(2, word.find('=') == std::string_view::npos ? std::string_view::npos : word.find('=') - 2);
    if (name == f.name) return true;
  }
  return false;
}

std::string CommandLine::Unknown(std::string_view what) const {
  return command_.empty() ? std::string(what) : fmt::format("{}: {}", command_, what);
}

Status CommandLine::Parse(const std::vector<std::string>& args) {
  po::options_description options;
  for (const Flag& f : flags_) {
    const std::string spelled = f.short_name != 0 ? fmt::format("{},{}", f.name, f.short_name) : f.name;
    switch (f.kind) {
      case Kind::kSwitch: options.add_options()(spelled.c_str(), po::bool_switch()); break;
      case Kind::kValue: options.add_options()(spelled.c_str(), po::value<std::string>()); break;
      case Kind::kValues: options.add_options()(spelled.c_str(), po::value<std::vector<std::string>>()); break;
    }
  }
  options.add_options()(kWords, po::value<std::vector<std::string>>());
  po::positional_options_description words;
  words.add(kWords, -1);
  // Unix style without allow_guessing: --gra is not --grace.
  const int style = po::command_line_style::unix_style & ~po::command_line_style::allow_guessing;

  po::parsed_options parsed(&options);
  try {
    parsed = po::command_line_parser(args).options(options).positional(words).style(style).run();
    po::variables_map checked;  // po's own checks (a flag given twice); the values are taken below, in order
    po::store(parsed, checked);
  } catch (const po::unknown_option& e) {
    return Status::InvalidArgument(Unknown(fmt::format("unknown option {}", e.get_option_name())));
  } catch (const po::invalid_command_line_syntax& e) {
    if (e.kind() == po::invalid_command_line_syntax::extra_parameter)
      return Status::InvalidArgument(fmt::format("{} takes no value", e.get_option_name()));
    if (e.kind() == po::invalid_command_line_syntax::missing_parameter ||
        e.kind() == po::invalid_command_line_syntax::empty_adjacent_parameter)
      return Status::InvalidArgument(fmt::format("{} needs a value", e.get_option_name()));
    return Status::InvalidArgument(Unknown(e.what()));
  } catch (const po::multiple_occurrences& e) {
    return Status::InvalidArgument(fmt::format("{} given more than once", e.get_option_name()));
  } catch (const po::error& e) {
    return Status::InvalidArgument(Unknown(e.what()));
  }

  std::size_t filled = 0;
  for (const po::option& o : parsed.options) {
    if (o.string_key == kWords) {
      if (o.position_key < 0) return Status::InvalidArgument(Unknown(fmt::format("unknown option --{}", kWords)));
      if (filled == slots_.size()) {
        return Status::InvalidArgument(Unknown(slots_.empty() ? fmt::format("unexpected word \"{}\"", o.value.at(0))
                                                              : fmt::format("one {}, not \"{}\" too", slots_.back().noun, o.value.at(0))));
      }
      *slots_[filled++].out = o.value.at(0);
      continue;
    }
    for (const Flag& f : flags_) {
      if (f.name != o.string_key) continue;
      const std::string flag = "--" + f.name;
      given_.push_back(f.name);
      if (f.kind == Kind::kSwitch) {
        TFD_RETURN_IF_ERROR(f.take(""));
        break;
      }
      // Program_options 1.74 takes "--dashboard --detach" as --dashboard "--detach": a flag of
      // this command in the value's place means the value is missing. (--sbatch --partition=cpu
      // stays a value; --run-dir=--x, given with '=', too.)
      const std::string& value = o.value.at(0);
      if (o.original_tokens.size() == 2 && NamesFlag(value)) return Status::InvalidArgument(fmt::format("{} needs a value", flag));
      TFD_RETURN_IF_ERROR(f.take(value));
      break;
    }
  }
  return Status::Ok();
}

bool CommandLine::Given(std::string_view name) const { return std::find(given_.begin(), given_.end(), name) != given_.end(); }

}  // namespace tfd::launcher
