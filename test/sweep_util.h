#pragma once
// A sweep's run folder read back for the tests that kill and resume its coordinator (the
// integration test with a coordinator task, the chaos matrix with tfctl as the coordinator), and
// the ASHA sweep they both run.

#include <cstddef>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/test_util.h"

namespace tfd::testing {

// 5 learning rates under ASHA (rungs at epochs 1 and 2, η 2) on the MNIST-format data in `data`:
// there a larger rate does better, so 0.0003 is pruned at the first rung and the rates after it
// run to `max_epochs`.
inline nlohmann::json AshaSweepFile(const std::string& data, int max_epochs) {
  nlohmann::json job = {{"model", {{"name", "mlp"}, {"init", "glorot_uniform"}}},
                        {"data", data},
                        {"epochs", max_epochs},
                        {"batch_size", 10},
                        {"seed", 5},
                        {"log_every_steps", 0},
                        {"validation_split", 200},
                        {"optimizer", {{"type", "momentum"}, {"learning_rate", 0.1}, {"momentum", 0.9}}}};
  return {{"job", job},
          {"space", {{"optimizer.learning_rate", {0.003, 0.0003, 0.01, 0.03, 0.1}}}},
          {"objective", {{"metric", "val_loss"}, {"mode", "min"}}},  // no ties: the synthetic classes are easy
          {"scheduler", {{"type", "asha"}, {"grace_epochs", 1}, {"reduction_factor", 2}, {"max_epochs", max_epochs}}}};
}

// trials.jsonl's epochs: trial -> epoch -> its epoch line's metrics, failing on an epoch reported twice.
inline std::map<int, std::map<int, nlohmann::json>> SweepEpochsOnce(const std::string& jsonl) {
  std::map<int, std::map<int, nlohmann::json>> out;
  for (const nlohmann::json& l : ReadJsonLines(jsonl)) {
    if (l["event"] != "epoch") continue;
    INFO(l.dump());
    const bool first = out[l["trial"].get<int>()].emplace(l["epoch"].get<int>(), l["metrics"]).second;
    CHECK(first);
  }
  return out;
}

// trials.jsonl's ends: each trial's last line.
inline std::map<int, nlohmann::json> SweepEnds(const std::string& jsonl) {
  std::map<int, nlohmann::json> out;
  for (const nlohmann::json& l : ReadJsonLines(jsonl))
    if (l["event"] == "end") out[l["trial"].get<int>()] = l;
  return out;
}

// The first epoch line of trials.jsonl after which its trial went on (a trial ≥ 1, an epoch in
// [2, max_epochs), no stop): a coordinator killed there leaves a trial to resume from its
// checkpoint. {trial, epoch}, or {-1, 0}.
inline std::pair<int, int> SweepKillPoint(const std::string& jsonl, int max_epochs) {
  for (const nlohmann::json& l : ReadJsonLines(jsonl))
    if (l["event"] == "epoch" && l["trial"].get<int>() >= 1 && l["epoch"].get<int>() >= 2 && l["epoch"].get<int>() < max_epochs && !l.contains("stop"))
      return {l["trial"].get<int>(), l["epoch"].get<int>()};
  return {-1, 0};
}

// leaderboard.csv's rows without the attempts column (a resumed trial was placed once more):
// "trial,status,epoch,val_loss,best,test_accuracy,worker" and "params,reason".
inline std::vector<std::pair<std::string, std::string>> LeaderboardRowsButAttempts(const std::string& csv) {
  std::vector<std::pair<std::string, std::string>> rows;
  std::istringstream in(csv);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::size_t> commas;  // the first 8: the 7th ends worker, the 8th attempts
    for (std::size_t at = line.find(','); at != std::string::npos && commas.size() < 8; at = line.find(',', at + 1)) commas.push_back(at);
    REQUIRE(commas.size() == 8);
    rows.emplace_back(line.substr(0, commas[6]), line.substr(commas[7] + 1));
  }
  return rows;
}

}  // namespace tfd::testing
