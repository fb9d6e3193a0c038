#include "daemon/predict/predict_command.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <cmath>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/config/data_spec.h"
#include "common/data/npy.h"
#include "common/data/readers.h"
#include "common/data/source.h"
#include "common/export/model_dir.h"
#include "common/tensor/cuda/runtime.h"
#ifdef TFD_HAVE_CUDA
#include "common/tensor/cuda/cuda_model.h"
#endif

namespace tfd::predict_command {
namespace {

namespace fs = std::filesystem;
using Format = config::DataSpec::Format;

constexpr const char* kUsage =
    "usage: tfd predict --model DIR --data SOURCE [--labels FILE] [--out FILE.csv|FILE.npy] [--top K] [--threads N] [--batch N]\n"
    "                   [--skip-rows N] [--header true|false|auto]\n"
    "  DIR: an exported model's version folder, or the folder of its versions (the newest is used).\n"
    "  SOURCE: a file (or folder) in any format tfd trains on, read as the model's training data was;\n"
    "  its label column is optional (with labels, the accuracy or MAE/RMSE is printed). --labels: the\n"
    "  labels of an .npy or IDX features file. Rows go to --out, or as CSV to standard output.\n"
    "  --skip-rows, --header: read a CSV otherwise than training read its files (docs/serving.md).\n";

struct Args {
  std::string model, data, labels, out, device = "cpu", header;
  int top = 1, threads = 1, batch = 256, skip_rows = -1;  // skip_rows -1: training's
  bool top_given = false;
  int cuda_device = -1;  // --device cuda:N; -1: the CPU
};
int Fail(const std::string& message) {
  std::fprintf(stderr, "tfd: predict: %s\n", message.c_str());
  return 2;
}

// A CSV read as training read its files (delimiter, columns, header, rows skipped) unless the
// flags say otherwise: a file cut from the same source as training's needs no flag.
Status CsvOverrides(const Args& a, config::DataSpec* spec) {
  if (a.skip_rows >= 0) spec->skip_rows = a.skip_rows;
  if (a.header == "true") spec->header = true;
  else if (a.header == "false") spec->header = false;
  else if (a.header == "auto") spec->header.reset();
  if ((a.skip_rows >= 0 || !a.header.empty()) && spec->format != Format::kCsv)
    return Status::InvalidArgument(fmt::format("--skip-rows, --header: only for a CSV file (--data {} is {})", a.data, config::FormatName(spec->format)));
  return Status::Ok();
}

// The spec that reads `a.data` as the model's training read its own files.
Result<config::DataSpec> SourceSpec(const exporting::ModelCard& card, const Args& a) {
  config::DataSpec spec = card.data;
  spec.train = {}, spec.test = {};
  spec.test_count = 0, spec.test_fraction = 0;
  spec.unlabeled_width = static_cast<int>(card.features());
  std::error_code ec;
  if (!fs::exists(a.data, ec)) return Status::NotFound(fmt::format("--data {}: no such file or folder", a.data));
  const bool folder = fs::is_directory(a.data, ec);
  if (folder && fs::exists(fs::path(a.data) / data::kTestImages, ec)) {  // the MNIST folder: its test pair
    if (!a.labels.empty()) return Status::InvalidArgument(fmt::format("--labels: not with the MNIST folder {} (its t10k labels are read)", a.data));
    spec.format = Format::kIdx;
    spec.train.x = (fs::path(a.data) / data::kTestImages).string();
    spec.train.y = (fs::path(a.data) / data::kTestLabels).string();
    return spec;
  }
  if (folder && card.dtype != data::DType::kU8)
    return Status::InvalidArgument(fmt::format("--data {}: a folder (read as image class folders), but the model was trained on {} data: name a file",
                                               a.data, config::FormatName(card.data.format)));
  if (folder) spec.format = Format::kImages;
  else if (!config::FormatFromName(a.data, &spec.format) && card.data.is_mnist_folder())
    return Status::InvalidArgument(fmt::format("--data {}: cannot tell the format from the name (expected .csv, .npy, .npz, .tfrecord, -ubyte, "
                                               "or a folder)", a.data));
  TFD_RETURN_IF_ERROR(CsvOverrides(a, &spec));
  if (spec.format != Format::kCsv) spec.categorical_names.clear(), spec.categorical_indices.clear();  // ids, not strings
  if (!a.labels.empty() && !fs::is_regular_file(a.labels, ec)) return Status::NotFound(fmt::format("--labels {}: no such file", a.labels));
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

// "SOURCE: ... but the model takes ...": a table's width in features, an image's shape.
Status WrongShape(const exporting::ModelCard& card, const data::Examples& e, bool labelled, const std::string& source) {
  if (card.height == 1 && card.channels == 1 && e.height == 1 && e.channels == 1)
    return Status::InvalidArgument(fmt::format("{}: {} features per example{}, but the model takes {} (a row without the label has exactly {} columns)",
                                               source, e.values(), labelled ? " besides the label" : "", card.features(), card.features()));
  return Status::InvalidArgument(fmt::format("{}: examples of {} x {} x {} ({} values), but the model takes {} x {} x {} ({} values)", source,
                                             e.height, e.width, e.channels, e.values(), card.height, card.width, card.channels, card.features()));
}

// The first few class names, for an error.
std::string ClassList(const std::vector<std::string>& names) {
  const std::size_t shown = std::min<std::size_t>(names.size(), 10);
  return fmt::format("{}{}", fmt::join(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(shown), ", "), shown < names.size() ? ", ..." : "");
}

// The examples as a dataset under the model's card: its classes numbered as the model numbers them.
Result<data::Dataset> AsDataset(const exporting::ModelCard& card, data::Examples e, const std::string& source) {
  const std::size_t n = card.regression() ? e.targets.size() / std::max(1, e.num_targets) : std::max(e.label_text.size(), e.label_ids.size());
  if (n != 0 && std::cmp_not_equal(n, e.size))
    return Status::InvalidArgument(fmt::format("{}: {} labels for {} examples (give every example its label, or none)", source, n, e.size));
  if (e.values() != card.features()) return WrongShape(card, e, n > 0, source);
  // A CSV's strings as the model's vocabulary numbers them; other formats (an .npy) hold the ids.
  if (!e.categorical.empty()) TFD_RETURN_IF_ERROR(data::EncodeCategories(card.categorical, &e, source));
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
  d.labels.reserve(n);
  std::unordered_map<std::string_view, ClassId> id;  // views of the card's names; thousands of classes are one look-up each
  id.reserve(card.class_names.size());
  for (std::size_t c = 0; c < card.class_names.size(); ++c) id.emplace(card.class_names[c], static_cast<ClassId>(c));
  for (std::size_t i = 0; i < n; ++i) {
    const std::string label = i < e.label_text.size() ? e.label_text[i] : std::to_string(e.label_ids[i]);
    auto it = id.find(label);
    if (it == id.end())
      return Status::InvalidArgument(fmt::format("{}: example {}: label \"{}\" is not one of the model's {} classes ({})", source, i + 1, label,
                                                 card.class_names.size(), ClassList(card.class_names)));
    d.labels.push_back(it->second);
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
      "skip-rows", po::value(&a.skip_rows))("header", po::value(&a.header))("help,h", po::bool_switch(&help));
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(opts).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return Status::InvalidArgument(fmt::format("{}\n{}", e.what(), kUsage));
  }
  if (help) return *exit_now = true, out << kUsage, a;
  a.top_given = vm.count("top") > 0;
  if (a.model.empty() || a.data.empty()) return Status::InvalidArgument(fmt::format("--model and --data are required\n{}", kUsage));
  if (a.top < 1) return Status::InvalidArgument(fmt::format("--top {}: expected a count >= 1", a.top));
  if (a.threads < 1 || a.threads > 256) return Status::InvalidArgument(fmt::format("--threads {}: expected 1 to 256", a.threads));
  if (a.batch < 1 || a.batch > 65536) return Status::InvalidArgument(fmt::format("--batch {}: expected 1 to 65536", a.batch));
  if (vm.count("skip-rows") > 0 && a.skip_rows < 0) return Status::InvalidArgument(fmt::format("--skip-rows {}: expected a count >= 0", a.skip_rows));
  if (!a.header.empty() && a.header != "true" && a.header != "false" && a.header != "auto")
    return Status::InvalidArgument(fmt::format("--header {}: expected true, false or auto", a.header));
  Result<int> device = config::ParseDevice(a.device);
  if (!device.ok()) return Status::InvalidArgument(fmt::format("--device: {}", device.status().message()));
  if (*device >= 0) {
    if (Status s = cuda::CheckDevice(*device); !s.ok()) return Status::InvalidArgument(fmt::format("--device {}: {}", a.device, s.message()));
    a.cuda_device = *device;
  }
  if (!a.out.empty() && !a.out.ends_with(".npy") && !a.out.ends_with(".csv"))
    return Status::InvalidArgument(fmt::format("--out {}: expected a .csv or .npy file", a.out));
  return a;
}

// The file the rows go to, opened before any work, so that an unwritable --out fails at once.
Result<std::unique_ptr<std::ofstream>> OpenOut(const std::string& path) {
  auto f = std::make_unique<std::ofstream>(path, std::ios::binary | std::ios::trunc);
  if (!*f) return Status::InvalidArgument(fmt::format("--out {}: cannot write: {}", path, std::strerror(errno)));
  return f;
}

// The examples of --data under the model's card, or the one-line reason they cannot be read.
// `skipped`: the CSV rows skipped by the job's skip_rows (not by --skip-rows), for the summary.
Result<data::Dataset> ReadSource(const exporting::ModelCard& card, const Args& a, int* skipped) {
  if (card.regression() && a.top_given) return Status::InvalidArgument(fmt::format("--top {}: the model is a regression model (no classes)", a.top));
  if (!card.regression() && a.top > card.outputs()) return Status::InvalidArgument(fmt::format("--top {}: the model has {} classes", a.top, card.outputs()));
  TFD_ASSIGN_OR_RETURN(config::DataSpec spec, SourceSpec(card, a));
  *skipped = spec.format == Format::kCsv && a.skip_rows < 0 ? spec.skip_rows : 0;
  TFD_ASSIGN_OR_RETURN(data::Examples examples, data::ReadExamples(spec, spec.train, "--data"));
  return AsDataset(card, std::move(examples), a.data);
}

// The model's outputs on the GPU (`device`), batch by batch, and the metric from them: what
// PredictProbabilities and EvaluateLoss give on the CPU (the GPU's sums may differ in the last bits).
struct DeviceRun {
  std::vector<float> outputs;  // softmax for a classifier, as PredictProbabilities
  model::EvalResult metric;
};
Result<DeviceRun> PredictOnDevice(model::Model& model, const data::Dataset& d, int device) {
#ifdef TFD_HAVE_CUDA
  TFD_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaModel> gpu, cuda::CudaModel::Create(model, device, /*memory_fraction=*/0.9));
  TFD_RETURN_IF_ERROR(gpu->UploadParams(model.params()));
  const int width = model.classes(), max_batch = model.max_batch();
  DeviceRun run;
  run.outputs.resize(static_cast<std::size_t>(d.size) * static_cast<std::size_t>(width));
  std::vector<float> x(static_cast<std::size_t>(max_batch * model.input_size()));
  std::vector<ClassId> y(static_cast<std::size_t>(max_batch));
  std::vector<float> targets(static_cast<std::size_t>(max_batch) * static_cast<std::size_t>(std::max(width, 1)));
  std::vector<std::uint32_t> idx(static_cast<std::size_t>(max_batch));
  double hits = 0, abs_sum = 0, sq_sum = 0;
  for (std::int64_t start = 0; start < d.size; start += max_batch) {
    const int n = static_cast<int>(std::min<std::int64_t>(max_batch, d.size - start));
    std::iota(idx.begin(), idx.begin() + n, static_cast<std::uint32_t>(start));
    data::FillBatch(d, std::span(idx).first(static_cast<std::size_t>(n)), x.data(), y.data(), targets.data());
    float* out = run.outputs.data() + start * width;
    TFD_RETURN_IF_ERROR(gpu->Forward(x.data(), n, std::span(out, static_cast<std::size_t>(n) * static_cast<std::size_t>(width))));
    for (int i = 0; i < n; ++i) {
      const float* row = out + static_cast<std::ptrdiff_t>(i) * width;
      if (model.regression()) {
        if (d.targets.empty()) continue;
        for (int j = 0; j < width; ++j) {
          const double e = row[j] - targets[static_cast<std::size_t>(i * width + j)];
          abs_sum += std::abs(e), sq_sum += e * e;
        }
      } else if (!d.labels.empty()) {
        hits += std::max_element(row, row + width) - row == y[static_cast<std::size_t>(i)];
      }
    }
  }
  if (!model.regression()) model::SoftmaxRows(run.outputs, width);
  const double n = static_cast<double>(d.size), values = n * width;
  run.metric.accuracy = d.size > 0 ? hits / n : 0;
  run.metric.mae = values > 0 ? abs_sum / values : 0;
  run.metric.rmse = values > 0 ? std::sqrt(sq_sum / values) : 0;
  return run;
#else
  (void)model, (void)d;
  return Status::InvalidArgument(fmt::format("--device cuda:{}: this tfd was built without CUDA", device));
#endif
}

// What is printed after the rows: how many, from where, and the metric when the data has labels
// (`metric`: the GPU's; else EvaluateLoss on the CPU, as training evaluates).
std::string Summary(model::Model& model, const exporting::ModelCard& card, const data::Dataset& d, const Args& a, const std::string& dir,
                    int skipped, const model::EvalResult* metric) {
  std::string line = fmt::format("{} examples from {} with the model in {}", d.size, a.data, dir);
  if (skipped > 0) line += fmt::format(" (its first {} rows skipped, as training skipped them; --skip-rows 0 reads them)", skipped);
  if (card.regression() ? !d.targets.empty() : !d.labels.empty()) {
    const model::EvalResult r = metric != nullptr ? *metric : model::EvaluateLoss(model, d, /*with_loss=*/false);
    line += card.regression() ? fmt::format("; mae={:.4f} rmse={:.4f}", r.mae, r.rmse) : fmt::format("; accuracy={:.4f}", r.accuracy);
  }
  if (!a.out.empty()) line += fmt::format("; predictions in {}", a.out);
  return line;
}

}  // namespace

int Run(int argc, char** argv, std::ostream& out) {
  bool exit_now = false;
  Result<Args> args = ParseArgs(argc, argv, out, &exit_now);
  if (!args.ok()) return Fail(args.status().message());
  if (exit_now) return 0;
  const Args& a = *args;
  Result<std::string> dir = exporting::ResolveVersionDir(a.model);
  if (!dir.ok()) return Fail("--model " + dir.status().message());
  Result<exporting::LoadedModel> loaded = exporting::LoadVersion(*dir, a.batch, {.threads = a.threads});
  if (!loaded.ok()) return Fail(loaded.status().message());
  const exporting::ModelCard& card = loaded->card;
  int skipped = 0;
  Result<data::Dataset> dataset = ReadSource(card, a, &skipped);
  if (!dataset.ok()) return Fail(dataset.status().message());
  std::unique_ptr<std::ofstream> file;
  if (!a.out.empty()) {
    Result<std::unique_ptr<std::ofstream>> opened = OpenOut(a.out);
    if (!opened.ok()) return Fail(opened.status().message());
    file = std::move(*opened);
  }
  const data::Dataset& d = *dataset;
  model::Model& model = *loaded->model;
  std::vector<float> predictions;
  std::optional<model::EvalResult> device_metric;
  if (a.cuda_device >= 0) {
    Result<DeviceRun> run = PredictOnDevice(model, d, a.cuda_device);
    if (!run.ok()) return Fail(fmt::format("--device {}: {}", a.device, run.status().message()));
    predictions = std::move(run->outputs);
    device_metric = run->metric;
  } else {
    predictions = model::PredictProbabilities(model, d);
  }
  if (a.out.ends_with(".npy")) {
    const std::string bytes = data::NpyFloat32(predictions, {static_cast<std::uint64_t>(d.size), static_cast<std::uint64_t>(card.outputs())});
    file->write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  } else {
    WriteCsv(file ? *file : out, card, predictions, d.size, card.regression() ? 1 : a.top);
  }
  if (file && !(file->flush() && (file->close(), !file->fail()))) return Fail(fmt::format("--out {}: cannot write: {}", a.out, std::strerror(errno)));
  const std::string line = Summary(model, card, d, a, *dir, skipped, device_metric ? &*device_metric : nullptr);
  if (a.out.empty()) std::fprintf(stderr, "tfd: predict: %s\n", line.c_str());  // stdout holds the rows
  else out << line << "\n";
  return 0;
}

}  // namespace tfd::predict_command
