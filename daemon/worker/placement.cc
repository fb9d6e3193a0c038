#include "daemon/worker/placement.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "common/base/check.h"
#include "common/base/sha256.h"

namespace tfd::worker {

std::int64_t Placement::ShardSize(std::size_t ps) const {
  std::int64_t n = 0;
  for (const Slice& s : shards[ps]) n += s.length;
  return n;
}

std::uint64_t Placement::LayoutHash() const {
  std::string canonical = fmt::format("{} ps;", shards.size());  // an empty shard still counts
  for (std::size_t ps = 0; ps < shards.size(); ++ps)
    for (const Slice& s : shards[ps]) canonical += fmt::format("{}|{}|{}|{};", ps, s.name, s.flat_offset, s.length);
  return Fingerprint64(canonical);
}

std::vector<std::string> Placement::Describe() const {
  std::vector<std::string> lines;
  for (std::size_t ps = 0; ps < shards.size(); ++ps) {
    std::vector<std::string> names;
    for (const Slice& s : shards[ps]) names.push_back(s.name);
    const std::int64_t n = ShardSize(ps);
    lines.push_back(fmt::format("ps:{} holds {} floats ({:.1f} KiB): {}", ps, n, static_cast<double>(n) * 4 / 1024,
                                names.empty() ? "nothing" : fmt::format("{}", fmt::join(names, ", "))));
  }
  return lines;
}

namespace {

// The flat floats [begin, end) as slices of the variables they cross, appended to `shard`.
void AddRange(const std::vector<VariableInfo>& variables, std::int64_t begin, std::int64_t end, std::vector<Slice>& shard) {
  for (const VariableInfo& v : variables) {
    const std::int64_t b = std::max(begin, v.offset), e = std::min(end, v.offset + v.size);
    if (b >= e) continue;
    std::string name = (b == v.offset && e == v.offset + v.size) ? v.name : fmt::format("{}[{}:{}]", v.name, b - v.offset, e - v.offset);
    shard.push_back({std::move(name), b, e - b});
  }
}

// by_host's cut: the hosts in the order they first appear take equal ranges of the flat buffer,
// and each host's ps tasks (in index order) equal parts of its range.
void PlaceByHost(const std::vector<VariableInfo>& variables, std::int64_t total, const std::vector<std::string>& ps_hosts,
                 Placement& p) {
  std::vector<std::string> hosts;
  std::vector<std::vector<std::size_t>> members;
  for (std::size_t ps = 0; ps < ps_hosts.size(); ++ps) {
    const auto at = std::find(hosts.begin(), hosts.end(), ps_hosts[ps]);
    if (at == hosts.end()) {
      hosts.push_back(ps_hosts[ps]);
      members.push_back({ps});
    } else {
      members[static_cast<std::size_t>(at - hosts.begin())].push_back(ps);
    }
  }
  const auto num_hosts = static_cast<std::int64_t>(hosts.size());
  for (std::int64_t h = 0; h < num_hosts; ++h) {
    const std::int64_t begin = total * h / num_hosts, length = total * (h + 1) / num_hosts - begin;
    const std::vector<std::size_t>& on = members[static_cast<std::size_t>(h)];
    const auto k = static_cast<std::int64_t>(on.size());
    for (std::int64_t j = 0; j < k; ++j)
      AddRange(variables, begin + length * j / k, begin + length * (j + 1) / k, p.shards[on[static_cast<std::size_t>(j)]]);
  }
}

}  // namespace

Placement Place(const std::vector<VariableInfo>& variables, int num_ps, config::Placement strategy,
                const std::vector<std::string>& ps_hosts) {
  TFD_CHECK(num_ps >= 1);
  TFD_CHECK(ps_hosts.empty() || ps_hosts.size() == static_cast<std::size_t>(num_ps));
  Placement p;
  p.shards.resize(static_cast<std::size_t>(num_ps));
  const std::int64_t total = variables.empty() ? 0 : variables.back().offset + variables.back().size;
  switch (strategy) {
    case config::Placement::kByHost:
      if (!ps_hosts.empty()) {
        PlaceByHost(variables, total, ps_hosts, p);
        break;
      }
      [[fallthrough]];  // no hosts known: every ps on its own
    case config::Placement::kBalanced:
      for (int ps = 0; ps < num_ps; ++ps)
        AddRange(variables, total * ps / num_ps, total * (ps + 1) / num_ps, p.shards[static_cast<std::size_t>(ps)]);
      break;
    case config::Placement::kRoundRobin:
      for (std::size_t i = 0; i < variables.size(); ++i)
        p.shards[i % static_cast<std::size_t>(num_ps)].push_back({variables[i].name, variables[i].offset, variables[i].size});
      break;
    case config::Placement::kGreedy: {
      std::vector<std::size_t> order(variables.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return variables[a].size > variables[b].size; });
      std::vector<std::int64_t> load(static_cast<std::size_t>(num_ps), 0);
      for (std::size_t i : order) {
        const std::size_t ps = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
        load[ps] += variables[i].size;
        p.shards[ps].push_back({variables[i].name, variables[i].offset, variables[i].size});
      }
      for (auto& shard : p.shards)
        std::sort(shard.begin(), shard.end(), [](const Slice& a, const Slice& b) { return a.flat_offset < b.flat_offset; });
      break;
    }
  }
  return p;
}

}  // namespace tfd::worker
