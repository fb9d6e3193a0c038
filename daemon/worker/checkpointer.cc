#include "daemon/worker/checkpointer.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "common/base/sha256.h"
#include "common/ckpt/format.h"
#include "common/wire/frame.h"
#include "common/optim/optimizer.h"

namespace tfd::worker {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

}  // namespace

Checkpointer::Checkpointer(const config::JobSpec& job, const model::Model& model, const Placement& placement,
                           PsClient& client, EventWriter& events, int num_workers, std::int64_t steps_per_epoch)
    : spec_(job.checkpoint),
      job_(job),
      placement_(placement),
      model_(model),
      client_(client),
      events_(events),
      num_workers_(num_workers),
      steps_per_epoch_(steps_per_epoch) {
  for (const model::Variable& v : model.variables()) {
    variables_.push_back({v.name, v.offset, v.size});
    shapes_.push_back(v.shape);
  }
  for (const std::vector<Slice>& shard : placement.shards) {
    ranges_.emplace_back();
    for (const Slice& s : shard) ranges_.back().push_back({s.flat_offset, s.length});
  }
  slot_names_ = optim::MakeOptimizer(job.optimizer)->SlotNames();
}

ckpt::DataCursor Checkpointer::CursorFor(std::uint32_t rank, std::uint64_t local_step) const {
  const auto steps = static_cast<std::uint64_t>(steps_per_epoch_);
  ckpt::DataCursor c;
  c.rank = rank;
  c.epoch = static_cast<std::uint32_t>(local_step / steps + 1);
  c.base = 0;
  c.next = (local_step % steps) * static_cast<std::uint64_t>(job_.batch_size);
  return c;
}

void Checkpointer::SetEarlyStopping(const ckpt::EarlyStopping& state) {
  early_stopping_ = state;
  if (!enabled()) return;
  // The folder may not be there yet: the first save creates it on its own thread, and an epoch can
  // end before that save is written (or before any save).
  std::error_code ec;
  std::filesystem::create_directories(spec_.dir, ec);
  if (Status s = ckpt::WriteEarlyStopping(spec_.dir, Fingerprint64(card_text_), state); !s.ok())
    spdlog::warn("checkpoint.dir: the early-stopping record after epoch {} was not written: {}", state.epoch, s.message());
}

Status Checkpointer::PrepareRestore() {
  if (!enabled()) return Status::Ok();
  // The last judgement's record, even without a checkpoint: a chief restarted before the first save.
  if (Result<ckpt::EarlyStopping> record = ckpt::ReadEarlyStopping(spec_.dir, Fingerprint64(card_text_)); record.ok())
    restored_early_stopping_.push_back(*record);
  else if (record.status().code() != Code::kNotFound)
    spdlog::warn("checkpoint.dir: {}; early stopping resumes from the checkpoint's state", record.status().message());
  Result<ckpt::Loaded> loaded = ckpt::LoadNewestValid(spec_.dir);
  if (!loaded.ok()) {
    if (loaded.status().code() != Code::kNotFound) return loaded.status().WithContext("checkpoint.dir");
    spdlog::info("checkpoint.dir {}: no checkpoint to restore ({}); starting afresh", spec_.dir, loaded.status().message());
    return Status::Ok();
  }
  const ckpt::Checkpoint& ck = loaded->checkpoint;
  const std::string& path = loaded->path;
  if (Status s = ckpt::CheckOptimizer(ck, job_.optimizer, path); !s.ok())
    return Status::InvalidArgument(fmt::format("optimizer: {}", s.message()));
  if (!card_text_.empty()) TFD_RETURN_IF_ERROR(exporting::CheckSameData(ck.model_card, card_, path));
  if (ck.early_stopping) restored_early_stopping_.push_back(*ck.early_stopping);
  if (ck.tensors.size() != variables_.size())
    return Status::InvalidArgument(fmt::format("model: {} holds {} tensors, the job's model has {} variables", path, ck.tensors.size(),
                                               variables_.size()));
  Result<std::vector<ckpt::ShardState>> shards = ckpt::Reshard(ck, variables_, ranges_);
  if (!shards.ok()) return Status::InvalidArgument(fmt::format("model: {}: {}", path, shards.status().message()));
  Result<std::vector<ckpt::DataCursor>> resharded = ckpt::ReshardCursors(ck, static_cast<std::uint32_t>(num_workers_));
  if (!resharded.ok()) return resharded.status().WithContext(path);
  const std::vector<ckpt::DataCursor>& cursors = *resharded;
  PsClient::Restore r;
  r.global_step = ck.global_step;
  r.updates = static_cast<std::uint64_t>(ck.optimizer.updates);
  const bool same_workers = ck.num_workers == static_cast<std::uint32_t>(num_workers_);
  for (const ckpt::DataCursor& c : cursors) {
    // Same worker count: each rank resumes after the batches its cursor has finished. Another
    // count: the trainer starts an epoch only at its beginning, so every worker starts the oldest
    // epoch any worker was in from the beginning (no example skipped; some read twice).
    const std::uint64_t epoch_start = (c.epoch > 0 ? c.epoch - 1 : 0) * static_cast<std::uint64_t>(steps_per_epoch_);
    const std::uint64_t batches = same_workers && c.base == 0 ? c.next / static_cast<std::uint64_t>(job_.batch_size) : 0;
    r.resume_steps.push_back(epoch_start + batches);
  }
  for (ckpt::ShardState& s : *shards) {
    r.values.push_back(std::move(s.values));
    r.slots.push_back(std::move(s.slots));
  }
  if (!same_workers)
    spdlog::info("{}: saved with {} workers, this cluster has {}: every worker starts epoch {} again", path, ck.num_workers,
                 num_workers_, cursors.empty() ? 0 : cursors[0].epoch);
  if (ck.feedback) RestoreFeedback(*ck.feedback, path);
  client_.SetRestore(std::move(r));
  restored_path_ = path;
  restored_step_ = ck.global_step;
  return Status::Ok();
}

void Checkpointer::Started(std::uint64_t global_step) {
  if (!enabled()) return;
  if (!restored_path_.empty() && client_.restored() > 0) {
    spdlog::info("restored {} at global_step {} ({} of {} ps)", restored_path_, restored_step_, client_.restored(),
                 placement_.shards.size());
    if (!restored_feedback_.empty())
      spdlog::info("{}: its error feedback, summed over the workers that saved it, resumes in the chief's; each other worker's starts "
                   "from zero", restored_path_);
    events_.Emit("restored", {{"path", restored_path_},
                              {"global_step", static_cast<std::int64_t>(restored_step_)},
                              {"ps_restored", static_cast<std::int64_t>(client_.restored())},
                              {"num_ps", static_cast<std::int64_t>(placement_.shards.size())}});
  }
  // The ps tasks kept their own state (only the chief restarted): the other workers kept their
  // feedback too, and the checkpoint's would count it twice.
  if (client_.restored() == 0) restored_feedback_.clear();
  schedule_.emplace(spec_, global_step, Clock::now());
}

bool Checkpointer::EnableFeedback() {
  if (!enabled()) return false;
  const std::uint64_t floats = model_.params().size() * static_cast<std::uint64_t>(num_workers_);
  // A ps's STATE carries its values, slots and every other worker's deposit; a deposit rides on a
  // push beside its gradient: each must stay one frame.
  std::uint64_t shard = 0;
  for (std::size_t i = 0; i < placement_.shards.size(); ++i) shard = std::max(shard, static_cast<std::uint64_t>(placement_.ShardSize(i)));
  const std::uint64_t state_bytes = 4 * shard * (1 + slot_names_.size() + static_cast<std::uint64_t>(num_workers_)) + (1u << 20);
  if (floats > ckpt::kMaxFeedbackFloats || state_bytes > wire::kMaxPayloadBytes) {
    spdlog::warn("checkpoint: the error feedback of {} workers x {} values is too large to collect ({} a checkpoint record's 4 GiB, a ps's "
                 "state with it {:.0f} MiB of a frame's {} MiB): checkpoints leave it out, and a resumed run starts it at 0",
                 num_workers_, model_.params().size(), floats > ckpt::kMaxFeedbackFloats ? "over" : "within",
                 static_cast<double>(state_bytes) / (1 << 20), wire::kMaxPayloadBytes >> 20);
    feedback_too_large_ = true;
    return false;
  }
  feedback_ = true;
  return true;
}

void Checkpointer::RestoreFeedback(const ckpt::ErrorFeedback& saved, const std::string& path) {
  const config::CompressionSpec::Method method = job_.update.compression.method;
  if (feedback_too_large_) {
    spdlog::info("{}: its error feedback is not restored: this run's is too large to collect (above)", path);
    return;
  }
  if (!feedback_ || saved.method != config::CompressionSpec::Method::kTopK || method != saved.method) {
    spdlog::info("{}: its {} error feedback is not restored: this job's update.compression is {}", path, config::CompressionName(saved.method),
                 config::CompressionName(method));
    return;
  }
  const std::size_t n = model_.params().size();
  if (saved.residuals.empty() || saved.residuals[0].size() != n) {
    spdlog::warn("{}: its error feedback holds {} values, the model {} parameters: not restored", path,
                 saved.residuals.empty() ? 0 : saved.residuals[0].size(), n);
    return;
  }
  // What the workers had not yet sent, all of it owed to the parameters: the chief sends it on.
  restored_feedback_.assign(n, 0.0f);
  for (const std::vector<float>& r : saved.residuals)
    for (std::size_t i = 0; i < n; ++i) restored_feedback_[i] += r[i];
}

std::uint64_t Checkpointer::Announce(std::uint64_t next_global_step) {
  if (!feedback_ || !schedule_) return 0;
  // A save due at the run's last step waits for the final one, which comes at once: the others
  // would not push again to deposit (every epoch's steps, by every worker in async mode).
  const std::uint64_t last = static_cast<std::uint64_t>(std::max(job_.epochs, 0)) * static_cast<std::uint64_t>(steps_per_epoch_) *
                             (job_.update.mode == config::UpdateSpec::Mode::kSync ? 1u : static_cast<std::uint64_t>(num_workers_));
  if (next_global_step >= last) return 0;
  if (writing_.valid() && writing_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return 0;  // it could not save yet
  if (!schedule_->Due(next_global_step, Clock::now())) return 0;
  announced_ = next_global_step;
  return announced_;
}

Status Checkpointer::MaybeSave(std::uint64_t global_step) {
  if (!enabled() || !schedule_) return Status::Ok();
  if (Status s = Collect(false); !s.ok()) spdlog::warn("checkpoint not written: {}; training goes on", s.message());
  if (writing_.valid() || !schedule_->Due(global_step, Clock::now())) return Status::Ok();
  if (feedback_ && announced_ == 0) return Status::Ok();  // the next step announces it, so the others' feedback comes
  // A ps lost right now is reconnected (by the fetch or the next step); a failed save is tried again later.
  if (Status s = Take(false); !s.ok()) spdlog::warn("checkpoint skipped: {}; training goes on", s.message());
  return Status::Ok();
}

void Checkpointer::set_metrics(metrics::TaskMetrics* metrics) {
  metrics_ = metrics;
  if (metrics_ != nullptr) metrics_->AddCheckpointMetrics();
}

Status Checkpointer::Save() {
  if (!enabled()) return Status::Ok();
  if (Status s = Collect(true); !s.ok()) spdlog::warn("checkpoint not written: {}", s.message());
  return Take(true, /*final=*/true);
}

Status Checkpointer::Collect(bool wait) {
  if (!writing_.valid()) return Status::Ok();
  if (!wait && writing_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return Status::Ok();
  return writing_.get();
}

Result<std::vector<PsClient::PsState>> Checkpointer::FetchWithFeedback(std::uint64_t request,
                                                                      std::optional<ckpt::ErrorFeedback>* feedback) {
  const Clock::time_point start = Clock::now(), deadline = start + kFeedbackWait;
  std::chrono::milliseconds pause(5);
  bool said = false;  // that the save waits
  for (;;) {
    TFD_ASSIGN_OR_RETURN(std::vector<PsClient::PsState> states, client_.FetchState(model_.params(), request));
    if (request == 0) return states;
    // Every worker still in the run deposits with its next push; a finished one never will (as
    // any ps says, now or in its last PUSH_ACK).
    std::vector<wire::Progress> heard = {client_.progress()};
    for (const PsClient::PsState& s : states) heard.push_back(s.progress);
    const auto gone = [&](std::uint32_t r) {
      return std::any_of(heard.begin(), heard.end(), [r](const wire::Progress& p) {
        return std::find(p.done.begin(), p.done.end(), r) != p.done.end() ||
               std::find(p.given_up.begin(), p.given_up.end(), r) != p.given_up.end();
      });
    };
    // A worker a ps has lost (and not seen back) cannot deposit with it: not waited for there. One
    // it has yet to hear from (at the start, or after the ps restarted) is on its way: waited for.
    std::vector<std::uint32_t> missing, away;
    for (std::uint32_t r = 1; r < static_cast<std::uint32_t>(num_workers_); ++r) {
      if (gone(r)) continue;
      bool waits = false, absent = false;
      for (const PsClient::PsState& s : states) {
        if (std::any_of(s.feedback.begin(), s.feedback.end(), [r](const auto& d) { return d.first == r; })) continue;
        if (std::binary_search(s.absent.begin(), s.absent.end(), r)) absent = true;
        else waits = true;
      }
      if (waits) missing.push_back(r);
      else if (absent) away.push_back(r);
    }
    if (!missing.empty() && Clock::now() < deadline) {
      if (!said && Clock::now() - start >= std::chrono::seconds(1)) {
        spdlog::info("checkpoint at global_step {}: waiting for the error feedback of worker rank(s) {} (at most {} s)", states[0].global_step,
                     fmt::join(missing, ", "), kFeedbackWait.count());
        said = true;
      }
      // A ps answers once its deposits are in or after holding the ask a second (a ps restarted
      // meanwhile answers at once): ask again from 5 ms later, doubling up to 200 ms.
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(200));
      continue;
    }
    ckpt::ErrorFeedback& f = feedback->emplace();
    f.method = config::CompressionSpec::Method::kTopK;
    f.residuals.assign(static_cast<std::size_t>(num_workers_), std::vector<float>(model_.params().size(), 0.0f));
    f.residuals[0] = own_feedback_ ? own_feedback_() : std::vector<float>(model_.params().size(), 0.0f);
    for (std::size_t i = 0; i < states.size(); ++i)
      for (const auto& [r, shard] : states[i].feedback)
        if (r > 0 && r < static_cast<std::uint32_t>(num_workers_)) client_.ScatterShard(i, shard, f.residuals[r]);
    if (!missing.empty())
      spdlog::warn("checkpoint at global_step {}: the error feedback of worker rank(s) {} did not come from every ps within {} s; saved as "
                   "zero where it did not",
                   states[0].global_step, fmt::join(missing, ", "), kFeedbackWait.count());
    if (!away.empty())
      spdlog::warn("checkpoint at global_step {}: worker rank(s) {} lost by a ps and not back; their error feedback is saved as zero "
                   "where it could not come",
                   states[0].global_step, fmt::join(away, ", "));
    return states;
  }
}

Status Checkpointer::Take(bool wait, bool final) {
  const Clock::time_point start = Clock::now();
  // The final save has no step after it to announce: its feedback is not asked for.
  const std::uint64_t request = feedback_ && !final ? std::exchange(announced_, 0) : 0;
  std::optional<ckpt::ErrorFeedback> feedback;
  Result<std::vector<PsClient::PsState>> fetched = FetchWithFeedback(request, &feedback);
  if (!fetched.ok()) return fetched.status().WithContext("checkpoint");
  std::vector<PsClient::PsState> states = std::move(fetched).value();
  auto ck = std::make_shared<ckpt::Checkpoint>();
  ck->feedback = std::move(feedback);
  ck->global_step = states[0].global_step;
  if (ck->global_step == last_saved_ && !final) return Status::Ok();  // nothing new since the last save
  ck->final = final;
  ck->num_workers = static_cast<std::uint32_t>(num_workers_);
  ck->optimizer.spec = job_.optimizer;
  ck->optimizer.updates = static_cast<std::int64_t>(states[0].updates);
  ck->optimizer.slot_names = slot_names_;
  ck->model_card = card_text_;
  ck->early_stopping = early_stopping_;
  for (int r = 0; r < num_workers_; ++r) {
    std::uint64_t local = UINT64_MAX;
    for (const PsClient::PsState& s : states)
      local = std::min(local, static_cast<std::size_t>(r) < s.resume_steps.size() ? s.resume_steps[static_cast<std::size_t>(r)] : 0);
    ck->cursors.push_back(CursorFor(static_cast<std::uint32_t>(r), local));
  }
  // A batch norm's moving statistics are the chief's own (the ps's copy never moves): saved from
  // its model, in place of what the ps tasks sent.
  auto moved = std::make_shared<std::vector<std::pair<std::string, std::vector<float>>>>();
  for (const model::Variable& v : model_.variables())
    if (!v.trainable) {
      const auto from = model_.params().begin() + static_cast<std::ptrdiff_t>(v.offset);
      moved->push_back({v.name, std::vector<float>(from, from + static_cast<std::ptrdiff_t>(v.size))});
    }
  auto shards = std::make_shared<std::vector<ckpt::ShardState>>();
  std::vector<std::vector<float>> slots;
  for (PsClient::PsState& s : states) {
    slots.push_back(s.slots);
    shards->push_back({std::move(s.values), std::move(s.slots)});
  }
  // A ps that restarts from now on gets these slots back.
  client_.SetRestartSlots(std::move(slots), static_cast<std::uint64_t>(ck->optimizer.updates));
  last_saved_ = ck->global_step;
  if (schedule_) schedule_->Saved(ck->global_step, Clock::now());
  const double paused_ms = MsSince(start);
  events_.Emit("checkpoint_start", {{"global_step", static_cast<std::int64_t>(ck->global_step)}});
  // The rest reads only what it is given (and the Checkpointer's constant tables): it runs on its
  // own thread while training goes on.
  writing_ = std::async(std::launch::async, [this, ck, shards, moved, start, paused_ms, m = metrics_]() -> Status {
    Result<std::vector<ckpt::NamedTensor>> tensors = ckpt::Assemble(variables_, shapes_, slot_names_, ranges_, *shards);
    if (!tensors.ok()) return tensors.status().WithContext("checkpoint");
    ck->tensors = std::move(tensors).value();
    for (auto& [name, values] : *moved)
      for (ckpt::NamedTensor& t : ck->tensors)
        if (t.name == name) t.values = std::move(values);
    std::error_code ec;
    std::filesystem::create_directories(spec_.dir, ec);
    if (ec) return Status::Unavailable(fmt::format("checkpoint.dir {}: cannot create it: {}", spec_.dir, ec.message()));
    TFD_ASSIGN_OR_RETURN(std::string path, ckpt::Write(spec_.dir, *ck, spec_.keep));
    const double ms = MsSince(start);
    const auto bytes = static_cast<std::int64_t>(std::filesystem::file_size(path, ec));
    spdlog::info("checkpoint {} global_step={} bytes={} ms={:.1f} paused_ms={:.1f}{}", path, ck->global_step, bytes, ms, paused_ms,
                 ck->final ? " final" : "");
    events_.Emit("checkpoint", {{"path", path}, {"global_step", static_cast<std::int64_t>(ck->global_step)}, {"bytes", bytes},
                                {"ms", ms}, {"paused_ms", paused_ms}, {"final", ck->final}});
    if (m != nullptr) m->CheckpointWritten(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
    return Status::Ok();
  });
  return wait ? Collect(true) : Status::Ok();
}

}  // namespace tfd::worker
