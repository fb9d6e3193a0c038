#include "daemon/data/data_command.h"

#include <cstdio>
#include <filesystem>
#include <string>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/config/job.h"
#include "common/data/inspect.h"
#include "common/data/source.h"

namespace tfd::data_command {
namespace {

constexpr const char* kUsage =
    "usage: tfd data inspect SOURCE|JOB.json [--json]\n"
    "  SOURCE: a data file (.csv, .csv.gz, .npz, .tfrecord, ...), an image folder of class folders, or the\n"
    "  MNIST IDX folder; JOB.json: a job file, whose \"data\" is read as training reads it.\n";

// A bare source as a data spec: the format from its name (a folder: the MNIST folder when it holds
// the MNIST files, else image folders), every row in `train`, nothing held out.
Result<config::DataSpec> SpecOf(const std::string& source) {
  namespace fs = std::filesystem;
  config::DataSpec spec;
  std::error_code ec;
  if (fs::is_directory(source, ec)) {
    if (fs::exists(fs::path(source) / data::kTrainImages, ec)) {
      spec.folder = source;
      return spec;
    }
    spec.format = config::DataSpec::Format::kImages;
  } else if (!config::FormatFromName(source, &spec.format)) {
    return Status::InvalidArgument(fmt::format("{}: cannot tell the format from the name (expected .csv, .csv.gz, .tsv, .npz, .tfrecord, "
                                               "-ubyte, or a folder); inspect a job file that sets data.format",
                                               source));
  }
  if (spec.format == config::DataSpec::Format::kNpy || spec.format == config::DataSpec::Format::kIdx)
    return Status::InvalidArgument(fmt::format("{}: {} keeps features and labels in two files: inspect a job file whose data names both",
                                               source, config::FormatName(spec.format)));
  spec.train.paths = {source};
  return spec;
}

nlohmann::ordered_json ToJson(const data::DataReport& r) {
  nlohmann::ordered_json j = {{"rows", r.rows}, {"shape", {r.height, r.width, r.channels}},
                              {"dtype", r.dtype == data::DType::kU8 ? "uint8" : "float32"}};
  j["classes"] = nlohmann::ordered_json::array();
  for (const auto& c : r.classes) j["classes"].push_back({{"name", c.name}, {"count", c.count}});
  j["features"] = nlohmann::ordered_json::array();
  for (const auto& f : r.first) j["features"].push_back({{"name", f.name}, {"min", f.min}, {"mean", f.mean}, {"max", f.max}});
  if (!r.categorical.empty()) {
    j["categorical"] = nlohmann::ordered_json::array();
    for (const auto& c : r.categorical) j["categorical"].push_back({{"name", c.name}, {"vocabulary", c.vocabulary}, {"out_of_vocabulary", c.unseen}});
  }
  j["warnings"] = r.warnings;
  return j;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "tfd: %s\n", message.c_str());
  return 2;
}

}  // namespace

int Run(int argc, char** argv, std::ostream& out) {
  namespace po = boost::program_options;
  std::string verb, source;
  bool json = false, help = false;
  po::options_description named;
  named.add_options()("json", po::bool_switch(&json))("help,h", po::bool_switch(&help));
  po::options_description all;
  all.add(named).add_options()("verb", po::value(&verb))("source", po::value(&source));
  po::positional_options_description positional;
  positional.add("verb", 1).add("source", 1);
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return Fail(fmt::format("data: {}\n{}", e.what(), kUsage));
  }
  if (help) return out << kUsage, 0;
  if (verb != "inspect") return Fail(fmt::format("data: unknown command \"{}\" (expected inspect)\n{}", verb, kUsage));
  if (source.empty()) return Fail(fmt::format("data inspect: name a source or a job file\n{}", kUsage));
  Result<config::DataSpec> spec = config::DataSpec{};
  std::uint64_t seed = 1;
  if (source.size() > 5 && source.compare(source.size() - 5, 5, ".json") == 0) {
    Result<config::JobSpec> job = config::LoadJobSpec(source);
    if (!job.ok()) return Fail(job.status().message());
    spec = job->data;
    seed = job->seed;
  } else {
    spec = SpecOf(source);
  }
  if (!spec.ok()) return Fail(spec.status().message());
  Result<data::DataSplits> loaded = data::LoadData(*spec, seed);
  if (!loaded.ok()) return Fail(loaded.status().message());
  const data::DataReport train = data::Inspect(loaded->train, loaded->train.feature_names);
  const bool has_test = loaded->test.size > 0;
  if (json) {
    nlohmann::ordered_json j = {{"source", source}, {"format", config::FormatName(spec->format)}, {"train", ToJson(train)}};
    if (has_test) j["test"] = ToJson(data::Inspect(loaded->test, loaded->test.feature_names));
    out << j.dump(2) << "\n";
    return 0;
  }
  out << data::FormatReport(fmt::format("{} ({}), training split", source, config::FormatName(spec->format)), train);
  if (has_test) out << "\n" << data::FormatReport("test split", data::Inspect(loaded->test, loaded->test.feature_names));
  return 0;
}

}  // namespace tfd::data_command
