#include "daemon/predict/predict_command.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "common/config/data_spec.h"
#include "common/data/npy.h"
#include "common/data/readers.h"
#include "common/data/source.h"
#include "common/export/model_dir.h"

namespace tfd::predict_command {
namespace {

namespace fs = std::filesystem;
using Format = config::DataSpec::Format;

constexpr const char* kUsage =
    "usage: tfd predict --model DIR --data SOURCE [--labels FILE] [--out FILE.csv|FILE.npy] [--top K] [--threads N] [--batch N]\n"
    "  DIR: an exported model's version folder, or the folder of its versions (the newest is used).\n"
    "  SOURCE: a file (or folder) in any format tfd trains on, read as the model's training data was;\n"
    "  its label column is optional (with labels, the accuracy or MAE/RMSE is printed). --labels: the\n"
    "  labels of an .npy or IDX features file. Rows go to --out, or as CSV to standard output.\n";

struct Args {
  std::string model, data, labels, out, device = "cpu";
  int top = 1, threads = 1, batch = 256;
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "tfd: predict: %s\n", message.c_str());
  return 2;
}

// The spec that reads `a.data` as the model's training read its own files.
Result<config::DataSpec> SourceSpec(const exporting::ModelCard& card, const Args& a) {
  config::DataSpec spec = card.data;
  spec.train = {}, spec.test = {};
  spec.test_count = 0, spec.test_fraction = 0;
  spec.unlabeled_width = static_cast<int>(card.features());
  std::error_code ec;
  const bool folder = fs::is_directory(a.data, ec);
  if (!fs::exists(a.data, ec)) return Status::NotFound(fmt::format("--data {}: no such file or folder", a.data));
  if (folder && fs::exists(fs::path(a.data) / data::kTestImages, ec)) {  // the MNIST folder: its test pair
    spec.format = Format::kIdx;
    spec.train.x = (fs::path(a.data) / data::kTestImages).string();
    spec.train.y = (fs::path(a.data) / data::kTestLabels).string();
    return spec;
  }
  if (folder) spec.format = Format::kImages;
  else if (!config::FormatFromName(a.data, &spec.format) && card.data.is_mnist_folder())
    return Status::InvalidArgument(fmt::format("--data {}: cannot tell the format from the name (expected .csv, .npy, .npz, .tfrecord, -ubyte, "
                                               "or a folder)", a.data));
  if (spec.format == Format::kNpy || spec.format == Format::kIdx) {
    if (spec.format == Format::kIdx && a.labels.empty())
      return Status::InvalidArgument(fmt::format("--data {}: an IDX features file needs its labels file (--labels)", a.data));
    spec.train.x = a.data, spec.train.y = a.labels;
  } else {
    if (!a.labels.empty()) return Status::InvalidArgument("--labels: only for .npy and IDX features; other formats keep labels with the features");
    spec.train.paths = {a.data};
  }
  return spec;
}

// The examples as a dataset under the model's card: its classes numbered as the model numbers them.
Result<data::Dataset> AsDataset(const exporting::ModelCard& card, data::Examples e, const std::string& source) {
  if (e.values() != card.features())
    return Status::InvalidArgument(fmt::format("{}: examples of {} x {} x {} ({} values), but the model takes {} x {} x {} ({} values)", source,
                                               e.height, e.width, e.channels, e.values(), card.height, card.width, card.channels, card.features()));
  data::Dataset d = card.Shell();
  d.size = e.size;
  d.dtype = e.dtype;
  d.features = std::move(e.features);
  if (card.regression()) {
    if (!e.targets.empty() && e.num_targets != card.num_targets)
      return Status::InvalidArgument(fmt::format("{}: {} targets per example, the model predicts {}", source, e.num_targets, card.num_targets));
    d.targets = std::move(e.targets);
    return d;
  }
  const std::size_t n = std::max(e.label_text.size(), e.label_ids.size());
  d.labels.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::string label = i < e.label_text.size() ? e.label_text[i] : std::to_string(e.label_ids[i]);
    auto it = std::find(card.class_names.begin(), card.class_names.end(), label);
    if (it == card.class_names.end())
      return Status::InvalidArgument(fmt::format("{}: example {}: label \"{}\" is not one of the model's {} classes", source, i, label,
                                                 card.class_names.size()));
    d.labels.push_back(static_cast<std::uint8_t>(it - card.class_names.begin()));
  }
  return d;
}

std::string CsvCell(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// One row per example: the class, its probability and the next K-1, or the regression outputs.
void WriteCsv(std::ostream& os, const exporting::ModelCard& card, const std::vector<float>& out, std::int64_t rows, int top) {
  const int width = card.outputs();
  if (card.regression()) {
    for (int j = 0; j < width; ++j) os << (j ? "," : "") << (width == 1 ? std::string("prediction") : fmt::format("prediction_{}", j));
    os << "\n";
    for (std::int64_t i = 0; i < rows; ++i) {
      for (int j = 0; j < width; ++j) os << (j ? "," : "") << fmt::format("{}", out[static_cast<std::size_t>(i * width + j)]);
      os << "\n";
    }
    return;
  }
  os << "class,probability";
  for (int k = 2; k <= top; ++k) os << fmt::format(",class_{},probability_{}", k, k);
  os << "\n";
  std::vector<int> order(static_cast<std::size_t>(width));
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* p = out.data() + i * width;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    for (int k = 0; k < top; ++k)
      os << (k ? "," : "") << CsvCell(card.class_names[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])]) << ","
         << fmt::format("{}", p[order[static_cast<std::size_t>(k)]]);
    os << "\n";
  }
}

Result<Args> ParseArgs(int argc, char** argv, std::ostream& out, bool* exit_now) {
  namespace po = boost::program_options;
  Args a;
  bool help = false;
  po::options_description opts;
  opts.add_options()("model", po::value(&a.model))("data", po::value(&a.data))("labels", po::value(&a.labels))("out", po::value(&a.out))(
      "top", po::value(&a.top))("threads", po::value(&a.threads))("batch", po::value(&a.batch))("device", po::value(&a.device))(
      "help,h", po::bool_switch(&help));
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(opts).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return Status::InvalidArgument(fmt::format("{}\n{}", e.what(), kUsage));
  }
  if (help) return *exit_now = true, out << kUsage, a;
  if (a.model.empty() || a.data.empty()) return Status::InvalidArgument(fmt::format("--model and --data are required\n{}", kUsage));
  if (a.top < 1) return Status::InvalidArgument(fmt::format("--top {}: expected a count >= 1", a.top));
  if (a.threads < 1 || a.threads > 256) return Status::InvalidArgument(fmt::format("--threads {}: expected 1 to 256", a.threads));
  if (a.batch < 1 || a.batch > 65536) return Status::InvalidArgument(fmt::format("--batch {}: expected 1 to 65536", a.batch));
  if (a.device != "cpu")
    return Status::InvalidArgument(fmt::format("--device {}: tfd predict runs on the CPU (expected \"cpu\")", a.device));
  const bool npy = a.out.ends_with(".npy");
  if (!a.out.empty() && !npy && !a.out.ends_with(".csv"))
    return Status::InvalidArgument(fmt::format("--out {}: expected a .csv or .npy file", a.out));
  return a;
}

}  // namespace

int Run(int argc, char** argv, std::ostream& out) {
  bool exit_now = false;
  Result<Args> args = ParseArgs(argc, argv, out, &exit_now);
  if (!args.ok()) return Fail(args.status().message());
  if (exit_now) return 0;
  const Args& a = *args;
  Result<std::string> dir = exporting::ResolveVersionDir(a.model);
  if (!dir.ok()) return Fail(dir.status().message());
  Result<exporting::LoadedModel> loaded = exporting::LoadVersion(*dir, a.batch, {.threads = a.threads});
  if (!loaded.ok()) return Fail(loaded.status().message());
  const exporting::ModelCard& card = loaded->card;
  if (!card.regression() && a.top > card.outputs())
    return Fail(fmt::format("--top {}: the model has {} classes", a.top, card.outputs()));
  Result<config::DataSpec> spec = SourceSpec(card, a);
  if (!spec.ok()) return Fail(spec.status().message());
  Result<data::Examples> examples = data::ReadExamples(*spec, spec->train, "--data");
  if (!examples.ok()) return Fail(examples.status().message());
  Result<data::Dataset> dataset = AsDataset(card, std::move(*examples), a.data);
  if (!dataset.ok()) return Fail(dataset.status().message());
  const data::Dataset& d = *dataset;
  model::Model& model = *loaded->model;
  const std::vector<float> predictions = model::PredictProbabilities(model, d);

  if (a.out.ends_with(".npy")) {
    const std::string bytes = data::NpyFloat32(predictions, {static_cast<std::uint64_t>(d.size), static_cast<std::uint64_t>(card.outputs())});
    std::ofstream f(a.out, std::ios::binary | std::ios::trunc);
    if (!f.write(bytes.data(), static_cast<std::streamsize>(bytes.size())) || !f.flush()) return Fail(fmt::format("--out {}: cannot write", a.out));
  } else if (!a.out.empty()) {
    std::ofstream f(a.out, std::ios::trunc);
    WriteCsv(f, card, predictions, d.size, card.regression() ? 1 : a.top);
    if (!f.flush()) return Fail(fmt::format("--out {}: cannot write", a.out));
  } else {
    WriteCsv(out, card, predictions, d.size, card.regression() ? 1 : a.top);
  }
  const bool labelled = card.regression() ? !d.targets.empty() : !d.labels.empty();
  std::string line = fmt::format("{} examples from {} with the model in {}", d.size, a.data, *dir);
  if (labelled) {
    const model::EvalResult r = model::EvaluateLoss(model, d, /*with_loss=*/false);
    line += card.regression() ? fmt::format("; mae={:.4f} rmse={:.4f}", r.mae, r.rmse) : fmt::format("; accuracy={:.4f}", r.accuracy);
  }
  if (a.out.empty()) std::fprintf(stderr, "tfd: predict: %s\n", line.c_str());
  else out << line << (a.out.empty() ? "" : fmt::format("; predictions in {}", a.out)) << "\n";
  return 0;
}

}  // namespace tfd::predict_command
