#include "daemon/pipeline/run_pipeline.h"

#include <unistd.h>


#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/base/service.h"
#include "common/transport/io_thread.h"
#include "common/transport/listener.h"
#include "daemon/pipeline/layer_stage.h"
#include "daemon/pipeline/stage_plan.h"
#include "daemon/pipeline/stage_updater.h"
#include "daemon/pipeline/unit_stage.h"
#include "daemon/ring_options.h"
#include "daemon/ring_restore.h"
#include "daemon/task_kind.h"
#include "daemon/train/job_data.h"
#include "daemon/train/trainer.h"
#include "daemon/task/lifecycle.h"

namespace tfd::pipeline {

Status RunPipelineWorker(const config::TfConfig& config, const config::JobSpec& job, EventWriter& events,
                         const train::WorkerTaskOptions& options, const transport::ConnectionOptions& connection) {
  const config::ModelParallelSpec& mp = job.model_parallel;
  const int workers = config.cluster.num_workers(), stages = mp.stages;
  const int replicas = workers / stages;
  const int rank = config.cluster.WorkerRank(config.task);
  const int replica = rank / stages, stage = rank % stages;
  TFD_ASSIGN_OR_RETURN(train::LoadedJob loaded, train::LoadJobData(job, replicas));
  model::Model& model = *loaded.model;
  const bool by_layers = mp.split == config::ModelParallelSpec::Split::kLayers;
  StagePlan plan;
  if (by_layers) {
    TFD_ASSIGN_OR_RETURN(plan, PlanLayers(mp, model));
  } else {
    TFD_RETURN_IF_ERROR(CheckUnits(mp, model));
  }
  std::unique_ptr<optim::Optimizer> optimizer = optim::MakeOptimizer(job.optimizer);
  spdlog::info("{}: stage {} of {} (replica {}); split {} {}, {} micro-batches of {}; model: {}", config.task.ToString(), stage, stages,
               replica, config::SplitName(mp.split), by_layers ? config::ScheduleName(mp.schedule) : "all-gather", mp.microbatches,
               job.batch_size / mp.microbatches, model.Summary());
  if (by_layers) spdlog::info("stages: {}", plan.Describe(model));
  task::EmitStart(events, {.role = "worker",
                           .mode = fmt::format("model_parallel {}", config::SplitName(mp.split)),
                           .rank = rank,
                           .chief = config.is_chief(),
                           .extra = {{"stage", std::int64_t{stage}},
                                     {"stages", std::int64_t{stages}},
                                     {"replica", std::int64_t{replica}},
                                     {"replicas", std::int64_t{replicas}}}});

  const std::int64_t steps_per_epoch = train::StepsPerEpoch(loaded.data.train.size, replicas, job.batch_size);
  // The chief reads the newest checkpoint now; every stage gets it once the rings are formed.
  // Its card (the model, the data's fingerprint) goes into every checkpoint and is checked at a restore.
  const exporting::ModelCard card = config.is_chief() && !job.checkpoint.dir.empty() ? exporting::CardFor(job, loaded.data.train) : exporting::ModelCard{};
  Result<train::WholeRestore> restore =
      config.is_chief() ? train::LoadWholeRestore(job, model, card, replicas, steps_per_epoch) : train::WholeRestore{};

  std::unique_ptr<transport::Listener> listener;
  std::shared_ptr<collective::Ring> ring, replica_ring;
  transport::IoThread io([&] {
    if (ring != nullptr) ring->Close(Status::Ok());
    if (replica_ring != nullptr) replica_ring->Close(Status::Ok());
    if (listener != nullptr) listener->Stop();
  });
  collective::RingOptions ro = RingOptionsFor(config, replica * stages, stages, stage, options, connection);
  for (int s = 0; s < stages; ++s) ro.members[s].task = fmt::format("{} (stage {} of replica {})", ro.members[s].task, s, replica);
  // The widest activation of a micro-batch, with its fields.
  std::int64_t widest = model.input_size();
  for (std::size_t i = 0; i < model.num_layers(); ++i) widest = std::max(widest, model.layer_output_shape(i).size());
  ro.max_message_bytes = static_cast<std::uint32_t>(
      std::min<std::int64_t>(wire::kMaxPayloadBytes, wire::kPipeTensorHeadBytes + 4 * widest * job.batch_size + 1024));
  ring = collective::Ring::Create(io.context(), ro);
  if (replicas > 1) {
    // This stage in every replica: workers stage, S + stage, 2S + stage, ... in replica order.
    collective::RingOptions rr = RingOptionsFor(config, 0, 0, replica, options, connection);
    for (int r = 0; r < replicas; ++r) {
      const config::TaskId t = config.cluster.WorkerTask(r * stages + stage);
      const config::Endpoint& ep = config.cluster.EndpointOf(t);
      rr.members.push_back({fmt::format("{} (stage {} of replica {})", t.ToString(), stage, r), ep.host, ep.port, ToWireKind(t.type),
                            static_cast<std::uint32_t>(t.index)});
    }
    replica_ring = collective::Ring::Create(io.context(), rr);
    ring->ShareListenerWith(replica_ring);  // one port: HELLOs from the previous replica's stage go to replica_ring
  }
  const config::Endpoint& self = config.self();
  TFD_ASSIGN_OR_RETURN(listener, transport::Listener::Bind(io.context(), options.bind_address, self.port,
                                                           [r = ring](transport::tcp::socket s) { r->Accept(std::move(s)); }));
  listener->Start();
  TFD_RETURN_IF_ERROR(train::AtStartup(ring->Connect()));
  if (replica_ring != nullptr) {
    if (Status s = replica_ring->Connect(); !s.ok()) {
      ring->Close(s);  // the replica's other stages learn why
      return train::AtStartup(s.WithContext(fmt::format("the ring of stage {} in the {} replicas", stage, replicas)));
    }
    spdlog::info("ready: the {} stages of replica {} are connected, and stage {} of the {} replicas", stages, replica, stage, replicas);
  } else {
    spdlog::info("ready: the {} stages of replica {} are connected", stages, replica);
  }
  if (!restore.ok()) {  // the chief's checkpoint does not fit: every task ends with its reason
    ring->Close(restore.status());
    if (replica_ring != nullptr) replica_ring->Close(restore.status());
    return restore.status();
  }
  task::EmitReady(events, 0, fmt::format("{}: stage {} of {}", config.task.ToString(), stage, stages));
  if (options.metrics != nullptr) options.metrics->connected_peers->Set(replica_ring != nullptr ? 4 : 2);

  train::TrainerOptions topts = train::TrainerOptionsFor(config, job, options);
  topts.rank = replica;
  topts.num_workers = replicas;
  topts.evaluate_each_epoch = false;  // a stage holds its own layers only until the final gather
  std::unique_ptr<LayerStage> layer_stage;
  std::unique_ptr<UnitStage> unit_stage;
  std::vector<OwnedRange> owned;
  StageStats* stats = nullptr;
  if (by_layers) {
    const std::size_t first = plan.first[static_cast<std::size_t>(stage)], last = plan.first[static_cast<std::size_t>(stage) + 1];
    layer_stage = std::make_unique<LayerStage>(*ring, model, first, last, stage, stages, replica, mp, job.batch_size);
    owned = LayerRanges(model, first, last);
    stats = &layer_stage->stats();
    topts.compute = [s = layer_stage.get()](const float* x, const tensor::Labels& y, std::uint64_t seed) {
      return s->Step(x, y, seed);
    };
  } else {
    unit_stage = std::make_unique<UnitStage>(*ring, model, stage, stages, mp.microbatches, job.batch_size);
    owned = UnitRanges(model, stage, stages);
    stats = &unit_stage->stats();
    topts.compute = [s = unit_stage.get()](const float* x, const tensor::Labels& y, std::uint64_t seed) {
      return s->Step(x, y, seed);
    };
  }
  StageCheckpointing checkpointing{.whole = {.spec = job.checkpoint,
                                             .optimizer = job.optimizer,
                                             .slot_names = optimizer->SlotNames(),
                                             .batch_size = job.batch_size,
                                             .model_card = card.data_fingerprint.empty() ? std::string() : exporting::CardText(card),
                                             .events = &events},
                                   .steps_per_epoch = steps_per_epoch,
                                   .replicas = replicas,
                                   .writer = config.is_chief()};
  if (!job.checkpoint.dir.empty() && job.checkpoint.every_secs > 0 && job.checkpoint.every_steps == 0)
    spdlog::warn("checkpoint.every_secs: a model-parallel job checkpoints every_steps (every stage gathers at the same step) and at "
                 "the end only");
  StageUpdater updater(*ring, *optimizer, std::move(owned),
                       [stats, stage, stages, replica, replicas, m = mp.microbatches, &events] {
                         std::vector<EventField> fields;
                         std::string note = stats->TakeNote(stage, stages, m, &fields);
                         fields.push_back({"replica", std::int64_t{replica}});
                         fields.push_back({"replicas", std::int64_t{replicas}});
                         events.Emit("stage", fields);
                         return note;
                       },
                       std::move(checkpointing));
  updater.CombineReplicasOver(replica_ring.get(), stats);
  TFD_RETURN_IF_ERROR(train::AtStartup(ShareWholeRestore(stage == 0 ? replica_ring.get() : nullptr, *ring, model.params().size(),
                                                         optimizer->num_slots(), &*restore)));
  if (restore->found) {
    std::copy(restore->params.begin(), restore->params.end(), model.params().begin());
    topts.start_local_step = static_cast<std::int64_t>(restore->resume_step);
    TFD_RETURN_IF_ERROR(train::AtStartup(updater.Restore(restore->slots, restore->updates, topts.start_local_step)));
    if (config.is_chief()) {
      spdlog::info("restored {} at global_step {} onto {} stages ({} split) of {} replica{}: resuming after local step {}", restore->path,
                   restore->global_step, stages, config::SplitName(mp.split), replicas, replicas > 1 ? "s" : "", restore->resume_step);
      events.Emit("restored", {{"path", restore->path},
                               {"global_step", static_cast<std::int64_t>(restore->global_step)},
                               {"stages", std::int64_t{stages}},
                               {"replicas", std::int64_t{replicas}}});
    }
  }
  if (Status s = train::Train(job, loaded.data, model, updater, events, topts); !s.ok()) {
    // Whichever ring failed told its neighbours; the other one tells its own, so every task of
    // every replica ends naming the stage that was lost.
    ring->Close(s);
    if (replica_ring != nullptr) replica_ring->Close(s);
    return s;
  }
  TFD_RETURN_IF_ERROR(ring->Finish());
  return replica_ring != nullptr ? replica_ring->Finish().WithContext("leaving the ring of the replicas") : Status::Ok();
}

}  // namespace tfd::pipeline
