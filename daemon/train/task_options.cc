#include "daemon/train/task_options.h"

namespace tfd::train {

TrainerOptions TrainerOptionsFor(const config::TfConfig& config, const config::JobSpec& job, const WorkerTaskOptions& options) {
  TrainerOptions t;
  t.task = config.task.ToString();
  t.rank = config.cluster.WorkerRank(config.task);
  t.num_workers = config.cluster.num_workers();
  t.evaluate_each_epoch = config.is_chief() && job.evaluation == config::Evaluation::kChief;
  t.exports = config.is_chief();
  t.stop = options.stop;
  t.params_out = options.params_out;
  t.shard_limit = options.shard_limit;
  t.observers = options.observers;
  t.prefetch = job.Prefetch();
  return t;
}

}  // namespace tfd::train
