#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config/job.h"

namespace tfd::worker {

// A variable in the model's flat parameter buffer (the ps never sees more than name and size).
struct VariableInfo {
  std::string name;
  std::int64_t offset = 0, size = 0;  // floats
};

// A contiguous run of one variable, held by one ps.
struct Slice {
  std::string name;  // "dense/kernel" or "dense/kernel[0:39200]" when the variable is split
  std::int64_t flat_offset = 0, length = 0;
};

// Which slices each ps holds, in flat order within a shard. Every worker computes the same
// placement from the same variables, ps count and strategy.
struct Placement {
  std::vector<std::vector<Slice>> shards;  // one per ps

  std::int64_t ShardSize(std::size_t ps) const;
  // A fingerprint of the whole layout: a ps initialised with another layout refuses workers.
  std::uint64_t LayoutHash() const;
  // One line per ps: "ps:0 holds 39755 floats (155.3 KiB): dense/kernel[0:39755]".
  std::vector<std::string> Describe() const;
};

// balanced: the flat buffer cut into num_ps contiguous ranges of equal size (±1 float), splitting
//   variables where needed, so every ps carries the same bytes (the default);
// round_robin: variable i on ps i % num_ps, as TensorFlow's replica_device_setter;
// greedy: largest variable first onto the least-loaded ps, as TF's GreedyLoadBalancingStrategy;
// by_host: balanced over the ps tasks' hosts, then over the ps tasks of each host: every distinct
//   host in `ps_hosts` (each ps task's host, as the cluster spec names it; nothing is resolved)
//   carries the same bytes through its link, its ps tasks splitting its share. With every ps on a
//   host of its own (or `ps_hosts` empty), balanced's layout exactly.
Placement Place(const std::vector<VariableInfo>& variables, int num_ps, config::Placement strategy,
                const std::vector<std::string>& ps_hosts = {});

}  // namespace tfd::worker
