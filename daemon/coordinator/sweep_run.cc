#include "daemon/coordinator/sweep_run.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/base/sha256.h"
#include "common/config/json_reader.h"
#include "common/config/json_writer.h"
#include "daemon/coordinator/leaderboard.h"

namespace tfd::coordinator {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// ensemble.json (the ensemble's accuracy, or MAE and RMSE, per epoch beside its members') and, for
// the last complete epoch, predictions/: labels.u8 (a byte per label, up to 256 classes; past that
// labels.i32, little-endian int32) or for a regression targets.f32, member-K.f32
// (each member's softmax or predicted values, rows x classes little-endian floats) and ensemble.f32
// (their mean, as the coordinator computed it).
void WriteEnsemble(const fs::path& run_dir, const std::vector<SweepScheduler::EnsembleEpoch>& epochs, const SweepScheduler::Predictions& last,
                   const SweepRunOptions& options) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const SweepScheduler::EnsembleEpoch& e : epochs) {
    nlohmann::ordered_json item = {{"epoch", e.epoch}};
    item.update(EnsembleFields(e));
    list.push_back(std::move(item));
  }
  nlohmann::ordered_json doc = {{"epochs", std::move(list)}};
  doc[last.regression() ? "targets" : "classes"] = last.classes;
  doc["predictions_epoch"] = last.epoch;
  std::ofstream(run_dir / "ensemble.json") << config::JsonText(doc, /*open_levels=*/2) << "\n";
  if (!epochs.empty()) {
    const auto& e = epochs.back();
    options.say(false, "ensemble",
                e.regression ? fmt::format("epoch {}: ensemble_test_mae {:.4f} ensemble_test_rmse {:.4f} (members' test_mae: best {:.4f}, "
                                           "mean {:.4f}, {} members)",
                                           e.epoch, e.ensemble.mae, e.ensemble.rmse, e.best_member, e.mean_member_mae, e.members)
                             : fmt::format("epoch {}: ensemble_test_accuracy {:.4f} (best of {} members {:.4f}, {:+.4f})", e.epoch,
                                           e.ensemble.accuracy, e.members, e.best_member, e.ensemble.accuracy - e.best_member));
  }
  if (last.members.empty()) return;
  std::error_code ec;
  fs::create_directories(run_dir / "predictions", ec);
  auto write = [&](const std::string& name, const void* data, std::size_t bytes) {
    std::ofstream(run_dir / "predictions" / name, std::ios::binary).write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  };
  if (last.regression()) write("targets.f32", last.targets.data(), last.targets.size() * sizeof(float));
  else if (last.classes <= 256) {
    const std::vector<std::uint8_t> bytes(last.labels.begin(), last.labels.end());  // every id < 256
    write("labels.u8", bytes.data(), bytes.size());
  } else {
    write("labels.i32", last.labels.data(), last.labels.size() * sizeof(ClassId));  // little-endian, as the floats
  }
  for (const auto& [trial, outputs] : last.members) write(fmt::format("member-{}.f32", trial), outputs.data(), outputs.size() * sizeof(float));
  write("ensemble.f32", last.mean.data(), last.mean.size() * sizeof(float));
}

// best_trial.json: which trial won, on what, and everything it reported at its best epoch (for a
// regression, its test_mae and test_rmse: shown, never used to choose). best.json stays the job.
nlohmann::ordered_json BestTrialJson(const TrialState& b, const config::SweepSpec& sweep) {
  // ParamsJson and MetricsJson are the scheduler's one way to turn these into JSON; read back here.
  const auto object = [](const std::string& text) { return nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false); };
  nlohmann::ordered_json doc = {{"trial", b.trial.id},
                                {"params", object(ParamsJson(b.trial.params))},
                                {"objective", {{"metric", sweep.metric}, {"mode", sweep.maximize ? "max" : "min"}}},
                                {"epoch", b.best_epoch},
                                {sweep.metric, *b.best},
                                {"metrics", object(MetricsJson(b.best_metrics))},
                                {"job", "best.json"}};
  return doc;
}

// " (test_mae 0.0498, test_rmse 0.0621 at that epoch, not used to choose)", or "" with nothing shown.
std::string ShownNote(const TrialState& b, const std::vector<std::string>& shown) {
  std::string values;
  for (const std::string& name : shown)
    if (const std::optional<double> v = ReportedAtBest(b, name)) values += fmt::format("{}{} {:.4f}", values.empty() ? "" : ", ", name, *v);
  return values.empty() ? "" : fmt::format(" ({} at that epoch, not used to choose)", values);
}

std::chrono::duration<double> Seconds(double s) { return std::chrono::duration<double>(s); }

// The best trial's exported model (`from`, a base of version folders) copied whole into `to`: into a
// temporary folder beside it first, renamed at the end, so a `tfd serve --model TO` started early
// never sees half of it. Half-written version folders (a killed attempt's ".tmp-*") are left out.
// NotFound when the trial exported none (ASHA stopped it before its last epoch, or it failed).
Status CopyModel(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (!fs::is_directory(from, ec)) return Status::NotFound(fmt::format("{}: no such folder (the trial exported no model)", from.string()));
  const fs::path tmp = to.parent_path() / ("." + to.filename().string() + ".tmp");
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  for (fs::directory_iterator it(from, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->path().filename().string().starts_with(".")) continue;
    fs::copy(it->path(), tmp / it->path().filename(), fs::copy_options::recursive, ec);
    if (ec) break;
  }
  if (!ec) fs::rename(tmp, to, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    return Status::Unavailable(fmt::format("cannot copy {} to {}: {}", from.string(), to.string(), ec.message()));
  }
  return Status::Ok();
}

// Where the run's trained networks are, said at the end: the best trial's model copied into
// run_dir/model, or an ensemble's members' own.
void SayModels(const fs::path& run_dir, int best, const SweepRunOptions& options) {
  if (options.trial_models.empty()) return;
  if (options.ensemble) {
    options.say(false, "models", fmt::format("each member's model: {}/<member>/model (tfd serve --model one of them)", options.trial_models));
    return;
  }
  const fs::path to = run_dir / "model";
  Status copied = CopyModel(fs::path(options.trial_models) / std::to_string(best) / "model", to);
  if (!copied.ok()) {
    options.say(true, "warning", fmt::format("the best trial's model is not in {}: {}", to.string(), copied.message()));
    return;
  }
  options.say(false, "model", fmt::format("model {} (trial {}'s); serve it: tfd serve --model {}", to.string(), best, to.string()));
}

}  // namespace

Result<PreparedSweep> PrepareSweep(const std::string& file, bool ensemble, int workers) {
  PreparedSweep p;
  TFD_ASSIGN_OR_RETURN(p.spec, ensemble ? config::LoadEnsembleSpec(file) : config::LoadSweepSpec(file));
  if (workers > 0) p.spec.workers = workers;
  p.trials = config::GenerateTrials(p.spec);
  p.parallel = p.spec.parallel > 0 ? p.spec.parallel : p.spec.workers;
  return p;
}

std::string SweepSha256(const std::string& file_text, const std::vector<config::Trial>& trials) {
  Sha256 h;
  const auto add = [&h](std::string_view text) {
    const std::string framed = fmt::format("{}:", text.size());  // lengths first: no two lists hash alike
    h.Update(std::as_bytes(std::span(framed)));
    h.Update(std::as_bytes(std::span(text)));
  };
  add(file_text);
  for (const config::Trial& t : trials) add(t.job_text);
  return h.HexDigest();
}

Status MakeSweepFolder(const fs::path& run_dir, const std::string& file, const PreparedSweep& prepared, bool ensemble) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return Status::Unavailable(fmt::format("cannot create the run folder {}: {}", run_dir.string(), ec.message()));
  fs::copy_file(file, run_dir / (ensemble ? "job.json" : "sweep.json"), fs::copy_options::overwrite_existing, ec);
  if (ec) return Status::Unavailable(fmt::format("cannot copy {} into the run folder {}: {}", file, run_dir.string(), ec.message()));
  TFD_ASSIGN_OR_RETURN(const std::string text, config::ReadTextFile(file, ensemble ? "the job file" : "the sweep file"));
  const nlohmann::ordered_json record = {
      {"sweep", fs::absolute(file).string()}, {"sha256", SweepSha256(text, prepared.trials)}, {"workers", prepared.spec.workers}};
  std::ofstream out(run_dir / "resume.json");
  out << config::JsonText(record) << "\n";
  if (!out.flush()) return Status::Unavailable(fmt::format("cannot write {}", (run_dir / "resume.json").string()));
  return Status::Ok();
}

namespace {

// resume.json read back: {"sweep": PATH, "sha256": HEX, "workers": N} ("workers" since it was recorded).
Result<nlohmann::ordered_json> ReadResumeRecord(const fs::path& run_dir) {
  const std::string path = (run_dir / "resume.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec))
    return Status::InvalidArgument(fmt::format("{}: missing: {} holds no sweep to resume (a sweep's run folder has resume.json and trials.jsonl)",
                                               path, run_dir.string()));
  TFD_ASSIGN_OR_RETURN(const std::string text, config::ReadTextFile(path, "the run folder's resume record"));
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("sweep") || !doc["sweep"].is_string() || !doc.contains("sha256") ||
      !doc["sha256"].is_string() ||
      (doc.contains("workers") && (!doc["workers"].is_number_integer() || doc["workers"].get<std::int64_t>() < 1 ||
                                   doc["workers"].get<std::int64_t>() > config::kMaxSweepWorkers)))
    return Status::InvalidArgument(
        fmt::format("{}: expected {{\"sweep\": PATH, \"sha256\": HEX, \"workers\": N in [1, {}]}}", path, config::kMaxSweepWorkers));
  return doc;
}

}  // namespace

Result<std::string> RecordedSweepFile(const fs::path& run_dir) {
  TFD_ASSIGN_OR_RETURN(const nlohmann::ordered_json record, ReadResumeRecord(run_dir));
  return record["sweep"].get<std::string>();
}

Result<int> RecordedSweepWorkers(const fs::path& run_dir) {
  TFD_ASSIGN_OR_RETURN(const nlohmann::ordered_json record, ReadResumeRecord(run_dir));
  return record.contains("workers") ? record["workers"].get<int>() : 0;
}

Result<SweepLog> OpenForResume(const fs::path& run_dir, const std::string& file, const PreparedSweep& prepared,
                                                         bool ensemble) {
  if (ensemble) return Status::InvalidArgument(fmt::format("{}: --resume: an ensemble is not resumed, only a sweep (docs/sweeps.md)", file));
  TFD_ASSIGN_OR_RETURN(const nlohmann::ordered_json record, ReadResumeRecord(run_dir));
  TFD_ASSIGN_OR_RETURN(const std::string text, config::ReadTextFile(file, "the sweep file"));
  const std::string sha = SweepSha256(text, prepared.trials);
  if (sha != record["sha256"].get<std::string>())
    return Status::InvalidArgument(fmt::format("{}: not the sweep {} was started with (its trials' SHA-256 {}, {} records {}): resume with that "
                                               "sweep file, or start a new run folder",
                                               file, run_dir.string(), sha.substr(0, 12), (run_dir / "resume.json").string(),
                                               record["sha256"].get<std::string>().substr(0, 12)));
  const std::string path = (run_dir / "trials.jsonl").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::InvalidArgument(fmt::format("{}: missing: {} holds no sweep to resume", path, run_dir.string()));
  TFD_ASSIGN_OR_RETURN(const std::string jsonl, config::ReadTextFile(path, "the sweep's trials.jsonl"));
  std::vector<nlohmann::ordered_json> lines;
  std::string kept;  // the file without a torn last line
  std::size_t at = 0;
  for (int n = 1; at < jsonl.size(); ++n) {
    const std::size_t end = jsonl.find('\n', at);
    const std::string_view line = std::string_view(jsonl).substr(at, end == std::string::npos ? std::string::npos : end - at);
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (end == std::string::npos && j.is_discarded()) break;  // torn by a kill mid-write: its event is lost
    if (j.is_discarded()) return Status::InvalidArgument(fmt::format("{}: line {}: not a JSON object", path, n));
    lines.push_back(std::move(j));
    kept.append(line).append("\n");
    at = end == std::string::npos ? jsonl.size() : end + 1;
  }
  if (kept != jsonl) {
    std::ofstream out(path, std::ios::trunc);
    out << kept;
    if (!out.flush()) return Status::Unavailable(fmt::format("cannot rewrite {}", path));
  }
  return SweepLog{.path = path, .lines = std::move(lines)};
}

int RunSweep(Coordinator& coord, const config::SweepSpec& sweep, const SweepRunOptions& options) {
  const fs::path run_dir = options.run_dir;
  std::ofstream jsonl(run_dir / "trials.jsonl", std::ios::app);
  LeaderboardPrinter printer(options.tty, sweep.metric, sweep.maximize, options.table, options.prefix, sweep.shown);
  const bool remote = !options.workers_running;  // the workers are other tasks
  bool stopping = false;
  const Clock::time_point started = Clock::now();
  Clock::time_point stop_deadline{}, finished_at{}, last_connected{};
  bool finished_seen = false, terminated = false, ever_connected = false;
  while (true) {
    for (const std::string& line : coord.TakeLines()) jsonl << line << "\n";
    jsonl.flush();
    if (!stopping && options.interrupted && options.interrupted()) {
      stopping = true;
      options.say(false, "stopping",
                  fmt::format("stopping every trial at its next epoch (workers still running in {} s are {})", options.grace_secs,
                              options.terminate_workers ? "terminated" : "left"));
      coord.StopAll();
      stop_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(Seconds(options.grace_secs));
    }
    const int connected = coord.Connected();
    const bool any_running = remote ? connected > 0 : options.workers_running();
    if (connected > 0) {
      ever_connected = true;
      last_connected = Clock::now();
    }
    if (!coord.Finished()) {
      if (!remote && !any_running && connected == 0) coord.FailWaiting("no worker left to run it");
      if (remote && connected == 0) {
        const auto limit = ever_connected ? options.reconnect_timeout : options.startup_timeout;
        if (Clock::now() - (ever_connected ? last_connected : started) > limit)
          coord.FailWaiting(fmt::format("no worker {} within {} s", ever_connected ? "came back" : "connected",
                                        std::chrono::duration<double>(limit).count()));
      }
    }
    printer.Update(coord.Trials(), coord.Best());
    const bool finished = coord.Finished();
    if (finished && !finished_seen) {
      finished_seen = true;
      finished_at = Clock::now();
    }
    if (finished && !any_running) {
      // A cluster's worker that has not come yet is waited for within its startup window, to be
      // told the sweep is over (not after a stop: it would only be told the same).
      const bool all_seen = coord.EverConnected() >= options.expected_workers;
      if (!remote || stopping || all_seen || Clock::now() - started > options.startup_timeout) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    const bool past_stop = stopping && Clock::now() > stop_deadline;
    if (!terminated && (past_stop || (finished_seen && Clock::now() - finished_at > std::chrono::seconds(10)))) {
      terminated = true;
      if (!options.terminate_workers) break;
      options.terminate_workers();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (const std::string& line : coord.TakeLines()) jsonl << line << "\n";
  jsonl.close();

  const std::vector<TrialState> final_trials = coord.Trials();
  const int best = coord.Best();
  if (options.ensemble) WriteEnsemble(run_dir, coord.EnsembleEpochs(), coord.LastPredictions(), options);
  printer.Final(final_trials, best);
  std::ofstream(run_dir / "leaderboard.csv") << LeaderboardCsv(final_trials, sweep.metric, sweep.maximize, sweep.shown);
  if (best >= 0) {
    const TrialState& b = final_trials[static_cast<std::size_t>(best)];
    std::ofstream(run_dir / "best.json") << b.trial.job_text << "\n";
    std::ofstream(run_dir / "best_trial.json") << config::JsonText(BestTrialJson(b, sweep), /*open_levels=*/1) << "\n";
    options.say(false, "best",
                fmt::format("best: trial {} {} {} = {:.4f}{}{}; its job: {}", b.trial.id, ParamsJson(b.trial.params), sweep.metric, *b.best,
                            b.best_epoch > 0 ? fmt::format(" at epoch {}", b.best_epoch) : "", ShownNote(b, sweep.shown),
                            (run_dir / "best.json").string()));
    SayModels(run_dir, b.trial.id, options);
  } else {
    options.say(true, "error", "no trial reported " + sweep.metric);
  }
  if (stopping) return 130;
  return best >= 0 ? 0 : 1;
}

}  // namespace tfd::coordinator
