#include "daemon/train/trainer.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/base/random.h"
#include "common/base/service.h"
#include "common/model/batch_input.h"
#include "common/optim/schedule.h"
#include "daemon/train/early_stopping.h"
#include "daemon/train/export.h"

namespace tfd::train {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

std::uint64_t DropoutSeed(std::uint64_t job_seed, int rank, std::int64_t local_step) {
  return Rng(job_seed ^ 0xd509'0a75'd509'0a75ULL, (static_cast<std::uint64_t>(rank) << 40) ^ static_cast<std::uint64_t>(local_step)).Next();
}

std::int64_t StepsPerEpoch(std::int64_t examples, int num_workers, int batch_size) {
  return (examples / num_workers) / batch_size;
}

Status AtStartup(const Status& s) {
  if (s.ok()) return s;
  return Status(s.code(), s.message() + " (this worker was starting: no step taken yet)");
}

namespace {

double UnixNow() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// A run's training metric over `rows` examples: classification's accuracy, or regression's MAE
// and RMSE over every example and target, as event fields named `prefix` + metric and a log
// line's " name=value" pieces.
struct Metric {
  std::vector<EventField> fields;
  std::string line;
};
Metric TrainMetric(const model::Model& model, std::int64_t correct, double abs_sum, double sq_sum, std::int64_t rows,
                   const std::string& prefix) {
  Metric m;
  if (!model.regression()) {
    const double accuracy = rows > 0 ? static_cast<double>(correct) / static_cast<double>(rows) : 0.0;
    m.fields = {{prefix + "accuracy", accuracy}};
    m.line = fmt::format(" {}accuracy={:.4f}", prefix, accuracy);
    return m;
  }
  const double values = static_cast<double>(rows) * model.classes();
  const double mae = values > 0 ? abs_sum / values : 0.0, rmse = values > 0 ? std::sqrt(sq_sum / values) : 0.0;
  m.fields = {{prefix + "mae", mae}, {prefix + "rmse", rmse}};
  m.line = fmt::format(" {}mae={:.4f} {}rmse={:.4f}", prefix, mae, prefix, rmse);
  return m;
}

// An evaluation's metric (test or validation), as TrainMetric gives it.
Metric EvalMetric(const model::Model& model, const model::EvalResult& r, const std::string& prefix) {
  if (!model.regression()) return {{{prefix + "accuracy", r.accuracy}}, fmt::format(" {}accuracy={:.4f}", prefix, r.accuracy)};
  return {{{prefix + "mae", r.mae}, {prefix + "rmse", r.rmse}}, fmt::format(" {}mae={:.4f} {}rmse={:.4f}", prefix, r.mae, prefix, r.rmse)};
}

Status TrainLoop(const config::JobSpec& job, const data::DataSplits& data, model::Model& model, Updater& updater,
                 EventWriter& events, const TrainerOptions& options) {
  const int batch = job.batch_size;
  const std::int64_t steps = StepsPerEpoch(data.train.size, options.num_workers, batch);
  TFD_CHECK(steps > 0);  // LoadJobData refused a batch larger than a worker's share
  const bool worker_line = options.task != "standalone";
  const std::string prefix = worker_line ? fmt::format("worker={} ", options.rank) : "";
  model::BatchInput input(data.train, model.input_size(), batch, options.prefetch);
  std::int64_t local_step = std::min<std::int64_t>(options.start_local_step, steps * job.epochs), global_step = 0;
  double test_accuracy = -1;  // the test metric: accuracy, or a regression model's MAE
  model::EvalResult test_result;
  EarlyStopper stopper(job);
  const bool validate = options.evaluate_each_epoch && data.validation.size > 0;
  const int first_epoch = options.first_epoch > 0 ? options.first_epoch : static_cast<int>(local_step / steps) + 1;
  std::optional<Updater::Share> share;  // elastic: the share this worker took last
  int epoch = first_epoch;
  // An updater's error (a lost peer, a ps that ended the run) says where this worker was.
  auto where = [&](const Status& s) {
    return Status(s.code(), fmt::format("{} (this worker was at epoch {}, local_step {}, global_step {})", s.message(), epoch,
                                        local_step, global_step));
  };
  // The newest saved state of the rule before the first epoch this run trains. One after it has
  // judged an epoch this run trains again (resumed on another worker count, from an older epoch's
  // start, or from a checkpoint older than the last judgement): judged twice, an epoch would count
  // twice, so such a state is passed over, and with none left the rule starts afresh.
  const ckpt::EarlyStopping* resumed = nullptr;
  for (const ckpt::EarlyStopping& e : options.early_stopping)
    if (static_cast<int>(e.epoch) < first_epoch && (resumed == nullptr || e.epoch > resumed->epoch)) resumed = &e;
  if (resumed != nullptr) {
    stopper.Restore(*resumed);
    const ckpt::EarlyStopping& e = *resumed;
    spdlog::info("{}early stopping: resumed after epoch {}: {} epoch{} without improvement{}", prefix, e.epoch, e.wait,
                 e.wait == 1 ? "" : "s", e.have_best ? fmt::format(", best {:.4f} at epoch {}", e.best, e.best_epoch) : "");
  } else if (!options.early_stopping.empty()) {
    spdlog::info("{}early stopping: the saved state is after epoch {}, which this run trains again: patience counts afresh",
                 prefix, options.early_stopping.front().epoch);
  }
  if (local_step > 0) {
    spdlog::info("{}resuming at epoch {} step {} of {} (local_step {} was applied before this restart)", prefix, first_epoch,
                 local_step % steps + 1, steps, local_step);
    events.Emit("resumed", {{"epoch", std::int64_t{first_epoch}}, {"step", local_step % steps + 1}, {"steps", steps}, {"local_step", local_step}});
  }
  // An updater that recovers from a failure (Updater::Recover) sends the loop back to a position
  // it returns: `resume` then says where, and the epoch in progress starts again there.
  std::optional<Updater::Position> resume = options.start_at;
  if (resume) global_step = resume->global_step;
  std::optional<Updater::Position> regrouped;  // Updater::Regrouped after the last step
  Status updater_error;  // what the last failed updater call returned
  auto fail = [&](const Status& s) {
    updater_error = s;
    return where(s);
  };
  // The exported model's card, made at the first export: its data fingerprint hashes the whole
  // training split, once per run rather than once per export.
  std::optional<exporting::ModelCard> card;
  const auto card_of = [&]() -> const exporting::ModelCard& {
    if (!card) card = exporting::CardFor(job, data.train);
    return *card;
  };
  auto run = [&]() -> Status {
    for (epoch = resume ? resume->epoch : first_epoch; epoch <= job.epochs; ++epoch) {
      updater.StartingEpoch(epoch);
      // Elastic: the workers in the run at the start of this epoch share its data.
      const std::optional<Updater::Share> now = updater.EpochShare();
      if (now && now != share) {
        spdlog::info("{}membership: {} workers from epoch {}; this worker takes share {} of {}", prefix, now->count, epoch, now->index,
                     now->count);
        events.Emit("share", {{"epoch", std::int64_t{epoch}}, {"index", std::int64_t{now->index}}, {"workers", std::int64_t{now->count}}});
      }
      share = now;
      std::vector<std::uint32_t> shard = data::EpochShard(data.train.size, job.seed, epoch, share ? share->index : options.rank,
                                                           share ? share->count : options.num_workers, job.shuffle);
      double loss_sum = 0;
      std::int64_t correct = 0, seen = 0;
      double abs_sum = 0, sq_sum = 0;  // regression
      // Where the epoch's time went, by the task's own clock: reading the batch, forward and backward,
      // and the update (the exchange with the ps or the ring and the optimizer, with any gradients
      // handed over during backprop).
      Clock::duration input_time{}, compute_time{}, update_time{};
      if (options.shard_limit > 0 && static_cast<std::int64_t>(shard.size()) > options.shard_limit)
        shard.resize(static_cast<std::size_t>(options.shard_limit));
      input.StartEpoch(shard);
      const bool join = updater.JoinsUnevenShards();
      const std::int64_t my_steps = join ? static_cast<std::int64_t>(shard.size()) / batch
                                         : (share ? StepsPerEpoch(data.train.size, share->count, batch) : steps);
      const Clock::time_point start = Clock::now();
      std::int64_t first_step = epoch == first_epoch && options.first_epoch == 0 ? local_step % steps : 0;
      if (resume) first_step = epoch == resume->epoch ? resume->epoch_steps : 0;
      std::int64_t epoch_steps = first_step;  // global steps of this epoch taken (join steps too)
      for (std::int64_t s = first_step; s < my_steps; ++s) {
        if (options.stop != nullptr && options.stop->load(std::memory_order_relaxed)) {
          return Status::FailedPrecondition(fmt::format("stopped by a signal at epoch {} local_step {}", epoch, local_step));
        }
        const Clock::time_point fill_start = Clock::now();
        const model::BatchInput::Batch in = input.Take(s, s + 1 < my_steps);
        const tensor::Labels y = in.y->View(batch);
        if (join) updater.SetHasNextBatch(s + 1 < my_steps);
        const std::uint64_t dropout_seed = DropoutSeed(job.seed, options.rank, local_step);
        Status sending;
        const Clock::time_point step_start = Clock::now();
        input_time += step_start - fill_start;
        Clock::duration handing_off{};  // gradients handed to the updater during backprop (overlap)
        tensor::LossResult r;
        if (options.compute) {
          Result<tensor::LossResult> computed = options.compute(in.x, y, dropout_seed);
          if (!computed.ok()) return fail(computed.status());
          r = *computed;
        } else {
          model.SetDropoutSeed(dropout_seed);
          r = model.ComputeGradients(in.x, y, [&](std::size_t from) {
            const Clock::time_point t = Clock::now();
            if (sending.ok()) sending = updater.GradientsReady(model, from);
            handing_off += Clock::now() - t;
          });
        }
        const Clock::time_point computed = Clock::now();
        if (!sending.ok()) return fail(sending);
        if (!std::isfinite(r.loss)) {
          return Status::Internal(fmt::format("loss is {} at epoch {} local_step {}: training diverged (lower the learning rate)",
                                              r.loss, epoch, local_step));
        }
        ++local_step;
        updater.AtStep({.epoch = epoch, .epoch_steps = ++epoch_steps, .local_step = local_step, .global_step = global_step + 1});
        Result<std::int64_t> stepped = updater.Step(model, local_step);
        if (!stepped.ok()) return fail(stepped.status());
        global_step = *stepped;
        if ((regrouped = updater.Regrouped())) return Status::Ok();
        const Clock::time_point stepped_at = Clock::now();
        compute_time += computed - step_start - handing_off;
        update_time += stepped_at - computed + handing_off;
        if (!options.observers.empty()) {
          const StepStats stats{.epoch = epoch, .global_step = global_step, .local_step = local_step, .examples = batch,
                                .loss = r.loss, .accuracy = static_cast<double>(r.correct) / batch,
                                .regression = model.regression(), .mae = r.abs_error / (static_cast<double>(batch) * model.classes()),
                                .learning_rate = optim::LearningRate(job.optimizer, std::max<std::int64_t>(global_step - 1, 0)),
                                .compute_seconds = std::chrono::duration<double>(computed - step_start - handing_off).count(),
                                .update_seconds = std::chrono::duration<double>(stepped_at - computed + handing_off).count(),
                                .wall_time = UnixNow()};
          for (TrainObserver* o : options.observers) o->OnStep(stats);
        }
        if (updater.StopRequested()) {
          spdlog::info("{}early stopping: the chief ended the run at the end of an epoch (its log says why); stopping at epoch {} "
                       "global_step {} local_step {}", prefix, epoch, global_step, local_step);
          events.Emit("early_stopping", {{"epoch", std::int64_t{epoch}}, {"global_step", global_step}, {"reason", std::string("the chief stopped")}});
          break;
        }
        loss_sum += r.loss * batch;
        correct += r.correct;
        abs_sum += r.abs_error;
        sq_sum += r.squared_error;
        seen += batch;
        if (job.log_every_steps > 0 && local_step % job.log_every_steps == 0) {
          std::vector<EventField> fields = {{"epoch", std::int64_t{epoch}}, {"global_step", global_step}, {"local_step", local_step},
                                            {"loss", r.loss}};
          for (EventField& f : TrainMetric(model, r.correct, r.abs_error, r.squared_error, batch, "").fields) fields.push_back(std::move(f));
          events.Emit("step", fields);
        }
      }
      if (updater.StopRequested()) break;
      // Out of data: take part (with no gradient) in the steps of workers that still have some.
      while (join && updater.OthersHaveData()) {
        if (options.stop != nullptr && options.stop->load(std::memory_order_relaxed)) {
          return Status::FailedPrecondition(fmt::format("stopped by a signal at epoch {} local_step {}", epoch, local_step));
        }
        updater.AtStep({.epoch = epoch, .epoch_steps = ++epoch_steps, .local_step = local_step, .global_step = global_step + 1});
        Result<std::int64_t> joined = updater.JoinStep(model);
        if (!joined.ok()) return fail(joined.status());
        global_step = *joined;
        if ((regrouped = updater.Regrouped())) return Status::Ok();
      }
      const double secs = std::chrono::duration<double>(Clock::now() - start).count();
      const double samples_per_sec = secs > 0 ? static_cast<double>(seen) / secs : 0;
      // (seen is 0 in an epoch taken up again at its end, after a recovery)
      const double loss = seen > 0 ? loss_sum / static_cast<double>(seen) : 0.0;
      const double accuracy = seen > 0 ? static_cast<double>(correct) / static_cast<double>(seen) : 0.0;
      const Metric trained = TrainMetric(model, correct, abs_sum, sq_sum, seen, "");
      const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
      std::vector<EventField> fields = {{"epoch", std::int64_t{epoch}}, {"global_step", global_step}, {"local_step", local_step},
                                        {"loss", loss}};
      fields.insert(fields.end(), trained.fields.begin(), trained.fields.end());
      for (EventField f : std::vector<EventField>{{"samples_per_sec", samples_per_sec}, {"epoch_s", secs}, {"input_s", seconds(input_time)},
                                                  {"compute_s", seconds(compute_time)}, {"update_s", seconds(update_time)}})
        fields.push_back(std::move(f));
      std::string eval;
      EpochMetrics metrics;
      metrics.loss = loss;
      model::EvalResult val;
      if (validate) {
        val = model::EvaluateLoss(model, data.validation);
        metrics.val_loss = val.loss;
        metrics.val_accuracy = val.accuracy;
        metrics.val_mae = val.mae;
        const Metric m = EvalMetric(model, val, "val_");
        fields.push_back({"val_loss", val.loss});
        fields.insert(fields.end(), m.fields.begin(), m.fields.end());
        eval = fmt::format(" val_loss={:.4f}{}", val.loss, m.line);
      }
      if (options.evaluate_each_epoch) {
        test_result = model::EvaluateLoss(model, data.test, /*with_loss=*/false);
        test_accuracy = model.regression() ? test_result.mae : test_result.accuracy;
        const Metric m = EvalMetric(model, test_result, "test_");
        fields.insert(fields.end(), m.fields.begin(), m.fields.end());
        eval += m.line;
      }
      std::string note = updater.EpochNote();
      spdlog::info("{}epoch={} global_step={}{} loss={:.4f}{}{} samples_per_sec={:.0f}{}{}", prefix, epoch, global_step,
                   worker_line ? fmt::format(" local_step={}", local_step) : "", loss, trained.line, eval, samples_per_sec,
                   note.empty() ? "" : " ", note);
      // The chief judges the epoch before its `epoch` event and the observers, so an epoch's
      // checkpoint holds the rule's state after it, and a chief killed once the event is out
      // resumes its count from there; the decision is shared at EndOfEpoch below.
      const bool judges = job.can_stop_early() && epoch < job.epochs;
      std::optional<std::string> reason;
      std::optional<ckpt::EarlyStopping> judged;  // the rule's state after this epoch, when judged
      if (judges && options.evaluate_each_epoch) {
        reason = stopper.Update(epoch, metrics);
        judged = stopper.State();
        updater.EpochJudged(*judged);
      }
      events.Emit("epoch", fields);
      if (!options.observers.empty()) {
        EpochStats stats{.epoch = epoch, .global_step = global_step, .local_step = local_step, .loss = loss, .accuracy = accuracy,
                         .samples_per_sec = samples_per_sec, .wall_time = UnixNow(), .model = &model};
        if (model.regression()) stats.mae = std::get<double>(trained.fields[0].value), stats.rmse = std::get<double>(trained.fields[1].value);
        if (validate && model.regression()) stats.val_loss = val.loss, stats.val_mae = val.mae, stats.val_rmse = val.rmse;
        else if (validate) stats.val_loss = metrics.val_loss, stats.val_accuracy = metrics.val_accuracy;
        if (options.evaluate_each_epoch && model.regression()) stats.test_mae = test_result.mae, stats.test_rmse = test_result.rmse;
        else if (options.evaluate_each_epoch) stats.test_accuracy = test_result.accuracy;
        stats.early_stopping = judged;
        for (TrainObserver* o : options.observers) o->OnEpoch(stats);
      }
      // Every export.every_epochs epochs (a model-parallel stage holds its own layers only until the
      // final gather, so it exports at the end alone). A failed export here is logged; the run goes on.
      const int every = job.export_model.every_epochs;
      if (options.exports && !job.export_model.dir.empty() && every > 0 && epoch % every == 0 && epoch < job.epochs &&
          !job.model_parallel.enabled()) {
        Result<std::string> exported = ExportTrainedModel(job, card_of(), model, global_step, fields, TrainedBy(job, options.task == "standalone"), events);
        if (!exported.ok()) spdlog::warn("{}epoch {}: the model was not exported: {}", prefix, epoch, exported.status().message());
      }
      NotifyStatus(fmt::format("epoch {} of {}: global_step={} loss={:.4f}{}{}", epoch, job.epochs, global_step, loss, trained.line, eval));
      if (judges) {
        Result<bool> ended = updater.EndOfEpoch(reason.has_value());
        if (!ended.ok()) return fail(ended.status());
        const bool stop = *ended;
        if (stop) {
          const std::string why = reason.value_or("the chief ended the run (its log says why)");
          spdlog::info("{}early stopping: {}; stopping after epoch {} of {}", prefix, why, epoch, job.epochs);
          events.Emit("early_stopping", {{"epoch", std::int64_t{epoch}}, {"global_step", global_step}, {"reason", why}});
          break;
        }
      }
    }
    epoch = std::min(epoch, job.epochs);  // past the loop, or where early stopping left it
    Result<std::int64_t> finished = updater.Finish(model);
    if (!finished.ok()) return fail(finished.status());
    global_step = *finished;
    return Status::Ok();
  };
  for (;;) {
    updater_error = Status::Ok();
    Status s = run();
    if (s.ok() && regrouped) {  // the epoch in progress goes on in the new ring, with the new shares
      resume = std::exchange(regrouped, std::nullopt);
      continue;
    }
    if (s.ok()) break;
    if (updater_error.ok()) return s;  // a signal, a diverged loss: nothing to recover from
    Result<Updater::Position> r = updater.Recover(model, updater_error);
    if (!r.ok()) return where(r.status());
    resume = *r;
    local_step = resume->local_step;
    global_step = resume->global_step;
  }
  if (updater.FinishChangesParams() || test_accuracy < 0) {
    test_result = model::EvaluateLoss(model, data.test, /*with_loss=*/false);
    test_accuracy = model.regression() ? test_result.mae : test_result.accuracy;
  }
  const Metric tested = EvalMetric(model, test_result, "test_");
  const std::string sha = model::ParamsSha256(model);
  if (!options.params_out.empty()) {
    std::ofstream out(options.params_out, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(model.params().data()), static_cast<std::streamsize>(model.params().size_bytes()));
    if (!out) return Status::Unavailable(fmt::format("--params-out: cannot write {}", options.params_out));
  }
  if (options.exports && !job.export_model.dir.empty()) {
    std::vector<EventField> final_metrics = tested.fields;
    final_metrics.push_back({"epochs", std::int64_t{job.epochs}});
    TFD_RETURN_IF_ERROR(ExportTrainedModel(job, card_of(), model, global_step, final_metrics, TrainedBy(job, options.task == "standalone"), events)
                            .status()
                            .WithContext("exporting the trained model"));
  }
  spdlog::info("{}done: global_step={} local_step={}{} params_sha256={}", prefix, global_step, local_step, tested.line, sha);
  std::vector<EventField> done = {{"global_step", global_step}, {"local_step", local_step}};
  done.insert(done.end(), tested.fields.begin(), tested.fields.end());
  done.push_back({"params_sha256", sha});
  events.Emit("done", done);
  return Status::Ok();
}

}  // namespace

Status Train(const config::JobSpec& job, const data::DataSplits& data, model::Model& model, Updater& updater,
             EventWriter& events, const TrainerOptions& options) {
  Status s = TrainLoop(job, data, model, updater, events, options);
  for (TrainObserver* o : options.observers) o->OnEnd(s.ok());
  return s;
}

}  // namespace tfd::train
