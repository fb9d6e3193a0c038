#include "common/ckpt/checkpoint.h"

#include <fmt/format.h>

#include "common/optim/optimizer.h"

namespace tfd::ckpt {

Status CheckOptimizer(const Checkpoint& ckpt, const config::OptimizerSpec& wanted, std::string_view source) {
  const auto saved = optim::MakeOptimizer(ckpt.optimizer.spec);
  const auto now = optim::MakeOptimizer(wanted);
  const std::string a = saved->Describe(), b = now->Describe();
  if (a != b)
    return Status::FailedPrecondition(
        fmt::format("{}: saved with optimizer \"{}\", the job asks for \"{}\": refusing to restore its slots", source, a, b));
  if (ckpt.optimizer.slot_names != now->SlotNames())
    return Status::FailedPrecondition(fmt::format("{}: holds {} optimizer slots, \"{}\" keeps {}", source,
                                                  ckpt.optimizer.slot_names.size(), b, now->num_slots()));
  return Status::Ok();
}

}  // namespace tfd::ckpt
