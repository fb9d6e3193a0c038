#include "launcher/live_table.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace tfd::launcher {

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

}  // namespace tfd::launcher
