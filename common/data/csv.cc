// The CSV reader (common/data/readers.h): libcsv splits the records (RFC 4180: quoted fields with
// delimiters, quotes and newlines inside, CRLF), zlib inflates .gz files, std::from_chars parses
// the numbers.
#include <csv.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "common/data/readers.h"

namespace tfd::data {
namespace {

using config::DataSpec;

constexpr std::size_t kBlock = 1 << 20;

// Reads a file in blocks, inflating it when its name ends in .gz.
class BlockReader {
 public:
  static Result<std::unique_ptr<BlockReader>> Open(const std::string& path) {
    auto r = std::unique_ptr<BlockReader>(new BlockReader);
    r->gz_ = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
    if (r->gz_) r->gzfile_ = gzopen(path.c_str(), "rb");
    else r->file_ = std::fopen(path.c_str(), "rb");
    if (r->gzfile_ == nullptr && r->file_ == nullptr) return Status::NotFound(fmt::format("{}: cannot open", path));
    if (r->gzfile_ != nullptr) gzbuffer(r->gzfile_, 1 << 18);
    return r;
  }
  ~BlockReader() {
    if (file_ != nullptr) std::fclose(file_);
    if (gzfile_ != nullptr) gzclose(gzfile_);
  }
  // Bytes read into `buf` (0 at the end); -1 on a read error (a corrupt .gz).
  long Read(char* buf, std::size_t n) {
    if (gz_) return gzread(gzfile_, buf, static_cast<unsigned>(n));
    const std::size_t got = std::fread(buf, 1, n, file_);
    return got == 0 && std::ferror(file_) ? -1 : static_cast<long>(got);
  }

 private:
  BlockReader() = default;
  bool gz_ = false;
  std::FILE* file_ = nullptr;
  gzFile gzfile_ = nullptr;
};

std::string Shown(std::string_view text) {
  std::string s(text.substr(0, 40));
  if (text.size() > 40) s += "...";
  return s;
}

// What every file of one split shares: the first file's column names, which every later file's
// header must repeat; the features read (float bytes); each categorical column's index of the
// values met so far (into out->categorical[c].vocabulary).
struct SplitState {
  std::vector<std::string> columns;
  std::vector<std::uint8_t> floats;
  std::vector<std::unordered_map<std::string, int>> categories;
};

// What one file's records go through: the column plan (which cells are features, which the
// label, which features are categorical), then each data row's cells parsed into the examples.
class CsvParser {
 public:
  // Appends each row's features to state->floats, its label to `out`.
  CsvParser(const DataSpec& spec, std::string path, Examples* out, SplitState* state)
      : spec_(spec), path_(std::move(path)), out_(out), columns_(&state->columns), floats_(&state->floats), categories_(&state->categories) {}

  static void OnField(void* field, std::size_t len, void* self) { static_cast<CsvParser*>(self)->Field(static_cast<const char*>(field), len); }
  static void OnRow(int, void* self) { static_cast<CsvParser*>(self)->Row(); }

  const Status& status() const { return status_; }
  std::int64_t rows() const { return rows_; }
  std::int64_t line() const { return line_; }

 private:
  // Before the plan (a skipped row, the header, a first row without one) a cell is kept as text;
  // after it, a feature cell is parsed at once and the label's text kept: no copy of the others.
  void Field(const char* field, std::size_t len) {
    if (!status_.ok()) return;
    const std::size_t k = cells_used_++;
    if (len > 0 && std::memchr(field, '\n', len) != nullptr) newlines_ += static_cast<std::int64_t>(std::count(field, field + len, '\n'));
    if (!planned_ || skipped_ < spec_.skip_rows) {
      if (k == cells_.size()) cells_.emplace_back();
      cells_[k].assign(field == nullptr ? "" : field, len);
      return;
    }
    Cell(k, std::string_view(field == nullptr ? "" : field, len));
  }

  void Cell(std::size_t k, std::string_view text) {
    if (k >= slot_.size()) return;  // a ragged row: Row() reports it
    const int s = slot_[k];
    if (s >= 0 && category_[static_cast<std::size_t>(s)] >= 0) {
      row_[static_cast<std::size_t>(s)] = Category(category_[static_cast<std::size_t>(s)], text, k);
    } else if (s >= 0) {
      if (!Number(text, &row_[static_cast<std::size_t>(s)]) && bad_column_ < 0) {
        bad_column_ = static_cast<int>(k);
        bad_text_.assign(text);
      }
    } else if (s == kLabel) {
      label_text_.assign(text);
    }
  }

  // The index of `text` among column c's values (a new one is appended), as a float: exact, as
  // indices stay below kMaxCategories < 2^24. Past the bound, Row() reports column k.
  float Category(int c, std::string_view text, std::size_t k) {
    std::unordered_map<std::string, int>& index = (*categories_)[static_cast<std::size_t>(c)];
    auto it = index.find(std::string(text));
    if (it != index.end()) return static_cast<float>(it->second);
    if (std::ssize(index) >= kMaxCategories) {
      if (full_column_ < 0) full_column_ = static_cast<int>(k);
      return 0.0f;
    }
    std::vector<std::string>& values = out_->categorical[static_cast<std::size_t>(c)].vocabulary;
    index.emplace(text, static_cast<int>(values.size()));
    values.emplace_back(text);
    return static_cast<float>(values.size() - 1);
  }

  void Row() {
    const std::int64_t line = line_;
    line_ += 1 + newlines_;
    newlines_ = 0;
    const std::size_t n = cells_used_;
    cells_used_ = 0;
    if (!status_.ok()) return;
    if (skipped_ < spec_.skip_rows) return void(++skipped_);
    if (!planned_) {
      if (!header_) header_ = spec_.header.has_value() ? *spec_.header : !AllNumbers(n);
      if (*header_) {
        std::vector<std::string> names(cells_.begin(), cells_.begin() + static_cast<std::ptrdiff_t>(n));
        if (!columns_->empty() && names != *columns_)
          return Fail(line, fmt::format("its header ({} columns) differs from the first file's ({} columns)", names.size(), columns_->size()));
        *columns_ = std::move(names);
        return Plan(line);
      }
      if (columns_->empty()) {
        if (!spec_.columns.empty()) *columns_ = spec_.columns;
        else
          for (std::size_t i = 0; i < n; ++i) columns_->push_back(fmt::format("column {}", i));
      }
      Plan(line);
      if (!status_.ok()) return;
      for (std::size_t k = 0; k < n; ++k) Cell(k, cells_[k]);  // the first row is data
    }
    if (n != columns_->size())
      return Fail(line, fmt::format("{} fields, but the {} has {}", n, *header_ ? "header" : "first row", columns_->size()));
    if (bad_column_ >= 0) return Fail(line, Column(static_cast<std::size_t>(bad_column_)), bad_text_);
    if (full_column_ >= 0)
      return Fail(line, fmt::format("column {}: more than {} distinct values; a categorical column (data.categorical) holds at most that many",
                                    Column(static_cast<std::size_t>(full_column_)), kMaxCategories));
    const auto at = floats_->size();
    floats_->resize(at + row_.size() * sizeof(float));
    std::memcpy(floats_->data() + at, row_.data(), row_.size() * sizeof(float));
    if (!labelled_) {
      // predicting on a file without the label column: features only
    } else if (spec_.task == DataSpec::Task::kRegression) {
      float t = 0;
      if (!Number(label_text_, &t)) return Fail(line, Column(label_), label_text_);
      out_->targets.push_back(t);
    } else {
      if (label_text_.empty()) return Fail(line, fmt::format("column {}: empty label", Column(label_)));
      out_->label_text.push_back(label_text_);
    }
    ++rows_;
  }

  // The label and feature columns, by name or index, from the column names.
  void Plan(std::int64_t line) {
    planned_ = true;
    const std::vector<std::string>& cols = *columns_;
    auto find = [&](const std::string& name) -> int {
      auto it = std::find(cols.begin(), cols.end(), name);
      return it == cols.end() ? -1 : static_cast<int>(it - cols.begin());
    };
    const bool named_features = !spec_.feature_names.empty() || !spec_.feature_indices.empty();
    labelled_ = spec_.unlabeled_width == 0 ||
                (spec_.label.empty() ? named_features || std::ssize(cols) != spec_.unlabeled_width : find(spec_.label) >= 0);
    if (cols.size() < 2 && labelled_) return Fail(line, fmt::format("{} column; expected features and a label", cols.size()));
    int label = spec_.label_index >= 0 ? spec_.label_index : static_cast<int>(cols.size()) - 1;
    if (!labelled_) label = static_cast<int>(cols.size());  // no column: every other one may be a feature
    else if (!spec_.label.empty() && (label = find(spec_.label)) < 0)
      return FailPlan(fmt::format("data.label: no column \"{}\" (columns: {})", spec_.label, Listed(cols)));
    if (label >= static_cast<int>(cols.size()) && labelled_)
      return FailPlan(fmt::format("data.label: column {} does not exist ({} columns)", label, cols.size()));
    label_ = static_cast<std::size_t>(label);
    features_.clear();
    for (const std::string& name : spec_.feature_names) {
      const int at = find(name);
      if (at < 0) return FailPlan(fmt::format("data.features: no column \"{}\" (columns: {})", name, Listed(cols)));
      features_.push_back(static_cast<std::size_t>(at));
    }
    for (int at : spec_.feature_indices) {
      if (at >= static_cast<int>(cols.size())) return FailPlan(fmt::format("data.features: column {} does not exist ({} columns)", at, cols.size()));
      features_.push_back(static_cast<std::size_t>(at));
    }
    if (features_.empty())
      for (std::size_t i = 0; i < cols.size(); ++i)
        if (i != label_) features_.push_back(i);
    if (labelled_ && std::find(features_.begin(), features_.end(), label_) != features_.end())
      return FailPlan(fmt::format("data.features: includes the label column \"{}\"", cols[label_]));
    slot_.assign(cols.size(), kIgnored);
    for (std::size_t f = 0; f < features_.size(); ++f) slot_[features_[f]] = static_cast<int>(f);
    if (labelled_) slot_[label_] = kLabel;
    row_.assign(features_.size(), 0.0f);
    if (!PlanCategories(find)) return;
    if (out_->width == 0) {
      out_->width = static_cast<int>(features_.size());
      for (std::size_t f : features_) out_->feature_names.push_back(cols[f]);
    }
  }

  // Which features hold category strings (data.categorical, by name or index): category_[f] is
  // the column's place among out_->categorical, in row order, or -1. False after a FailPlan.
  template <typename Find>
  bool PlanCategories(const Find& find) {
    const std::vector<std::string>& cols = *columns_;
    std::vector<int> at;
    for (std::size_t i = 0; i < spec_.categorical_names.size(); ++i) {
      at.push_back(find(spec_.categorical_names[i]));
      if (at.back() < 0)
        return FailPlan(fmt::format("data.categorical[{}]: no column \"{}\" (columns: {})", i, spec_.categorical_names[i], Listed(cols))), false;
    }
    for (std::size_t i = 0; i < spec_.categorical_indices.size(); ++i) {
      at.push_back(spec_.categorical_indices[i]);
      if (at.back() >= std::ssize(cols))
        return FailPlan(fmt::format("data.categorical[{}]: column {} does not exist ({} columns)", i, at.back(), cols.size())), false;
    }
    category_.assign(features_.size(), -1);
    for (std::size_t i = 0; i < at.size(); ++i) {
      const int s = slot_[static_cast<std::size_t>(at[i])];
      if (s == kLabel) return FailPlan(fmt::format("data.categorical[{}]: \"{}\" is the label column", i, cols[static_cast<std::size_t>(at[i])])), false;
      if (s < 0) return FailPlan(fmt::format("data.categorical[{}]: \"{}\" is not one of data.features", i, cols[static_cast<std::size_t>(at[i])])), false;
      category_[static_cast<std::size_t>(s)] = 0;
    }
    int c = 0;
    const bool first = out_->width == 0;
    for (std::size_t f = 0; f < features_.size(); ++f) {
      if (category_[f] < 0) continue;
      category_[f] = c++;
      if (first) out_->categorical.push_back({.feature = static_cast<int>(f), .name = cols[features_[f]], .vocabulary = {}});
    }
    categories_->resize(out_->categorical.size());
    return true;
  }

  static std::string Listed(const std::vector<std::string>& cols) {
    std::string s = fmt::format("{}", fmt::join(cols.begin(), cols.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(cols.size(), 6)), ", "));
    return cols.size() > 6 ? s + ", ..." : s;
  }
  std::string Column(std::size_t i) const { return fmt::format("{} (\"{}\")", i + 1, (*columns_)[i]); }

  // Whether the first `n` cells kept as text are all numbers (a first row of data, not a header).
  bool AllNumbers(std::size_t n) const {
    float v = 0;
    for (std::size_t k = 0; k < n; ++k)
      if (!Number(cells_[k], &v)) return false;
    return n > 0;
  }

  // A finite number, spaces around it allowed.
  static bool Number(std::string_view s, float* v) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    if (!s.empty() && s.front() == '+') s.remove_prefix(1);
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
    return !s.empty() && ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(*v);
  }

  void Fail(std::int64_t line, const std::string& what) {
    if (status_.ok()) status_ = Status::InvalidArgument(fmt::format("{}:{}: {}", path_, line, what));
  }
  void Fail(std::int64_t line, const std::string& column, const std::string& text) {
    Fail(line, fmt::format("column {}: expected a finite number, got \"{}\"", column, Shown(text)));
  }
  void FailPlan(const std::string& what) {
    if (status_.ok()) status_ = Status::InvalidArgument(fmt::format("{}: {}", path_, what));
  }

  const DataSpec& spec_;
  std::string path_;
  Examples* out_;
  std::vector<std::string>* columns_;
  std::vector<std::uint8_t>* floats_;
  std::vector<std::unordered_map<std::string, int>>* categories_;
  std::vector<int> category_;       // per feature: its categorical column's place, or -1
  int full_column_ = -1;            // the row's first categorical cell past kMaxCategories values
  static constexpr int kIgnored = -1, kLabel = -2;
  std::vector<std::string> cells_;  // the row's cells as text, before the plan
  std::size_t cells_used_ = 0;
  std::vector<int> slot_;           // per column: its place in row_, kLabel or kIgnored
  std::vector<float> row_;          // the row's features
  std::string label_text_, bad_text_;
  int bad_column_ = -1;             // the row's first cell that is not a number
  std::optional<bool> header_;      // the spec's, or decided from the first row
  std::int64_t line_ = 1, newlines_ = 0, rows_ = 0;
  int skipped_ = 0;
  bool planned_ = false;
  bool labelled_ = true;  // false: a file to predict on, without the label column
  std::size_t label_ = 0;
  std::vector<std::size_t> features_;
  Status status_;
};

Status ReadOne(const DataSpec& spec, const std::string& path, Examples* out, SplitState* state) {
  TFD_ASSIGN_OR_RETURN(std::unique_ptr<BlockReader> in, BlockReader::Open(path));
  csv_parser p{};
  if (csv_init(&p, CSV_STRICT | CSV_STRICT_FINI | CSV_APPEND_NULL) != 0) return Status::Internal("csv_init failed");
  csv_set_delim(&p, static_cast<unsigned char>(spec.delimiter));
  std::unique_ptr<csv_parser, void (*)(csv_parser*)> owner(&p, [](csv_parser* q) { csv_free(q); });
  CsvParser parser(spec, path, out, state);
  std::vector<char> buf(kBlock);
  for (;;) {
    const long got = in->Read(buf.data(), buf.size());
    if (got < 0) return Status::InvalidArgument(fmt::format("{}: read failed (a corrupt or truncated .gz?)", path));
    if (got == 0) break;
    const std::size_t used = csv_parse(&p, buf.data(), static_cast<std::size_t>(got), CsvParser::OnField, CsvParser::OnRow, &parser);
    if (!parser.status().ok()) return parser.status();
    if (used != static_cast<std::size_t>(got))
      return Status::InvalidArgument(fmt::format("{}:{}: {}", path, parser.line(), csv_strerror(csv_error(&p))));
  }
  if (csv_fini(&p, CsvParser::OnField, CsvParser::OnRow, &parser) != 0)
    return Status::InvalidArgument(fmt::format("{}:{}: {}", path, parser.line(), csv_strerror(csv_error(&p))));
  if (!parser.status().ok()) return parser.status();
  if (parser.rows() == 0) return Status::InvalidArgument(fmt::format("{}: no data rows", path));
  return Status::Ok();
}

}  // namespace

Result<Examples> ReadCsv(const DataSpec& spec, const std::vector<std::string>& paths) {
  Examples out;
  out.dtype = DType::kF32;
  SplitState state;
  for (const std::string& path : paths) TFD_RETURN_IF_ERROR(ReadOne(spec, path, &out, &state));
  out.size = static_cast<std::int64_t>(state.floats.size() / sizeof(float)) / std::max(out.width, 1);
  if (spec.task == DataSpec::Task::kRegression) out.num_targets = 1;
  out.features = ByteArray(std::move(state.floats));
  return out;
}

}  // namespace tfd::data
