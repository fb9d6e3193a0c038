#include "launcher/report.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/config/cluster_file.h"
#include "common/config/job.h"
#include "launcher/plan.h"
#include "launcher/run_summary.h"

namespace tfd::launcher {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Calls `f` with each complete line of `text` (a last line without '\n' is still being written).
template <typename F>
void ForEachLine(std::string_view text, F&& f) {
  std::size_t start = 0;
  for (std::size_t nl; (nl = text.find('\n', start)) != std::string_view::npos; start = nl + 1) f(text.substr(start, nl - start));
}

bool IsPs(std::string_view task) { return task.rfind("ps:", 0) == 0; }

std::string Escape(std::string_view s) {  // for HTML and SVG text and attributes
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Worker colours, also the dashboard's (launcher/assets/dashboard.html).
constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string Num(double v) {  // short axis labels
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e5 || a < 1e-3) return fmt::format("{:.2g}", v);
  if (a >= 100) return fmt::format("{:.0f}", v);
  return fmt::format("{:.3g}", v);
}

constexpr int kChartW = 460, kChartH = 260, kLeft = 56, kRight = 12, kTop = 28, kBottom = 40, kColumns = 2;

// One chart at (ox, oy): frame, axis ticks, a path per series, a legend.
void RenderChart(const Chart& c, int ox, int oy, const std::map<std::string, std::size_t>& colour, std::string* out) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const Series& s : c.series)
    for (const CurvePoint& p : s.points) {
      x0 = std::min(x0, p.x), x1 = std::max(x1, p.x), y0 = std::min(y0, p.y), y1 = std::max(y1, p.y);
    }
  if (!(x0 <= x1)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x0 -= 0.5, x1 += 0.5;
  if (y1 == y0) y0 -= 0.5, y1 += 0.5;
  const double pw = kChartW - kLeft - kRight, ph = kChartH - kTop - kBottom;
  auto sx = [&](double x) { return ox + kLeft + (x - x0) / (x1 - x0) * pw; };
  auto sy = [&](double y) { return oy + kTop + (1 - (y - y0) / (y1 - y0)) * ph; };
  *out += fmt::format(R"(<g class="chart" data-metric="{}">)", Escape(c.metric));
  *out += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="#fff" stroke="#ccc"/>)", ox + kLeft, oy + kTop, pw, ph);
  *out += fmt::format(R"(<text x="{}" y="{}" class="title">{}</text>)", ox + kLeft, oy + 18, Escape(c.title));
  for (int i = 0; i <= 4; ++i) {
    const double fx = x0 + (x1 - x0) * i / 4, fy = y0 + (y1 - y0) * i / 4;
    const char* anchor = i == 0 ? "start" : i == 4 ? "end" : "middle";  // the end labels stay inside the chart
    *out += fmt::format(R"(<text x="{:.1f}" y="{}" class="tick" text-anchor="{}">{}</text>)", sx(fx), oy + kTop + ph + 14, anchor, Num(fx));
    *out += fmt::format(R"(<text x="{}" y="{:.1f}" class="tick" text-anchor="end">{}</text>)", ox + kLeft - 4, sy(fy) + 4, Num(fy));
    *out += fmt::format(R"(<line x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" stroke="#eee"/>)", ox + kLeft, ox + kLeft + pw, sy(fy), sy(fy));
  }
  *out += fmt::format(R"(<text x="{}" y="{}" class="tick" text-anchor="middle">{}</text>)", ox + kLeft + pw / 2, oy + kChartH - 8,
                      Escape(c.x_label));
  std::size_t legend = 0;  // names left to right, ending at the chart's right edge
  for (const Series& s : c.series) {
    const char* col = kPalette[colour.at(s.task) % std::size(kPalette)];
    std::string d;
    for (const CurvePoint& p : s.points) d += fmt::format("{}{:.1f} {:.1f}", d.empty() ? "M" : " L", sx(p.x), sy(p.y));
    if (s.points.size() == 1) d += " l0 0";  // a dot (round caps)
    *out += fmt::format(R"(<path class="curve" data-task="{}" data-metric="{}" data-points="{}" d="{}" stroke="{}"/>)", Escape(s.task),
                        Escape(c.metric), s.points.size(), d, col);
    *out += fmt::format(R"(<text x="{}" y="{}" class="legend" style="fill:{}">{}</text>)", ox + kChartW - kRight - 90 * static_cast<int>(c.series.size() - legend),
                        oy + 18, col, Escape(s.task));
    ++legend;
  }
  *out += "</g>";
}

std::string StateFromExit(int code, bool past_deadline) {
  if (code == 0) return "done";
  if (past_deadline) return "killed past the deadline";
  if (code == 130 || code == 143) return "stopped";
  return fmt::format("failed ({})", code);
}

// job.json's fields as "path = value" rows ("optimizer.learning_rate = 0.01").
void Flatten(const json& j, const std::string& path, std::vector<std::pair<std::string, std::string>>* rows) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [k, v] : j.items()) Flatten(v, path.empty() ? k : path + "." + k, rows);
  } else {
    rows->emplace_back(path, j.is_string() ? j.get<std::string>() : j.dump());
  }
}

Result<std::string> ReadText(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return Status::InvalidArgument(fmt::format("{}: no such file", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::InvalidArgument(fmt::format("{}: cannot be read", path.string()));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// `s` as one shell word: as it is when it holds nothing a shell reads, else quoted.
std::string ShellWord(const std::string& s) {
  const bool plain = !s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./:=@%+,") == std::string::npos;
  return plain ? s : ShellQuote(s);
}

// tfd predict's --data (and --labels) for the job's data: the MNIST folder (predict reads its test
// pair), else the test files, else the training files.
std::string PredictData(const config::DataSpec& data) {
  if (data.is_mnist_folder()) return "--data " + ShellWord(data.folder);
  const config::DataFiles& files = data.test.empty() ? data.train : data.test;
  if (!files.x.empty()) return "--data " + ShellWord(files.x) + (files.y.empty() ? "" : " --labels " + ShellWord(files.y));
  return files.paths.empty() ? "" : "--data " + ShellWord(files.paths.front());
}

void RenderModel(const ReportInputs& in, std::string* h) {
  *h += "<h2>Model</h2>\n";
  if (!in.model) {
    *h += "<p class=\"empty\">The run exported no model (summary.json names none).</p>\n";
    return;
  }
  const ModelSummary& m = *in.model;
  auto row = [&](const std::string& key, const std::string& value, bool code) {
    *h += fmt::format("<tr><th>{}</th><td>{}{}{}</td></tr>\n", key, code ? "<code>" : "", Escape(value), code ? "</code>" : "");
  };
  *h += "<table id=\"model\">\n";
  row("path", m.where(), true);
  row("version", m.version, false);
  if (m.global_step) row("global step", std::to_string(*m.global_step), false);
  row("exported by", m.task, false);
  row(m.host.empty() ? "serve" : "serve (on " + Escape(m.host) + ")", in.commands.serve, true);
  if (!in.commands.predict.empty()) row(m.host.empty() ? "predict" : "predict (on " + Escape(m.host) + ")", in.commands.predict, true);
  const json card = json::parse(in.model_json, nullptr, /*allow_exceptions=*/false);
  if (card.is_object() && card.contains("metrics") && card["metrics"].is_object()) {
    for (const auto& [k, v] : card["metrics"].items()) {
      const std::string value = v.is_number_float() ? fmt::format("{:.6g}", v.get<double>()) : v.is_string() ? v.get<std::string>() : v.dump();
      *h += fmt::format("<tr data-metric=\"{0}\"><th>{0}</th><td>{1}</td></tr>\n", Escape(k), Escape(value));
    }
  }
  *h += "</table>\n";
}

}  // namespace

ModelCommands CommandsFor(const ModelSummary& model, const config::DataSpec& data) {
  const std::string base = ShellWord(model.base());
  const std::string from = PredictData(data);
  return {.serve = "tfd serve --model " + base, .predict = from.empty() ? "" : "tfd predict --model " + base + " " + from};
}

RunCurves ExtractCurves(std::string_view metrics_jsonl) {
  struct PerTask {
    std::vector<CurvePoint> step_loss, step_acc, epoch_loss, epoch_acc, test_acc, val_acc, rate;
    std::vector<CurvePoint> step_mae, epoch_mae, test_mae, val_mae;  // a regression run's
  };
  std::map<std::string, PerTask> by_task;
  // A model-parallel stage's task -> the curve it draws: stage 0 draws its replica's ("replica R"),
  // the others none (every stage logs the replica's loss, passed back from the last stage).
  std::map<std::string, std::string> replica_of;
  RunCurves out;
  ForEachLine(metrics_jsonl, [&](std::string_view line) {
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;
    Result<config::Event> e = config::ParseEvent(line);
    if (!e.ok()) {
      ++out.skipped;
      return;
    }
    ++out.events;
    if (IsPs(e->task) || e->task.empty()) return;
    if (e->event == "start" && e->numbers.contains("stage") && e->numbers.contains("replica")) {
      replica_of[e->task] = e->Number("stage") == 0 ? fmt::format("replica {:.0f}", e->Number("replica")) : "";
      return;
    }
    std::string name = e->task;
    if (auto r = replica_of.find(e->task); r != replica_of.end()) {
      if (r->second.empty()) return;
      name = r->second;
    }
    PerTask& t = by_task[name];
    auto add = [&](std::vector<CurvePoint>& v, const char* xkey, const char* ykey) {
      auto x = e->numbers.find(xkey), y = e->numbers.find(ykey);
      if (x != e->numbers.end() && y != e->numbers.end() && std::isfinite(y->second)) v.push_back({x->second, y->second});
    };
    if (e->event == "step") {
      add(t.step_loss, "global_step", "loss");
      add(t.step_acc, "global_step", "accuracy");
      add(t.step_mae, "global_step", "mae");
    } else if (e->event == "epoch") {
      add(t.epoch_mae, "global_step", "mae");
      add(t.test_mae, "epoch", "test_mae");
      add(t.val_mae, "epoch", "val_mae");
      add(t.epoch_loss, "global_step", "loss");
      add(t.epoch_acc, "global_step", "accuracy");
      add(t.test_acc, "epoch", "test_accuracy");
      add(t.val_acc, "epoch", "val_accuracy");
      add(t.rate, "epoch", "samples_per_sec");
    }
  });
  auto chart = [&](const char* metric, const char* title, const char* x_label, auto pick) {
    Chart c{metric, title, x_label, {}};
    for (auto& [task, t] : by_task) {
      std::vector<CurvePoint>& pts = pick(t);
      if (!pts.empty()) c.series.push_back({task, std::move(pts)});
    }
    return c;
  };
  out.charts.push_back(chart("loss", "loss", "global step",
                             [](PerTask& t) -> std::vector<CurvePoint>& { return t.step_loss.empty() ? t.epoch_loss : t.step_loss; }));
  // A regression run (some task logged an MAE) charts MAE where a classifier charts accuracy.
  const bool regression = std::any_of(by_task.begin(), by_task.end(), [](const auto& t) {
    return !t.second.epoch_mae.empty() || !t.second.step_mae.empty() || !t.second.test_mae.empty();
  });
  if (regression) {
    out.charts.push_back(chart("mae", "MAE (training batches)", "global step",
                               [](PerTask& t) -> std::vector<CurvePoint>& { return t.step_mae.empty() ? t.epoch_mae : t.step_mae; }));
    out.charts.push_back(chart("test_mae", "test MAE", "epoch", [](PerTask& t) -> std::vector<CurvePoint>& { return t.test_mae; }));
  } else {
    out.charts.push_back(chart("accuracy", "accuracy (training batches)", "global step",
                               [](PerTask& t) -> std::vector<CurvePoint>& { return t.step_acc.empty() ? t.epoch_acc : t.step_acc; }));
    out.charts.push_back(chart("test_accuracy", "test accuracy", "epoch", [](PerTask& t) -> std::vector<CurvePoint>& { return t.test_acc; }));
  }
  Chart val = regression ? chart("val_mae", "validation MAE", "epoch", [](PerTask& t) -> std::vector<CurvePoint>& { return t.val_mae; })
                         : chart("val_accuracy", "validation accuracy", "epoch", [](PerTask& t) -> std::vector<CurvePoint>& { return t.val_acc; });
  if (!val.series.empty()) out.charts.push_back(std::move(val));
  out.charts.push_back(chart("samples_per_sec", "samples/s", "epoch", [](PerTask& t) -> std::vector<CurvePoint>& { return t.rate; }));
  return out;
}

std::vector<TaskState> TaskStatesFromEvents(std::string_view metrics_jsonl) {
  std::map<std::string, TaskState> by_task;
  ForEachLine(metrics_jsonl, [&](std::string_view line) {
    Result<config::Event> e = config::ParseEvent(line);
    if (!e.ok() || e->task.empty()) return;
    TaskState& t = by_task[e->task];
    t.task = e->task;
    if (e->event == "start") {
      if (t.state != "starting") ++t.restarts;
      t.state = t.restarts > 0 ? "restarted" : "running";
    } else if (e->event == "done") {
      t.state = "done";
      t.test_accuracy = e->Number("test_accuracy", t.test_accuracy);
    } else if (e->event == "error") {
      t.state = "failed";
    }
  });
  std::vector<TaskState> out;
  for (auto& entry : by_task) out.push_back(std::move(entry.second));
  return out;
}

namespace {

void ApplyRunSummary(const RunSummary& summary, std::vector<TaskState>* tasks) {
  for (const TaskSummary& t : summary.tasks) {
    auto it = std::find_if(tasks->begin(), tasks->end(), [&](const TaskState& s) { return s.task == t.task; });
    if (it == tasks->end()) it = tasks->insert(tasks->end(), TaskState{.task = t.task});
    it->exit_code = t.exit_code;
    it->restarts = t.restarts;
    if (t.test_accuracy) it->test_accuracy = *t.test_accuracy;
    it->state = StateFromExit(it->exit_code, t.past_deadline);
  }
  std::sort(tasks->begin(), tasks->end(), [](const TaskState& a, const TaskState& b) { return a.task < b.task; });
}

}  // namespace

Status ApplySummary(std::string_view summary_json, std::string_view source, std::vector<TaskState>* tasks) {
  TFD_ASSIGN_OR_RETURN(const RunSummary summary, ParseSummary(summary_json, source));
  ApplyRunSummary(summary, tasks);
  return Status::Ok();
}

std::string RenderCurvesSvg(const RunCurves& curves) {
  std::map<std::string, std::size_t> colour;
  for (const Chart& c : curves.charts)
    for (const Series& s : c.series) colour.emplace(s.task, 0);
  std::size_t n = 0;
  for (auto& [task, index] : colour) index = n++;
  const int rows = (static_cast<int>(curves.charts.size()) + kColumns - 1) / kColumns;
  std::string out = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" class="curves" width="{0}" height="{1}" viewBox="0 0 {0} {1}">)",
                                kChartW * kColumns, std::max(rows, 1) * kChartH);
  out += "<style>text{font-family:sans-serif;font-size:11px;fill:#333}.title{font-size:13px;font-weight:bold}"
         "path.curve{fill:none;stroke-width:1.5;stroke-linejoin:round;stroke-linecap:round}</style>";
  for (std::size_t i = 0; i < curves.charts.size(); ++i)
    RenderChart(curves.charts[i], static_cast<int>(i % kColumns) * kChartW, static_cast<int>(i / kColumns) * kChartH, colour, &out);
  out += "</svg>\n";
  return out;
}

std::string RenderReportHtml(const ReportInputs& in) {
  const std::string name = fs::path(in.run_dir).filename().string();
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>tfd run " + Escape(name) + "</title>\n";
  h += "<style>body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}"
       "td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}th{background:#f3f3f3}"
       ".done{color:#2a7a2a}.failed{color:#b00}.empty{font-style:italic}code{font-family:monospace}</style></head>\n<body>\n";
  h += fmt::format("<h1>tfd run {}</h1>\n<p>Run folder <code>{}</code>: {}.</p>\n", Escape(name), Escape(in.run_dir),
                   in.ended ? "the run has ended (summary.json)" : "the run had not ended when this report was written");
  h += "<h2>Tasks</h2>\n<table id=\"tasks\"><tr><th>task</th><th>state</th><th>restarts</th><th>exit code</th><th>test accuracy</th></tr>\n";
  for (const TaskState& t : in.tasks) {
    const char* cls = t.state == "done" ? "done" : t.state.rfind("failed", 0) == 0 ? "failed" : "";
    h += fmt::format("<tr data-task=\"{}\" data-state=\"{}\"><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                     Escape(t.task), Escape(t.state), Escape(t.task), cls, Escape(t.state), t.restarts,
                     t.exit_code < 0 ? "-" : std::to_string(t.exit_code), t.test_accuracy < 0 ? "-" : fmt::format("{:.4f}", t.test_accuracy));
  }
  h += "</table>\n<h2>Job</h2>\n<table id=\"job\">\n";
  std::vector<std::pair<std::string, std::string>> rows;
  Flatten(json::parse(in.job_json, nullptr, false), "", &rows);
  for (const auto& [k, v] : rows) h += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", Escape(k), Escape(v));
  h += "</table>\n";
  if (in.ended) RenderModel(in, &h);
  h += "<h2>Curves</h2>\n";
  if (in.curves.events == 0) {
    h += "<p class=\"empty\">No events yet: metrics.jsonl has no event line, so there is nothing to plot.</p>\n";
  } else {
    h += RenderCurvesSvg(in.curves);
    h += fmt::format("<p>{} events{}.</p>\n", in.curves.events,
                     in.curves.skipped == 0 ? "" : fmt::format("; {} lines of metrics.jsonl were not events and were left out", in.curves.skipped));
  }
  h += "</body></html>\n";
  return h;
}

Status WriteReport(const fs::path& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return Status::InvalidArgument(fmt::format("{}: not a run folder (no such folder)", run_dir.string()));
  Result<std::string> job = ReadText(run_dir / "job.json");
  if (!job.ok()) return job.status();
  if (json j = json::parse(*job, nullptr, false); j.is_discarded() || !j.is_object())
    return Status::InvalidArgument(fmt::format("{}: expected a JSON object (the job spec)", (run_dir / "job.json").string()));
  Result<std::string> metrics = ReadText(run_dir / "metrics.jsonl");
  if (!metrics.ok()) return metrics.status();
  ReportInputs in{.run_dir = fs::absolute(run_dir, ec).lexically_normal().string(), .job_json = *job};
  in.curves = ExtractCurves(*metrics);
  if (in.curves.events == 0 && in.curves.skipped > 0)
    return Status::InvalidArgument(fmt::format("{}: no line is a JSON event", (run_dir / "metrics.jsonl").string()));
  in.tasks = TaskStatesFromEvents(*metrics);
  if (fs::exists(run_dir / "summary.json", ec)) {
    Result<std::string> summary = ReadText(run_dir / "summary.json");
    if (!summary.ok()) return summary.status();
    TFD_ASSIGN_OR_RETURN(const RunSummary parsed, ParseSummary(*summary, (run_dir / "summary.json").string()));
    ApplyRunSummary(parsed, &in.tasks);
    in.ended = true;
    in.model = parsed.model;
  }
  if (in.model) {
    Result<config::JobSpec> spec = config::ParseJobSpec(*job, (run_dir / "job.json").string());
    in.commands = CommandsFor(*in.model, spec.ok() ? spec->data : config::DataSpec{});
    if (!spec.ok()) in.commands.predict.clear();
    if (in.model->host.empty()) {  // a remote chief's model.json is on its host
      Result<std::string> card = ReadText(fs::path(in.model->path) / "model.json");
      if (card.ok()) in.model_json = std::move(card).value();
    }
  }
  for (const auto& [file, text] : {std::pair{"report.html", RenderReportHtml(in)}, std::pair{"curves.svg", RenderCurvesSvg(in.curves)}}) {
    const fs::path path = run_dir / file;
    const fs::path tmp = run_dir / (std::string(file) + ".tmp");
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << (std::string_view(file) == "curves.svg" ? "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" : "") << text;
    out.close();
    if (!out) return Status::Internal(fmt::format("{}: cannot be written", tmp.string()));
    fs::rename(tmp, path, ec);  // a browser reloading the file never sees half of it
    if (ec) return Status::Internal(fmt::format("{}: cannot be written: {}", path.string(), ec.message()));
  }
  return Status::Ok();
}

}  // namespace tfd::launcher
