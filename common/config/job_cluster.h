#pragma once

#include <string_view>

#include "common/base/status.h"
#include "common/config/cluster.h"
#include "common/config/job.h"

namespace tfd::config {

// Whether `cluster` can run `job`: every check between the two that needs no task's own place in
// it, in one function that tfd (before a task starts its role) and tfctl validate / up (before any
// task starts) both call, so neither finds a mismatch the other misses:
//   - the update mode against the ps tasks: async and sync need at least one ps; allreduce and a
//     model-parallel job have none;
//   - sync: total_num_replicas equal to, and replicas_to_aggregate and min_replicas at most, the
//     number of workers; an elastic sync job aggregates every worker (no replicas_to_aggregate);
//   - elastic: the cluster's workers within min_workers .. max_workers (only an elastic allreduce
//     ring can be joined: TF_CONFIG tfd.base_workers below the cluster's own count);
//   - model_parallel: a whole number of replicas of `stages` workers (CheckModelParallelCluster);
//   - evaluation: an evaluator task's needs (CheckEvaluation).
// A cluster with a coordinator task is not checked: its workers train the jobs the coordinator hands
// out. InvalidArgument otherwise: a job field's message starts with `job_where` ("cluster.json:
// train.", "job.json: "), a cluster field's with "cluster." ("cluster.ps: empty: ...").
Status CheckJobOnCluster(const ClusterSpec& cluster, const JobSpec& job, std::string_view job_where);

// The checks between a cluster and its job's evaluation (docs/config.md, "evaluation"): an
// evaluator task needs the chief's checkpoints (checkpoint.dir, a ps mode) and a job whose
// evaluation is not "none". InvalidArgument "WHERE<field>: what" (`where`: "cluster.json: train.").
Status CheckEvaluation(const ClusterSpec& cluster, const JobSpec& job, std::string_view where);

// Whether a cluster of `num_workers` workers and `num_ps` ps tasks can run `mp` (enabled): a whole
// number of replicas of `stages` workers each, and no ps (replicas all-reduce among same-stage
// workers). InvalidArgument naming the field and both numbers otherwise.
Status CheckModelParallelCluster(const ModelParallelSpec& mp, int num_workers, std::size_t num_ps);

}  // namespace tfd::config
