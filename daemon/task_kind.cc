#include "daemon/task_kind.h"

#include <fmt/format.h>

#include "common/base/check.h"

namespace tfd {

wire::TaskKind ToWireKind(config::TaskType type) {
  switch (type) {
    case config::TaskType::kChief: return wire::TaskKind::kChief;
    case config::TaskType::kWorker: return wire::TaskKind::kWorker;
    case config::TaskType::kPs: return wire::TaskKind::kPs;
    case config::TaskType::kEvaluator: return wire::TaskKind::kEvaluator;
    case config::TaskType::kCoordinator: return wire::TaskKind::kCoordinator;
  }
  TFD_CHECK(false);  // every TaskType is listed above
  return wire::TaskKind::kWorker;
}

Result<config::TaskType> TaskTypeFromWire(wire::TaskKind kind) {
  for (config::TaskType t : config::kAllTypes)
    if (ToWireKind(t) == kind) return t;
  return Status::Corruption(fmt::format("task kind {} names no task type", static_cast<int>(kind)));
}

transport::HandshakeIdentity HandshakeIdentityOf(const config::TfConfig& config, std::uint64_t incarnation) {
  transport::HandshakeIdentity self;
  self.name = config.task.ToString();
  self.kind = ToWireKind(config.task.type);
  self.index = static_cast<std::uint32_t>(config.task.index);
  self.incarnation = incarnation;
  self.cluster_id = config.cluster.Id();
  return self;
}

}  // namespace tfd
