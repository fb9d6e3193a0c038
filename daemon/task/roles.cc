#include "daemon/task/roles.h"

#include <filesystem>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/base/memory.h"
#include "common/config/job.h"
#include "common/config/job_cluster.h"
#include "daemon/allreduce/run_allreduce.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/coordinator/generic_worker.h"
#include "daemon/coordinator/sweep_run.h"
#include "daemon/evaluator/evaluator.h"
#include "daemon/evaluator/sinks.h"
#include "daemon/pipeline/run_pipeline.h"
#include "daemon/ps/run_ps.h"
#include "daemon/task/lifecycle.h"
#include "daemon/task/metrics_endpoint.h"
#include "daemon/train/metrics_observer.h"
#include "daemon/train/standalone.h"
#include "daemon/train/summary_observer.h"
#include "daemon/train/task_options.h"
#include "daemon/worker/run_worker.h"

namespace tfd::task {
namespace {

// The job of a task: --job read, the flags' overrides applied (--summaries-dir, --export-dir, --device,
// --gpu-memory-fraction), and checked against the cluster (config::CheckJobOnCluster).
Result<config::JobSpec> LoadTaskJob(const RoleContext& c) {
  const TaskFlags& f = c.flags;
  config::JobSpec job;
  if (!f.job_path.empty()) {
    TFD_ASSIGN_OR_RETURN(job, config::LoadJobSpec(f.job_path));
    if (job.ensemble.members > 0)
      return Status::InvalidArgument(f.job_path + ": ensemble: an ensemble trains one member per worker: run it with tfctl ensemble " +
                                     f.job_path);
    if (c.place.tf) TFD_RETURN_IF_ERROR(config::CheckJobOnCluster(c.place.tf->cluster, job, f.job_path + ": "));
  }
  if (!f.summaries_dir.empty()) job.summaries.dir = f.summaries_dir;
  if (!f.export_dir.empty()) job.export_model.dir = f.export_dir;
  if (f.device) {
    job.device = *f.device;
    job.cuda_device = *f.cuda_device;
  }
  if (f.gpu_memory_fraction) job.gpu_memory_fraction = *f.gpu_memory_fraction;
  return job;
}

// A task's metrics endpoint (--metrics) and the observers of a training role: TensorBoard
// summaries in the job's summaries.dir, and the metrics fed each step. Alive for the role's run.
class Observation {
 public:
  // `trains`: the role trains (observers, training metrics); `serves_peers`: a ps or a ring member,
  // whose refusals the metrics count.
  static Result<Observation> Open(const RoleContext& c, const config::JobSpec* job, bool trains, bool serves_peers) {
    Observation o;
    if (trains && job != nullptr && !job->summaries.dir.empty()) {
      TFD_ASSIGN_OR_RETURN(o.summaries_, train::SummaryObserver::Open(job->summaries, c.place.name));
      o.observers_.push_back(o.summaries_.get());
    }
    if (c.flags.metrics) {
      MetricsEndpoint::Options m;
      m.host = c.flags.metrics->first;
      m.port = c.flags.metrics->second;
      m.labels = {{"job", "standalone"}, {"task", "0"}, {"run", c.flags.run_name}};
      if (c.place.tf) {
        m.labels[0].second = config::TaskTypeName(c.place.tf->task.type);
        m.labels[1].second = std::to_string(c.place.tf->task.index);
      } else if (c.place.role == Role::kGenericWorker) {  // --coordinator: worker I of the sweep, as tfctl's targets.json says
        m.labels[0].second = "worker";
        m.labels[1].second = std::to_string(c.place.worker_index);
      }
      m.task = c.place.name;
      m.training = trains;
      m.serves_peers = serves_peers;
      TFD_ASSIGN_OR_RETURN(o.endpoint_, MetricsEndpoint::Start(m));
      spdlog::info("metrics on http://{}/metrics", o.endpoint_->address());
      if (trains) {
        o.metrics_observer_ = std::make_unique<train::MetricsObserver>(o.endpoint_->metrics());
        o.observers_.push_back(o.metrics_observer_.get());
      }
    }
    return o;
  }

  const std::vector<train::TrainObserver*>& observers() const { return observers_; }
  metrics::TaskMetrics* metrics() { return endpoint_ != nullptr ? &endpoint_->metrics() : nullptr; }
  std::shared_ptr<transport::PeerGuard> guard() const { return endpoint_ != nullptr ? endpoint_->guard() : nullptr; }
  // Runs the role: /healthz says "running", then "finished" or "failed". A model or batch too
  // large for this machine's memory is a usage error naming the job, not a crash.
  template <typename Role>
  Status Run(const std::string& job_path, Role&& role) {
    if (endpoint_ != nullptr) endpoint_->SetPhase("running");
    Status s;
    try {
      s = role();
    } catch (const std::bad_alloc&) {
      s = Status::InvalidArgument(fmt::format("{}: out of memory: the model or batch_size is too large for this machine", job_path));
    }
    if (endpoint_ != nullptr) endpoint_->SetPhase(s.ok() ? "finished" : "failed");
    return s;
  }

 private:
  std::unique_ptr<train::SummaryObserver> summaries_;
  std::unique_ptr<train::MetricsObserver> metrics_observer_;
  std::vector<train::TrainObserver*> observers_;
  std::unique_ptr<MetricsEndpoint> endpoint_;  // last: its server stops first
};

// The connection settings of a role that talks to peers: the flags', the token, and `guard` (the
// metrics' admission control, or null).
transport::ConnectionOptions ConnectionFor(const RoleContext& c, std::shared_ptr<transport::PeerGuard> guard) {
  transport::ConnectionOptions conn = c.flags.Connection();
  conn.token = c.token;
  conn.insecure = c.flags.insecure;
  conn.guard = std::move(guard);  // null without metrics: the role's server makes its own
  return conn;
}

}  // namespace

Status RunStandaloneTask(const RoleContext& c) {
  KeepLargeAllocationsInHeap();
  TFD_ASSIGN_OR_RETURN(config::JobSpec job, LoadTaskJob(c));
  TFD_ASSIGN_OR_RETURN(Observation o, Observation::Open(c, &job, /*trains=*/true, /*serves_peers=*/false));
  return o.Run(c.flags.job_path, [&] {
    return train::RunStandalone(job, c.task.events(),
                                {.stop = c.task.stop(), .params_out = c.flags.params_out, .observers = o.observers()});
  });
}

Status RunPsTask(const RoleContext& c) {
  KeepLargeAllocationsInHeap();
  if (!c.flags.job_path.empty()) TFD_RETURN_IF_ERROR(LoadTaskJob(c).status());  // a ps needs none; one given must be right
  TFD_ASSIGN_OR_RETURN(Observation o, Observation::Open(c, nullptr, /*trains=*/false, /*serves_peers=*/true));
  return o.Run(c.flags.job_path, [&] {
    return ps::RunPs(*c.place.tf, c.task.events(),
                     {.bind_address = c.flags.bind,
                      .connection = ConnectionFor(c, o.guard()),
                      .stop = c.task.stop(),
                      .worker_return_timeout = c.flags.reconnect_timeout,
                      .startup_timeout = c.flags.startup_timeout,
                      .summaries_dir = c.flags.summaries_dir,
                      .metrics = o.metrics()});
  });
}

Status RunWorkerTask(const RoleContext& c) {
  KeepLargeAllocationsInHeap();
  TFD_ASSIGN_OR_RETURN(config::JobSpec job, LoadTaskJob(c));
  const bool ring = job.update.mode == config::UpdateSpec::Mode::kAllreduce || job.model_parallel.enabled();
  TFD_ASSIGN_OR_RETURN(Observation o, Observation::Open(c, &job, /*trains=*/true, /*serves_peers=*/ring));
  train::WorkerTaskOptions options;
  options.startup_timeout = c.flags.startup_timeout;
  options.step_timeout = c.flags.step_timeout;
  options.reconnect_timeout = c.flags.reconnect_timeout;
  options.stop = c.task.stop();
  options.params_out = c.flags.params_out;
  options.bind_address = c.flags.bind;
  options.shard_limit = c.flags.shard_limit;
  options.observers = o.observers();
  options.metrics = o.metrics();
  const transport::ConnectionOptions conn = ConnectionFor(c, o.guard());
  const config::TfConfig& tf = *c.place.tf;
  return o.Run(c.flags.job_path, [&] {
    if (job.model_parallel.enabled()) return pipeline::RunPipelineWorker(tf, job, c.task.events(), options, conn);
    if (job.update.mode == config::UpdateSpec::Mode::kAllreduce) return allreduce::RunAllreduceWorker(tf, job, c.task.events(), options, conn);
    return worker::RunWorker(tf, job, c.task.events(), options, conn);
  });
}

Status RunEvaluatorTask(const RoleContext& c) {
  KeepLargeAllocationsInHeap();
  TFD_ASSIGN_OR_RETURN(config::JobSpec job, LoadTaskJob(c));
  TFD_ASSIGN_OR_RETURN(Observation o, Observation::Open(c, &job, /*trains=*/false, /*serves_peers=*/false));
  evaluator::EvaluatorOptions options;
  options.stop = c.task.stop();
  options.startup_timeout = c.flags.startup_timeout;
  options.idle_timeout = c.flags.idle_timeout.value_or(std::chrono::milliseconds(0));
  // Its scalars go to LOGDIR/eval/, TensorFlow's folder for them; its accuracy to the metrics.
  std::unique_ptr<evaluator::SummarySink> summaries;
  std::unique_ptr<evaluator::MetricsSink> metrics;
  if (!job.summaries.dir.empty()) {
    TFD_ASSIGN_OR_RETURN(summaries, evaluator::SummarySink::Open(job.summaries.dir));
    options.sinks.push_back(summaries.get());
  }
  if (o.metrics() != nullptr) {
    metrics = std::make_unique<evaluator::MetricsSink>(*o.metrics());
    options.sinks.push_back(metrics.get());
  }
  return o.Run(c.flags.job_path, [&] { return evaluator::RunEvaluator(*c.place.tf, job, c.task.events(), options); });
}

Status RunGenericWorkerTask(const RoleContext& c) {
  TFD_ASSIGN_OR_RETURN(Observation o, Observation::Open(c, nullptr, /*trains=*/true, /*serves_peers=*/false));
  coordinator::GenericWorkerOptions options{.host = c.place.coordinator_host,
                                            .port = c.place.coordinator_port,
                                            .index = c.place.worker_index,
                                            .cluster_id = c.place.tf ? c.place.tf->cluster.Id() : 0,
                                            .stop = c.task.stop(),
                                            .startup_timeout = c.flags.startup_timeout,
                                            .observers = o.observers(),
                                            .export_root = c.flags.export_dir};
  // A worker of tfctl sweep (--coordinator) reaches it on this host with no token; a worker task of
  // a TF_CONFIG cluster with the cluster's.
  const transport::ConnectionOptions conn = ConnectionFor(c, nullptr);
  return o.Run("", [&] { return coordinator::RunGenericWorker(options, c.task.events(), conn); });
}

namespace {

// The `resumed` event of a coordinator that went on with the sweep in its run folder, and its log line.
void EmitResumed(EventWriter& events, const coordinator::SweepScheduler::Restored& r, const std::string& run_dir) {
  spdlog::info("resumed the sweep in {}: {} trials ended, {} resumed ({} from a checkpoint), {} not started yet", run_dir, r.done, r.resumed,
               r.from_checkpoint, r.pending);
  events.Emit("resumed", {{"run_dir", run_dir},
                          {"done", static_cast<std::int64_t>(r.done)},
                          {"resumed", static_cast<std::int64_t>(r.resumed)},
                          {"from_checkpoint", static_cast<std::int64_t>(r.from_checkpoint)},
                          {"pending", static_cast<std::int64_t>(r.pending)}});
}

}  // namespace

// The coordinator task of a TF_CONFIG cluster (docs/sweeps.md, "By hand"): runs the sweep of --sweep
// (or the ensemble of --job) on the cluster's worker tasks, listening on its own endpoint, and
// writes the run folder --run-dir as tfctl sweep does.
Status RunCoordinatorTask(const RoleContext& c) {
  namespace fs = std::filesystem;
  const config::TfConfig& tf = *c.place.tf;
  const bool ensemble = c.flags.sweep_path.empty();
  const std::string file = ensemble ? c.flags.job_path : c.flags.sweep_path;
  const std::string run_dir = fs::absolute(c.flags.run_dir).string();
  // The cluster's worker tasks, whatever the file says.
  TFD_ASSIGN_OR_RETURN(coordinator::PreparedSweep prepared, coordinator::PrepareSweep(file, ensemble, tf.cluster.num_workers()));
  coordinator::CoordinatorOptions copts;
  if (c.flags.resume) {
    TFD_ASSIGN_OR_RETURN(copts.resume, coordinator::OpenForResume(run_dir, file, prepared, ensemble));
  } else {
    std::error_code ec;
    if (fs::exists(fs::path(run_dir) / "trials.jsonl", ec))
      return Status::InvalidArgument(
          fmt::format("--run-dir: {} holds a sweep's trials.jsonl already: give a new or empty folder, or --resume to go on with it", run_dir));
    if (Status s = coordinator::MakeSweepFolder(run_dir, file, prepared, ensemble); !s.ok()) return Status::InvalidArgument("--run-dir: " + s.message());
  }
  TFD_ASSIGN_OR_RETURN(Observation o, Observation::Open(c, nullptr, /*trains=*/false, /*serves_peers=*/false));

  const config::SweepSpec& sweep = prepared.spec;
  copts.bind_address = c.flags.bind;
  copts.port = tf.self().port;
  copts.connection = ConnectionFor(c, nullptr);
  copts.trials_dir = (fs::path(run_dir) / "trials").string();
  copts.cluster_id = tf.cluster.Id();
  TFD_ASSIGN_OR_RETURN(std::unique_ptr<coordinator::Coordinator> coord,
                       coordinator::Coordinator::Start(sweep, prepared.trials, prepared.parallel, copts));
  spdlog::info("{} {}: {} trials, {} at once on {} worker tasks, {} of {}, scheduler {}; listening on port {}; run folder {}",
               ensemble ? "ensemble" : "sweep", file, prepared.trials.size(), prepared.parallel, sweep.workers, sweep.maximize ? "max" : "min",
               sweep.metric, sweep.asha ? "asha" : "none", coord->port(), run_dir);
  EmitStart(c.task.events(), {.role = "coordinator",
                              .rank = tf.task.index,
                              .extra = {{"trials", static_cast<std::int64_t>(prepared.trials.size())}}});
  if (c.flags.resume) EmitResumed(c.task.events(), coord->restored(), run_dir);

  coordinator::SweepRunOptions ropts;
  ropts.run_dir = run_dir;
  ropts.ensemble = ensemble;
  ropts.table = stderr;
  ropts.prefix = c.place.name;
  ropts.say = [](bool error, std::string_view, const std::string& message) {
    if (error) spdlog::error("{}", message);
    else spdlog::info("{}", message);
  };
  const std::atomic<bool>* stop = c.task.stop();
  ropts.interrupted = [stop] { return stop->load(); };
  ropts.startup_timeout = c.flags.startup_timeout;
  ropts.reconnect_timeout = c.flags.reconnect_timeout;
  ropts.expected_workers = sweep.workers;
  const Status s = o.Run("", [&] {
    const int rc = coordinator::RunSweep(*coord, sweep, ropts);
    coord.reset();
    if (rc == 130) return Status::FailedPrecondition("stopped by a signal; what the sweep wrote is kept in " + run_dir);
    if (rc != 0) return Status::FailedPrecondition(std::string("no trial reported ") + sweep.metric);
    return Status::Ok();
  });
  if (s.ok()) c.task.events().Emit("done", {{"run_dir", run_dir}});
  return s;
}

}  // namespace tfd::task
