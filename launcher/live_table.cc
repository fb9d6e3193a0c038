#include "launcher/live_table.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "launcher/runner.h"

namespace tfd::launcher {
namespace {

std::optional<std::int64_t> Step(double step) {
  if (!std::isfinite(step)) return std::nullopt;
  return std::llround(step);
}

}  // namespace

void ApplyEvent(const config::Event& e, LiveRow& r, TaskFacts& facts) {
  if (e.event == "start") {
    facts.pid = static_cast<pid_t>(e.Number("pid", -1));
    if (e.numbers.contains("stage") && e.numbers.contains("replica")) {  // a model-parallel stage: its replica's row
      r.stage = static_cast<int>(e.Number("stage"));
      r.stages = static_cast<int>(e.Number("stages", 0));
      r.replica = static_cast<int>(e.Number("replica"));
    }
  } else if (e.event == "epoch") {
    r.epoch = e.Number("epoch", r.epoch);
    r.global_step = e.Number("global_step", r.global_step);
    r.loss = e.Number("loss", r.loss);
    r.accuracy = e.Number("accuracy", r.accuracy);
    r.test_accuracy = e.Number("test_accuracy", r.test_accuracy);
    r.mae = e.Number("mae", r.mae), r.test_mae = e.Number("test_mae", r.test_mae);  // a regression run's
    r.samples_per_sec = e.Number("samples_per_sec", r.samples_per_sec);
    r.state = "training";
  } else if (e.event == "eval") {  // the evaluator's row: its last evaluated step and accuracy (a regression's test MAE)
    r.global_step = e.Number("global_step", r.global_step);
    r.test_accuracy = e.Number("test_accuracy", r.test_accuracy);
    r.test_mae = e.Number("test_mae", r.test_mae);
    r.state = "evaluating";
    facts.final_global_step = Step(r.global_step);
    if (e.numbers.contains("test_accuracy")) facts.final_test_accuracy = r.test_accuracy;
  } else if (e.event == "stage") {
    r.stage = static_cast<int>(e.Number("stage", r.stage));
    r.stages = static_cast<int>(e.Number("stages", r.stages));
    r.replica = static_cast<int>(e.Number("replica", r.replica < 0 ? 0 : r.replica));
    r.busy = e.Number("busy", r.busy);
  } else if (e.event == "ready") {
    r.state = "training";
  } else if (e.event == "done") {
    r.test_accuracy = e.Number("test_accuracy", r.test_accuracy);
    r.test_mae = e.Number("test_mae", r.test_mae);
    r.global_step = e.Number("global_step", r.global_step);
    r.state = "done";
    facts.final_test_accuracy.reset();
    facts.final_global_step.reset();
    if (e.numbers.contains("test_accuracy")) facts.final_test_accuracy = e.Number("test_accuracy");
    if (e.numbers.contains("global_step")) facts.final_global_step = Step(e.Number("global_step"));
    const auto sha = e.strings.find("params_sha256");
    facts.params_sha256 = sha != e.strings.end() ? sha->second : "";
  } else if (e.event == "exported") {  // the latest version folder it wrote (export.every_epochs writes several)
    const auto path = e.strings.find("path"), version = e.strings.find("version");
    if (path == e.strings.end()) return;
    facts.exported_path = path->second;
    facts.exported_version = version != e.strings.end() ? version->second : "";
    facts.exported_step.reset();
    if (e.numbers.contains("global_step")) facts.exported_step = Step(e.Number("global_step"));
  }
}

std::vector<LiveRow> ByReplica(const std::vector<LiveRow>& rows) {
  std::vector<LiveRow> out;
  std::map<int, std::size_t> at;                     // replica -> its row in `out`
  std::map<int, std::vector<const LiveRow*>> stages;  // replica -> its stages' rows
  for (const LiveRow& r : rows) {
    if (r.stage < 0 || r.replica < 0) {
      out.push_back(r);
      continue;
    }
    if (!at.contains(r.replica)) {
      at[r.replica] = out.size();
      out.push_back({});
    }
    stages[r.replica].push_back(&r);
  }
  for (auto& [replica, members] : stages) {
    std::sort(members.begin(), members.end(), [](const LiveRow* a, const LiveRow* b) { return a->stage < b->stage; });
    LiveRow merged;
    merged.name = fmt::format("replica {}", replica);
    merged.replica = replica;
    merged.stages = members.front()->stages;
    merged.epoch = members.front()->epoch;
    merged.global_step = members.front()->global_step;
    merged.samples_per_sec = members.front()->samples_per_sec;
    std::string busy;
    bool same_state = true;
    for (const LiveRow* m : members) {
      merged.epoch = std::min(merged.epoch, m->epoch);
      merged.global_step = std::min(merged.global_step, m->global_step);
      merged.samples_per_sec = std::min(merged.samples_per_sec, m->samples_per_sec);
      if (m->loss >= 0) merged.loss = m->loss;
      if (m->accuracy >= 0) merged.accuracy = m->accuracy;
      if (m->test_accuracy >= 0) merged.test_accuracy = m->test_accuracy;
      if (m->mae >= 0) merged.mae = m->mae;
      if (m->test_mae >= 0) merged.test_mae = m->test_mae;
      same_state = same_state && m->state == members.front()->state;
      busy += fmt::format(" {}:{}", m->stage, m->busy < 0 ? std::string("-") : fmt::format("{:.0f}%", 100 * m->busy));
    }
    if (same_state) {
      merged.state = members.front()->state;
    } else {  // say which stage is where: "stage 0 training, stage 1 failed (1)"
      merged.state.clear();
      for (const LiveRow* m : members)
        merged.state += fmt::format("{}stage {} {}", merged.state.empty() ? "" : ", ", m->stage, m->state);
    }
    merged.state += ", stages" + busy;
    out[at[replica]] = std::move(merged);
  }
  return out;
}

std::vector<std::string> FormatLiveTable(const std::vector<LiveRow>& rows) {
  const bool regression = std::any_of(rows.begin(), rows.end(), [](const LiveRow& r) { return r.mae >= 0 || r.test_mae >= 0; });
  std::vector<std::string> lines = {fmt::format("{:<10} {:>5} {:>11} {:>8} {:>8} {:>9} {:>10}  {}", "worker", "epoch", "global_step", "loss",
                                                regression ? "mae" : "accuracy", regression ? "test_mae" : "test_acc", "samples/s", "state")};
  for (const LiveRow& r : rows) {
    auto num = [](double v, const char* f) { return v < 0 ? std::string("-") : fmt::format(fmt::runtime(f), v); };
    lines.push_back(fmt::format("{:<10} {:>5} {:>11} {:>8} {:>8} {:>9} {:>10}  {}", r.name, num(r.epoch, "{:.0f}"),
                                num(r.global_step, "{:.0f}"), num(r.loss, "{:.4f}"), num(regression ? r.mae : r.accuracy, "{:.4f}"),
                                num(regression ? r.test_mae : r.test_accuracy, "{:.4f}"), num(r.samples_per_sec, "{:.0f}"), r.state));
  }
  return lines;
}

void LiveDisplay::Line(const std::string& s) {
  if (json_) {
    const std::size_t close = s.find("] ");
    const bool tagged = !s.empty() && s[0] == '[' && close != std::string::npos;
    Say(stdout, /*json=*/true, "log", tagged ? s.substr(close + 2) : s, {}, tagged ? s.substr(1, close - 1) : "tfctl");
    return;
  }
  Clear();
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fputc('\n', stdout);
  Draw();
}

void LiveDisplay::SetRows(std::vector<std::pair<std::string, LiveRow>> rows) {
  rows_ = std::move(rows);
  Clear();
  Draw();
}

std::vector<std::string> LiveDisplay::Table() const {
  std::vector<LiveRow> rows;
  for (const auto& [name, r] : rows_) {
    rows.push_back(r);
    rows.back().name = name;
  }
  return FormatLiveTable(ByReplica(rows));
}

void LiveDisplay::Clear() {
  if (tty_) block_.Clear();
}

void LiveDisplay::Draw() {
  if (json_) return;
  if (!tty_) {
    std::fflush(stdout);
    return;
  }
  block_.Draw(Table());
}

}  // namespace tfd::launcher
