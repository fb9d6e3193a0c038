#include "daemon/coordinator/leaderboard.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

namespace tfd::coordinator {
namespace {

// Indexes of `trials`, best first by their best value (no value last), ties by id.
std::vector<std::size_t> Order(const std::vector<TrialState>& all, bool maximize) {
  std::vector<std::size_t> order(all.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& x = all[a].best;
    const auto& y = all[b].best;
    if (x.has_value() != y.has_value()) return x.has_value();
    if (!x) return false;
    return maximize ? *x > *y : *x < *y;
  });
  return order;
}

std::string Value(const std::optional<double>& v) { return v ? fmt::format("{:.4f}", *v) : "-"; }

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

std::string ShortParams(const TrialState& t) {
  std::string out;
  for (const auto& [path, value] : t.trial.params) {
    if (!out.empty()) out += " ";
    const std::size_t dot = path.rfind('.');
    out += fmt::format("{}={}", dot == std::string::npos ? path : path.substr(dot + 1), value);
  }
  return out;
}

}  // namespace

std::optional<double> ReportedAtBest(const TrialState& t, const std::string& name) {
  for (const auto& [n, value] : t.best_metrics)
    if (n == name) return value;
  return std::nullopt;
}

std::string LeaderboardCsv(const std::vector<TrialState>& trials, const std::string& metric, bool maximize, const std::vector<std::string>& shown) {
  std::string extra_header;
  for (const std::string& name : shown) extra_header += name + ",";
  std::string out = fmt::format("trial,status,epoch,{},best,{}worker,attempts,params,reason\n", metric, extra_header);
  for (std::size_t i : Order(trials, maximize)) {
    const TrialState& t = trials[i];
    std::string extra;
    for (const std::string& name : shown) {
      const std::optional<double> v = ReportedAtBest(t, name);
      extra += (v ? fmt::format("{}", *v) : "") + ",";
    }
    out += fmt::format("{},{},{},{},{},{}{},{},{},{}\n", t.trial.id, TrialStatusName(t.status), t.epoch,
                       t.metric ? fmt::format("{}", *t.metric) : "", t.best ? fmt::format("{}", *t.best) : "", extra, t.worker, t.attempt,
                       CsvField(ParamsJson(t.trial.params)), CsvField(t.reason));
  }
  return out;
}

std::vector<std::string> LeaderboardRows(const std::vector<TrialState>& trials, const std::string& metric, bool maximize, int best,
                                         const std::vector<std::string>& shown) {
  std::vector<std::string> rows;
  std::string extra_header;
  for (const std::string& name : shown) extra_header += fmt::format("  {:>9}", name);
  rows.push_back(fmt::format("  {:>5}  {:<8} {:>5}  {:>14}  {:>8}{}  {}", "trial", "status", "epoch", metric, "best", extra_header, "parameters"));
  for (std::size_t i : Order(trials, maximize)) {
    const TrialState& t = trials[i];
    std::string extra;
    for (const std::string& name : shown) extra += fmt::format("  {:>9}", Value(ReportedAtBest(t, name)));
    std::string row = fmt::format("{} {:>5}  {:<8} {:>5}  {:>14}  {:>8}{}  {}", static_cast<int>(i) == best ? '*' : ' ', t.trial.id,
                                  TrialStatusName(t.status), t.epoch, Value(t.metric), Value(t.best), extra, ShortParams(t));
    if (t.status == TrialStatus::kFailed || t.status == TrialStatus::kStopped) row += "  (" + t.reason.substr(0, 100) + ")";
    rows.push_back(std::move(row));
  }
  return rows;
}

void LeaderboardPrinter::Update(const std::vector<TrialState>& trials, int best) {
  if (tty_) {
    std::vector<std::string> rows = LeaderboardRows(trials, metric_, maximize_, best, shown_);
    if (rows == last_) return;
    block_.Draw(rows);
    last_ = std::move(rows);
    return;
  }
  last_.resize(trials.size());
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const TrialState& t = trials[i];
    std::string key = fmt::format("{} {}", TrialStatusName(t.status), t.epoch);
    if (key == last_[i]) continue;
    last_[i] = key;
    if (t.status == TrialStatus::kPaused && t.attempt == 0) continue;  // not started yet
    std::fprintf(out_, "%s: trial %d %s epoch %d %s=%s best=%s %s%s\n", prefix_.c_str(), t.trial.id, std::string(TrialStatusName(t.status)).c_str(),
                t.epoch, metric_.c_str(), Value(t.metric).c_str(), Value(t.best).c_str(), ShortParams(t).c_str(),
                t.reason.empty() ? "" : (" (" + t.reason + ")").c_str());
  }
  (void)best;
  std::fflush(out_);
}

void LeaderboardPrinter::Final(const std::vector<TrialState>& trials, int best) {
  if (tty_) return Update(trials, best);
  for (const std::string& r : LeaderboardRows(trials, metric_, maximize_, best, shown_)) std::fprintf(out_, "%s\n", r.c_str());
  std::fflush(out_);
}

}  // namespace tfd::coordinator
