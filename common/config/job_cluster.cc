#include "common/config/job_cluster.h"

#include <fmt/format.h>

namespace tfd::config {

namespace {

// A batch norm's moving statistics live on the workers: in the ps modes each keeps its own across
// its pulls (daemon/worker); in model parallel the stage that holds the layer moves them once per
// micro-batch (a recompute before a Backward leaves them alone). A synchronised one's sums run over
// the allreduce ring in the middle of each step, which neither has. A batch norm inside a residual
// block is named by its path in the block (model.layers[i].layers[j]).
Status CheckSyncBatchNorm(const JobSpec& job, std::string_view job_where, std::string_view mode) {
  return ForEachLayer(job.model.layers, [&](const LayerSpec& l, const std::string& path) {
    if (l.kind != LayerSpec::Kind::kBatchNorm || !l.sync) return Status::Ok();
    return Status::InvalidArgument(fmt::format("{}{}.sync: a synchronised batch_norm sums over the allreduce ring, which {} has not "
                                               "(leave \"sync\" out: each worker then normalises with its own batch)",
                                               job_where, path, mode));
  });
}

}  // namespace

Status CheckJobOnCluster(const ClusterSpec& cluster, const JobSpec& job, std::string_view job_where) {
  if (!cluster.coordinator.empty()) return Status::Ok();
  const std::size_t num_ps = cluster.ps.size();
  if (job.model_parallel.enabled()) {
    TFD_RETURN_IF_ERROR(CheckSyncBatchNorm(job, job_where, "model parallel"));
    if (Status s = CheckModelParallelCluster(job.model_parallel, cluster.num_workers(), num_ps); !s.ok())
      return Status::InvalidArgument(fmt::format("{}{}", s.message().starts_with("model_parallel") ? job_where : "", s.message()));
    return CheckEvaluation(cluster, job, job_where);
  }
  const ElasticSpec& elastic = job.elastic;
  switch (job.update.mode) {
    case UpdateSpec::Mode::kAllreduce: {
      const int n = cluster.num_workers();
      if (num_ps != 0)
        return Status::InvalidArgument(fmt::format("cluster.ps: {} ps tasks, but allreduce mode has none (workers all-reduce among "
                                                   "themselves): remove them or use async or sync mode",
                                                   num_ps));
      if (elastic.enabled() && (n < elastic.min_workers || n > elastic.max_workers))
        return Status::InvalidArgument(fmt::format("{}elastic: a ring of {} workers is outside min_workers {} .. max_workers {}", job_where,
                                                   n, elastic.min_workers, elastic.max_workers));
      if (!elastic.enabled() && cluster.base_num_workers() != n)
        return Status::InvalidArgument(fmt::format("cluster: a worker joins a running ring of {} workers (TF_CONFIG tfd.base_workers), but "
                                                   "the job has no \"elastic\" section", cluster.base_num_workers()));
      break;
    }
    case UpdateSpec::Mode::kAsync:
    case UpdateSpec::Mode::kSync: {
      // An elastic job's joining workers count the workers the run started with, as the others do.
      const int n = cluster.base_num_workers();
      const bool sync = job.update.mode == UpdateSpec::Mode::kSync;
      TFD_RETURN_IF_ERROR(CheckSyncBatchNorm(job, job_where, sync ? "sync mode" : "async mode"));
      if (num_ps == 0)
        return Status::InvalidArgument(fmt::format("cluster.ps: empty: {} mode needs at least one ps task", sync ? "sync" : "async"));
      if (elastic.enabled() && (n < elastic.min_workers || n > elastic.max_workers))
        return Status::InvalidArgument(fmt::format("{}elastic: a cluster of {} workers is outside min_workers {} .. max_workers {}",
                                                   job_where, n, elastic.min_workers, elastic.max_workers));
      if (elastic.enabled() && sync && job.update.replicas_to_aggregate != 0)
        return Status::InvalidArgument(
            fmt::format("{}update.replicas_to_aggregate: an elastic sync job aggregates every worker's gradient; leave it out", job_where));
      if (sync && job.update.total_num_replicas != 0 && job.update.total_num_replicas != n)
        return Status::InvalidArgument(
            fmt::format("{}update.total_num_replicas: {}, but the cluster has {} workers", job_where, job.update.total_num_replicas, n));
      if (sync && job.update.replicas_to_aggregate > n)
        return Status::InvalidArgument(fmt::format("{}update.replicas_to_aggregate: {}, but the cluster has {} workers", job_where,
                                                   job.update.replicas_to_aggregate, n));
      if (sync && job.update.min_replicas > n)
        return Status::InvalidArgument(
            fmt::format("{}update.min_replicas: {}, but the cluster has {} workers", job_where, job.update.min_replicas, n));
      break;
    }
  }
  return CheckEvaluation(cluster, job, job_where);
}

Status CheckEvaluation(const ClusterSpec& cluster, const JobSpec& job, std::string_view where) {
  if (cluster.evaluator.empty()) return Status::Ok();
  if (job.evaluation == Evaluation::kNone)
    return Status::InvalidArgument(fmt::format("{}evaluation: \"none\", but the cluster has an evaluator task (remove it, or set "
                                               "\"evaluation\": \"evaluator\")", where));
  if (job.checkpoint.dir.empty())
    return Status::InvalidArgument(fmt::format("{}checkpoint: missing: the cluster has an evaluator task, which evaluates the "
                                               "chief's checkpoints (set checkpoint.dir)", where));
  return Status::Ok();
}


Status CheckModelParallelCluster(const ModelParallelSpec& mp, int num_workers, std::size_t num_ps) {
  if (num_workers % mp.stages != 0)
    return Status::InvalidArgument(fmt::format("model_parallel.stages: the cluster's {} workers are not a multiple of {} stages (each "
                                               "replica needs one worker per stage)", num_workers, mp.stages));
  if (num_ps != 0)
    return Status::InvalidArgument(fmt::format("cluster.ps: {} ps tasks, but a model-parallel job's replicas combine their gradients by "
                                               "all-reduce among same-stage workers, not through ps tasks: remove them",
                                               num_ps));
  return Status::Ok();
}

}  // namespace tfd::config
